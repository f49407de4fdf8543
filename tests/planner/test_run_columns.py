"""Free-text knob columns of a runs file -> the planner's vocabulary (planner/run_columns.py)."""

from pathlib import Path

import pytest

from hardware.catalog import load_catalog
from planner import run_columns as rc
from planner.errors import PlanError
from planner.runs import load_runs


@pytest.mark.parametrize("framework,stack", [
    ("Megatron-LM", "megatron"), ("Megatron-DeepSpeed", "megatron_deepspeed"),
    ("Megatron-LM + DeepSpeed (3D)", "megatron_deepspeed"), ("GPT-NeoX", "megatron_deepspeed"),
    ("NeMo 24.07 (Megatron-Core)", "megatron"), ("MegaScale (Megatron-LM based)", "megatron"),
    ("metaseq (FSDP + Megatron TP)", "fsdp"), ("MosaicML Composer", "fsdp"), ("torchtitan (FSDP2)", "torchtitan"),
    ("HF Transformers + DeepSpeed", "hf"), ("Accelerate", "hf"), ("HF Trainer + DeepSpeed ZeRO-3", "hf"),
    ("accelerate + PyTorch FSDP", "hf"), ("HuggingFace transformers", "hf"), ("HF", "hf"),
    ("PyTorch FSDP", "fsdp"), ("FSDP", "fsdp"),
    # no model code named, or a framework without data: the pooled fit
    ("DeepSpeed ZeRO", "generic"), ("DeepSpeed ZeRO-3", "generic"), ("DDP", "generic"), ("JAX/pjit", "generic"),
])
def test_framework_to_stack(framework, stack):
    assert rc.stack_of({"id": "paper_001", "framework": framework}, []) == stack


def test_unknown_framework_is_generic_and_noted():
    notes = []
    assert rc.stack_of({"id": "x", "framework": ""}, notes) == "generic"
    assert notes and "generic" in notes[0]


@pytest.mark.parametrize("framework", ["deepspeed", "ddp", "fsdp", "hf-deepspeed"])
def test_seed_logs_bare_frameworks_ran_transformers_code(framework):
    assert rc.stack_of({"id": "s003-01", "framework": framework}, []) == "hf"
    assert rc.stack_of({"id": "s002-01", "framework": "megatron"}, []) == "megatron"


def test_seed_runs_file_hf_rows_stay_hf():
    runs = load_runs(Path(__file__).resolve().parents[2] / "validation" / "data" / "seed_runs.csv")
    assert {r.plan.stack for r in runs if r.id.startswith("s003")} == {"hf"}


@pytest.mark.parametrize("text,sharding", [
    ("ZeRO-1", "zero1"), ("zero stage 3", "zero3"), ("ZeRO stage-2", "zero2"), ("zero0", "none"),
    ("Stage 3", "zero3"), ("distributed optimizer", "zero1"), ("FSDP (full shard)", "fsdp_full_shard"),
    ("fsdp_full_shard (FSDP2)", "fsdp_full_shard"), ("SHARD_GRAD_OP", "fsdp_shard_grad_op"),
    ("HSDP", "fsdp_hybrid"), ("fsdp_hybrid (HSDP: shard in node, replicate across)", "fsdp_hybrid"),
    ("none", "none"), ("DDP", "none"),
])
def test_sharding_spellings(text, sharding):
    assert rc.sharding_of({"zero_stage_or_fsdp": text}, "hf", []) == sharding


@pytest.mark.parametrize("text,sharding", [
    ("FSDP (ZeRO-2-like)", "fsdp_shard_grad_op"), ("FSDP ZeRO stage 3", "fsdp_full_shard"),
    ("fsdp (zero-3 like)", "fsdp_full_shard"), ("SHARD_GRAD_OP", "fsdp_shard_grad_op"),
    ("HYBRID_SHARD", "fsdp_hybrid"), ("NO_SHARD", "none"), ("FULL_SHARD", "fsdp_full_shard"),
])
def test_fsdp_cells_that_name_a_zero_stage(text, sharding):
    """'FSDP (ZeRO-2-like)' read as full shard (ZeRO-3's memory): FSDP's strategy of the stated stage."""
    assert rc.sharding_of({"zero_stage_or_fsdp": text}, "fsdp", []) == sharding


