"""Mixture-of-experts runs in a runs file (planner/run_moe.py, run_moe_model.py, run_moe_plan.py): every
spelling of ep / etp / experts / top-k / sizes is read, a bad ep is 'not predicted' naming ep and what is
allowed, an MoE row never falls to the dense bare-size rule, and a dense row is read as before.

Figures checked: Mixtral-8x7B "46.7B total parameters but only uses 12.9B parameters per token" (Mistral AI,
"Mixtral of experts", 11 Dec 2023; Jiang et al. 2024, arXiv 2401.04088: 13B active) and its config.json
shape (tests/planner/moe_models.py); Qwen3-30B-A3B "30.5B in total and 3.3B activated" (model card).
Rows are invented (no measured number of any source: the speed is a placeholder).
"""

import csv
from pathlib import Path

import pytest

from planner import moe, run_moe
from planner.errors import PlanError
from planner.runs import NotPredicted, load_runs
from planner.settings import Settings
from planner.validate import predict
from tests.planner.moe_models import MIXTRAL_8X7B
from tests.planner.test_run_spellings import BASE, COLUMNS, load

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
# an invented Mixtral run on 64 H100-80GB (8 nodes), shape by name only
MIXTRAL = dict(model_name="Mixtral-8x7B", n_params_B="46.7", n_layers="", hidden="", n_heads="", n_kv_heads="",
               ffn_hidden="", vocab="", seq_len="4096", tp="1", pp="4", dp="16", global_batch="256",
               zero_stage_or_fsdp="none", activation_checkpointing="selective")


@pytest.mark.parametrize("cells,extra,ep,etp", [
    (dict(notes="EP 8"), (), 8, 1), (dict(notes="EP8"), (), 8, 1), (dict(notes="ep=8, ETP 1"), (), 8, 1),
    (dict(notes="expert parallel 8"), (), 8, 1), (dict(notes="expert-parallel size 8"), (), 8, 1),
    (dict(notes="--expert-model-parallel-size 8 --expert-tensor-parallel-size 1"), (), 8, 1),
    (dict(notes="expert_model_parallel_size=4"), (), 4, 1), (dict(notes="8-way expert parallelism"), (), 8, 1),
    (dict(notes="TP2 PP4 EP8", tp="", pp="", dp=""), (), 8, 2),  # etp: Megatron-Core's default (tp)
    (dict(notes="TP2 PP4 EP4 ETP1", tp="", pp="", dp=""), (), 4, 1),
    (dict(layout="tp=1,pp=4,ep=8,dp=16", tp="", pp="", dp=""), ("layout",), 8, 1),
    (dict(ep="8"), ("ep",), 8, 1), (dict(EP="EP8"), ("EP",), 8, 1), (dict(expert_parallel_size="2"), ("expert_parallel_size",), 2, 1),
    (dict(ep="4", etp="ETP 1"), ("ep", "etp"), 4, 1),
])
def test_expert_parallel_spellings(tmp_path, cells, extra, ep, etp):
    run = load(tmp_path, extra, **{**MIXTRAL, **cells})
    assert (run.plan.ep, run.plan.etp) == (ep, etp)
    assert run.ep_stated and run.spec.moe_experts == 8
    if "tp" in cells and not cells["tp"]:
        assert (run.plan.tp, run.plan.pp) == ({"TP2 PP4 EP8": 2, "TP2 PP4 EP4 ETP1": 2}.get(cells.get("notes"), 1), 4)


@pytest.mark.parametrize("text,facts", [
    ("8 experts, top-2", dict(experts=8, top_k=2)), ("64 experts top 6", dict(experts=64, top_k=6)),
    ("E8, top-k=2", dict(experts=8, top_k=2)), ("num_experts=64 --moe-router-topk 8", dict(experts=64, top_k=8)),
    ("256 routed experts, 8 experts per token, 1 shared expert", dict(experts=256, top_k=8, shared=1)),
    ("capacity factor 1.25", dict(capacity_factor=1.25)), ("--moe-expert-capacity-factor 2.0", dict(capacity_factor=2.0)),
    ("46.7B total / 12.9B active", dict(total_b=46.7, active_b=12.9)),
    ("46.7B params, 12.9B active", dict(total_b=46.7, active_b=12.9)),
    ("moe_ffn_hidden=1408, 60 experts", dict(ffn=1408, experts=60)),
    ("mixture of experts", dict(experts=None)),
])
def test_moe_facts_in_the_notes(text, facts):
    f = run_moe.facts_of({"id": "x", "notes": text})
    assert f.is_moe or "capacity" in text
    for k, v in facts.items():
        assert getattr(f, k) == v, (k, getattr(f, k))


