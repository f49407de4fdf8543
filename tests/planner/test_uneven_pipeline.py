"""Uneven pipelines (planner/stage_split.py, planner/run_split.py) and the tp-vs-kv-heads rule:
reader spellings, the first stage's memory with its own blocks, the rules and the search."""

import numpy as np
import pytest

from planner import memory, pinned, rules, search
from planner.errors import PlanError
from planner.layout import Layout
from planner.resolve import resolve_model, resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from tests.planner.test_run_spellings import load

PIPE = dict(n_layers="126", tp="4", pp="16", dp="1", global_batch="64")


@pytest.mark.parametrize("notes, vpp, want", [
    ("first stage 7 layers, last 7", 1, (7, 7, False, False)),
    ("first stage 7 layers, last 7; VP=2", 1, (7, 7, False, False)),  # 7 blocks do not split in 2 chunks
    ("decoder_first_pipeline_num_layers=6, decoder_last_pipeline_num_layers=8", 1, (6, 8, False, False)),
    ("--decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 8", 1, (6, 8, False, False)),
    ("first/last stage: 7 layers", 1, (7, 7, False, False)),
    ("uneven pp: 1 layer less on first and last", 1, (0, 0, True, True)),
    ("uneven pp: 1 layer less on first and last; interleaved, VP=8", 8, (0, 0, True, True)),
    ("we reduce one Transformer layer each from the first and the last stages; vpp 4", 4, (0, 0, True, True)),
    ("uneven pipeline: first and last stage one layer fewer", 1, (0, 0, True, True)),
    ("first/last stages: 1 block less each", 1, (0, 0, True, True)),
    ("--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", 1, (0, 0, True, True)),
    ("account_for_embedding_in_pipeline_split=true", 1, (0, 0, True, False)),
    ("", 1, (0, 0, False, False)),
])
def test_split_spellings(tmp_path, notes, vpp, want):
    run = load(tmp_path, notes=notes, **PIPE)
    p = run.plan
    assert (p.first_stage_layers, p.last_stage_layers, p.embedding_in_split, p.loss_in_split) == want
    assert p.vpp == vpp
    if any(want):
        assert any("uneven pipeline" in a for a in run.assumptions)


def test_split_columns(tmp_path):
    run = load(tmp_path, ("first_stage_layers", "last_stage_layers"), first_stage_layers="6",
               last_stage_layers="8", notes="VP=2", **PIPE)
    assert (run.plan.first_stage_layers, run.plan.last_stage_layers, run.plan.vpp) == (6, 8, 2)


def test_without_pipeline_stages_the_split_is_ignored(tmp_path):
    run = load(tmp_path, notes="first stage 7 layers, last 7", n_layers="126", tp="8", pp="1", dp="8")
    assert run.plan.first_stage_layers == 0 and run.plan.last_stage_layers == 0


def _spec():
    return resolve_model(Scenario(n_layers=32, hidden=4096, n_heads=32, ffn_hidden=16384, vocab=32000))


def _act(**knobs) -> float:
    plan = ExecutionPlan(tp=8, pp=4, dp=1, micro_batch=1, grad_accum=8, seq_len=2048, **knobs)
    return float(memory.activation_bytes(_spec(), Layout.from_plan(plan))[0])


def test_first_stage_memory_counts_its_own_blocks():
    """32 blocks, pp 4, vpp 2, 8 micro batches, no recompute. Even: rank 0 holds 4 micro batches x 8
    blocks + (p-1)/p x 4 more of its first chunk (4 blocks) = 44 blocks (Korthikanti eq. 6:
    4 x 8 x (1 + 3/8)). First 4 / last 12 blocks: rank 0 holds 4 x (4 + 3/4 x 2) = 22, the second
    rank 3 micro batches x 8 blocks x 1.375 = 33: the activations drop by 11 blocks' worth."""
    spec = _spec()
    per_block = float(memory.layer_activation_bytes(spec, Layout.from_plan(
        ExecutionPlan(tp=8, pp=4, dp=1, micro_batch=1, grad_accum=8, seq_len=2048)))[0])
    even = _act(vpp=2)
    uneven = _act(vpp=2, first_stage_layers=4, last_stage_layers=12)
    assert even - uneven == pytest.approx(11 * per_block, rel=1e-9)
    # without interleaving: 4 x 8 = 32 blocks against max(4 x 4, 3 x 8) = 24
    assert _act() - _act(first_stage_layers=4, last_stage_layers=12) == pytest.approx(8 * per_block, rel=1e-9)


def test_params_of_the_heaviest_stage():
    """The last stage with 12 blocks holds more than the first with 4 blocks and the embedding."""
    spec = _spec()
    lay = Layout.from_plan(ExecutionPlan(tp=1, pp=4, dp=1, first_stage_layers=4, last_stage_layers=12))
    assert float(memory.params_per_gpu(spec, lay)[0]) == pytest.approx(12 * spec.params_per_layer)