@pytest.mark.parametrize("text", ["FSDP (ZeRO-1-like)", "fsdp zero1", "FSDP, ZeRO stage 0"])
def test_fsdp_with_a_zero_stage_it_has_not_is_refused(text):
    """PyTorch FSDP has no ZeRO-1 strategy: one line naming the column, the cell and what to write (it read as
    FSDP full shard)."""
    with pytest.raises(PlanError) as e:
        rc.sharding_of({"id": "x", "zero_stage_or_fsdp": text}, "fsdp", [])
    msg = str(e.value)
    assert msg.startswith("zero_stage_or_fsdp: row x: ") and repr(text) in msg and "no ZeRO-" in msg
    assert "write zero1" in msg and "\n" not in msg


def test_unreadable_cells_name_their_column():
    with pytest.raises(PlanError) as e:
        rc.sharding_of({"id": "x", "zero_stage_or_fsdp": "magic"}, "hf", [])
    assert "zero_stage_or_fsdp" in str(e.value) and "magic" in str(e.value)
    with pytest.raises(PlanError) as e:
        rc.checkpointing_of({"id": "x", "activation_checkpointing": "sometimes"}, "hf", [])
    assert "activation_checkpointing" in str(e.value)
    with pytest.raises(PlanError):
        rc.offload_of({"id": "x", "offload": "gpu"}, [])


@pytest.mark.parametrize("text,offload", [
    ("", "none"), ("none", "none"), ("CPU optimizer", "optimizer"), ("optimizer", "optimizer"),
    ("optimizer+params", "optimizer+params"), ("full (ZeRO-Infinity)", "optimizer+params"),
])
def test_offload_spellings(text, offload):
    assert rc.offload_of({"offload": text}, []) == offload


def test_checkpointing_spellings():
    assert rc.checkpointing_of({"activation_checkpointing": "yes"}, "hf", [])[0] == "full"
    assert rc.checkpointing_of({"activation_checkpointing": "No"}, "hf", [])[0] == "none"
    notes = []
    assert rc.checkpointing_of({"activation_checkpointing": "selective"}, "fsdp", notes)[:2] == ("blocks", 0.5)
    assert notes


def test_attention_by_era_and_gpu():
    cat = load_catalog()

    class S:  # what attention_of reads of a System
        def __init__(self, gpu):
            self.gpu = cat.gpus[gpu]

    a100, v100 = S("a100-80gb"), S("v100-32gb")
    notes = []
    assert rc.attention_of({"id": "x", "source": "Some paper (arXiv 2201.11990)"}, a100, notes) == "eager"
    assert "2022" in notes[0]
    assert rc.attention_of({"id": "x", "source": "tech report, Jul 2024"}, a100, []) == "flash"
    assert rc.attention_of({"id": "x", "source": "no date"}, a100, []) == "flash"
    assert rc.attention_of({"id": "x", "source": "2024"}, v100, []) == "eager"
    assert rc.attention_of({"id": "x", "source": "2021", "notes": "FlashAttention-2"}, a100, []) == "flash2"


