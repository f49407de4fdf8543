"""Leave-one-origin-out error by sequence length within one model (a diagnostic; nothing fitted here).

Groups the published rows of the PyTorch-FSDP origins (llm-foundry, torchtitan, fms-fsdp) by origin, GPU, model
width, head dim and activation checkpointing, and prints each group's held-out error (predicted / measured
tokens/s - 1, %) at every sequence length, plus the mean slope of the error per doubling of the sequence
(validation/worst_rows.md finding 3). Profiles are fitted without the row's origin, as validation/worst_rows.py does.
It also prints, per origin, GPU, head dim and checkpointing, the attention scale each attention-dominated row
implies: the factor on the model's attention time that zeroes the row's held-out error with every other part held,
1 + err / attention share (rows whose predicted attention share is at least MIN_SHARE). A scale flat over s but
different between head dims is a level error of the kernel per head dim, not a sequence-length shape error (round 38).
And per model, the least-squares split err ~ (1 - a) e_rest + a e_attn over its lengths (a: the row's predicted
attention share): a trend that is (e_attn - e_rest) times the growth of a(s) leaves a small rms.

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
MIN_SHARE = 0.4  # predicted attention share of the step above which a row's error is mostly attention's


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


def implied_attention_scale(rows: list[Row], min_share: float = MIN_SHARE) -> dict[tuple, tuple]:
    """(origin, gpu, head dim, checkpointing) -> (mean, min, max, rows) of 1 + err / attention share over the rows
    whose predicted attention share (Row.share["attn"]) is at least `min_share`: the factor on the modelled
    attention time that would zero each row's error with every other part held."""
    groups = defaultdict(list)
    for r in rows:
        share = r.share.get("attn", 0.0)
        if share >= min_share:
            key = (fit_weights.origin(r.run), r.run.gpu_type, r.run.spec.head_dim, r.run.plan.activation_checkpointing)
            groups[key].append(1.0 + r.err / share)
    return {k: (float(np.mean(v)), float(min(v)), float(max(v)), len(v)) for k, v in groups.items()}


def level_split(rows: list[Row]) -> dict[tuple, tuple[float, float, float]]:
    """group_key -> (e_rest, e_attn, rms) for models with 3+ lengths: least squares of err = (1 - a) e_rest + a e_attn,
    a = the row's predicted attention share; e_attn - e_rest is the part of the trend an attention level explains."""
    groups = defaultdict(list)
    for r in rows:
        groups[group_key(r)].append(r)
    out = {}
    for key, g in groups.items():
        if len({r.run.plan.seq_len for r in g}) < 3:
            continue
        a = np.array([r.share.get("attn", 0.0) for r in g])
        x, y = np.column_stack([1.0 - a, a]), np.array([r.err for r in g])
        sol = np.linalg.lstsq(x, y, rcond=None)[0]
        out[key] = (float(sol[0]), float(sol[1]), float(np.sqrt(np.mean((x @ sol - y) ** 2))))
    return out


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
    print(f"Implied attention scale (1 + err / attention share) of rows with attention share >= {MIN_SHARE:.0%}:")
    for (o, gpu, hd, ckpt), (mean, lo, hi, n) in sorted(implied_attention_scale(pub).items(), key=str):
        print(f"  {o:10} {gpu:10} hd{hd:<3} {ckpt:9} mean {mean:.2f} (range {lo:.2f}-{hi:.2f}, {n} rows)")
    print("Level split per model, err ~ (1 - attention share) e_rest + attention share e_attn (%):")
    for key, (rest, attn, rms) in sorted(level_split(pub).items(), key=str):
        print(f"  {key[0]:10} {key[1]:10} h{key[2]:<5} hd{key[3]:<3} {key[4]:9} e_rest {100 * rest:+5.1f} "
              f"e_attn {100 * attn:+5.1f} rms {100 * rms:.1f}")


def main() -> int:
    from hardware.catalog import load_catalog
    from validation.fit_profiles import load_all

    runs, priors = load_all(), load_catalog().stacks
    report(held_out(runs, priors, fit_weights.origin))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
