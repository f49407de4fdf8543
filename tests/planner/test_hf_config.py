"""Hugging Face config.json files -> ModelSpec, checked against the authors' published counts.

The fixtures in tests/fixtures/hf_configs/ are typed in from the public config.json files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.hf_config import load_hf_config
from planner.presets import resolve_model

from tests.planner.hf_config_files import FIXTURES, edited_config as _write

# Published totals: model cards / papers (Pythia: Biderman et al. 2023, Table 1). MPT-7B's card
# says "6.7B"; 6,649,286,656 is the exact count of MosaicML's MPT code (no position table when
# alibi, no_bias strips every bias including LayerNorm's, tied head).
PUBLISHED = {
    "gpt2.json": 124_439_808,
    "llama-2-7b.json": 6_738_415_616,
    "llama3-8b.json": 8_030_261_248,
    "mistral-7b.json": 7_241_732_096,
    "bloom-7b1.json": 7_069_016_064,
    "pythia-160m.json": 162_322_944,
    "pythia-1b.json": 1_011_781_632,
    "mpt-7b.json": 6_649_286_656,
    "olmo-1b.json": 1_176_764_416,
    "olmo-1b-hf.json": 1_176_764_416,
    "olmo-7b.json": 6_888_095_744,
    # Read from the standard keys with per-family rules (planner/hf_config.py RULES). Configs from
    # huggingface.co/<id>/blob/main/config.json; totals as the model pages list them (safetensors
    # parameter count): Qwen/Qwen2.5-7B (card: 7.61B, 6.53B non-embedding; q/k/v biases),
    # google/gemma-2-9b and gemma-2-2b (head_dim 256, GeGLU, 4 norms per layer, tied),
    # google/gemma-3-1b-pt (+ per-head q/k norms), microsoft/Phi-3-mini-4k-instruct (3.8B),
    # tiiuae/falcon-7b (multi-query, one LayerNorm per parallel block, tied).
    "qwen2.5-7b.json": 7_615_616_512,
    "gemma-2-9b.json": 9_241_705_984,
    "gemma-2-2b.json": 2_614_341_888,
    "gemma-3-1b.json": 999_885_952,
    "phi-3-mini-4k.json": 3_821_079_552,
    "falcon-7b.json": 6_921_720_704,
    # EleutherAI/gpt-neox-20b model card: 20,554,567,680 (use_parallel_residual, two LayerNorms).
    "gpt-neox-20b.json": 20_554_567_680,
}
# Totals published only rounded (model cards / release blog): checked to their last digit.
# Qwen/Qwen2.5-0.5B card: 0.49B (0.36B non-embedding); Qwen2 blog (qwenlm.github.io/blog/qwen2):
# Qwen2-1.5B 1.54B (1.31B non-embedding); bigcode/starcoder2-3b and -7b model pages: 3.03B, 7.17B
# (StarCoder 2 paper, Lozhkov et al. 2024: LayerNorm, biases, GELU MLP, tied embeddings).
PUBLISHED_ROUNDED = {
    "qwen2.5-0.5b.json": (0.49e9, 0.36e9, 0.01e9),
    "qwen2-1.5b.json": (1.54e9, 1.31e9, 0.01e9),
    "starcoder2-3b.json": (3.03e9, None, 0.01e9),
    "starcoder2-7b.json": (7.17e9, None, 0.01e9),
    # Parallel blocks: EleutherAI/gpt-j-6b card 6,053,381,344 (its lm_head bias and the out
    # projection's missing bias are not expressed: -0.04%); microsoft/phi-2 model page 2.78B;
    # CohereForAI/c4ai-command-r-v01 card: 35B (LayerNorm without bias, one per block, tied).
    "gpt-j-6b.json": (6.05e9, None, 0.01e9),
    # mistralai/Mixtral-8x7B-v0.1 (planner/hf_moe.py): "46.7B total parameters" (Mistral AI, "Mixtral
    # of experts", 11 Dec 2023); its 12.9B active: tests/planner/test_hf_moe.py.
    "mixtral-8x7b.json": (46.7e9, None, 0.05e9),
    "phi-2.json": (2.78e9, None, 0.01e9),
    "command-r.json": (35e9, None, 0.05e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_config_matches_published_count(name: str) -> None:
    spec = resolve_model(str(FIXTURES / name))
    assert spec.n_params == PUBLISHED[name]
    assert spec.source == str(FIXTURES / name)


@pytest.mark.parametrize("name", sorted(PUBLISHED_ROUNDED))
def test_config_matches_rounded_published_count(name: str) -> None:
    total, non_embedding, unit = PUBLISHED_ROUNDED[name]
    spec = resolve_model(str(FIXTURES / name))
    assert abs(spec.n_params - total) < unit, spec.n_params
    if non_embedding is not None:
        blocks = spec.n_layers * spec.params_per_layer  # the blocks of n_params
        assert abs(blocks - non_embedding) < unit, blocks


def test_fixture_set_is_complete() -> None:
    assert {p.name for p in FIXTURES.glob("*.json")} == set(PUBLISHED) | set(PUBLISHED_ROUNDED)


def test_family_rules_of_the_standard_reader() -> None:
    qwen = load_hf_config(FIXTURES / "qwen2.5-7b.json")
    assert qwen.qkv_bias and not qwen.bias and qwen.kv_heads == 4 and not qwen.tied_embeddings
    gemma = load_hf_config(FIXTURES / "gemma-2-9b.json")
    assert gemma.head_dim == 256 and gemma.q_dim == 4096 != gemma.hidden and gemma.mlp == "swiglu"
    assert gemma.norms_per_layer == 4 and gemma.tied_embeddings and gemma.qk_norm == "none"
    assert load_hf_config(FIXTURES / "gemma-3-1b.json").qk_norm == "per_head"
    falcon = load_hf_config(FIXTURES / "falcon-7b.json")
    assert falcon.kv_heads == 1 and falcon.norms_per_layer == 1 and falcon.mlp == "gelu" and falcon.norm == "layernorm"
    star = load_hf_config(FIXTURES / "starcoder2-3b.json")
    assert star.bias and star.norm == "layernorm" and star.mlp == "gelu" and star.tied_embeddings
    phi = load_hf_config(FIXTURES / "phi-3-mini-4k.json")
    assert phi.mlp == "swiglu" and not phi.bias and phi.norm == "rmsnorm"


def test_falcon_new_decoder_architecture(tmp_path: Path) -> None:
    """Falcon-40B's layout (tiiuae/falcon-40b config.json): 8 kv heads, ln_attn + ln_mlp."""
    path = _write(tmp_path, "falcon-7b.json", hidden_size=8192, num_attention_heads=128, num_hidden_layers=60,
                  num_kv_heads=8, new_decoder_architecture=True, multi_query=None)
    spec = load_hf_config(path)
    assert spec.kv_heads == 8 and spec.norms_per_layer == 2
    per_layer = 8192 * (8192 + 2 * 512) + 8192 * 8192 + 2 * 8192 * 4 * 8192 + 2 * 2 * 8192
    assert spec.n_params == 60 * per_layer + 65024 * 8192 + 2 * 8192


