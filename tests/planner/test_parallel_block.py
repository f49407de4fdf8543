"""The parallel attention + MLP block (planner/parallel_block.py) against its published physics.

GPT-NeoX-20B (Black et al. 2022, sec. 3.1): summing attention and MLP outputs before the
reduction leaves one all-reduce per block in forward and one in backward (two of each in a
sequential block, Shoeybi et al. 2019); the FLOPs are the same GEMMs; one norm's input is saved
instead of two (Korthikanti et al. 2022 sec. 4.1 tensor list)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner import flops, memory, parallel_block
from planner.errors import PlanError
from planner.hf_config import load_hf_config
from planner.model import ModelSpec
from planner.resolve import resolve_model as resolve_scenario_model
from planner.runs import load_runs
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

NEOX = resolve_model("gpt-neox-20b")
SEQ = NEOX.model_copy(update={"parallel_block": False})
GPTJ = resolve_model("gpt-j-6b")


def _perf(spec, gpus=8, **plan_kw):
    plan = ExecutionPlan(**{"dp": gpus // plan_kw.get("tp", 1), "seq_len": 2048, "micro_batch": 1, **plan_kw})
    system = resolve_system(Scenario(cluster="dgx-a100", gpus=gpus))
    return {k: np.asarray(v)[0] for k, v in performance(spec, Layout.from_plan(plan), system, Settings()).items()}


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("ckpt", ["none", "full"])
def test_tp_comm_per_block_halves(sp, ckpt):
    """One all-reduce (or, with sequence parallelism, one all-gather + reduce-scatter pair) per
    block and pass instead of two: the same bytes per collective, half the collectives."""
    kw = dict(tp=8, sequence_parallel=sp, activation_checkpointing=ckpt)
    par, seq = _perf(NEOX, **kw), _perf(SEQ, **kw)
    assert seq["tp_comm_s"] > 0
    assert par["tp_comm_s"] == pytest.approx(0.5 * seq["tp_comm_s"], rel=1e-9)
    assert par["step_time_s"] < seq["step_time_s"]


def test_tp_calls_count():
    assert parallel_block.tp_calls_per_block(SEQ, 0.0) == 4.0  # Shoeybi et al.: 2 forward + 2 backward
    assert parallel_block.tp_calls_per_block(NEOX, 0.0) == 2.0  # Black et al.: 1 + 1
    assert parallel_block.tp_calls_per_block(NEOX, 1.0) == 3.0  # + the recomputed forward's one


def test_flops_unchanged():
    """Same GEMMs and attention core: model FLOPs, hardware FLOPs and GEMM time do not move."""
    assert flops.model_flops_per_token(NEOX, 2048) == flops.model_flops_per_token(SEQ, 2048)
    assert flops.hardware_flops_per_token(NEOX, 2048, "full") == flops.hardware_flops_per_token(SEQ, 2048, "full")
    par, seq = _perf(NEOX, tp=8), _perf(SEQ, tp=8)
    for key in ("raw_gemm_s", "raw_attention_s"):
        assert par[key] == pytest.approx(seq[key], rel=1e-12)
    assert par["mfu"] > seq["mfu"]  # same FLOPs in less time


def test_async_tp_hides_no_more_than_the_collectives():
    par = _perf(NEOX, tp=8, sequence_parallel=True, async_tp=True, stack="torchtitan")
    seq = _perf(SEQ, tp=8, sequence_parallel=True, async_tp=True, stack="torchtitan")
    assert 0.0 <= par["tp_comm_s"] < seq["tp_comm_s"]


def _layer_bytes(spec, **plan_kw):
    plan = ExecutionPlan(**{"dp": 1, "seq_len": 2048, "micro_batch": 1, "attention": "flash", **plan_kw})
    return float(np.asarray(memory.layer_activation_bytes(spec, Layout.from_plan(plan)))[0])


@pytest.mark.parametrize("tp,sp", [(1, False), (8, False), (8, True)])
def test_one_norm_saves_one_shared_input(tp, sp):
    """GPT-J's one LayerNorm: the norm input x and its output (the attention and MLP input) are
    saved once; a sequential block saves 2 norm inputs + 2 norm outputs (4 sbh) and two norms'
    statistics. With two norms over x (GPT-NeoX) 3 sbh and both norms' statistics."""
    s, h, a = 2048, GPTJ.hidden, 2  # bf16 activations
    div = tp if sp else 1
    sequential = GPTJ.model_copy(update={"parallel_block": False, "norms_per_layer": 2})
    kw = dict(tp=tp, sequence_parallel=sp, dp=1)
    stats = 2 * 4 * s / div  # LayerNorm: mean and rstd in fp32 per token
    assert _layer_bytes(sequential, **kw) - _layer_bytes(GPTJ, **kw) == pytest.approx(2 * s * h * a / div + stats)
    neox_seq = _layer_bytes(SEQ, **kw)
    assert neox_seq - _layer_bytes(NEOX, **kw) == pytest.approx(s * NEOX.hidden * a / div)


