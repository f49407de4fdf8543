"""Model presets and the bare-size rule: exact parameter counts against published ones."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hardware.catalog import ENV_VAR
from hardware.errors import CatalogError
from planner.errors import PlanError
from planner.presets import list_presets, resolve_model
from planner.sizes import SHAPE_ANCHORS, gpt_for_params, hidden_for_params, parse_size

REQUIRED = {
    "tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "bloom-7b1", "llama2-7b", "llama2-13b",
    "llama2-70b", "llama3-8b", "llama3-70b", "mistral-7b", "olmo-1b", "olmo-7b",
    "gpt2-7.5b", "gpt2-18b", "gpt2-30b", "gpt2-39b", "gpt2-52b", "gpt2-65b",
}
# The authors' published totals (model cards / papers), independent of our formula.
PUBLISHED = {
    "gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200, "bloom-7b1": 7_069_016_064, "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192, "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096, "olmo-1b": 1_176_764_416,
    "olmo-7b": 6_888_095_744,
}
SEED_SIZES_B = {"gpt2-18b": 18, "gpt2-22b": 22, "gpt2-24b": 24, "gpt2-25b": 25, "gpt2-30b": 30,
                "gpt2-39b": 39, "gpt2-50b": 50, "gpt2-52b": 52, "gpt2-65b": 65, "gpt2-78b": 78,
                "gpt2-97b": 97, "gpt2-116b": 116, "gpt2-206b": 206}

SEED_MAX_PP = {"gpt2-78b": 64}  # seed 002 ran it on 64 pipeline stages ("Max model size 16GB")


@pytest.fixture(autouse=True)
def _no_env_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_required_presets_exist() -> None:
    assert REQUIRED <= set(list_presets())


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_preset_matches_published_count(preset: str) -> None:
    spec = resolve_model(preset)
    assert spec.published_params == PUBLISHED[preset]
    assert spec.n_params == PUBLISHED[preset]
    assert spec.source


def test_every_preset_with_published_params_matches() -> None:
    for pid, spec in list_presets().items():
        if spec.published_params is not None:
            assert spec.n_params == spec.published_params, pid


def test_tiny_is_tiny() -> None:
    spec = resolve_model("tiny")
    assert spec.n_layers == 2 and 64 <= spec.hidden <= 128 and spec.max_positions == 128
    assert spec.vocab_padded == 512 and spec.vocab_padded % 128 == 0
    assert 2e5 < spec.n_params < 1.5e6


def test_seed_002_gpt_7_5b_and_its_formula() -> None:
    spec = resolve_model("gpt2-7.5b")
    assert (spec.n_layers, spec.hidden) == (36, 4096)
    # seed 002: l*(12h^2 + 13h) + v*h + s*h + 2h with v=50257, s=512 prints "7B" ... 7.46e9
    h, l, v, s = 4096, 36, 50257, 512
    seed = l * (12 * h**2 + 13 * h) + v * h + s * h + 2 * h
    same = spec.model_copy(update={"vocab_multiple": 1, "max_positions": s})
    assert same.n_params == seed == 7_457_632_256


# Seed 002's own Megatron scripts give these shapes (MSIZE table; 32 heads, seq 1024).
SEED_SCRIPT_SHAPES = {"gpt2-18b": (40, 6144), "gpt2-25b": (40, 7168), "gpt2-30b": (48, 7168),
                      "gpt2-39b": (48, 8192), "gpt2-52b": (64, 8192), "gpt2-65b": (64, 9216),
                      "gpt2-97b": (64, 11264), "gpt2-116b": (64, 12288), "gpt2-206b": (64, 16384)}


@pytest.mark.parametrize("preset", sorted(SEED_SIZES_B))
def test_seed_presets_shapes(preset: str) -> None:
    spec = resolve_model(preset)
    if preset in SEED_SCRIPT_SHAPES:
        assert (spec.n_layers, spec.hidden, spec.n_heads) == (*SEED_SCRIPT_SHAPES[preset], 32)
    else:  # sizes the scripts do not list follow the bare-size rule, with a block per pipeline stage
        rule = gpt_for_params(SEED_SIZES_B[preset] * 1e9, max_positions=1024)
        layers = max(rule.n_layers, SEED_MAX_PP.get(preset, 1))
        assert (spec.n_layers, spec.hidden, spec.n_heads) == (layers, rule.hidden, rule.n_heads)
    assert abs(spec.n_params / (SEED_SIZES_B[preset] * 1e9) - 1) < 0.05
    assert spec.n_heads % 4 == 0  # seed 002 ran TP=4


@pytest.mark.parametrize("text", ["7b", "52B", "1.3b", "350m", "125M", "13b", "175b", "1t", "2.7B"])
def test_bare_size_lands_within_5_percent(text: str) -> None:
    target = parse_size(text)
    spec = resolve_model(text)
    assert abs(spec.n_params / target - 1) < 0.05
    assert spec.hidden % 128 == 0 and spec.head_dim == 128
    assert spec.vocab_padded == 50304 and spec.max_positions == 2048 and spec.tied_embeddings
    assert spec.mlp == "gelu" and spec.norm == "layernorm" and spec.position == "learned" and spec.bias
    if spec.hidden >= 4096:
        assert spec.n_heads % 8 == 0


def test_bare_size_is_closest_layer_count() -> None:
    spec = resolve_model("7b")
    for n in (spec.n_layers - 1, spec.n_layers + 1):
        other = spec.model_copy(update={"n_layers": n})
        assert abs(other.n_params - 7e9) >= abs(spec.n_params - 7e9)


def test_rule_keeps_published_anchor_shapes_and_is_monotone() -> None:
    for n_params, hidden in SHAPE_ANCHORS:
        assert hidden_for_params(n_params) == hidden
    sizes = [10 ** (7.5 + k / 10) for k in range(50)]
    hiddens = [hidden_for_params(p) for p in sizes]
    assert hiddens == sorted(hiddens)
    assert resolve_model("39.1b").hidden == 8192 and resolve_model("18.4b").hidden == 6144


@pytest.mark.parametrize(
    ("ref", "words"),
    [
        ("0b", "must be positive"),
        ("0.0m", "must be positive"),
        ("abc", "a size like"),
        ("-7b", "a size like"),
        ("7 bn", "a size like"),
        ("", "is empty"),
        ("1m", "too small"),
        ("lama2-7b", "did you mean llama2-7b"),
        ("gpt-2", "did you mean gpt2"),
    ],
)
def test_bad_model_refs(ref: str, words: str) -> None:
    with pytest.raises(PlanError) as e:
        resolve_model(ref)
    assert e.value.field == "model" and words in str(e.value)
    assert "\n" not in str(e.value)


def test_user_preset_overrides_and_adds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "gpt2.toml").write_text("n_layers = 2\nhidden = 64\nn_heads = 2\nvocab = 100\n")
    (tmp_path / "models" / "mine.toml").write_text("n_layers = 3\nhidden = 64\nn_heads = 2\nvocab = 100\n")
    assert resolve_model("gpt2", [tmp_path]).n_layers == 2
    assert resolve_model("mine", [tmp_path]).name == "mine"
    assert resolve_model("gpt2").n_layers == 12
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert "mine" in list_presets()


@pytest.mark.parametrize(
    ("text", "field"),
    [("n_layers = 2\nhidden = 64\nn_heads = 2\n", "vocab"),
     ("n_layers = 2\nhidden = 64\nn_heads = 2\nvocab = 9\nwidth = 3\n", "width"),
     ("n_layers = 2\nhidden = 64\nn_heads = 2\nvocab = 9\nmlp = 'relu'\n", "mlp"),
     ("n_layers = 0\nhidden = 64\nn_heads = 2\nvocab = 9\n", "n_layers")],
)
def test_malformed_preset_names_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "bad.toml").write_text(text)
    with pytest.raises(CatalogError) as e:
        resolve_model("bad", [tmp_path])
    assert e.value.field == field and "bad.toml" in str(e.value)


def test_size_parser() -> None:
    assert parse_size("7b") == 7e9 and parse_size("350M") == 3.5e8 and parse_size("1.5T") == 1.5e12
    assert parse_size("gpt2") is None
    assert math.isclose(parse_size(" 2.7b ") or 0, 2.7e9)


# Mixture-of-experts presets: published only rounded (total, active, unit), sources in each TOML.
MOE_PUBLISHED = {"mixtral-8x7b": (46.7e9, 12.9e9, 0.05e9), "mixtral-8x22b": (141e9, 39e9, 0.5e9),
                 "qwen3-30b-a3b": (30.5e9, 3.3e9, 0.1e9), "olmoe-1b-7b": (6.9e9, 1.3e9, 0.05e9)}


@pytest.mark.parametrize("preset", sorted(MOE_PUBLISHED))
def test_moe_preset_matches_rounded_published_counts(preset: str) -> None:
    from planner import moe
    from tests.planner.moe_models import MIXTRAL_8X7B, OLMOE_1B_7B, QWEN3_30B_A3B

    spec = resolve_model(preset)
    total, active, unit = MOE_PUBLISHED[preset]
    assert abs(spec.n_params - total) < unit and abs(moe.active_params(spec) - active) < unit
    typed = {"mixtral-8x7b": MIXTRAL_8X7B, "olmoe-1b-7b": OLMOE_1B_7B, "qwen3-30b-a3b": QWEN3_30B_A3B}.get(preset)
    if typed is not None:  # the same shape as the config typed in for the MoE tests
        assert spec.n_params == typed.n_params and moe.active_params(spec) == moe.active_params(typed)


# Presets typed from the config.json files the reader tests type in: the same shape either way
@pytest.mark.parametrize("preset", ["llama4-scout", "llama4-maverick", "gpt-oss-20b", "gpt-oss-120b"])
def test_2025_moe_presets_are_their_config_files(preset: str) -> None:
    from planner import moe
    from planner.hf_config import spec_from_config
    from tests.planner.test_hf_llama4 import MAVERICK, SCOUT
    from tests.planner.test_hf_moe import _gpt_oss

    cfg = {"llama4-scout": SCOUT, "llama4-maverick": MAVERICK, "gpt-oss-20b": _gpt_oss(24, 32),
           "gpt-oss-120b": _gpt_oss(36, 128)}[preset]
    spec, read = resolve_model(preset), spec_from_config(cfg)
    keep = {"name", "source"}
    assert spec.model_dump(exclude=keep) == read.model_dump(exclude=keep)
    assert moe.active_params(spec) == moe.active_params(read)