@pytest.mark.parametrize("name,facts", [
    ("Qwen3-30B-A3B", dict(active_b=3.0)), ("Qwen1.5-MoE-A2.7B", dict(active_b=2.7)),
    ("Mixtral-8x22B", dict(experts=8, base_b=22.0)), ("my 16x1B model", dict(experts=16, base_b=1.0)),
])
def test_moe_facts_in_the_name(name, facts):
    f = run_moe.facts_of({"id": "x", "model_name": name})
    assert f.is_moe
    for k, v in facts.items():
        assert getattr(f, k) == v


@pytest.mark.parametrize("column,value,fact,expected", [
    ("moe_experts", "8", "experts", 8), ("num_experts", "64 experts", "experts", 64), ("moe_top_k", "2", "top_k", 2),
    ("top_k", "8", "top_k", 8), ("num_experts_per_tok", "6", "top_k", 6), ("moe_ffn_hidden", "14336", "ffn", 14336),
    ("moe_intermediate_size", "768", "ffn", 768), ("n_active_params_B", "12.9B", "active_b", 12.9),
    ("active_params_B", "3.3", "active_b", 3.3), ("capacity_factor", "1.25", "capacity_factor", 1.25),
])
def test_moe_fact_columns(column, value, fact, expected):
    f = run_moe.facts_of({"id": "x", column: value})
    assert getattr(f, fact) == expected
    assert column == "capacity_factor" or f.is_moe


def test_a_fact_column_that_is_not_a_number_names_the_column():
    with pytest.raises(PlanError) as e:
        run_moe.facts_of({"id": "x", "num_experts": "many"})
    assert e.value.field == "num_experts" and "\n" not in str(e.value)


@pytest.mark.parametrize("ep,allowed", [("3", "allowed: 1, 2, 4, 8"), ("16", "allowed: 1, 2, 4, 8")])
def test_ep_that_does_not_divide_the_experts_is_not_predicted(tmp_path, ep, allowed):
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS + ["ep"])
        w.writeheader()
        w.writerow({**BASE, **MIXTRAL, "ep": ep, "dp": "", "pp": "1", "tp": "1"})
    missing: list[NotPredicted] = []
    assert load_runs(path, not_predicted=missing) == []
    (np_,) = missing
    assert np_.field == "ep" and allowed in np_.reason and "8 routed experts" in np_.reason


def test_ep_on_a_dense_model_names_ep(tmp_path):
    with pytest.raises(PlanError) as e:
        load(tmp_path, ("ep",), ep="8")
    assert e.value.field == "ep" and "mixture-of-experts" in str(e.value)


def test_mixtral_ep8_on_64_h100_is_predicted_and_fits(tmp_path):
    run = load(tmp_path, **{**MIXTRAL, "notes": "EP 8"})
    assert run.spec.name == "mixtral-8x7b" and run.plan.ep == 8
    pred = predict(run, Settings())
    assert pred.fits and pred.predicted_mem_gib < 80
    # without ep the same layout holds all 8 experts per GPU: it does not fit (the brief's 218 GiB)
    one = predict(run.__class__(**{**run.__dict__, "plan": run.plan.model_copy(update={"ep": 1})}), Settings())
    assert not one.fits and one.predicted_mem_gib > 150
    # MFU on the active parameters (12.9B), not the total (46.7B): a plausible fraction
    assert 0.2 < pred.mfu < 0.6


def test_mixtral_without_ep_gets_the_planners_best_ep(tmp_path):
    run = load(tmp_path, **MIXTRAL)
    assert not run.ep_stated and any("ep not stated" in a for a in run.assumptions)
    pred = predict(run, Settings())
    assert pred.fits


def test_preset_by_name_agrees_with_the_active_count(tmp_path):
    # "Mixtral-8x7B, 12.9B" (active) is the same preset as "46.7B" (total)
    run = load(tmp_path, **{**MIXTRAL, "n_params_B": "12.9"})
    assert run.spec.name == "mixtral-8x7b"
    assert abs(moe.active_params(run.spec) / 12.9e9 - 1) < 0.01 and abs(run.spec.n_params / 46.7e9 - 1) < 0.01