@pytest.mark.parametrize("pins, field, words", [
    (dict(pp=4, first_stage_layers=6), "first_stage_layers", "equal, whole, non-empty share"),
    (dict(pp=1, first_stage_layers=4), "first_stage_layers", "pp > 1"),
    (dict(pp=4, first_stage_layers=5, embedding_in_split=True), "first_stage_layers", "not both"),
    (dict(pp=4, vpp=3, first_stage_layers=5, last_stage_layers=5), "vpp", "divide by vpp 3"),
    (dict(pp=4, vpp=2, embedding_in_split=True), "vpp", "n_layers + embedding/loss slots = 33"),
])
def test_split_rules(pins, field, words):
    scenario = Scenario(n_layers=32, hidden=4096, n_heads=32, ffn_hidden=16384, vocab=32000, gpu="a100-80gb",
                        gpus=32, seq_len=2048, **pins)
    with pytest.raises(PlanError) as e:
        pinned.check_pinned(resolve_model(scenario), resolve_system(scenario), scenario, 2048, None)
    assert e.value.field == field and words in str(e.value), str(e.value)


def _kv_context(**pins):
    scenario = Scenario(model="llama3-8b", gpu="h100-80gb", gpus=32, gpus_per_node=16, seq_len=2048, **pins)
    return scenario, resolve_model(scenario), resolve_system(scenario)


def test_tp_above_the_kv_heads_is_refused_naming_the_field():
    """Megatron-Core: num_query_groups must be a multiple of tp (transformer_config.py); llama3-8b has
    8 kv heads and 32 query heads: tp 16 divides the heads but not the kv heads."""
    scenario, spec, system = _kv_context(tp=16)
    with pytest.raises(PlanError) as e:
        pinned.check_pinned(spec, system, scenario, 2048, None)
    assert e.value.field == "tp" and "8 key/value heads (n_kv_heads)" in str(e.value)
    assert "\n" not in str(e.value)


def test_search_rejects_tp_above_the_kv_heads():
    scenario, spec, system = _kv_context()
    res = search.search(spec, system, scenario, Settings(), 2048)
    code = rules.INDEX["tp_kv_heads"]
    assert (res.reason == code).any()
    assert np.all(res.layout.tp[res.reason == code] == 16)
    assert not np.any((res.reason == rules.FITS) & (res.layout.tp == 16))


def test_search_takes_a_pinned_split():
    """Pinned first/last blocks reach every candidate; pp that cannot take them is rejected by the rule."""
    scenario = Scenario(n_layers=30, hidden=4096, n_heads=32, ffn_hidden=16384, vocab=32000, gpu="a100-80gb",
                        gpus=32, seq_len=2048, first_stage_layers=7, last_stage_layers=7, vpp=1)
    res = search.search(resolve_model(scenario), resolve_system(scenario), scenario, Settings(), 2048)
    ok = res.reason == rules.FITS
    assert ok.any() and np.all(res.layout.first_stage_layers == 7)
    # 16 blocks left: pp 4 (2 x 8) and pp 6 (4 x 4)... fit the rule, pp 8 (6 x 16/6) does not
    assert set(np.unique(res.layout.pp[ok]).tolist()) <= {2, 3, 4, 6, 10, 18}
    assert (res.reason[res.layout.pp == 8] == rules.INDEX["split_layers"]).all()


def test_megatron_args_carry_the_split():
    from planner.exports.megatron_args import flag_lines, megatron_args
    from planner.presets import resolve_model as preset

    model = preset("llama2-70b")
    plan = ExecutionPlan(tp=8, pp=16, vpp=8, dp=4, embedding_in_split=True, loss_in_split=True, sequence_parallel=True,
                         sharding="zero1", micro_batch=1, grad_accum=16, seq_len=8192, activation_checkpointing="selective")
    args = megatron_args(plan, model)
    text = "\n".join(flag_lines(args))
    for want in ("--pipeline-model-parallel-size 16", "--num-virtual-stages-per-pipeline-rank 8",
                 "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
                 "--global-batch-size 64", "--use-distributed-optimizer", "--recompute-granularity selective"):
        assert want in text, text
    first_last = megatron_args(plan.model_copy(update={"vpp": 1, "embedding_in_split": False, "loss_in_split": False,
                                                       "first_stage_layers": 7, "last_stage_layers": 7}), model)
    assert first_last[first_last.index("--decoder-first-pipeline-num-layers") + 1] == "7"
    with pytest.raises(PlanError) as e:
        megatron_args(plan.model_copy(update={"sharding": "zero3"}), model)
    assert e.value.field == "sharding"


def test_embedding_or_loss_in_split_without_stages_names_the_flag():
    """--loss-in-split / --embedding-in-split with pp 1 name the flag given and what it needs (the error named
    first_stage_layers, which the user never gave)."""
    from typer.testing import CliRunner

    from plan_cli.main import app

    for flag, field in (("--loss-in-split", "loss_in_split"), ("--embedding-in-split", "embedding_in_split")):
        r = CliRunner().invoke(app, ["estimate", "--model", "7b", "--gpus", "8", flag, "--pp", "1"])
        assert r.exit_code == 2, r.output
        assert r.output.strip().startswith(f"error: {field}: ") and "pp > 1" in r.output, r.output
