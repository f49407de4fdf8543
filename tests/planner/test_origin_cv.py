"""Leave-one-ORIGIN-out CV (planner/profile_fit.py `cross_validate_origins`, validation/origin_cv.py)."""

import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hardware.catalog import load_catalog
from hardware.stacks import StackProfile, profile_to_toml
from planner import fit_weights, profile_fit
from planner.runs import load_runs
from validation import origin_cv

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
BLOOM = "bloom_prequel"


def _runs():
    """Two tables of one origin (bloom_prequel) and two other origins: small enough for a few fits."""
    runs = load_runs(DATA / "published_dev.csv")
    return [r for r in runs if r.scored and r.layout_stated and r.source.startswith(
        ("bloom_prequel:48 node", "bloom_prequel:NHEADs", "megatron_sc21", "fms_fsdp"))]


def _poisoned(runs, table: str, factor: float):
    """A copy in which the rows of one table report `factor` x their measured speed."""
    return [replace(r, measured_tokens_per_s_per_gpu=r.measured_tokens_per_s_per_gpu * factor)
            if r.source == table else r for r in runs]


def _predicted(runs, errors):
    return {r.id: r.measured_tokens_per_s_per_gpu * (1 + errors[r.id]) for r in runs}


def test_origin_of_a_row_drops_the_table_and_keeps_papers_apart():
    runs = load_runs(DATA / "published_dev.csv") + load_runs(DATA / "seed_runs.csv")
    of = {r.source: fit_weights.origin(r) for r in runs}
    assert {o for s, o in of.items() if s.startswith("bloom_prequel:")} == {BLOOM}
    assert {o for s, o in of.items() if s.startswith("seed002:")} == {"seed002"}
    assert of["llmfoundry:H100 80GB BF16"] == of["llmfoundry:A100 80GB with 1600 Gbps node-node interconnect (RoCE)"]
    # one NVIDIA team, separate papers: separate origins; the team sensitivity joins them
    megatron = [r for r in runs if fit_weights.origin(r) in origin_cv.NVIDIA_MEGATRON]
    assert len({fit_weights.origin(r) for r in megatron}) == 5
    assert {origin_cv.team(r) for r in megatron} == {"nvidia_megatron"}
    per = profile_fit.source_errors(runs, {r.id: 0.1 for r in runs}, fit_weights.origin)
    assert sum(s.rows for s in per) == len(runs)
    assert len(per) == len({fit_weights.origin(r) for r in runs}) < len({r.source for r in runs})


def test_leave_one_origin_out_never_trains_on_the_held_out_origin():
    """Poison one bloom table (3x its measured speed): under leave-one-origin-out no bloom prediction
    moves (no bloom row is in the fit that predicts bloom), while under leave-one-source-out the other
    bloom table's predictions do (its sibling table is in its training set); the other origins, trained
    on the poisoned rows, move under both."""
    runs, priors = _runs(), load_catalog().stacks
    table = "bloom_prequel:NHEADs comparison"
    bad = _poisoned(runs, table, 3.0)
    clean_o = _predicted(runs, profile_fit.cross_validate_origins(runs, priors))
    bad_o = _predicted(bad, profile_fit.cross_validate_origins(bad, priors))
    assert set(clean_o) == {r.id for r in runs}
    bloom = [r.id for r in runs if fit_weights.origin(r) == BLOOM]
    others = [r.id for r in runs if fit_weights.origin(r) != BLOOM]
    assert np.allclose([bad_o[i] for i in bloom], [clean_o[i] for i in bloom], rtol=1e-9)
    assert max(abs(bad_o[i] / clean_o[i] - 1) for i in others) > 0.01

    sibling = [r.id for r in runs if r.source.startswith("bloom_prequel:48 node")]
    clean_s = _predicted(runs, profile_fit.cross_validate(runs, priors))
    bad_s = _predicted(bad, profile_fit.cross_validate(bad, priors))
    assert max(abs(bad_s[i] / clean_s[i] - 1) for i in sibling) > 0.01


def test_frozen_parts_predict_what_the_model_predicts():
    """The screen's linear prediction from parts computed once equals the model's at those profiles."""
    runs, priors = _runs(), load_catalog().stacks
    parts = origin_cv.FrozenParts(runs, priors)
    assert np.allclose(parts.predict(parts.runs, priors), profile_fit.predict_ratio(parts.runs, priors), rtol=1e-9)
    errors = parts.cv(parts.runs, priors, fit_weights.origin)
    assert set(errors) == {r.id for r in parts.runs}
    assert 0 < origin_cv.published_mape(parts.runs, errors) < 50


def test_settings_are_restored_and_change_the_fit():
    runs, priors = _runs(), load_catalog().stacks
    parts = origin_cv.FrozenParts(runs, priors)
    before = origin_cv.current()
    base = parts.cv(parts.runs, priors, fit_weights.origin)
    with origin_cv.settings(RIDGE_STACK=10.0, RIDGE_POOLED=10.0):
        assert profile_fit.RIDGE_STACK == 10.0
        stiff = parts.cv(parts.runs, priors, fit_weights.origin)
    assert origin_cv.current() == before
    assert any(abs(stiff[k] - base[k]) > 1e-3 for k in base)


def test_toml_header_says_what_its_cv_error_is(tmp_path):
    prof = load_catalog().stacks["fsdp"]
    path = tmp_path / "fsdp.toml"
    path.write_text(profile_to_toml(prof, "cv_mape_pct: leave-one-ORIGIN-out\nsecond line"))
    text = path.read_text()
    assert "# cv_mape_pct: leave-one-ORIGIN-out\n# second line\n" in text
    assert StackProfile.model_validate({**tomllib.loads(text), "id": "fsdp"}) == prof


@pytest.mark.parametrize("sid", ["fsdp", "megatron", "megatron_deepspeed", "torchtitan"])
def test_catalog_profiles_state_the_origin_level_error(sid):
    prof = load_catalog().stacks[sid]
    assert "leave-one-ORIGIN-out" in prof.fit_method
    assert prof.cv_mape_pct is not None and prof.cv_mape_pct > 0
