"""The leave-one-trial-out calibration check (tuner/calibration_check.py) gives what the straightforward one gave:
a fit on the other trials for each trial (the grid search as it was, written out here) and a planner call under
that fit (planner.api.evaluate with the calibration, as tuner/predict.py made it) -- while fitting every left-out
calibration at once (tuner/calibrate.py fit_each_left_out) and searching each configuration once (the search
reads no calibration; tuner/predict.py)."""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner.api import evaluate
from planner.errors import PlanError
from planner.resolve import resolve_system
from planner.scenario import Scenario
from planner.settings import Calibration, Settings
from tuner import predict as predict_mod
from tuner.calibrate import Observation, fit_calibration, fit_each_left_out
from tuner.calibration_check import Measured, _abs_pct, choose
from tuner.predict import Predictor, _from_estimate
from tuner.space import Space, default_choices


def _reference_fit(obs: list[Observation], ridge=1e-4, source="plan tune") -> Calibration:
    """The grid search of tuner/calibrate.py as it was before fit_each_left_out (commit 905dc99)."""
    usable = [o for o in obs if o.measured_step_s > 0 and (o.compute_s + o.comm_s) > 0]
    if not usable:
        return Calibration(source=f"{source} (no completed trials)")
    a, b, r, m = (np.array([getattr(o, f) for o in usable])[:, None]
                  for f in ("compute_s", "comm_s", "rest_s", "measured_step_s"))
    cu, cv, half = 0.0, 0.0, math.log(20.0)
    for _ in range(8):
        g = np.linspace(-half, half, 41)
        uu, vv = np.meshgrid(cu + g, cv + g, indexing="ij")
        u, v = uu.ravel(), vv.ravel()
        pred = a * np.exp(u)[None, :] + b * np.exp(v)[None, :] + r
        loss = (np.log(np.maximum(pred, 1e-30) / m) ** 2).sum(axis=0) + ridge * (u**2 + v**2)
        k = int(np.argmin(loss))
        cu, cv = float(u[k]), float(v[k])
        half /= 8.0
    return Calibration(compute=math.exp(-cu), network=math.exp(-cv), source=f"{source} ({len(usable)} trials)")


def _observations(rng: random.Random, n: int) -> list[Observation]:
    out = []
    for _ in range(n):
        c, m, r = rng.uniform(0.0, 2.0), rng.choice([0.0, rng.uniform(0.0, 1.0)]), rng.uniform(0.0, 0.5)
        step = (c / rng.uniform(0.3, 3.0) + m / rng.uniform(0.3, 3.0) + r) * rng.uniform(0.8, 1.2)
        if rng.random() < 0.05:
            step = 0.0  # not measured: left out of every fit
        if rng.random() < 0.05:
            c = m = 0.0  # nothing the factors scale
        out.append(Observation(c, m, r, step))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_every_left_out_fit_is_the_reference_fit(seed):
    rng = random.Random(seed)
    for n in (1, 2, 3, 7, 30):
        obs = _observations(rng, n)
        assert fit_each_left_out(obs) == [_reference_fit(obs[:i] + obs[i + 1:]) for i in range(n)]
        assert fit_calibration(obs) == _reference_fit(obs)


def test_ties_are_broken_as_the_reference_does():
    """compute and communication the same in every trial: the loss is symmetric in the two factors, so two grid
    points tie exactly at every level (the sum less one trial cannot tell them apart: summed as the reference)."""
    rng = random.Random(7)
    obs = [Observation(x, x, 0.1, 2 * x * rng.uniform(0.5, 1.5) + 0.1) for x in (rng.uniform(0.1, 1) for _ in range(9))]
    got = fit_each_left_out(obs)
    assert got == [_reference_fit(obs[:i] + obs[i + 1:]) for i in range(len(obs))]


