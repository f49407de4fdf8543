"""A model given by its columns can be a LLaMA block (`mlp = swiglu`) from the CLI, a scenario file or HTTP."""

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.resolve import resolve_model
from planner.scenario import Scenario

# Llama 3 405B's shape (Dubey et al. 2024, arXiv 2407.21783, Table 3): 405B parameters
L405 = dict(n_layers=126, hidden=16384, n_heads=128, n_kv_heads=8, ffn_hidden=53248, vocab=128256)


def test_swiglu_columns_give_the_llama_block():
    spec = resolve_model(Scenario(**L405, mlp="swiglu"))
    assert (spec.mlp, spec.norm, spec.position, spec.tied_embeddings, spec.bias) == (
        "swiglu", "rmsnorm", "rope", False, False)
    assert spec.n_params / 1e9 == pytest.approx(405, rel=0.01)
    gelu = resolve_model(Scenario(**L405))
    assert gelu.mlp == "gelu" and gelu.n_params < 0.8 * spec.n_params  # 2 MLP matrices instead of 3


def test_mlp_overrides_a_preset_only_in_its_mlp():
    base = resolve_model(Scenario(model="llama2-7b"))
    other = resolve_model(Scenario(model="llama2-7b", mlp="gelu"))
    assert base.mlp == "swiglu" and other.mlp == "gelu"
    assert (other.norm, other.position) == (base.norm, base.position)


def test_bad_mlp_is_one_line_naming_the_field():
    res = CliRunner().invoke(app, ["estimate", "--n-layers", "2", "--hidden", "64", "--n-heads", "2",
                                   "--vocab", "100", "--mlp", "relu", "--gpus", "1"])
    assert res.exit_code == 2
    assert "mlp" in res.output and "swiglu" in res.output


def test_estimate_json_reports_the_swiglu_model():
    res = CliRunner().invoke(app, ["estimate", "--n-layers", "4", "--hidden", "256", "--n-heads", "4",
                                   "--vocab", "1000", "--mlp", "swiglu", "--ffn-hidden", "688",
                                   "--gpus", "8", "--json"])
    assert res.exit_code == 0, res.output
    assert '"mlp": "swiglu"' in res.output


def test_pydantic_rejects_unknown_mlp():
    with pytest.raises(ValueError, match="swiglu"):
        Scenario(**L405, mlp="relu")
