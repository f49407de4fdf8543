"""One origin's rows held out: each row's predicted step by part, and what its twins say (a diagnostic; nothing fitted).

Profiles are fitted without the origin (leave-one-origin-out, as validation/worst_rows.py). For every published row
of the origin: the held-out error (predicted / measured tokens/s - 1), the predicted step and each part's share of
it. Then the twins: rows that differ in one switch only (torch.compile, precision/fp8 recipe, async TP) give a
measured and a predicted speed-up; a part the model mis-charges shows as a ratio off on every twin that switches
it, whatever the level. Last, rows that keep tokens per GPU fixed while the sequence grows with context parallelism
(torchtitan Table 2: s = 32K x cp) give each row's step as N + A x k (k = s / s_min: attention work per GPU grows
with s, everything else stays): the two-point fits on adjacent pairs must agree if the rows lie on one line.
Round 38's section in validation/worst_rows.md reads the output for torchtitan.

    python -m validation.titan_rows                 # torchtitan
    python -m validation.titan_rows --origin fms_fsdp
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner import fit_weights, profile_fit  # noqa: E402
from validation.worst_rows import PARTS, breakdown, config  # noqa: E402

SWITCHES = ("compile", "precision", "fp8_recipe", "async_tp")  # plan fields a twin may differ in (one at a time)
SAME = ("gpus", "tp", "pp", "cp", "dp", "seq_len", "micro_batch", "global_batch", "activation_checkpointing",
        "sharding", "sequence_parallel")


def measured_step(run) -> float:
    p = run.plan
    return p.global_batch * p.seq_len / (run.measured_tokens_per_s_per_gpu * p.gpus)


def rows_of(origin: str):
    """(run, held-out predicted step, part shares) of every published row of `origin`, fitted without it."""
    from hardware.catalog import load_catalog
    from validation.fit_profiles import load_all

    runs, priors = load_all(), load_catalog().stacks
    scored = [r for r in runs if r.scored and r.layout_stated]
    profiles, _ = profile_fit.fit_sites([r for r in scored if fit_weights.origin(r) != origin], priors)
    test = [r for r in scored if fit_weights.origin(r) == origin and not fit_weights.is_seed(r)]
    return [(r, *breakdown(r, profiles)[:2]) for r in test]


def twin_switch(a, b) -> str | None:
    """The one switch two rows of the same model differ in, else None."""
    pa, pb = a.plan, b.plan
    if a.spec != b.spec or any(getattr(pa, k) != getattr(pb, k) for k in SAME):
        return None
    diff = [k for k in SWITCHES if getattr(pa, k) != getattr(pb, k)]
    if diff == ["precision", "fp8_recipe"]:  # bf16 -> fp8 sets a recipe too
        return "precision"
    return diff[0] if len(diff) == 1 else None


def twins(rows) -> list[tuple]:
    out = []
    for i, (a, sa, _) in enumerate(rows):
        for b, sb, _ in rows[i + 1:]:
            k = twin_switch(a, b)
            if k:
                meas = measured_step(a) / measured_step(b)
                out.append((a.id, b.id, k, meas, sa / sb))
    return out


def line_fits(rows) -> list[tuple]:
    """Adjacent pairs of rows with context parallelism and fixed tokens per GPU: (ids, N, A) of step = N + A k."""
    def key(r):  # model, tokens per GPU, recompute: the rows of one series
        return (r.spec.n_layers, r.spec.hidden, r.plan.micro_batch * r.plan.seq_len // r.plan.cp,
                r.plan.activation_checkpointing, r.plan.precision)

    series = {key(r) for r, _, _ in rows if r.plan.cp > 1}
    cp_rows = [(r, s) for r, s, _ in rows if key(r) in series]
    cp_rows.sort(key=lambda t: t[0].plan.seq_len)
    out = []
    if not cp_rows:
        return out
    s0 = cp_rows[0][0].plan.seq_len
    for (a, pa), (b, pb) in zip(cp_rows, cp_rows[1:]):
        ka, kb = a.plan.seq_len / s0, b.plan.seq_len / s0
        for label, ta, tb in (("measured", measured_step(a), measured_step(b)), ("predicted", pa, pb)):
            A = (tb - ta) / (kb - ka)
            out.append((a.id, b.id, label, ta - A * ka, A))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--origin", default="torchtitan")
    args = ap.parse_args(argv)
    rows = rows_of(args.origin)
    print(f"{args.origin}, leave-one-origin-out: err = predicted/measured tokens/s - 1; step = predicted seconds; "
          f"parts in % of the predicted step")
    print(f"  {'id':16} {'err%':>6} {'step':>7} {'meas':>7} " + " ".join(f"{k:>5}" for k in PARTS))
    for r, step, share in rows:
        print(f"  {r.id[:16]:16} {100 * (measured_step(r) / step - 1):+6.1f} {step:7.3f} {measured_step(r):7.3f} "
              + " ".join(f"{100 * share[k]:5.1f}" for k in PARTS))
        print(f"      {config(r)}")
    errs = [measured_step(r) / s - 1 for r, s, _ in rows]
    print(f"  MAPE {100 * np.mean(np.abs(errs)):.1f}%  bias {100 * np.mean(errs):+.1f}%  ({len(rows)} rows)")
    print("Twins (speed-up of the second row over the first: measured | predicted; ratio = predicted / measured):")
    for a, b, k, meas, pred in twins(rows):
        print(f"  {a:16} -> {b:16} {k:10} {meas:6.3f} | {pred:6.3f}  ratio {pred / meas:6.3f}")
    fits = line_fits(rows)
    if fits:
        print("Context-parallel rows at fixed tokens per GPU, step = N + A k over adjacent pairs (k = s / s_min):")
        for a, b, label, n, A in fits:
            print(f"  {a:16} {b:16} {label:9} N {n:7.2f} s  A {A:6.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
