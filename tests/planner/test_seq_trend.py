"""validation/seq_trend.py: the within-model error slope per doubling of the sequence (worst_rows.md finding 3)."""

from types import SimpleNamespace

import pytest

from validation.seq_trend import group_key, slope_per_doubling
from validation.worst_rows import Row


def _row(source, hidden, seq_len, err):
    run = SimpleNamespace(source=f"{source}: table", gpu_type="A100-80GB", id=f"{source}_{hidden}_{seq_len}",
                          spec=SimpleNamespace(hidden=hidden, head_dim=128),
                          plan=SimpleNamespace(seq_len=seq_len, activation_checkpointing="none"))
    return Row(run, err, 1.0)


def test_slope_is_the_within_model_trend_whatever_each_model_s_level():
    # +2 points per doubling in both models, levels -10% and +5%: the slope ignores the levels
    rows = [_row("llmfoundry", 2048, 512 * 2 ** k, -0.10 + 0.02 * k) for k in range(7)]
    rows += [_row("llmfoundry", 1536, 2048 * 2 ** k, 0.05 + 0.02 * k) for k in range(5)]
    assert slope_per_doubling(rows) == pytest.approx(2.0)


def test_models_with_fewer_than_three_lengths_do_not_count():
    rows = [_row("llmfoundry", 2048, 512 * 2 ** k, -0.01 * k) for k in range(4)]
    rows += [_row("llmfoundry", 4096, s, e) for s, e in ((1024, -0.5), (65536, 0.5))]  # two lengths: ignored
    assert slope_per_doubling(rows) == pytest.approx(-1.0)
    assert group_key(rows[0]) != group_key(rows[-1])
