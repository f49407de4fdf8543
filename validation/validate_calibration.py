"""Run every calibration row through the planner: predicted vs measured speed and fit/OOM.

    python validation/validate_calibration.py [--data-dir validation/data] [--calibrated] [--json]

Per row: predicted and measured tokens/s and iteration time, the error, fit vs outcome. Per
source: MAPE of the speed (tokens/s) and fit agreement. `--calibrated` also fits one
Calibration.compute per *seed* source on its own rows (what the tuner does with measured runs;
in-sample) and shows the MAPE after it. The published rows are never fitted: they judge.
The last section shows seed 003's scaling shape (ZeRO-1 8 -> 16 A100 without accumulation,
16 -> 48 with accumulation 256) on the catalog network and slower ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.layout import Layout  # noqa: E402
from planner.memory import memory_arrays  # noqa: E402
from planner.scenario import ExecutionPlan  # noqa: E402
from planner.settings import Calibration, Settings  # noqa: E402
from planner.throughput import performance  # noqa: E402
from validation.rows import DEFAULT_DATA_DIR, Case, load_cases  # noqa: E402


def predict(case: Case, settings: Settings) -> dict:
    lay = Layout.from_plan(case.plan)
    perf = performance(case.spec, lay, case.system, settings)
    mem = memory_arrays(case.spec, lay, case.system, settings)
    fits = bool(mem["total_bytes"][0] <= mem["capacity_bytes"][0]
                and mem["host_bytes_per_node"][0] <= mem["host_capacity_bytes_per_node"][0])
    return {
        "tokens_per_s": float(perf["tokens_per_s"][0]),
        "iter_time_s": float(perf["step_time_s"][0]),
        "mfu": float(perf["mfu"][0]),
        "bottleneck": str(perf["bottleneck"][0]),
        "mem_gib": float(mem["total_bytes"][0] / 2**30),
        "fits": fits,
    }


def evaluate_cases(cases: list[Case], calibration: dict[str, Calibration] | None = None) -> list[dict]:
    rows = []
    for c in cases:
        cal = (calibration or {}).get(c.source, Calibration())
        p = predict(c, Settings(calibration=cal))
        err = None
        if c.scored:
            err = p["tokens_per_s"] / c.measured_tokens_per_s - 1.0
        rows.append({
            "id": c.id, "source": c.source, "outcome": c.outcome,
            "measured_tokens_per_s": c.measured_tokens_per_s, "measured_iter_time_s": c.measured_iter_time_s,
            **{f"pred_{k}": v for k, v in p.items()}, "error": err,
            "fit_agrees": p["fits"] == (c.outcome == "ok"), "assumptions": c.assumptions,
        })
    return rows


def mape_by_source(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for src in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == src]
        errs = [abs(r["error"]) for r in mine if r["error"] is not None]
        out[src] = {
            "rows": len(mine), "speed_rows": len(errs),
            "mape_pct": 100 * float(np.mean(errs)) if errs else None,
            "median_ape_pct": 100 * float(np.median(errs)) if errs else None,
            "fit_agreement": f"{sum(r['fit_agrees'] for r in mine)}/{len(mine)}",
        }
    return out


def fit_seed_calibration(cases: list[Case]) -> dict[str, Calibration]:
    """One compute multiplier per seed source: the geometric mean of measured / predicted speed."""
    rows = evaluate_cases(cases)
    out = {}
    for src in ("seed002", "seed003"):
        ratios = [1 / (1 + r["error"]) for r in rows if r["source"] == src and r["error"] is not None]
        if ratios:
            out[src] = Calibration(compute=float(np.exp(np.mean(np.log(ratios)))), source=f"fitted on {src}")
    return out


def seed003_shape(cases: list[Case]) -> list[dict]:
    """Days per 100B tokens for seed 003's ZeRO-1 scaling rows at several inter-node networks."""
    base = next(c for c in cases if c.id == "s003-03")
    configs = [("8 GPUs mb1 ga1", 8, 1, 1), ("16 GPUs mb2 ga1", 16, 2, 1),
               ("16 GPUs mb2 ga256", 16, 2, 256), ("48 GPUs mb2 ga256", 48, 2, 256)]
    out = []
    for busbw in (None, 200.0, 100.0, 50.0):
        days = {}
        for label, gpus, mb, ga in configs:
            system = base.system.model_copy(update={"gpus": gpus, "measured_internode_busbw_gbps": busbw})
            plan = ExecutionPlan(**{**base.plan.model_dump(), "dp": gpus, "micro_batch": mb, "grad_accum": ga})
            perf = performance(base.spec, Layout.from_plan(plan), system, Settings(tokens=1e11))
            days[label] = float(perf["days"][0])
        out.append({"internode_busbw_gbps": busbw or f"catalog {base.system.internode_gbps:g} x link eff.",
                    **days})
    return out


