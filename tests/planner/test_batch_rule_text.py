"""The sentence that says how `plan estimate` chose the global batch names the model's size in the unit
people use: 0.479M, 356M, 7.06B (it said '0.000479B parameters' for the tiny model)."""

from planner.presets import resolve_model
from planner.search import default_global_batch


def test_rule_names_the_size_in_m_below_a_billion():
    for model, size in (("tiny", "0.479M"), ("350m", "356M"), ("7b", "7.06B")):
        batch, rule = default_global_batch(resolve_model(model), 8, 2048)
        assert f"tokens for {size} parameters, rounded to" in rule, rule
        assert rule.startswith(f"global batch {batch} sequences")


def test_moe_batch_follows_active_parameters_not_total():
    """An MoE token runs through its active parameters: the default batch reads those (DeepSeek LLM's
    B_opt follows compute per token), so gpt-oss-120b (5.7B active) is not batched like a 117B model."""
    from planner import moe

    for model in ("gpt-oss-120b", "qwen3-30b-a3b", "deepseek-v2-lite", "mixtral-8x7b"):
        spec = resolve_model(model)
        batch, rule = default_global_batch(spec, 256, 4096)
        active = moe.active_params(spec)
        assert f"tokens for {active / 1e9:.3g}B active parameters" in rule, rule
        assert batch * 4096 <= 2.2e6, (model, batch)  # a <=13B-active model: GPT-3's 2M tokens at most
    assert default_global_batch(resolve_model("gpt-oss-120b"), 256, 4096)[0] == 512  # was 1024 (117B total)
    assert default_global_batch(resolve_model("qwen3-30b-a3b"), 256, 4096)[0] == 256  # was 512 (30.5B total)
    dense_batch, dense_rule = default_global_batch(resolve_model("llama2-70b"), 256, 4096)
    assert "active" not in dense_rule and dense_batch == 512
