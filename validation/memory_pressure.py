"""Memory pressure as a cause of the seed rows outside their +-40% band: a check, not a model term.

When a step's reserved peak (planner/memory.py `total_bytes`, what the caching allocator would hold
with room to spare) exceeds the device but the bytes alive at once (`required_bytes`,
planner/memory_required.py) still fit, PyTorch's allocator runs out of fresh memory, frees its cached
blocks and retries (`num_alloc_retries`, torch.cuda.memory_stats; cudaFree synchronizes the device).
DeepSpeed ZeRO-3 warns about it at every step ("N pytorch allocator cache flushes since last step.
this happens when there is high memory pressure and is detrimental to performance",
deepspeed/runtime/zero/stage3.py); MosaicML's composer lowers the micro batch on such retries
("throughput will collapse due to memory thrashing", mosaicml/composer#1998). No source found gives
the size of the slowdown, so this module does not put one in the planner: it lists the rows the
planner's own memory model places in that regime, with their CV errors, and screens a flat slowdown
k above a threshold of required / capacity without refitting (error -> (1 + error) / k - 1).

    python -m validation.memory_pressure            # LOSO errors (~3-5 min), rows near the cap, screen
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from planner import memory, run_capacity  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.memory_required import gathered_bytes  # noqa: E402
from planner.runs import Run  # noqa: E402
from planner.settings import Settings  # noqa: E402
from planner.validate import resolved_plan  # noqa: E402

NEAR_CAP = 0.95  # rows listed: required or reserved at least this share of the device
SEED_BAND = 0.40  # seed 002: one configuration varied +-40% between allocations on Jean Zay


@dataclass(frozen=True)
class Pressure:
    """One run's memory against its device, in the planner's own memory model (catalog profiles)."""
    id: str
    required_share: float  # bytes alive at once / device
    reserved_share: float  # reserved peak with a caching allocator / device
    resident_gib: float  # what stays allocated between steps: model states, buffers, runtime

    @property
    def flushing(self) -> bool:
        """The allocator cannot keep its cache but the step fits: it flushes and retries."""
        return self.reserved_share > 1.0 >= self.required_share


def pressure_of(run: Run, settings: Settings | None = None) -> Pressure:
    settings = run_capacity.settings_for(run, settings or Settings())
    lay = Layout.from_plan(resolved_plan(run, settings))
    m = {k: float(v[0]) for k, v in memory.memory_arrays(run.spec, lay, run.system, settings).items()
         if k.endswith("_bytes")}
    cap = m["capacity_bytes"]
    # between steps only the sharded model states, the buffers and the CUDA context stay allocated
    # (activations, gathered ZeRO-3 modules and freed transients are gone): what a device shows once
    # its allocator has returned the cache
    gathered = float(np.asarray(gathered_bytes(run.spec, lay))[0])
    resident = (m["weights_bytes"] + m["grads_bytes"] + m["optimizer_bytes"] + m["comm_buffers_bytes"]
                + m["runtime_bytes"] - gathered)
    return Pressure(run.id, m["required_bytes"] / cap, m["total_bytes"] / cap, resident / 2**30)


def screen(errors: dict[str, float], shares: dict[str, float], threshold: float, k: float) -> dict[str, float]:
    """CV errors after a flat slowdown `k` of the step of every row whose required share is at or
    above `threshold` (no refit: a first-order screen of a pressure term)."""
    return {i: ((1.0 + e) / k - 1.0) if shares.get(i, 0.0) >= threshold else e for i, e in errors.items()}


def seeds_inside(errors: dict[str, float], band: float = SEED_BAND) -> int:
    return sum(abs(e) <= band for i, e in errors.items() if i.startswith("s00"))


def published_mape(errors: dict[str, float]) -> float:
    pub = [abs(e) for i, e in errors.items() if not i.startswith("s00")]
    return 100.0 * float(np.mean(pub))


def main() -> int:
    from hardware.catalog import load_catalog
    from planner import profile_fit
    from validation.fit_profiles import load_all

    runs = load_all()
    errors = profile_fit.cross_validate(runs, load_catalog().stacks)
    press = {r.id: pressure_of(r) for r in runs if r.id in errors}
    print("Rows near the device's memory (planner's memory model) with their leave-one-source-out error:")
    print(f"  {'row':28} {'required':>8} {'reserved':>8} {'resident GiB':>12} {'flushing':>8} {'CV err %':>8}")
    for i, p in sorted(press.items(), key=lambda kv: -kv[1].required_share):
        if max(p.required_share, p.reserved_share) >= NEAR_CAP:
            print(f"  {i:28} {p.required_share:8.2f} {p.reserved_share:8.2f} {p.resident_gib:12.1f} "
                  f"{'yes' if p.flushing else '':>8} {100 * errors[i]:+8.1f}")
    shares = {i: p.required_share for i, p in press.items()}
    print(f"Screen (no refit): base seeds inside +-40% {seeds_inside(errors)}, published MAPE "
          f"{published_mape(errors):.2f}%")
    for threshold in (0.95, 0.97, 0.99):
        for k in (1.15, 1.33, 1.86):
            new = screen(errors, shares, threshold, k)
            print(f"  required >= {threshold:.2f}, step x {k:.2f}: seeds inside {seeds_inside(new)}, "
                  f"published MAPE {published_mape(new):.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
