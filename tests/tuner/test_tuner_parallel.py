"""Tensor and pipeline parallelism in the tuner's space: added when the planner picks them,
predicted with the planner's tp/pp terms, and run by the bundled trainer."""

import json

import pytest

from planner.resolve import resolve_system
from planner.scenario import Scenario
from tuner.space import build_space, complete, ranked_parallel_choices, to_plan, trainer_runs

from tests.tuner.tune_helpers import FAST, plan


def test_space_gets_tp_pp_when_the_planner_picks_them():
    # fp32: a V100 has no bf16 (fp16: test_v100_fp16_study_searches_tp_pp)
    big = Scenario(model="gpt2-52b", cluster="jean-zay-v100-32gb", gpus=64, precision="fp32")
    choices = ranked_parallel_choices(big, resolve_system(big))
    assert choices and (max(choices["tp"]) > 1 or max(choices["pp"]) > 1), choices
    assert choices["tp"][0] == 1 and choices["pp"][0] == 1
    space = build_space("fsdp", on_gpu=True, parallel=choices)
    assert set(space.choices["tp"]) == set(choices["tp"])
    small = Scenario(model="tiny", cluster="dgx-h100", gpus=2)
    assert ranked_parallel_choices(small, resolve_system(small)) == {}


def test_v100_fp16_study_searches_tp_pp():
    """The study `plan tune` opens on 64 V100s (fp16 only: no bf16): the bundled trainer scales fp16 losses under
    tp/pp (trainer/backends/loss_scale.py), so the planner's fp16 tp/pp pick puts tp/pp in the space. Refused by a
    bundled rule before, the best bundled plan was data-parallel ZeRO-3 and the space had no tp/pp at all."""
    from tuner.config import TuneConfig
    from tuner.setup import _new_meta

    cfg = TuneConfig(model="gpt2-52b", cluster="jean-zay-v100-32gb", measure_network=False, budget_s=60)
    meta = _new_meta(cfg, 64, on_gpu=True)
    assert "bf16" not in meta.space["precision"] and "fp16" in meta.space["precision"]
    assert max(meta.space.get("tp", [1])) > 1 or max(meta.space.get("pp", [1])) > 1, meta.space


def test_data_parallel_size_follows_tp_pp():
    knobs = complete({"micro_batch": 2, "tp": 2, "pp": 2}, global_batch=16, dp=8)
    assert knobs["grad_accum"] == 4  # 8 ranks / (tp 2 x pp 2) = dp 2: 16 = 2 x 4 x 2
    p = to_plan(knobs, dp=8, seq_len=64)
    assert (p.dp, p.tp, p.pp, p.gpus, p.sequence_parallel) == (2, 2, 2, 8, True)


@pytest.mark.parametrize("knobs, runs", [
    ({"tp": 2, "sharding": "zero2"}, False), ({"pp": 2, "offload": "optimizer"}, False),
    ({"tp": 2, "precision": "fp16"}, True), ({"tp": 2, "sharding": "fsdp_full_shard"}, True),
    ({"pp": 2, "sharding": "none"}, True), ({"sharding": "zero3"}, True),
])
def test_trainer_runs(knobs, runs):
    assert (trainer_runs(knobs) == "") == runs


@pytest.mark.slow
def test_study_tries_tensor_and_pipeline_parallel_trials(tmp_path):
    """tp=2 and pp=2 in the space: the planner predicts them and real trials run them."""
    db = f"sqlite:///{tmp_path}/tune.db"
    r = plan(["tune", *[a if a != "tiny" else "tiny4" for a in FAST], "--choices", "micro_batch=2",
              "--choices", "tp=1,2", "--choices", "pp=1,2", "--budget", "4m", "--max-trials", "4",
              "--storage", db, "--study", "par", "--remeasure-rounds", "0", "--json"], tmp_path, timeout=400)
    data = json.loads(r.stdout)
    assert data["launched"] >= 2
    from typer.testing import CliRunner

    from plan_cli.main import app

    rep = CliRunner().invoke(app, ["tune", "report", "--study", "par", "--storage", db, "--json"])
    assert rep.exit_code == 0, rep.output
    import optuna

    st = optuna.load_study(study_name="par", storage=db)
    assert "remeasured" not in st.user_attrs and "final_ranking" not in st.user_attrs  # --remeasure-rounds 0
    trials = st.trials
    tried = {(t.user_attrs["knobs"]["tp"], t.user_attrs["knobs"]["pp"]) for t in trials if "knobs" in t.user_attrs}
    assert tried & {(2, 1), (1, 2)}, tried
    ok = [t for t in trials if t.user_attrs.get("status") == "ok"]
    assert any(t.user_attrs["knobs"]["tp"] * t.user_attrs["knobs"]["pp"] == 2 for t in ok), \
        [(t.user_attrs.get("knobs"), t.user_attrs.get("status")) for t in trials]
