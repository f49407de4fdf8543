"""Leave-one-origin-out error by sequence length within one model (a diagnostic; nothing fitted here).

Groups the published rows of the PyTorch-FSDP origins (llm-foundry, torchtitan, fms-fsdp) by origin, GPU, model
width, head dim and activation checkpointing, and prints each group's held-out error (predicted / measured
tokens/s - 1, %) at every sequence length, plus the mean slope of the error per doubling of the sequence
(validation/worst_rows.md finding 3). Profiles are fitted without the row's origin, as validation/worst_rows.py does.

    python -m validation.seq_trend
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner import fit_weights  # noqa: E402
from validation.worst_rows import Row, held_out  # noqa: E402

ORIGINS = ("llmfoundry", "torchtitan", "fms_fsdp")


def group_key(row: Row) -> tuple:
    r = row.run
    return (fit_weights.origin(r), r.gpu_type, r.spec.hidden, r.spec.head_dim, r.plan.activation_checkpointing)


def slope_per_doubling(rows: list[Row]) -> float:
    """Least-squares slope of the error (points of %) against log2(seq_len) over groups with 3+ lengths,
    each group centred on its own mean (a within-model trend)."""
    xs, ys = [], []
    groups = defaultdict(list)
    for r in rows:
        groups[group_key(r)].append(r)
    for g in groups.values():
        if len({r.run.plan.seq_len for r in g}) < 3:
            continue
        x = np.log2([r.run.plan.seq_len for r in g])
        y = 100.0 * np.array([r.err for r in g])
        xs += list(x - x.mean())
        ys += list(y - y.mean())
    xs, ys = np.array(xs), np.array(ys)
    return float(xs @ ys / (xs @ xs)) if len(xs) else float("nan")


def report(rows: list[Row]) -> None:
    pub = [r for r in rows if not fit_weights.is_seed(r.run) and fit_weights.origin(r.run) in ORIGINS]
    groups = defaultdict(list)
    for r in pub:
        groups[group_key(r)].append(r)
    print("LOOO error (%) by sequence length within one model (origin gpu hidden head_dim ckpt: s=err ...)")
    for key in sorted(groups, key=str):
        g = sorted(groups[key], key=lambda r: r.run.plan.seq_len)
        if len({r.run.plan.seq_len for r in g}) < 2:
            continue
        cells = " ".join(f"{r.run.plan.seq_len // 1024 if r.run.plan.seq_len >= 1024 else r.run.plan.seq_len}"
                         f"{'K' if r.run.plan.seq_len >= 1024 else ''}={100 * r.err:+.0f}" for r in g)
        print(f"  {key[0]:10} {key[1]:10} h{key[2]:<5} hd{key[3]:<3} {key[4]:9} {cells}")
    for o in ORIGINS:
        sub = [r for r in pub if fit_weights.origin(r.run) == o]
        if sub:
            print(f"  {o}: slope {slope_per_doubling(sub):+.2f} points per doubling of s, "
                  f"MAPE {100 * np.mean([abs(r.err) for r in sub]):.1f}% over {len(sub)} rows")
    print(f"  all three: slope {slope_per_doubling(pub):+.2f} points per doubling")


def main() -> int:
    from hardware.catalog import load_catalog
    from validation.fit_profiles import load_all

    runs, priors = load_all(), load_catalog().stacks
    report(held_out(runs, priors, fit_weights.origin))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
