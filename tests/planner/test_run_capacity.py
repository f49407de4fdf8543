"""A runs file's capacity factor is applied to that row's prediction (planner/run_capacity.py): the row predicts
exactly what `plan estimate --moe-capacity-factor` predicts for the same plan (planner/moe_time.py load_factor:
padded, every expert runs c x the mean rows; Megatron-Core without padding: min(c, dropless 1.25)). Rows are
invented (the speed is a placeholder, no source's number)."""

import pytest

from planner.errors import PlanError
from planner.runs import NotPredicted, load_runs
from planner.settings import Settings
from planner.validate import predict
from tests.planner.test_run_moe import MIXTRAL
from tests.planner.test_run_spellings import load

PAD = "--moe-pad-expert-input-to-capacity"


def _row(tmp_path, notes: str, **cells):
    return load(tmp_path, **{**MIXTRAL, "notes": notes, **cells})


def _same(a, b) -> bool:
    return (a.predicted_tokens_per_s_per_gpu, a.predicted_mem_gib) == (b.predicted_tokens_per_s_per_gpu,
                                                                      b.predicted_mem_gib)


def test_a_padded_capacity_factor_predicts_what_the_setting_predicts(tmp_path):
    dropless = _row(tmp_path, "EP 8")
    assert dropless.moe_capacity_factor is None
    padded = _row(tmp_path, f"EP 8, capacity factor 2.0, {PAD}")
    assert padded.moe_capacity_factor == 2.0 and any("padded to 2 x" in a for a in padded.assumptions)
    row, base = predict(padded, Settings()), predict(dropless, Settings())
    # the amount: exactly the model's capacity-factor physics for the same plan
    assert _same(row, predict(dropless, Settings(moe_capacity_factor=2.0)))
    assert row.predicted_tokens_per_s_per_gpu < 0.97 * base.predicted_tokens_per_s_per_gpu
    assert row.predicted_mem_gib > base.predicted_mem_gib + 0.1
    # the row states its load: it wins over the settings' capacity factor
    assert _same(predict(padded, Settings(moe_capacity_factor=1.0)), row)


def test_capacity_factor_at_and_below_the_dropless_imbalance(tmp_path):
    base = predict(_row(tmp_path, "EP 8"), Settings())
    # padded to Switch's 1.25: the planner's dropless busiest rank already runs 1.25 x the mean
    assert _same(predict(_row(tmp_path, f"EP 8, capacity factor 1.25, {PAD}"), Settings()), base)
    tight = predict(_row(tmp_path, f"EP 8, capacity factor 1.0, {PAD}"), Settings())
    assert tight.predicted_tokens_per_s_per_gpu > base.predicted_tokens_per_s_per_gpu
    assert tight.predicted_mem_gib < base.predicted_mem_gib


def test_megatron_without_padding_drops_but_does_not_pad(tmp_path):
    base = predict(_row(tmp_path, "EP 8"), Settings())
    loose = _row(tmp_path, "EP 8, capacity factor 2.0")  # framework Megatron-LM, no padding stated
    assert loose.plan.stack == "megatron" and loose.moe_capacity_factor == 1.25
    assert any("without padding" in a for a in loose.assumptions)
    assert _same(predict(loose, Settings()), base)
    capped = _row(tmp_path, "EP 8, capacity factor 1.0")
    assert _same(predict(capped, Settings()), predict(_row(tmp_path, f"EP 8, capacity factor 1.0, {PAD}"), Settings()))


def test_a_bad_capacity_factor_is_not_predicted_naming_it(tmp_path):
    with pytest.raises(PlanError) as e:
        load(tmp_path, ("capacity_factor",), **{**MIXTRAL, "notes": "EP 8", "capacity_factor": "0"})
    assert e.value.field == "capacity_factor" and "> 0" in e.value.message and "\n" not in e.value.message
    skipped: list[NotPredicted] = []
    assert load_runs(tmp_path / "runs.csv", not_predicted=skipped) == [] and skipped[0].field == "capacity_factor"


def test_a_dense_row_ignores_nothing_and_gets_no_capacity(tmp_path):
    assert load(tmp_path).moe_capacity_factor is None


def test_a_zero_capacity_factor_in_the_notes_is_refused(tmp_path):
    with pytest.raises(PlanError) as e:
        _row(tmp_path, "EP 8, capacity factor 0")
    assert e.value.field == "capacity_factor" and "allowed: a number > 0" in e.value.message
