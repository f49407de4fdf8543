"""Ranking within groups, row by row: which configurations the planner orders wrongly.

    python -m validation.ranking            # every group: rows, measured vs predicted, ranks
    python -m validation.ranking --shape    # also the 'shape' groups (one table, one model size,
                                            # the number of heads may vary: BLOOM 'NHEADs comparison')
    python -m validation.ranking --pairs    # also each group's replicate spread and the pairs it
                                            # orders wrongly beyond it (validation/ranking_pairs.py)

Predictions are the leave-one-source-out CV ones of validation/fit_profiles.py. A group of the
issue's target is planner/validate.py's: one model on one GPU type and count at one sequence
length, >= 3 measured configurations. A shape group keys on the table (source) and the model's
layers and hidden size instead of its name, so that rows differing only in the number of heads
are ranked together.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from planner.runs import Run
from planner.validate import MIN_GROUP, _spearman
from validation import ranking_pairs


@dataclass
class GroupRows:
    name: str
    runs: list[Run]
    measured: np.ndarray
    predicted: np.ndarray

    @property
    def spearman(self) -> float:
        return _spearman(self.predicted, self.measured)

    @property
    def top1_regret(self) -> float:
        return float(1.0 - self.measured[int(np.argmax(self.predicted))] / self.measured.max())


def _target_key(r: Run) -> str:
    return f"{r.model} | {r.gpu_type} x {r.system.gpus} | seq {r.plan.seq_len}"


def _shape_key(r: Run) -> str:
    model = re.sub(r"\s*nh\d+", "", r.model)
    return f"{r.source} | {model} | L{r.spec.n_layers} H{r.spec.hidden} | x {r.system.gpus} | seq {r.plan.seq_len}"


def groups(runs: list[Run], errors: dict[str, float], shape: bool = False) -> list[GroupRows]:
    """Groups of scored runs with their CV predictions (measured x (1 + CV error))."""
    keyed: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        if r.id in errors:
            keyed[(_shape_key if shape else _target_key)(r)].append(r)
    out = []
    for name, rs in sorted(keyed.items()):
        meas = np.array([r.measured_tokens_per_s_per_gpu for r in rs])
        if len(rs) < MIN_GROUP or np.ptp(meas) == 0:
            continue
        pred = meas * (1.0 + np.array([errors[r.id] for r in rs]))
        out.append(GroupRows(name, rs, meas, pred))
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    return len(x) - np.argsort(np.argsort(x))  # 1 = fastest


def describe(g: GroupRows) -> list[str]:
    lines = [f"{g.name}: {len(g.runs)} rows, Spearman {g.spearman:+.2f}, top-1 regret {100 * g.top1_regret:.1f}%"]
    rm, rp = _ranks(g.measured), _ranks(g.predicted)
    lines.append(f"    {'id':20} {'heads':>5} {'tp':>3} {'pp':>3} {'dp':>3} {'mb':>3} {'gbs':>5} "
                 f"{'meas tok/s':>10} {'pred':>8} {'err %':>6} {'rank m/p':>8}")
    for i in np.argsort(-g.measured):
        r = g.runs[i]
        plan = r.plan
        lines.append(f"    {r.id:20} {r.spec.n_heads:5} {plan.tp:3} {plan.pp:3} {plan.dp:3} {plan.micro_batch:3} "
                     f"{plan.global_batch:5} {g.measured[i]:10.1f} {g.predicted[i]:8.1f} "
                     f"{100 * (g.predicted[i] / g.measured[i] - 1):+6.1f} {rm[i]:4}/{rp[i]:<3}")
    return lines


def summary(gs: list[GroupRows]) -> str:
    if not gs:
        return "no groups"
    return (f"{len(gs)} groups: mean Spearman {np.mean([g.spearman for g in gs]):.2f}, "
            f"mean top-1 regret {100 * np.mean([g.top1_regret for g in gs]):.1f}%")


def main(argv=None) -> int:
    from hardware.catalog import load_catalog
    from planner import profile_fit
    from validation.fit_profiles import load_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="store_true", help="also the shape groups (heads may vary)")
    ap.add_argument("--pairs", action="store_true", help="also the replicate spread and wrongly ordered pairs")
    args = ap.parse_args(argv)
    runs = load_all()
    errors = profile_fit.cross_validate(runs, load_catalog().stacks)
    for shape in (False, True) if args.shape else (False,):
        gs = groups(runs, errors, shape=shape)
        print(("Shape groups" if shape else "Target groups") + " (CV predictions):")
        for g in gs:
            print("\n".join(describe(g)))
            if args.pairs:
                print("\n".join(ranking_pairs.describe(g.runs, g.measured, g.predicted)))
        print(summary(gs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