def test_a_file_in_other_spellings_loads(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("id,n_gpus,gpu_type,framework,zero_stage_or_fsdp,offload,activation_checkpointing,precision,"
                 "n_params_B,tp,pp,micro_batch,source\n"
                 "a,64,NVIDIA A100-SXM4-40GB,GPT-NeoX,ZeRO-1,,yes,mixed fp16,20,2,4,4,arXiv 2204.06745\n"
                 "b,16,H800,DeepSpeed,ZeRO stage 3,CPU optimizer,no,bf16,7,1,1,2,2024\n")
    a, b = load_runs(f)
    assert (a.plan.stack, a.plan.sharding, a.plan.activation_checkpointing, a.plan.precision, a.plan.attention) == \
        ("megatron_deepspeed", "zero1", "full", "fp16", "eager")
    assert a.system.gpu.hbm_gib == 40
    # bare "DeepSpeed": the model code is not named, the pooled (generic) profile
    assert (b.plan.stack, b.plan.sharding, b.plan.offload, b.plan.activation_checkpointing, b.plan.attention) == \
        ("generic", "zero3", "optimizer", "none", "flash")


def test_a_layout_the_stated_stack_cannot_run_takes_the_nearest_stack_that_can(tmp_path):
    """metaseq (OPT) = FSDP + Megatron tensor parallelism: the fsdp profile has no TP, torchtitan's has;
    a run that ran is not called structurally infeasible for the profile's sake."""
    from planner.validate import validate

    f = tmp_path / "runs.csv"
    f.write_text("id,n_gpus,gpu_type,framework,zero_stage_or_fsdp,n_params_B,tp,pp,micro_batch,"
                 "measured_tokens_per_sec_per_gpu\n"
                 "a,64,A100-80GB,metaseq,fsdp_full_shard,13,8,1,2,500\n"
                 "b,64,A100-80GB,PyTorch FSDP,fsdp_full_shard,13,1,1,2,500\n")
    a, b = load_runs(f)
    assert a.plan.stack == "torchtitan" and any("cannot run this layout" in n for n in a.assumptions)
    assert b.plan.stack == "fsdp"
    assert validate([a, b]).false_alarms_structural == 0


def test_unstated_megatron_sharding_by_era():
    """The distributed optimizer (ZeRO-1) is how Megatron-Core/NeMo and 2023+ Megatron runs train; a
    2021 Megatron row without it keeps full optimizer states on every data-parallel rank."""
    notes = []
    assert rc.sharding_of({"id": "a", "source": "tech report (Jul 2024)"}, "megatron", notes) == "zero1"
    assert "distributed optimizer" in notes[0]
    assert rc.sharding_of({"id": "b", "framework": "Megatron-Core r0.9"}, "megatron", []) == "zero1"
    assert rc.sharding_of({"id": "c", "source": "SC 2021 paper"}, "megatron", []) == "none"
    assert rc.sharding_of({"id": "d", "source": "2024"}, "megatron_deepspeed", []) == "none"


def test_tflops_count_the_recomputed_forward_only_under_full_recompute(tmp_path):
    """Megatron's formula (SC21 eq. 3) counts 4 passes; without full recompute hardware and model
    FLOPs agree on 3: the same TFLOPs then mean 4/3 the tokens."""
    f = tmp_path / "runs.csv"
    f.write_text("id,n_gpus,gpu_type,framework,n_layers,hidden,n_heads,vocab,seq_len,tp,pp,micro_batch,"
                 "global_batch,activation_checkpointing,measured_tflops_per_gpu\n"
                 "a,64,A100-80GB,Megatron-LM,40,5120,40,51200,2048,8,1,1,512,full,150\n"
                 "b,64,A100-80GB,Megatron-LM,40,5120,40,51200,2048,8,1,1,512,none,150\n")
    a, b = load_runs(f)
    assert b.measured_tokens_per_s_per_gpu == pytest.approx(a.measured_tokens_per_s_per_gpu * 4 / 3)


@pytest.mark.parametrize("cell, counts", [("16K", "16384 or 16000"), ("1.5k", "1536 or 1500")])
def test_a_k_count_is_refused_with_what_to_write(cell, counts):
    """'16K' GPUs: K is 1,000 or 1,024, so the cell stays refused; the line names the field and says to write the
    count itself (it said only "'16K' is not a number")."""
    from planner import run_text

    with pytest.raises(PlanError) as e:
        run_text.number({"id": "x", "n_gpus": cell}, "n_gpus")
    msg = str(e.value)
    assert msg.startswith(f"n_gpus: row x: {cell!r} is not a number") and f"write the count itself, e.g. {counts}" in msg


@pytest.mark.parametrize("text", ["_HYBRID_SHARD_ZERO2", "HSDP (ZeRO-2-like)", "hybrid shard, grad op",
                                  "HSDP reshard_after_forward=False"])
def test_hybrid_shard_zero2_reads_as_hybrid_with_what_was_assumed(text):
    """FSDP's _HYBRID_SHARD_ZERO2 (HSDP whose in-node shard keeps the parameters after forward) read as
    fsdp_hybrid without a word: the note now says it is the closest and what differs."""
    notes = []
    assert rc.sharding_of({"id": "x", "zero_stage_or_fsdp": text}, "fsdp", notes) == "fsdp_hybrid"
    assert len(notes) == 1 and repr(text) in notes[0] and "keeps the parameters after forward" in notes[0]
    assert "read as fsdp_hybrid" in notes[0] and "memory" in notes[0]


@pytest.mark.parametrize("text", ["HYBRID_SHARD", "HSDP", "hybrid (ZeRO-3-like)"])
def test_plain_hybrid_shard_has_no_note(text):
    notes = []
    assert rc.sharding_of({"id": "x", "zero_stage_or_fsdp": text}, "fsdp", notes) == "fsdp_hybrid" and not notes
