"""Resuming a study with options that only shape a new study (--seq-len, --global-batch, --calibration) is a
one-line error naming them; they were ignored without a word (a --calibration file that did not even exist
ran a whole study)."""

from __future__ import annotations

import pytest

from planner.errors import PlanError
from tuner.config import TuneConfig
from tuner.setup import open_study

CHOICES = {"sharding": ("none",), "offload": ("none",), "activation_checkpointing": ("none",), "precision": ("fp32",),
           "micro_batch": (2,)}


def _cfg(tmp_path, **kw) -> TuneConfig:
    return TuneConfig(model="tiny", gpus=2, budget_s=60, steps=3, storage=f"sqlite:///{tmp_path}/r.db", study="r",
                      measure_network=False, progress=False, choices=CHOICES, **kw)


@pytest.fixture
def made(tmp_path):
    open_study(_cfg(tmp_path, seq_len=32))
    return tmp_path


@pytest.mark.parametrize("kw, field, words", [
    (dict(seq_len=64), "study", "r was created with --seq-len 32, not --seq-len 64; resume it without --seq-len"),
    (dict(global_batch=8), "study", "r was created without --global-batch, not --global-batch 8"),
    (dict(calibration_in="/no/such/cal.json"), "calibration", "study r exists and keeps its own calibration"),
])
def test_options_of_a_new_study_on_a_resume_are_errors(made, kw, field, words):
    with pytest.raises(PlanError) as e:
        open_study(_cfg(made, **kw))
    assert e.value.field == field and words in str(e.value)


def test_a_resume_with_the_same_or_no_options_opens_it(made):
    assert open_study(_cfg(made, seq_len=32)).meta.seq_len == 32
    assert open_study(_cfg(made)).meta.seq_len == 32
