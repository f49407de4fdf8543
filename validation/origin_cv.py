"""Leave-one-ORIGIN-out: how the fit does on a run from a paper, repository or team it has never seen.

The independent runs the planner is judged on come from origins the fit never saw; leave-one-source-out
(planner/profile_fit.py `cross_validate`) keeps an origin's other tables in the training set. Here each
origin (`planner.fit_weights.origin`: a paper, a repository's benchmark page, a seed log, all its tables
together) is predicted by profiles fitted on the other origins only, and the fit's hyperparameters are
screened by that error:

    python -m validation.origin_cv             # per-origin table under the current settings (exact)
    python -m validation.origin_cv --grid      # the hyperparameter screen, and its nested selection (~2 min)

The screen computes the raw parts once (at the catalog profiles, as the fit's first iteration does) and
refits only the linear factors per fold and setting, so a grid of settings costs seconds, not hours; the
chosen setting is then checked with the exact pipeline (`python -m validation.fit_profiles`).
Nested selection: for each held-out origin, the setting is chosen by leave-one-origin-out error over the
OTHER origins only, then that origin is predicted with it; its pooled error is the honest error of the
whole procedure, choice of hyperparameters included.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python validation/origin_cv.py` from anywhere

from hardware.stacks import StackProfile  # noqa: E402
from planner import fit_weights, profile_fit, site_effects  # noqa: E402
from planner.runs import Run  # noqa: E402

# (module, constant) of each hyperparameter the screen varies, with its grid
KNOBS = {
    "RIDGE_POOLED": (profile_fit, (0.001, 0.003, 0.01, 0.05)),
    "RIDGE_STACK": (profile_fit, (0.0003, 0.001, 0.003, 0.01)),
    "FULL_ORIGINS": (fit_weights, (1, 2, 3, 5)),
    "SEED_SPREAD": (fit_weights, (0.1, 0.2, 0.4)),
    "SITE_SPREAD": (site_effects, (1e-3, 0.3, 1.0, 3.0)),
}
RIDGES = ("RIDGE_POOLED", "RIDGE_STACK")  # chosen by the nested selection; the others: sensitivity only
# One NVIDIA team's Megatron papers and pages (fit_weights.origin keeps them apart): held out together
# in the `team` sensitivity
NVIDIA_MEGATRON = {"megatron_2020", "megatron_sc21", "megatron_korthikanti", "megatron_core_h100", "nemo_perf"}


def team(run: Run) -> str:
    o = fit_weights.origin(run)
    return "nvidia_megatron" if o in NVIDIA_MEGATRON else o


def is_published(run: Run) -> bool:
    return not fit_weights.is_seed(run)


@contextlib.contextmanager
def settings(**values) -> Iterator[None]:
    """The fit's hyperparameters set to `values` (names of KNOBS) for the block, restored after."""
    old = {k: getattr(KNOBS[k][0], k) for k in values}
    try:
        for k, v in values.items():
            setattr(KNOBS[k][0], k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(KNOBS[k][0], k, v)


def current() -> dict[str, float]:
    return {k: getattr(mod, k) for k, (mod, _) in KNOBS.items()}


class FrozenParts:
    """The raw parts of every run computed once; a design and a prediction from them (linear in the factors)."""

    def __init__(self, runs: list[Run], priors: dict[str, StackProfile]):
        self.runs = [r for r in runs if r.scored and r.layout_stated]
        d = profile_fit._design(self.runs, priors)
        self.row = {r.id: i for i, r in enumerate(self.runs)}
        self.A, self.b = d.A, d.b

    def design(self, runs: list[Run], profiles: dict[str, StackProfile]) -> profile_fit.Design:
        idx = [self.row[r.id] for r in runs]
        return profile_fit.Design(self.A[idx], self.b[idx])

    def predict(self, runs: list[Run], profiles: dict[str, StackProfile]) -> np.ndarray:
        idx = [self.row[r.id] for r in runs]
        x = np.array([[getattr(profiles[r.plan.stack], p[0]) for p in profile_fit.PARAMS] for r in runs])
        return 1.0 / (np.einsum("ij,ij->i", self.A[idx], x) + self.b[idx])

    def cv(self, runs: list[Run], priors, group) -> dict[str, float]:
        return profile_fit.cross_validate(runs, priors, group=group, design=self.design, predict=self.predict)


def published_mape(runs: list[Run], errors: dict[str, float]) -> float:
    e = [errors[r.id] for r in runs if r.id in errors and is_published(r)]
    return 100 * float(np.mean(np.abs(e))) if e else float("nan")


def grid(knobs: tuple[str, ...]) -> list[dict[str, float]]:
    return [dict(zip(knobs, vals)) for vals in itertools.product(*(KNOBS[k][1] for k in knobs))]


def screen(parts: FrozenParts, priors, settings_list: list[dict]) -> list[tuple[dict, float, float]]:
    """Each setting -> (leave-one-origin-out, leave-one-source-out) published MAPE %, frozen parts."""
    out = []
    for s in settings_list:
        with settings(**s):
            loo = published_mape(parts.runs, parts.cv(parts.runs, priors, fit_weights.origin))
            los = published_mape(parts.runs, parts.cv(parts.runs, priors, profile_fit.by_source))
        out.append((s, loo, los))
    return out


def nested(parts: FrozenParts, priors, settings_list: list[dict]) -> tuple[dict[str, float], dict[str, dict]]:
    """Nested leave-one-origin-out: each published origin predicted with the setting that was best by
    leave-one-origin-out over the other origins. Returns run id -> error, origin -> chosen setting."""
    runs = parts.runs
    errors: dict[str, float] = {}
    chosen: dict[str, dict] = {}
    for o in sorted({fit_weights.origin(r) for r in runs if is_published(r)}):
        inner = [r for r in runs if fit_weights.origin(r) != o]
        test = [r for r in runs if fit_weights.origin(r) == o]
        best, best_mape = None, np.inf
        for s in settings_list:
            with settings(**s):
                m = published_mape(inner, parts.cv(inner, priors, fit_weights.origin))
            if m < best_mape:
                best, best_mape = s, m
        chosen[o] = best
        with settings(**best):
            profiles, _ = profile_fit.fit_sites(inner, priors, parts.design)
        for r, ratio in zip(test, parts.predict(test, profiles)):
            errors[r.id] = float(ratio - 1.0)
    return errors, chosen


def report(runs: list[Run], priors: dict[str, StackProfile], errors: dict[str, float] | None = None) -> dict[str, float]:
    """Print the leave-one-origin-out table (exact pipeline): per origin MAPE/bias, pooled published."""
    errors = profile_fit.cross_validate_origins(runs, priors) if errors is None else errors
    print("Leave-one-ORIGIN-out CV (each paper/repository/seed log predicted by profiles fitted on the other origins):")
    print(f"  {'origin':40} {'rows':>4} {'MAPE %':>7} {'bias %':>7}")
    for s in profile_fit.source_errors(runs, errors, fit_weights.origin):
        print(f"  {s.source[:40]:40} {s.rows:4} {s.mape_pct:7.1f} {s.bias_pct:+7.1f}")
    pub = np.array([errors[r.id] for r in runs if r.id in errors and is_published(r)])
    per_origin = [s.mape_pct for s in profile_fit.source_errors([r for r in runs if is_published(r)], errors,
                                                                fit_weights.origin)]
    print(f"  published rows (leave-one-origin-out): MAPE {100 * np.mean(np.abs(pub)):.1f}%  bias "
          f"{100 * np.mean(pub):+.1f}%  ({pub.size} rows; mean over origins {np.mean(per_origin):.1f}%)")
    return errors


def main(argv=None) -> int:
    from hardware.catalog import load_catalog
    from validation.fit_profiles import load_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", action="store_true", help="screen the fit's hyperparameters (frozen raw parts)")
    args = ap.parse_args(argv)
    runs, priors = load_all(), load_catalog().stacks
    if not args.grid:
        report(runs, priors)
        return 0
    parts = FrozenParts(runs, priors)
    print("current:", current())
    print("Screen on frozen raw parts: published MAPE %, leave-one-origin-out / leave-one-source-out")
    res = {tuple(s.values()): (loo, los) for s, loo, los in screen(parts, priors, grid(RIDGES))}
    stacks = KNOBS["RIDGE_STACK"][1]
    print("  RIDGE_POOLED \\ RIDGE_STACK " + "".join(f"{k:>14g}" for k in stacks))
    for p in KNOBS["RIDGE_POOLED"][1]:
        print(f"  {p:<26g}" + "".join(f"{res[(p, k)][0]:7.2f} /{res[(p, k)][1]:5.2f}" for k in stacks))
    for knob in KNOBS:  # one at a time around the current settings
        if knob not in RIDGES:
            for s, loo, los in screen(parts, priors, grid((knob,))):
                print(f"  {knob}={s[knob]:<8g} origin-out {loo:6.2f}%  source-out {los:6.2f}%")
    with_team = published_mape(parts.runs, parts.cv(parts.runs, priors, team))
    print(f"  NVIDIA's Megatron papers held out together (one team): {with_team:.2f}%")
    errors, chosen = nested(parts, priors, grid(RIDGES))
    print(f"Nested selection of {', '.join(RIDGES)} (each origin predicted with the setting best on the others): "
          f"published MAPE {published_mape(parts.runs, errors):.2f}%")
    for o, s in chosen.items():
        print(f"  {o:24} " + ", ".join(f"{k} {v:g}" for k, v in s.items()))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
