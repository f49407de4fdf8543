"""ModelSpec.rope_theta: the RoPE base read from config.json (rope_theta, rope_parameters.rope_theta, GPT-NeoX's
rotary_emb_base, MPT's attn_config.rope_theta), set on the RoPE presets, 10000 for a RoPE model that gives none
(old scenario and preset files) and absent for other position encodings. Before it, every RoPE model was base 10000."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlanError
from planner.hf_config import load_hf_config
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.presets import resolve_model
from tests.planner.hf_config_files import FIXTURES, edited_config as _config


@pytest.mark.parametrize("fixture, theta", [
    ("llama3-8b.json", 500_000.0), ("qwen2.5-7b.json", 1_000_000.0), ("mixtral-8x7b.json", 1_000_000.0),
    ("command-r.json", 8_000_000.0), ("starcoder2-3b.json", 999999.4420358813),
    ("gpt-neox-20b.json", 10_000.0),  # rotary_emb_base
])
def test_config_json_rope_theta_is_read(fixture, theta):
    assert load_hf_config(FIXTURES / fixture).rope_theta == theta


def test_other_spellings_and_absent_keys(tmp_path):
    # transformers v5 moves it under rope_parameters
    v5 = _config(tmp_path, "llama3-8b.json", rope_theta=None, rope_parameters={"rope_type": "default",
                                                                                 "rope_theta": 500000.0})
    assert load_hf_config(v5).rope_theta == 500_000.0
    # no key at all (GPT-J's config): transformers' default base 10000
    assert load_hf_config(FIXTURES / "gpt-j-6b.json").rope_theta == 10_000.0
    # MPT with RoPE in its attn_config
    mpt = json.loads((FIXTURES / "mpt-7b.json").read_text())
    mpt["attn_config"] = {**mpt["attn_config"], "alibi": False, "rope": True, "rope_theta": 250000}
    path = tmp_path / "mpt" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(mpt))
    assert load_hf_config(path).rope_theta == 250_000.0
    # learned positions and ALiBi: no base
    assert load_hf_config(FIXTURES / "gpt2.json").rope_theta is None
    assert load_hf_config(FIXTURES / "bloom-7b1.json").rope_theta is None


@pytest.mark.parametrize("value", ["500000", 0, -1.0, True])
def test_bad_rope_theta_names_the_key(tmp_path, value):
    path = _config(tmp_path, "llama3-8b.json", rope_theta=value)
    with pytest.raises(PlanError) as e:
        load_hf_config(path)
    assert "rope_theta" in str(e.value) and "must be a number > 0" in str(e.value) and str(path) in str(e.value)


def test_spec_default_and_refusal():
    shape = dict(n_layers=2, hidden=64, n_heads=4, vocab=300)
    assert ModelSpec(**shape, **LLAMA_BLOCK).rope_theta == 10_000.0  # an old RoPE spec without the field
    assert ModelSpec(**shape).rope_theta is None  # learned positions
    assert ModelSpec(**shape, **LLAMA_BLOCK, rope_theta=1e6).rope_theta == 1e6
    with pytest.raises(ValueError, match="rope_theta needs position rope"):
        ModelSpec(**shape, rope_theta=500000.0)
    with pytest.raises(ValueError, match="rope_theta"):
        ModelSpec(**shape, **LLAMA_BLOCK, rope_theta=0)
    # a spec dumped before the field existed still loads
    old = ModelSpec(**shape, **LLAMA_BLOCK).model_dump(mode="json")
    old.pop("rope_theta")
    assert ModelSpec.model_validate(old).rope_theta == 10_000.0


@pytest.mark.parametrize("preset, theta", [
    ("llama3-8b", 500_000.0), ("llama3-405b", 500_000.0), ("llama4-scout", 500_000.0), ("qwen3-30b-a3b", 1e6),
    ("mixtral-8x22b", 1e6), ("gpt-oss-20b", 150_000.0), ("gpt-oss-120b", 150_000.0), ("deepseek-v3", 10_000.0),
    ("llama2-7b", 10_000.0), ("gpt2", None), ("bloom-7b1", None),
])
def test_presets_carry_their_config_base(preset, theta):
    assert resolve_model(preset).rope_theta == theta
