"""What the megatron profile's comm factor absorbs: each Megatron-stack row's predicted step split into its parts
(compute, TP exchanges, PP p2p + bubble, exposed DP, overheads) at the catalog's fitted profile and at comm factor
1.0, with the in-sample error at both (a diagnostic; nothing fitted; validation/worst_rows.md, round 28).

    python -m validation.megatron_split                      # the five published Megatron origins
    python -m validation.megatron_split megatron_core_h100   # one origin's rows
    python -m validation.megatron_split --micro-batch 2      # rows whose micro batch is not stated, at 2
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware.stacks import StackProfile  # noqa: E402
from planner.runs import Run  # noqa: E402
from validation.worst_rows import breakdown  # noqa: E402

ORIGINS = ("megatron_core_h100", "nemo_perf", "megatron_sc21", "megatron_korthikanti", "megatron_2020")
# printed groups of worst_rows.PARTS
GROUPS = {"compute": ("gemm", "attn", "elem"), "tp": ("tp",), "pp+bubble": ("pp", "bubble"), "dp": ("dp",),
          "ovh+opt": ("ovh", "opt")}


def measured_step_s(run: Run) -> float:
    p = run.plan
    return p.global_batch * p.seq_len / (run.measured_tokens_per_s_per_gpu * p.gpus)


def with_comm_factor(profiles: dict[str, StackProfile], stack: str, factor: float) -> dict[str, StackProfile]:
    return {**profiles, stack: profiles[stack].model_copy(update={"comm_time_factor": factor})}


def split(run: Run, profiles: dict[str, StackProfile]) -> tuple[float, dict[str, float]]:
    """(predicted / measured tokens/s - 1, share of the predicted step by group)."""
    step, share, _ = breakdown(run, profiles)
    return measured_step_s(run) / step - 1.0, {g: sum(share[k] for k in ks) for g, ks in GROUPS.items()}


def with_micro_batch(run: Run, mb: int) -> Run:
    """The row at micro batch `mb` where it states none and the global batch divides (grad accumulation follows)."""
    p = run.plan
    ga, rest = divmod(p.global_batch, p.dp * mb)
    if not any("micro batch not stated" in a for a in run.assumptions) or ga < 1 or rest:
        return run
    return replace(run, plan=p.model_copy(update={"micro_batch": mb, "grad_accum": ga}))


def main(argv=None) -> int:
    from hardware.catalog import load_catalog
    from validation.fit_profiles import load_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("origins", nargs="*", default=list(ORIGINS))
    ap.add_argument("--micro-batch", type=int, default=0, help="read unstated micro batches as this")
    args = ap.parse_args(argv)
    fitted = load_catalog().stacks
    unit = with_comm_factor(fitted, "megatron", 1.0)
    print(f"megatron comm_time_factor {fitted['megatron'].comm_time_factor:g} (fitted) vs 1.0; err = predicted / "
          f"measured tokens/s - 1 (in sample); parts in % of the predicted step")
    print(f"  {'id':26} {'err%':>6} " + " ".join(f"{g:>9}" for g in GROUPS) + f" {'err@1%':>7} {'dp@1':>5}")
    for run in load_all():
        if not (run.scored and run.plan.stack == "megatron" and run.id.startswith(tuple(args.origins))):
            continue
        run = with_micro_batch(run, args.micro_batch) if args.micro_batch else run
        err, sh = split(run, fitted)
        err1, sh1 = split(run, unit)
        print(f"  {run.id[:26]:26} {100 * err:+6.1f} " + " ".join(f"{100 * sh[g]:9.1f}" for g in GROUPS)
              + f" {100 * err1:+7.1f} {100 * sh1['dp']:5.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
