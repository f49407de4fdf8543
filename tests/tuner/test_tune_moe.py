"""`plan tune` on mixture-of-experts and sliding-window models: the bundled trainer runs them (ep 1, no tp/pp with
experts), so the tuner proposes and runs real trials of them, and keeps tp/pp out of an MoE study."""

import json

import optuna
import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.resolve import resolve_system
from planner.scenario import Scenario
from tuner.predict import Predictor
from tuner.space import ranked_parallel_choices, trainer_runs

from tests.tuner.tune_helpers import FAST, plan

# a tiny Mixtral (every layer MoE, 4 experts top-2) with Mistral's sliding window on every layer, 16 < seq 32
TINY_MIXTRAL = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16, "rms_norm_eps": 1e-5,
                "tie_word_embeddings": False}


def test_an_moe_study_gets_no_tp_pp():
    big = Scenario(model="mixtral-8x7b", cluster="dgx-h100", gpus=64)
    assert ranked_parallel_choices(big, resolve_system(big)) == {}
    assert trainer_runs({"tp": 2, "sharding": "fsdp_full_shard"}, moe=True).startswith("a mixture-of-experts")
    assert trainer_runs({"sharding": "zero3"}, moe=True) == ""
    small = Scenario(model="mixtral-8x7b", cluster="dgx-h100", gpus=64, seq_len=4096)
    predict = Predictor(small, resolve_system(small))
    knobs = {"sharding": "fsdp_full_shard", "offload": "none", "activation_checkpointing": "full",
             "precision": "bf16", "micro_batch": 1, "grad_accum": 1}
    assert "mixture-of-experts" in predict({**knobs, "tp": 2}).reason
    assert predict({**knobs, "tp": 1}).reason != predict({**knobs, "tp": 2}).reason


@pytest.mark.slow
def test_real_trials_of_a_tiny_mixtral_with_a_window(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_MIXTRAL))
    db = f"sqlite:///{tmp_path}/tune.db"
    args = [str(config) if a == "tiny" else "sharding=none,zero3,fsdp_full_shard" if a == "sharding=none" else a
            for a in FAST]
    plan(["tune", *args, "--choices", "micro_batch=2",
          "--budget", "4m", "--max-trials", "2", "--storage", db, "--study", "moe", "--remeasure-rounds", "0",
          "--top-k", "1"], tmp_path, timeout=400)
    rep = CliRunner().invoke(app, ["tune", "report", "--study", "moe", "--storage", db, "--json"])
    assert rep.exit_code == 0, rep.output
    data = json.loads(rep.output)
    assert data["launched"] == 2 and data["by_status"].get("ok") == 2, data["by_status"]
    st = optuna.load_study(study_name="moe", storage=db)
    ok = [t for t in st.trials if t.user_attrs.get("status") == "ok"]
    assert len(ok) == 2 and all(t.user_attrs["knobs"].get("tp", 1) == 1 for t in ok)