def test_elementwise_traffic_of_the_replicated_tensors():
    """Korthikanti et al.'s 10 sbh outside the tensor-parallel split: 6 with one shared norm."""
    assert parallel_block.replicated_sbh(SEQ) == 10.0
    assert parallel_block.replicated_sbh(GPTJ) == 6.0
    assert parallel_block.replicated_sbh(NEOX) == 8.0


# ---- where the block comes from: Hugging Face configs and presets ------------------------------
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


@pytest.mark.parametrize("name,norms", [("gpt-neox-20b", 2), ("gpt-j-6b", 1), ("falcon-7b", 1), ("phi-2", 1),
                                        ("command-r", 1)])
def test_hf_configs_of_parallel_families(name, norms):
    spec = load_hf_config(FIXTURES / f"{name}.json")
    assert spec.parallel_block and spec.norms_per_layer == norms


def _write(tmp_path, name, **changes):
    cfg = {**json.loads((FIXTURES / name).read_text()), **changes}
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def test_hf_switches_of_the_parallel_block(tmp_path):
    """GPT-NeoX's use_parallel_residual (default True when absent; Pythia's configs say it);
    Falcon's parallel_attn and new_decoder_architecture (ln_attn + ln_mlp)."""
    neox = json.loads((FIXTURES / "gpt-neox-20b.json").read_text())
    neox.pop("use_parallel_residual")
    (tmp_path / "neox.json").write_text(json.dumps(neox))
    assert load_hf_config(tmp_path / "neox.json").parallel_block
    assert not load_hf_config(_write(tmp_path, "gpt-neox-20b.json", use_parallel_residual=False)).parallel_block
    seq = load_hf_config(_write(tmp_path, "falcon-7b.json", parallel_attn=False))
    assert not seq.parallel_block and seq.norms_per_layer == 2
    new = load_hf_config(_write(tmp_path, "falcon-7b.json", new_decoder_architecture=True, num_kv_heads=8,
                                hidden_size=8192, num_attention_heads=128))
    assert new.parallel_block and new.norms_per_layer == 2
    sequential_llama = load_hf_config(FIXTURES / "llama-2-7b.json")
    assert not sequential_llama.parallel_block


def test_cohere_qk_norm_is_read(tmp_path):
    plain = load_hf_config(FIXTURES / "command-r.json")
    qk = load_hf_config(_write(tmp_path, "command-r.json", use_qk_norm=True))
    assert qk.qk_norm == "full" and qk.n_params - plain.n_params == 40 * 2 * 8192  # q and k weights per head