def _study(n: int):
    """n trials of 7b on 8 x H100 (the default GPU space with tp 1/2/4, pp 1/2, shuffled), measured = the
    planner's default prediction x a factor per configuration."""
    base = Scenario(model="7b", gpus=8, cluster="dgx-h100")
    system = resolve_system(base, load_catalog())
    predictor = Predictor(base, system)
    configs = Space(default_choices("any", on_gpu=True) | {"tp": (1, 2, 4), "pp": (1, 2)}).configs()
    rng = random.Random(0)
    rng.shuffle(configs)
    trials = []
    for knobs in configs:
        p = predictor(knobs)
        if p.fits and p.step_time_s:
            f = rng.uniform(0.6, 1.6) * (1.3 if knobs["sharding"] != "none" else 1.0)
            trials.append(Measured(knobs, p.observation(p.step_time_s / f), p.tokens_per_s * f))
        if len(trials) == n:
            return base, system, predictor, trials
    raise AssertionError("too few configurations fit")


def _planner_tokens_per_s(base, system, knobs, cal) -> float | None:
    """tuner/predict.py's planner call as it was: planner.api.evaluate under `cal`, everything searched again."""
    scenario = base.model_copy(update={"tp": 1, "pp": 1, "vpp": 1, "stack": "bundled", **knobs,
                                       "sequence_parallel": knobs.get("tp", 1) > 1})
    try:
        return _from_estimate(evaluate(scenario, settings=Settings(calibration=cal), system=system)).tokens_per_s
    except PlanError:
        return None


def _reference_choose(trials, predict, start):
    """The check's decision the straightforward way: a fit on the others and a planner call for each trial."""
    pairs = []
    for i, t in enumerate(trials):
        base = _abs_pct(predict(t.knobs, start), t.tokens_per_s)
        held = _abs_pct(predict(t.knobs, _reference_fit([o.obs for j, o in enumerate(trials) if j != i])),
                        t.tokens_per_s)
        pairs.append((base, held))
    base_pct, held_pct = (sum(p[k] for p in pairs) / len(pairs) for k in (0, 1))
    return ("fitted" if held_pct < base_pct else "baseline"), base_pct, held_pct, _reference_fit([t.obs for t in trials])


@pytest.mark.parametrize("n,start", [(12, Calibration()), (20, Calibration(compute=1.3, network=0.7, source="given"))])
def test_the_check_keeps_what_the_reference_keeps(n, start):
    base, system, predictor, trials = _study(n)
    t0 = time.perf_counter()
    cal, check = choose(trials, lambda k, c: predictor(k, c, cache=c == start).tokens_per_s, start)
    took = time.perf_counter() - t0
    t0 = time.perf_counter()
    kept, base_pct, held_pct, fitted = _reference_choose(
        trials, lambda k, c: _planner_tokens_per_s(base, system, k, c), start)
    print(f"\n{n} trials: check {took:.3f} s, straightforward {time.perf_counter() - t0:.3f} s")
    assert (check["kept"], check["n"]) == (kept, n)
    assert check["baseline_mean_abs_pct"] == pytest.approx(base_pct, rel=1e-12)
    assert check["held_out_mean_abs_pct"] == pytest.approx(held_pct, rel=1e-12)
    assert check["fitted"] == {"compute": fitted.compute, "network": fitted.network}
    assert cal == (fitted if kept == "fitted" else cal) and (kept == "fitted") == (cal == fitted)
    assert check["why"].startswith("it predicts trials" if kept == "fitted" else "fitted on the other trials")


def test_a_configuration_is_searched_once_under_every_calibration(monkeypatch):
    """The predictor's search of a configuration (memory, rules) reads no calibration: done once, and each
    calibration's prediction is planner.api.evaluate's."""
    base, system, predictor, trials = _study(6)
    calls = []
    real = predict_mod.search
    monkeypatch.setattr(predict_mod, "search", lambda *a, **k: calls.append(1) or real(*a, **k))
    for t in trials:
        for cal in (Calibration(compute=0.5, network=2.0), Calibration(compute=1.7, network=0.9)):
            p = predictor(t.knobs, cal, cache=False)
            assert p.tokens_per_s == _planner_tokens_per_s(base, system, t.knobs, cal)
    assert calls == []  # each was searched when its default prediction was made
