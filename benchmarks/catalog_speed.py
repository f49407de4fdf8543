"""Catalog and model-resolution speed: prints milliseconds (goals: load < 30 ms, resolve < 20 ms).

Run: .venv/bin/python benchmarks/catalog_speed.py
"""

from __future__ import annotations

import time
from pathlib import Path

from hardware import catalog as hw_catalog
from planner.presets import list_presets, resolve_model

ROOT = Path(__file__).resolve().parents[1]


def ms(fn, repeat: int = 20) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def cold_load() -> None:
    hw_catalog._load.cache_clear()
    hw_catalog.load_catalog()


def main() -> None:
    rows = [
        ("load_catalog, cold (parse + validate every file)", ms(cold_load)),
        ("load_catalog, cached", ms(hw_catalog.load_catalog)),
    ]
    for ref in ("llama2-70b", "52b", str(ROOT / "tests/fixtures/hf_configs/mistral-7b.json")):
        rows.append((f"resolve_model({Path(ref).name!r}), catalog cached", ms(lambda: resolve_model(ref))))
    rows.append(("resolve_model('gpt2'), cold catalog", ms(lambda: (cold_load(), resolve_model("gpt2")))))
    rows.append((f"list_presets ({len(list_presets())} presets)", ms(list_presets)))
    for label, value in rows:
        print(f"{label:<52} {value:7.2f} ms")

if __name__ == "__main__":
    main()
