"""The worst cross-validated rows and what the model says they spend their time on (a diagnostic; nothing fitted).

Each held-out group (an origin: a paper, repository or seed log with all its tables; or a stack) is predicted by
profiles fitted on the other groups only, exactly as validation/origin_cv.py and validation/stack_cv.py do, and
each row's predicted step is split into the model's parts AT THOSE held-out profiles: block and logits GEMMs,
attention core, element-wise kernels (with the loss), per-layer/launch/step overhead, optimizer step, exposed
comm by kind (TP, CP, PP, DP/ZeRO/FSDP, MoE all-to-all) and the pipeline bubble. Read: a row that the model
is too fast on (+err) whose step is mostly attention, say, points at attention; the same part and sign on rows
of several origins points at a physical cause rather than one team's setup. Notes: validation/worst_rows.md.

    python -m validation.worst_rows                 # leave-one-origin-out and leave-one-stack-out, 25 rows each
    python -m validation.worst_rows --rows 40 --json out.json
    python -m validation.worst_rows --split megatron   # a stack's rows: held out on `generic` vs its own fit
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware.stacks import StackProfile  # noqa: E402
from planner import fit_weights, profile_fit, site_effects, throughput  # noqa: E402
from planner.layout import Layout  # noqa: E402
from planner.runs import Run  # noqa: E402
from planner.settings import Settings  # noqa: E402

# printed parts: name -> performance() keys summed (seconds per step, stack factors applied)
PARTS = {
    "gemm": ("gemm",), "attn": ("attention",), "elem": ("elementwise",), "ovh": ("overhead", "unit_overhead", "launch_sync", "step"),
    "opt": ("optimizer_s",), "tp": ("tp_comm_s",), "cp": ("cp_comm_s",), "pp": ("pp_comm_s",), "dp": ("dp_comm_s",),
    "moe": ("moe_a2a_s", "moe_expert_grad_s"), "bubble": ("bubble_s",), "offl": ("offload_s",),
}


@dataclass
class Row:
    run: Run
    err: float  # predicted / measured tokens/s - 1, held out
    step_s: float
    share: dict[str, float] = field(default_factory=dict)  # part -> share of the predicted step
    mfu: float = 0.0


def breakdown(run: Run, profiles: dict[str, StackProfile]) -> tuple[float, dict[str, float], float]:
    """Predicted step seconds, each part's share of it and the MFU, at `profiles` (the stack's factors applied)."""
    perf = throughput.performance(run.spec, Layout.from_plan(run.plan), run.system, Settings(stacks=profiles))
    get = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in perf.items() if k != "bottleneck"}
    prof = profiles[run.plan.stack]
    ga_scaled = {
        "gemm": get["raw_gemm_s"] * prof.gemm_time_factor + get.get("moe_compute_s", 0.0),
        "attention": get["raw_attention_s"] * prof.attention_time_factor,
        "elementwise": get["raw_elementwise_s"] * prof.elementwise_time_factor,
        "overhead": get["raw_overhead_s"] * prof.layer_overhead_us,
        "unit_overhead": get["raw_unit_overhead_s"] * prof.unit_overhead_us,
        "launch_sync": get["launch_sync_s"],
        "step": prof.step_overhead_s,
    }
    get = {**get, **ga_scaled}
    step = get["step_time_s"]
    share = {name: sum(get.get(k, 0.0) if np.isfinite(get.get(k, 0.0)) else 0.0 for k in keys) / step
             for name, keys in PARTS.items()}
    return step, share, get["mfu"]


def held_out(runs: list[Run], priors: dict[str, StackProfile], group, on_generic: bool = False) -> list[Row]:
    """Every scored row predicted by profiles fitted without its group (as profile_fit.cross_validate; with
    `on_generic`, as validation/stack_cv.py: the held-out stack's rows run on the pooled `generic` profile)."""
    scored = [r for r in runs if r.scored and r.layout_stated]
    rows: list[Row] = []
    for g in sorted({group(r) for r in scored} - ({profile_fit.GENERIC} if on_generic else set())):
        train = [r for r in scored if group(r) != g]
        test = [r for r in scored if group(r) == g]
        if on_generic:
            profiles, sites = profile_fit.fit(train, priors), {}
            test = [replace(r, plan=r.plan.model_copy(update={"stack": profile_fit.GENERIC})) for r in test]
        else:
            profiles, sites = profile_fit.fit_sites(train, priors)
        site = site_effects.row_factors(site_effects.keys(test), sites)
        for r, s, orig in zip(test, site, [x for x in scored if group(x) == g]):
            step, share, mfu = breakdown(r, profiles)
            measured = r.plan.global_batch * r.plan.seq_len / (r.measured_tokens_per_s_per_gpu * r.plan.gpus)
            rows.append(Row(orig, measured / (step * s) - 1.0, step * s, share, mfu))
    return rows


def config(run: Run) -> str:
    p, m = run.plan, run.spec
    bits = [f"{run.gpu_type}x{p.gpus}", f"L{m.n_layers} h{m.hidden} a{m.n_heads} hd{m.head_dim} V{m.vocab}",
            f"s{p.seq_len} mb{p.micro_batch} gbs{p.global_batch}", f"tp{p.tp} pp{p.pp}" + (f"v{p.vpp}" if p.vpp > 1 else "")
            + (f" cp{p.cp}" if p.cp > 1 else "") + f" dp{p.dp}", p.sharding, p.precision + (f"/{p.fp8_recipe}" if
            p.precision == "fp8" else ""), f"ckpt={p.activation_checkpointing}"]
    bits += [k for k in ("compile", "async_tp", "sequence_parallel") if getattr(p, k)]
    return " ".join(bits)


def table(rows: list[Row], n: int, title: str) -> None:
    worst = sorted((r for r in rows if not fit_weights.is_seed(r.run)), key=lambda r: -abs(r.err))[:n]
    print(f"{title}: the {len(worst)} worst published rows (err = predicted/measured tokens/s - 1; parts: % of the "
          f"predicted step at the held-out profiles)")
    print(f"  {'id':26} {'stack':10} {'err%':>6} {'MFU%':>5} " + " ".join(f"{k:>5}" for k in PARTS))
    for r in worst:
        print(f"  {r.run.id[:26]:26} {r.run.plan.stack[:10]:10} {100 * r.err:+6.1f} {100 * r.mfu:5.1f} "
              + " ".join(f"{100 * r.share[k]:5.1f}" for k in PARTS))
        print(f"      {config(r.run)}")
    pub = [r for r in rows if not fit_weights.is_seed(r.run)]
    print(f"  published MAPE {100 * np.mean([abs(r.err) for r in pub]):.1f}% over {len(pub)} rows")


def correlations(rows: list[Row]) -> None:
    """Spearman correlation of the held-out error with each part's share and a few shape variables (published)."""
    from planner.validate import _spearman

    pub = [r for r in rows if not fit_weights.is_seed(r.run)]
    err = np.array([r.err for r in pub])
    feats = {f"share {k}": [r.share[k] for r in pub] for k in PARTS}
    feats.update({
        "log seq_len": [np.log(r.run.plan.seq_len) for r in pub],
        "head_dim": [r.run.spec.head_dim for r in pub],
        "log hidden": [np.log(r.run.spec.hidden) for r in pub],
        "log hidden/tp": [np.log(r.run.spec.hidden / r.run.plan.tp) for r in pub],
        "log gpus": [np.log(r.run.plan.gpus) for r in pub],
        "log vocab/hidden": [np.log(r.run.spec.vocab / r.run.spec.hidden) for r in pub],
        "tokens per micro batch": [np.log(r.run.plan.micro_batch * r.run.plan.seq_len) for r in pub],
        "predicted MFU": [r.mfu for r in pub],
    })
    print("  Spearman(held-out error, x) over published rows:  "
          + ", ".join(f"{k} {_spearman(np.asarray(v, dtype=float), err):+.2f}" for k, v in feats.items() if np.std(v) > 0))


def split(runs: list[Run], priors: dict[str, StackProfile], stack: str) -> None:
    """Each published row of `stack`: its predicted step split into parts (x the measured step) on `generic`
    fitted without the stack (leave-one-stack-out) and on the stack's own profile fitted on every row, and
    the mean difference per part: which of the pooled terms decides the held-out error."""
    scored = [r for r in runs if r.scored and r.layout_stated]
    gen = profile_fit.fit([r for r in scored if r.plan.stack != stack], priors)
    own = profile_fit.fit(scored, priors)
    print(f"factors: generic fitted without {stack} | {stack} fitted on all rows")
    for name, *_ in profile_fit.PARAMS:
        print(f"  {name:24} {getattr(gen[profile_fit.GENERIC], name):9.4g} | {getattr(own[stack], name):9.4g}")
    test = [r for r in scored if r.plan.stack == stack and not fit_weights.is_seed(r)]
    diff = dict.fromkeys(PARTS, 0.0)
    print(f"  {'id':24} {'generic':>7} {'own':>6}  parts on generic - parts on own (x measured step)")
    for r in test:
        measured = r.plan.global_batch * r.plan.seq_len / (r.measured_tokens_per_s_per_gpu * r.plan.gpus)
        moved = replace(r, plan=r.plan.model_copy(update={"stack": profile_fit.GENERIC}))
        (sg, shg, _), (so, sho, _) = breakdown(moved, gen), breakdown(r, own)
        d = {k: (shg[k] * sg - sho[k] * so) / measured for k in PARTS}
        diff = {k: diff[k] + d[k] / len(test) for k in PARTS}
        print(f"  {r.id[:24]:24} {100 * (measured / sg - 1):+6.1f}% {100 * (measured / so - 1):+5.1f}%  "
              + " ".join(f"{k} {v:+.2f}" for k, v in d.items() if abs(v) >= 0.005))
    print("  mean: " + " ".join(f"{k} {v:+.3f}" for k, v in diff.items() if abs(v) >= 0.0005))


def main(argv=None) -> int:
    from hardware.catalog import load_catalog
    from validation.fit_profiles import load_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--json", type=Path, help="write id -> {looo, lost, shares} here")
    ap.add_argument("--split", metavar="STACK", help="only the split of STACK's rows: generic (held out) vs own")
    args = ap.parse_args(argv)
    runs, priors = load_all(), load_catalog().stacks
    if args.split:
        split(runs, priors, args.split)
        return 0
    looo = held_out(runs, priors, fit_weights.origin)
    table(looo, args.rows, "Leave-one-ORIGIN-out")
    correlations(looo)
    lost = held_out(runs, priors, lambda r: r.plan.stack, on_generic=True)
    table(lost, args.rows, "Leave-one-STACK-out (generic profile fitted on the other stacks)")
    correlations(lost)
    if args.json:
        args.json.write_text(json.dumps({r.run.id: {"looo": r.err, "share": r.share, "config": config(r.run),
                                                    "stack": r.run.plan.stack, "origin": fit_weights.origin(r.run)}
                                         for r in looo} | {"_lost": {r.run.id: r.err for r in lost}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
