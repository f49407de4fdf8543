"""Weights of the profile fit (planner/fit_weights.py) and the generic (pooled) profile."""

from pathlib import Path

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import fit_weights, profile_fit
from planner.runs import load_runs

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


def _runs():
    pub = [r for r in load_runs(DATA / "published_dev.csv")
           if r.source.startswith(("bloom_prequel:NHEADs", "megatron_sc21:", "fms_fsdp"))]
    seed = [r for r in load_runs(DATA / "seed_runs.csv") if r.source.startswith("seed002:HF+DeepSpeed ZeRO-3 perf")]
    return pub, seed


def test_seed_rows_count_by_their_stated_spread():
    pub, seed = _runs()
    assert fit_weights.noise_weight(pub[0]) == 1.0
    # +-40% day to day read as 2 sd (0.2) on top of the model's 0.1: 0.01 / 0.05
    assert fit_weights.noise_weight(seed[0]) == pytest.approx(0.2)


def test_stack_pull_grows_as_its_origins_fall():
    pub, seed = _runs()
    one = [r for r in pub if r.source.startswith("fms_fsdp")]
    assert fit_weights.stack_ridge(one, 0.01) == pytest.approx(0.03)
    assert fit_weights.stack_ridge(one + seed, 0.01) == pytest.approx(0.015)
    assert fit_weights.stack_ridge(pub, 0.01) == pytest.approx(0.01)  # three origins


def test_generic_is_the_pooled_fit_and_a_stack_without_rows_gets_it():
    pub, seed = _runs()
    priors = load_catalog().stacks
    fitted = profile_fit.fit(pub + seed, priors)
    assert "bundled" not in {r.plan.stack for r in pub + seed}
    for field, *_ in profile_fit.PARAMS:
        assert getattr(fitted["generic"], field) == pytest.approx(getattr(fitted["bundled"], field))
    # the pooled factors are not those of any one stack with rows of its own
    assert fitted["generic"].gemm_time_factor != pytest.approx(fitted["hf"].gemm_time_factor)


def test_noisy_few_origin_stack_is_pulled_towards_the_pool(monkeypatch):
    """hf's rows here: one seed table (one origin, +-40% logs). With the seed weighting and the
    per-origin pull its factors sit nearer the pooled ones than with neither."""
    from validation.stack_cv import factor_distance

    pub, seed = _runs()
    priors = load_catalog().stacks
    near = factor_distance(profile_fit.fit(pub + seed, priors))["hf"]
    monkeypatch.setattr(fit_weights, "SEED_SPREAD", 0.0)
    monkeypatch.setattr(fit_weights, "FULL_ORIGINS", 1)
    far = factor_distance(profile_fit.fit(pub + seed, priors))["hf"]
    assert near < far
    assert np.isfinite(near)


def test_site_factor_is_the_shrunk_ratio_of_its_rows():
    from planner import site_effects

    keys = ["seed009", "seed009", None]
    # the model says half the measured time on both rows of the log: m near 2, pulled a little to 1
    sites = site_effects.update(np.array([0.5, 0.5, 0.5]), np.array([1.0, 1.0, 1.0]), keys)
    assert set(sites) == {"seed009"}
    assert 1.9 < sites["seed009"] < 2.0
    assert list(site_effects.row_factors(keys, sites)) == [sites["seed009"]] * 2 + [1.0]


def test_a_slow_seed_log_gets_a_site_factor_not_a_slow_stack():
    """Seed 002's HF rows (Jean Zay, +-40% logs): the fit gives their log a site factor > 1 so the hf
    factors stay nearer the pooled ones than without site factors."""
    from planner import site_effects
    from validation.stack_cv import factor_distance

    pub, seed = _runs()
    priors = load_catalog().stacks
    profiles, sites = profile_fit.fit_sites(pub + seed, priors)
    # 1.19 here (the log's only stack is hf, so the stack pull decides how the slowness splits between
    # site and stack: 1.56 with the stronger pulls before profile_fit's leave-one-origin-out choice)
    assert sites["seed002"] > 1.1
    with_sites = factor_distance(profiles)["hf"]
    orig = site_effects.SITE_SPREAD
    try:
        site_effects.SITE_SPREAD = 1e-3  # a site factor pinned at 1
        without = factor_distance(profile_fit.fit(pub + seed, priors))["hf"]
    finally:
        site_effects.SITE_SPREAD = orig
    assert with_sites < without
