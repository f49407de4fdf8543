"""validation/seq_trend.py: the within-model error slope per doubling of the sequence (worst_rows.md finding 3)."""

from types import SimpleNamespace

import pytest

from validation.seq_trend import group_key, implied_attention_scale, level_split, slope_per_doubling
from validation.worst_rows import Row


def _row(source, hidden, seq_len, err, head_dim=128, attn=0.0):
    run = SimpleNamespace(source=f"{source}: table", gpu_type="A100-80GB", id=f"{source}_{hidden}_{seq_len}",
                          spec=SimpleNamespace(hidden=hidden, head_dim=head_dim),
                          plan=SimpleNamespace(seq_len=seq_len, activation_checkpointing="none"))
    return Row(run, err, 1.0, {"attn": attn})


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


def test_implied_attention_scale_is_per_head_dim_over_attention_dominated_rows():
    # hd128: +8% error at 50% attention share and +12% at 75% both imply attention x1.16; hd64: -1% at 80% -> 0.9875;
    # a 10%-attention row (its error is mostly other parts) is left out
    rows = [_row("llmfoundry", 2048, 8192, 0.08, attn=0.50), _row("llmfoundry", 2048, 32768, 0.12, attn=0.75),
            _row("llmfoundry", 768, 32768, -0.01, head_dim=64, attn=0.80),
            _row("llmfoundry", 2048, 512, 0.30, attn=0.10)]
    got = implied_attention_scale(rows)
    assert set(got) == {("llmfoundry", "A100-80GB", 128, "none"), ("llmfoundry", "A100-80GB", 64, "none")}
    mean, lo, hi, n = got[("llmfoundry", "A100-80GB", 128, "none")]
    assert (mean, lo, hi, n) == (pytest.approx(1.16), pytest.approx(1.16), pytest.approx(1.16), 2)
    assert got[("llmfoundry", "A100-80GB", 64, "none")][0] == pytest.approx(0.9875)


def test_level_split_finds_the_attention_level_behind_a_trend():
    # err = (1 - a) * -4% + a * +16% with the attention share a growing with s: a +20-point level gap, no residual
    shares = (0.07, 0.10, 0.16, 0.25, 0.39, 0.55, 0.71)
    rows = [_row("llmfoundry", 2048, 512 * 2 ** k, (1 - a) * -0.04 + a * 0.16, attn=a) for k, a in enumerate(shares)]
    rest, attn, rms = level_split(rows)[group_key(rows[0])]
    assert (rest, attn, rms) == (pytest.approx(-0.04), pytest.approx(0.16), pytest.approx(0.0, abs=1e-12))