def _fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                    help=f"folder with seed_runs.csv and published_dev.csv (default {DEFAULT_DATA_DIR})")
    ap.add_argument("--calibrated", action="store_true", help="also fit and apply per-seed calibration")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    if not (args.data_dir / "seed_runs.csv").exists():
        print(f"data-dir: no seed_runs.csv in {args.data_dir}", file=sys.stderr)
        return 2
    cases, skipped = load_cases(args.data_dir)
    rows = evaluate_cases(cases)
    report = {"rows": rows, "mape": mape_by_source(rows), "skipped": skipped, "seed003_shape": seed003_shape(cases)}
    if args.calibrated:
        cal = fit_seed_calibration(cases)
        report["calibration"] = {k: v.compute for k, v in cal.items()}
        report["mape_calibrated"] = mape_by_source(evaluate_cases(cases, cal))
    if args.json:
        print(json.dumps(report, indent=1, default=str))
        return 0
    print(f"{'id':26} {'meas tok/s':>10} {'pred tok/s':>10} {'err':>7} {'meas it s':>9} {'pred it s':>9} "
          f"{'MFU':>5} {'bottleneck':>10} {'mem GiB':>7} outcome/fit")
    for r in rows:
        err = "-" if r["error"] is None else f"{100 * r['error']:+.0f}%"
        fit = "fit" if r["pred_fits"] else "OOM"
        print(f"{r['id']:26} {_fmt(r['measured_tokens_per_s'], '10.0f')} {r['pred_tokens_per_s']:10.0f} {err:>7} "
              f"{_fmt(r['measured_iter_time_s'], '9.3g')} {r['pred_iter_time_s']:9.3g} {r['pred_mfu']:5.2f} "
              f"{r['pred_bottleneck']:>10} {r['pred_mem_gib']:7.1f} {r['outcome']}/{fit}"
              f"{'' if r['fit_agrees'] else '  <-- fit disagrees'}"
              f"{'  (layout inconsistent, not scored)' if any(a.startswith('INCONSISTENT') for a in r['assumptions']) else ''}")
    print("\nskipped:", *skipped, sep="\n  ")
    _print_mape("MAPE of tokens/s per source (catalog defaults)", report["mape"])
    if args.calibrated:
        print("\nfitted compute calibration (in-sample):", report["calibration"])
        _print_mape("MAPE after per-seed calibration (published rows unchanged)", report["mape_calibrated"])
    print("\nSeed 003 shape, days per 100B tokens (bloom-7b1 ZeRO-1, seq 1024; seed: 258 / '2x slower' / 57 / 19):")
    for s in report["seed003_shape"]:
        print("  ", s)
    return 0


def _print_mape(title: str, mape: dict) -> None:
    print(f"\n{title}:")
    for src, m in mape.items():
        print(f"  {src:32} rows {m['rows']:3}  speed rows {m['speed_rows']:3}  MAPE {_fmt(m['mape_pct'], '.1f')}%"
              f"  median {_fmt(m['median_ape_pct'], '.1f')}%  fit agreement {m['fit_agreement']}")


if __name__ == "__main__":
    raise SystemExit(main())
