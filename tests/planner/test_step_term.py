"""A fixed per-step time is identified only by the same configuration at several grad accumulations
(planner/step_term.py); the fit over origins pulls it tighter where the rows cannot identify it."""

from pathlib import Path

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import fit_weights, profile_fit, step_term
from planner.runs import load_runs
from validation import origin_cv

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


def _runs():
    return [r for r in load_runs(DATA / "published_dev.csv") + load_runs(DATA / "seed_runs.csv")
            if r.scored and r.layout_stated]


def test_seed003s_grad_accumulation_rows_identify_the_fixed_term_and_llmfoundrys_do_not():
    runs = _runs()
    assert step_term.identified([r for r in runs if r.id.startswith("s003")])
    # llm-foundry's tables vary model, sequence length and micro batch, never grad accumulation alone
    assert not step_term.identified([r for r in runs if fit_weights.origin(r) == "llmfoundry"])


def test_a_configuration_at_two_grad_accumulations_identifies_it():
    one = next(r for r in _runs() if r.id.startswith("llmfoundry"))
    twice = type(one)(**{**one.__dict__, "id": one.id + "b",
                         "plan": one.plan.model_copy(update={"grad_accum": one.plan.grad_accum + 1})})
    assert not step_term.identified([one])
    assert step_term.identified([one, twice])
    other = type(one)(**{**one.__dict__, "plan": one.plan.model_copy(update={"grad_accum": one.plan.grad_accum + 1,
                                                                             "micro_batch": one.plan.micro_batch + 1})})
    assert not step_term.identified([one, other])  # micro batch changed too: not the same configuration


def test_unidentified_stacks_get_the_tighter_scale_identified_ones_keep_the_fits():
    runs = _runs()
    stacks = sorted({r.plan.stack for r in runs})
    own = dict(zip(stacks, profile_fit._own_rows(runs, stacks)))
    k = [p[0] for p in profile_fit.PARAMS].index("step_overhead_s")
    assert own["fsdp"][2][k] == pytest.approx(step_term.UNIDENTIFIED_SCALE_S)
    assert own["hf"][2][k] == pytest.approx(profile_fit.STEP_OVERHEAD_SCALE_S)
    assert np.delete(own["fsdp"][2], k) == pytest.approx(np.delete(profile_fit.SCALES_OVER_ORIGINS, k))


def test_fsdp_without_llmfoundry_puts_tens_of_ms_per_step():
    """fms_fsdp's 8 rows (2-20 s steps) cannot tell a fixed time from a factor: fitted without llmfoundry, fsdp's
    per-step term stays near a tuned loop's host work instead of 0.24-0.31 s (validation/worst_rows.md finding 1)."""
    runs = load_runs(DATA / "published_dev.csv") + load_runs(DATA / "seed_runs.csv")
    priors = load_catalog().stacks
    parts = origin_cv.FrozenParts(runs, priors)
    train = [r for r in parts.runs if fit_weights.origin(r) != "llmfoundry"]
    profiles, _ = profile_fit.fit_sites(train, priors, parts.design)
    assert profiles["fsdp"].step_overhead_s < 0.15