def test_unknown_decoder_type_reads_from_standard_keys(tmp_path: Path) -> None:
    """A model type with no rules (here: llama's keys under a new name) reads as LLaMA does."""
    spec = load_hf_config(_write(tmp_path, "llama-2-7b.json", model_type="brand_new_lm"))
    assert spec.n_params == 6_738_415_616 and spec.family == "brand_new_lm"


def test_family_features() -> None:
    mistral = load_hf_config(FIXTURES / "mistral-7b.json")
    assert mistral.kv_heads == 8 and mistral.mlp == "swiglu" and not mistral.tied_embeddings
    assert mistral.norm == "rmsnorm" and mistral.position == "rope" and not mistral.bias
    bloom = load_hf_config(FIXTURES / "bloom-7b1.json")
    assert bloom.position == "alibi" and bloom.embedding_norm and bloom.tied_embeddings
    neox = load_hf_config(FIXTURES / "pythia-160m.json")
    assert not neox.tied_embeddings and neox.position == "rope" and neox.bias
    mpt = load_hf_config(FIXTURES / "mpt-7b.json")
    assert mpt.position == "alibi" and not mpt.bias and not mpt.norm_bias and mpt.ffn == 4 * 4096
    for name in ("olmo-1b.json", "olmo-1b-hf.json", "olmo-7b.json"):
        olmo = load_hf_config(FIXTURES / name)
        assert olmo.norm == "nonparametric" and olmo.vocab_padded == 50304
    assert load_hf_config(FIXTURES / "olmo-7b.json").ffn == 11008
    assert load_hf_config(FIXTURES / "gpt2.json").name == "gpt2"