def test_moe_row_never_takes_the_dense_bare_size_rule(tmp_path):
    with pytest.raises(PlanError) as e:
        load(tmp_path, **{**MIXTRAL, "model_name": "DeepSeek-V3-probe", "n_params_B": "671", "notes": "EP 64",
                          "tp": "1", "pp": "16", "dp": "4", "global_batch": "64"})
    assert e.value.field == "model" and "MoE without expert count/shape" in str(e.value) and "\n" not in str(e.value)


def test_moe_shape_from_total_and_active_counts(tmp_path):
    # Mixtral's published counts with a name no preset matches: the built model carries them
    run = load(tmp_path, **{**MIXTRAL, "model_name": "probe-moe", "n_params_B": "",
                            "notes": "46.7B total / 12.9B active, 8 experts, top-2, EP 8"})
    s = run.spec
    assert (s.moe_experts, s.moe_top_k, run.plan.ep) == (8, 2, 8)
    assert abs(s.n_params / 46.7e9 - 1) < 0.03 and abs(moe.active_params(s) / 12.9e9 - 1) < 0.03
    assert any("MoE shape from the stated counts" in a for a in run.assumptions)


def test_moe_shape_from_the_name_and_total(tmp_path):
    # "8x7B" + the total: one expert is (46.7 - 7) / 7 B; top-2 is Megatron-LM's default (noted)
    run = load(tmp_path, **{**MIXTRAL, "model_name": "Probe-8x7B", "n_params_B": "46.7", "notes": ""})
    s = run.spec
    assert s.moe_experts == 8 and s.moe_top_k == 2 and any("top-k not stated: 2" in a for a in run.assumptions)
    assert abs(s.n_params / 46.7e9 - 1) < 0.03 and abs(moe.active_params(s) / 12.9e9 - 1) < 0.05


def test_moe_shape_columns_with_experts_give_mixtrals_exact_count(tmp_path):
    # config.json's shape typed into the columns: 46,702,792,704 total, 12,879,925,248 active (the preset's)
    run = load(tmp_path, ("num_experts", "top_k"), **{
        **MIXTRAL, "model_name": "probe", "n_layers": "32", "hidden": "4096", "n_heads": "32", "n_kv_heads": "8",
        "ffn_hidden": "14336", "vocab": "32000", "num_experts": "8", "top_k": "2", "n_params_B": ""})
    assert run.spec.n_params == MIXTRAL_8X7B.n_params == 46_702_792_704
    assert moe.active_params(run.spec) == 12_879_925_248


def test_moe_shape_columns_solve_the_expert_width_from_the_total(tmp_path):
    run = load(tmp_path, ("moe_experts", "moe_top_k"), **{
        **MIXTRAL, "model_name": "probe", "n_layers": "32", "hidden": "4096", "n_heads": "32", "n_kv_heads": "8",
        "ffn_hidden": "", "vocab": "32000", "moe_experts": "8", "moe_top_k": "2", "n_params_B": "46.7"})
    assert abs(run.spec.moe_ffn_hidden - 14336) <= 64


def test_qwen3_a3b_by_name_is_its_preset(tmp_path):
    run = load(tmp_path, **{**MIXTRAL, "model_name": "Qwen3-30B-A3B", "n_params_B": "30.5", "notes": "EP 8"})
    assert run.spec.name == "qwen3-30b-a3b" and run.plan.ep == 8
    assert abs(moe.active_params(run.spec) / 3.3e9 - 1) < 0.05


def test_dense_dev_rows_carry_no_moe_signal():
    for name in ("published_dev.csv", "seed_runs.csv"):
        with open(DATA / name, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                assert not run_moe.facts_of(row).is_moe, row["id"]


def test_a_stated_capacity_factor_is_applied(tmp_path):
    run = load(tmp_path, **{**MIXTRAL, "notes": "EP 8, capacity factor 1.0"})
    assert run.moe_capacity_factor == 1.0 and any("capacity factor 1 without padding" in a for a in run.assumptions)


def test_a_preset_name_with_a_remark_in_brackets_is_the_preset(tmp_path):
    run = load(tmp_path, **{**MIXTRAL, "model_name": "Mixtral-8x7B (Megatron-Core)", "notes": "EP 8"})
    assert run.spec.name == "mixtral-8x7b"