# Published totals (model cards, papers) and how far the preset may be from them.
PRESETS = {
    "gpt-neox-20b": 20.6e9,  # Black et al. 2022 (20,554,567,680 on the model card)
    "gpt-j-6b": 6_053_381_344,  # EleutherAI/gpt-j-6b model card
    "falcon-7b": 6_921_720_704,  # tiiuae/falcon-7b model page
    "falcon-40b": 41.8e9,  # tiiuae/falcon-40b checkpoint
    "palm-540b": 540.35e9,  # Chowdhery et al. 2022, Table 1
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_match_published_sizes(preset):
    spec = resolve_model(preset)
    assert spec.parallel_block
    assert spec.n_params == pytest.approx(PRESETS[preset], rel=0.01)


def test_falcon_180b_shape_by_hand():
    """80 x (q/k/v: 14848 x (14848 + 2*8*64), dense, 2 MLP matrices of 4h, ln_attn + ln_mlp)
    + untied embeddings + ln_f: 179.5B, the "180B" of its name."""
    h, kv = 14848, 8 * 64
    layer = h * (h + 2 * kv) + h * h + 2 * h * 4 * h + 2 * 2 * h
    spec = resolve_model("falcon-180b")
    assert spec.n_params == 80 * layer + 2 * 65024 * h + 2 * h
    assert spec.n_params == pytest.approx(180e9, rel=0.01)


def test_one_norm_without_parallel_block_is_refused():
    with pytest.raises(ValueError, match="parallel_block"):
        ModelSpec(n_layers=2, hidden=64, n_heads=4, vocab=10, norms_per_layer=1, parallel_block=False)
    assert ModelSpec(n_layers=2, hidden=64, n_heads=4, vocab=10, norms_per_layer=1).parallel_block


# ---- the scenario flag and the runs file --------------------------------------------------------
def test_scenario_switches_a_preset_block():
    llama = resolve_scenario_model(Scenario(model="llama2-7b", parallel_block=True))
    assert llama.parallel_block and llama.norms_per_layer == 2  # only the block input is shared
    gptj = resolve_scenario_model(Scenario(model="gpt-j-6b", parallel_block=False))
    assert not gptj.parallel_block and gptj.norms_per_layer == 2  # its one norm becomes two
    assert gptj.n_params == GPTJ.n_params + 28 * 2 * GPTJ.hidden
    assert resolve_scenario_model(Scenario(model="gpt-j-6b")).parallel_block  # the preset's own block
    assert resolve_scenario_model(Scenario(parallel_block="yes", n_layers=2, hidden=64, n_heads=2,
                                           vocab=100)).parallel_block


def test_cli_flag_halves_the_tp_time():
    def tp_time(flag):
        res = CliRunner().invoke(app, ["estimate", "--model", "gpt-j-6b", flag, "--gpus", "8", "--tp", "8",
                                       "--micro-batch", "1", "--grad-accum", "8", "--sharding", "none",
                                       "--activation-checkpointing", "none", "--sequence-parallel", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert out["model"]["parallel_block"] == (flag == "--parallel-block")
        return out["results"][0]["time"]["comm_exposed_s"]

    assert tp_time("--parallel-block") == pytest.approx(0.5 * tp_time("--no-parallel-block"), rel=1e-6)


ROW = {"id": "x_001", "source": "test", "model_name": "", "n_layers": "44", "hidden": "6144", "n_heads": "64",
       "ffn_hidden": "24576", "vocab": "50432", "seq_len": "2048", "gpu_type": "A100-80GB", "n_gpus": "8",
       "framework": "Megatron-LM", "tp": "8", "pp": "1", "micro_batch": "1", "global_batch": "8",
       "measured_iter_time_s": "1.0", "outcome": "ok"}


def _load(tmp_path, **cells):
    path = tmp_path / "runs.csv"
    row = {**ROW, **cells}
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    return load_runs(path)[0]


@pytest.mark.parametrize("cells,parallel", [
    ({}, False),
    ({"notes": "GPT-NeoX-20B shape, parallel attention + FF layers"}, True),
    ({"notes": "use_parallel_residual: parallel residual"}, True),
    ({"notes": "no parallel attention (sequential block)"}, False),
    ({"notes": "MFU per nanoGPT/PaLM method"}, False),  # PaLM named, no block stated
    ({"parallel_block": "yes"}, True),
    ({"parallel_block": "no", "notes": "parallel attention"}, False),  # the column wins
])
def test_runs_rows_state_the_block(tmp_path, cells, parallel):
    run = _load(tmp_path, **cells)
    assert run.spec.parallel_block is parallel
    assert any("block as stated" in a for a in run.assumptions) == parallel


def test_bad_parallel_block_cell_names_the_column(tmp_path):
    with pytest.raises(PlanError) as e:
        _load(tmp_path, parallel_block="sometimes")
    assert "parallel_block" in str(e.value) and "sometimes" in str(e.value)


def test_no_dev_row_states_a_parallel_block():
    """The published dev rows and the seed rows are all sequential blocks: the CV is unchanged."""
    data = Path(__file__).resolve().parents[2] / "validation" / "data"
    for name in ("published_dev.csv", "seed_runs.csv"):
        with open(data / name, newline="", encoding="utf-8") as f:
            assert not any(parallel_block.stated_in_row(r) for r in csv.DictReader(f)), name