def test_model_folder_and_affine_olmo(tmp_path: Path) -> None:
    folder = tmp_path / "OLMo-1B"
    folder.mkdir()
    cfg = json.loads((FIXTURES / "olmo-1b.json").read_text())
    cfg["layer_norm_with_affine"] = True  # a LayerNorm with weights (no bias: bias_for_layer_norm false)
    (folder / "config.json").write_text(json.dumps(cfg))
    spec = resolve_model(str(folder))
    assert spec.name == "OLMo-1B" and spec.norm == "layernorm" and not spec.norm_bias
    assert spec.n_params == 1_176_764_416 + (2 * 16 + 1) * 2048


def test_llama_tied_and_gqa_variants(tmp_path: Path) -> None:
    cfg = json.loads((FIXTURES / "llama-2-7b.json").read_text())
    cfg.update(tie_word_embeddings=True, num_key_value_heads=8)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = load_hf_config(path)
    kv_saving = 32 * 2 * (4096 * 4096 - 4096 * 1024)
    assert spec.n_params == 6_738_415_616 - 32000 * 4096 - kv_saving


@pytest.mark.parametrize(
    ("base", "changes", "words"),
    [
        ("llama-2-7b.json", {"hidden_size": None}, "key 'hidden_size': missing"),
        ("llama-2-7b.json", {"hidden_size": -4096}, "key 'hidden_size': must be positive"),
        ("llama-2-7b.json", {"num_hidden_layers": "32"}, "key 'num_hidden_layers': must be an integer"),
        ("llama-2-7b.json", {"tie_word_embeddings": "no"}, "key 'tie_word_embeddings': must be true or false"),
        ("llama-2-7b.json", {"model_type": "dbrx", "num_experts": 16}, "mixture-of-experts model_type 'dbrx' is not modelled"),
        ("llama-2-7b.json", {"model_type": "llama", "num_local_experts": 8}, "model_type 'llama' is not modelled (llama, num_local_experts=8"),
        ("llama-2-7b.json", {"model_type": "deepseek_v3"}, "key 'kv_lora_rank': missing"),
        ("llama-2-7b.json", {"model_type": "llama", "kv_lora_rank": 512},
         "multi-head latent attention (llama, kv_lora_rank=512"),
        ("llama-2-7b.json", {"model_type": "t5"}, "only decoder-only transformers are modelled"),
        ("llama-2-7b.json", {"model_type": None}, "key 'model_type': missing"),
        ("llama-2-7b.json", {"hidden_size": 4001}, "key 'head_dim': missing, and hidden_size 4001"),
        ("llama-2-7b.json", {"attention_bias": True, "mlp_bias": False}, "key 'mlp_bias'"),
        ("gpt2.json", {"n_head": 7}, "divisible"),
        ("mpt-7b.json", {"d_model": 0}, "key 'd_model': must be positive"),
        ("mpt-7b.json", {"attn_config": 3}, "key 'attn_config': must be an object"),
    ],
)
def test_malformed_config_names_file_and_key(tmp_path: Path, base: str, changes: dict, words: str) -> None:
    path = _write(tmp_path, base, **changes)
    with pytest.raises(PlanError) as e:
        resolve_model(str(path))
    assert str(path) in str(e.value) and words in str(e.value)


def test_unreadable_configs(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    with pytest.raises(PlanError, match="broken.json: not valid JSON"):
        resolve_model(str(bad))
    with pytest.raises(PlanError, match="file not found"):
        resolve_model(str(tmp_path / "missing.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(PlanError, match="JSON object"):
        resolve_model(str(tmp_path / "list.json"))
    shutil.copy(FIXTURES / "gpt2.json", tmp_path / "gpt2.json")
    assert resolve_model(str(tmp_path / "gpt2.json")).n_params == 124_439_808


def test_a_relative_config_json_is_named_by_its_folder(tmp_path: Path, monkeypatch) -> None:
    """`--model ./config.json` run inside the model's folder: the folder's name (was "", a header
    line starting with ": 8.030B params"); a config with another file name: its stem."""
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    cfg = json.loads((FIXTURES / "llama3-8b.json").read_text())
    cfg.pop("_name_or_path", None)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "my-llama.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(folder)
    assert resolve_model("./config.json").name == "Meta-Llama-3-8B"
    assert resolve_model("config.json").name == "Meta-Llama-3-8B"
    assert resolve_model("my-llama.json").name == "my-llama"
    assert resolve_model(".").name == "Meta-Llama-3-8B"
    assert resolve_model("./config.json").describe().startswith("Meta-Llama-3-8B: 8.030B params")
