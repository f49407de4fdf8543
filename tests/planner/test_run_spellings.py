"""One fact, many spellings: a runs CSV curated by someone else must read the same as ours.

Each table gives cell spellings (invented, not measured rows) and the ExecutionPlan / System field
the row must read as, through planner.runs.load_runs on a one-row CSV. Every default a reader takes
must leave a note in the run's assumptions.
"""

import csv

import pytest

from planner import run_columns as rc
from planner.runs import load_runs

COLUMNS = ["id", "source", "model_name", "n_params_B", "n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden",
           "vocab", "seq_len", "gpu_type", "n_gpus", "gpus_per_node", "internode_network", "framework", "tp", "pp",
           "dp", "zero_stage_or_fsdp", "offload", "activation_checkpointing", "precision", "micro_batch",
           "global_batch", "measured_tflops_per_gpu", "measured_mfu", "measured_tokens_per_sec_per_gpu",
           "measured_iter_time_s", "measured_peak_mem_GB", "outcome", "notes"]
# an invented row: a 96-layer GPT on 64 H100s, every column a reader needs
BASE = dict(id="probe_001", source="invented probe (2024)", model_name="GPT probe", n_params_B="", n_layers="96",
            hidden="4096", n_heads="32", n_kv_heads="32", ffn_hidden="16384", vocab="50304", seq_len="2048",
            gpu_type="H100-80GB", n_gpus="64", gpus_per_node="8", internode_network="", framework="Megatron-LM",
            tp="8", pp="1", dp="8", zero_stage_or_fsdp="none", offload="none", activation_checkpointing="none",
            precision="bf16", micro_batch="1", global_batch="64", measured_tokens_per_sec_per_gpu="1000",
            outcome="ok", notes="")


def load(tmp_path, extra_columns=(), **cells):
    row = {**BASE, **cells}
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS + [c for c in extra_columns if c not in COLUMNS])
        w.writeheader()
        w.writerow(row)
    (run,) = load_runs(path)
    return run


@pytest.mark.parametrize("text,per_node,gbps", [
    ("8x200 Gb/s InfiniBand HDR", 8, 1600), ("Selene: 8x200Gbps HDR IB per node", 8, 1600),
    ("8 x 400 Gbps ConnectX-7", 8, 3200), ("8x400G RoCE", 8, 3200), ("8 × 400 Gbit/s", 8, 3200),
    ("400 Gb/s per GPU RDMA backend (Grand Teton)", 8, 3200), ("400 Gbit/s per GPU", 8, 3200),
    ("50 GB/s per GPU", 8, 3200), ("400 GB/s per node", 8, 3200), ("3.2 Tbps", 8, 3200), ("3.2 Tb/s per node", 8, 3200),
    ("1600 Gbps node-node RoCE", 8, 1600), ("400Gbps (per node, as stated)", 8, 400), ("EFA 3200 Gbps", 8, 3200),
    ("Slingshot-11 4x200", 4, 800), ("4 x 200 Gbps Slingshot-11", 4, 800), ("100 Gbps Ethernet", 8, 100),
    ("2 x 100 GbE", 8, 200), ("25GbE", 8, 25), ("8 NICs x 400 Gbps", 8, 3200), ("400 Gbps per NIC, 8 NICs", 8, 3200),
    # a named InfiniBand generation without a count: one NIC per GPU (rail-optimised DGX/HGX nodes)
    ("InfiniBand HDR", 8, 1600), ("HDR100 InfiniBand", 8, 800), ("NDR", 8, 3200), ("IB NDR400", 8, 3200),
    ("EDR InfiniBand", 4, 400), ("4x HDR", 8, 800), ("8 x NDR", 8, 3200), ("200 Gbps HDR InfiniBand", 8, 1600),
    ("ConnectX-7 InfiniBand", 8, 3200), ("400 Gbps x 8", 8, 3200), ("100 Gb/s EDR per node", 8, 100),
    ("InfiniBand NDR 8x400", 8, 3200), ("1x HDR per node", 8, 200),
])
def test_internode_network_spellings(tmp_path, text, per_node, gbps):
    run = load(tmp_path, internode_network=text, gpus_per_node=str(per_node))
    assert run.system.internode_gbps == pytest.approx(gbps)


@pytest.mark.parametrize("text", ["", "Omni-Path (Jean Zay)", "HPE Slingshot (Adastra)", "EFA"])
def test_network_without_a_rate_is_the_clusters_and_noted(tmp_path, text):
    run = load(tmp_path, internode_network=text)
    assert run.system.internode_gbps == 3200  # dgx-h100's catalog network
    assert any("network of" in n for n in run.assumptions)


def test_named_generation_without_a_count_is_noted(tmp_path):
    run = load(tmp_path, internode_network="InfiniBand HDR")
    assert any("one NIC per GPU" in n for n in run.assumptions)


@pytest.mark.parametrize("notes,pp,vpp", [
    ("VP=6", 8, 6), ("CP=1, VP=6; model TFLOPs", 8, 6), ("interleave=3", 8, 3),
    ("interleave (virtual stages)=3 per calculon encoding", 8, 3), ("vpp 6", 8, 6), ("VPP=4", 8, 4), ("vpp: 4", 8, 4),
    ("virtual pipeline size 4", 8, 4), ("virtual_pipeline_model_parallel_size 4", 8, 4),
    ("--virtual-pipeline-model-parallel-size=4", 8, 4), ("interleaved schedule with 4 model chunks", 8, 4),
    ("4 virtual stages per GPU", 8, 4), ("layers per virtual stage 2", 8, 6), ("2 layers per virtual stage", 8, 6),
    ("num_layers_per_virtual_pipeline_stage=2", 8, 6), ("--num-layers-per-virtual-pipeline-stage 3", 8, 4),
    ("interleaved: 4 layers per virtual stage", 4, 6), ("interleaved: 1 layer per virtual stage", 8, 12),
    ("virtual pipeline stages: 4", 8, 4), ("--num-virtual-stages-per-pipeline-rank 4", 8, 4),
    ("model chunks per GPU: 4", 8, 4), ("interleaved (vpp 4)", 8, 4),
    ("no interleaving", 8, 1), ("", 8, 1), ("VP=6", 1, 1),
])
def test_virtual_pipeline_spellings(tmp_path, notes, pp, vpp):
    run = load(tmp_path, notes=notes, pp=str(pp), tp="8", dp=str(64 // (8 * pp)), global_batch="512")
    assert run.plan.vpp == vpp


def test_interleaved_without_a_size_is_two_and_noted(tmp_path):
    run = load(tmp_path, notes="interleaved 1F1B schedule", pp="8", tp="8", dp="1", global_batch="512")
    assert run.plan.vpp == 2 and any("vpp" in n for n in run.assumptions)


def test_vpp_column(tmp_path):
    run = load(tmp_path, ("vpp",), vpp="4", pp="8", tp="8", dp="1", global_batch="512")
    assert run.plan.vpp == 4


@pytest.mark.parametrize("notes,cp", [
    ("CP=2", 2), ("CP 2", 2), ("CP: 2", 2), ("cp2", 2), ("context parallel 2", 2), ("context parallel=2", 2),
    ("context_parallel_size=2", 2), ("--context-parallel-size 2", 2), ("context parallelism of 2", 2),
    ("FSDP 4 x CP 2 (context parallel=2)", 2), ("CP size 2", 2), ("2-way context parallelism", 2), ("2-way CP", 2), ("CPU offload of the optimizer", 1), ("CP=1, VP=1", 1), ("", 1),
])
def test_context_parallel_spellings(tmp_path, notes, cp):
    run = load(tmp_path, notes=notes, dp="")
    assert run.plan.cp == cp and run.plan.dp == 64 // (8 * cp)


@pytest.mark.parametrize("column,value,field,expected", [
    ("cp", "2", "cp", 2), ("context_parallel", "2", "cp", 2), ("sequence_parallel", "yes", "sequence_parallel", True),
    ("sequence_parallel", "false", "sequence_parallel", False), ("grad_accum", "8", "grad_accum", 8),
    ("gradient_accumulation_steps", "8", "grad_accum", 8),
])
def test_optional_knob_columns(tmp_path, column, value, field, expected):
    cells = {column: value, "dp": ""}
    if field == "grad_accum":
        cells.update(global_batch="")
    run = load(tmp_path, (column,), **cells)
    assert getattr(run.plan, field) == expected


def test_expert_parallel_column_is_refused_with_its_reason(tmp_path):
    with pytest.raises(Exception) as e:
        load(tmp_path, ("ep",), ep="8")
    assert "ep" in str(e.value)


@pytest.mark.parametrize("notes,framework,source,sp", [
    ("", "", "invented probe (2024)", True),  # generic TP run of the SP era: on, noted
    ("", "", "invented probe (2021)", False),  # before sequence parallelism (Korthikanti et al. 2022)
    ("sequence parallel", "", "invented probe (2021)", True), ("TP8 + SP", "DeepSpeed", "x", True),
    ("--sequence-parallel", "", "x", True), ("no sequence parallelism", "Megatron-LM", "x", False),
    ("SP off", "Megatron-Core", "x", False), ("sequence_parallel: false", "Megatron-Core", "x", False), ("", "Megatron-LM", "x", True),
    # Megatron-LM's default (on with tp > 1) does not reach back before the flag existed (SC21, 2021)
    ("", "Megatron-LM", "invented probe (2021)", False), ("", "Megatron-LM", "invented probe (2022)", True),
])
def test_sequence_parallel(tmp_path, notes, framework, source, sp):
    run = load(tmp_path, notes=notes, framework=framework, source=source)
    assert run.plan.sequence_parallel is sp
    if not notes and (framework == "" or not sp):
        assert any("sequence parallel" in n for n in run.assumptions)


@pytest.mark.parametrize("notes,on", [
    ("", False), ("--tp-comm-overlap", True), ("async TP", True), ("Async-TP on", True),
    # NeMo 1.0 launcher configs and NeMo 2.0 recipes spell it their own way
    ("ub_tp_comm_overlap: True", True), ("MegatronCommOverlapCallback(tp_comm_overlap=True)", True),
    ("TP comm overlap", True), ("ub_tp_comm_overlap: false", False), ("tp_comm_overlap=False", False),
    ("no async TP", False), ("without --tp-comm-overlap", False), ("TP comm overlap not stated", False),
])
def test_tp_comm_overlap_spellings(tmp_path, notes, on):
    assert load(tmp_path, notes=notes).plan.async_tp is on


@pytest.mark.parametrize("notes,ga", [
    ("grad accumulation 16", 16), ("gradient_accumulation_steps=16", 16), ("GA=16", 16),
    ("16 gradient accumulation steps", 16),
])
def test_grad_accum_from_notes_when_the_batch_is_blank(tmp_path, notes, ga):
    run = load(tmp_path, notes=notes, global_batch="")
    assert run.plan.grad_accum == ga


def test_blank_global_batch_uses_the_planners_batch_rule_and_fills_the_pipeline(tmp_path):
    # a 1T-class probe on pp 64: micro batch x dp alone would leave the pipeline 63/64 idle
    run = load(tmp_path, n_layers="128", hidden="25600", n_heads="160", n_kv_heads="160", ffn_hidden="102400",
               n_gpus="12288", tp="8", pp="64", dp="24", global_batch="")
    assert run.plan.grad_accum >= 64
    assert any("global batch not stated" in n and "GPT-3" in n for n in run.assumptions)
    small = load(tmp_path, global_batch="", pp="2", dp="4", n_layers="4", hidden="256", n_heads="4",
                 n_kv_heads="4", ffn_hidden="1024")
    assert small.plan.grad_accum >= 2


def test_blank_micro_batch_and_seq_len_are_noted(tmp_path):
    run = load(tmp_path, micro_batch="", seq_len="")
    assert run.plan.micro_batch == 1 and run.plan.seq_len == 2048
    assert any("micro batch not stated" in n for n in run.assumptions)
    assert any("seq_len not stated" in n for n in run.assumptions)


def test_micro_batch_from_notes(tmp_path):
    run = load(tmp_path, micro_batch="", notes="micro_batch_size=2", global_batch="128")
    assert run.plan.micro_batch == 2 and run.plan.grad_accum == 8


@pytest.mark.parametrize("cells,layout", [
    (dict(n_gpus=""), (8, 1, 1, 8)),  # n_gpus from tp x pp x dp
    (dict(tp="", pp="", dp="8"), (8, 1, 1, 8)),  # model-parallel 8 = one node: TP in the node
    (dict(tp="", pp="", dp="4"), (8, 2, 1, 4)),  # 16-way: TP 8 in the node, 2 stages
    (dict(tp="", pp="", dp="64"), (1, 1, 1, 64)),
    (dict(tp="8", pp="", dp=""), (8, 1, 1, 8)), (dict(tp="", pp="4", dp=""), (1, 4, 1, 16)),
])
def test_layout_combinations(tmp_path, cells, layout):
    run = load(tmp_path, global_batch="512", **cells)
    p = run.plan
    assert (p.tp, p.pp, p.cp, p.dp) == layout and run.layout_stated and run.system.gpus == 64
    assert run.assumptions


@pytest.mark.parametrize("framework,stack", [
    ("Megatron-Core", "megatron"), ("MCore", "megatron"), ("mcore r0.9", "megatron"), ("NeMo 2.0", "megatron"),
    ("Megatron-Bridge", "megatron"), ("Megatron-LM (MegaScale)", "megatron"), ("Nanotron", "megatron"),
    ("DeepSpeed-Megatron", "megatron_deepspeed"), ("Megatron-DeepSpeed", "megatron_deepspeed"),
    ("GPT-NeoX", "megatron_deepspeed"), ("Metaseq", "fsdp"), ("FairScale FSDP", "fsdp"), ("PyTorch FSDP2", "fsdp"),
    ("torchtitan", "torchtitan"), ("PyTorch FSDP2 (torchtitan)", "torchtitan"), ("Composer", "fsdp"),
    ("MosaicML", "fsdp"), ("HF Accelerate", "hf"), ("OLMo", "fsdp"), ("OLMo-core", "fsdp"),
    ("Lightning + FSDP", "fsdp"), ("Primus", "megatron"), ("AMD Primus (Megatron backend)", "megatron"),
    ("Primus (TorchTitan)", "torchtitan"), ("Primus MaxText (JAX)", "generic"), ("FlagScale", "megatron"),
    ("Axolotl (DeepSpeed ZeRO-2)", "hf"), ("LLaMA-Factory", "hf"), ("TRL SFTTrainer", "hf"),
    ("Colossal-AI", "generic"), ("fairseq", "generic"), ("Lightning", "generic"), ("MaxText", "generic"),
    ("JAX/TPU", "generic"),
])
def test_framework_spellings(framework, stack):
    notes = []
    assert rc.stack_of({"id": "probe_001", "framework": framework}, notes) == stack
    if stack == "generic":
        assert notes and "generic" in notes[0]


def test_jax_framework_says_so():
    notes = []
    rc.stack_of({"id": "probe_001", "framework": "MaxText (JAX)"}, notes)
    assert "JAX" in notes[0]


@pytest.mark.parametrize("text,precision,recipe", [
    ("BF16 mixed precision", "bf16", "tensorwise"), ("bfloat16", "bf16", "tensorwise"), ("float16", "fp16", "tensorwise"),
    ("half", "fp16", "tensorwise"), ("FP8 (Transformer Engine)", "fp8", "delayed"), ("fp8 delayed scaling", "fp8", "delayed"),
    ("FP8 hybrid", "fp8", "delayed"), ("MXFP8", "fp8", "tensorwise"), ("bf16 + fp8 linears", "fp8", "delayed"),  # Megatron-LM: fp8 through TE
    ("mixed fp16", "fp16", "tensorwise"), ("AMP", "fp16", "tensorwise"), ("AMP (bf16)", "bf16", "tensorwise"),
    ("TF32", "fp32", "tensorwise"), ("float32", "fp32", "tensorwise"), ("FP16 mixed precision", "fp16", "tensorwise"),
    ("Mixed precision (BF16)", "bf16", "tensorwise"),
])
def test_precision_spellings(tmp_path, text, precision, recipe):
    run = load(tmp_path, precision=text)
    assert (run.plan.precision, run.plan.fp8_recipe) == (precision, recipe)


@pytest.mark.parametrize("text,ckpt", [
    ("recompute: full", "full"), ("full recompute", "full"), ("selective recompute", "selective"),
    ("no recompute", "none"), ("none", "none"), ("uniform", "full"), ("block", "full"), ("every layer", "full"),
    ("recompute_granularity=full", "full"), ("recompute_granularity=selective", "selective"),
    ("gradient checkpointing", "full"), ("activation checkpointing", "full"), ("enabled", "full"),
    ("disabled", "none"), ("N/A", "none"), ("-", "none"), ("False", "none"), ("Yes (full)", "full"),
])
def test_checkpointing_spellings(tmp_path, text, ckpt):
    run = load(tmp_path, activation_checkpointing=text)
    assert run.plan.activation_checkpointing == ckpt


@pytest.mark.parametrize("text,fraction", [("every other layer", 0.5), ("every 2nd block", 0.5), ("half of the blocks", 0.5)])
def test_partial_checkpointing(tmp_path, text, fraction):
    run = load(tmp_path, activation_checkpointing=text, framework="PyTorch FSDP", tp="1", dp="64",
               zero_stage_or_fsdp="FSDP")
    assert (run.plan.activation_checkpointing, run.plan.checkpoint_fraction) == ("blocks", fraction)


@pytest.mark.parametrize("text,sharding", [
    ("ZeRO stage 1", "zero1"), ("ZeRO-3", "zero3"), ("Z3", "zero3"), ("Z1", "zero1"), ("stage 2", "zero2"),
    ("FULL_SHARD", "fsdp_full_shard"), ("HYBRID_SHARD", "fsdp_hybrid"), ("_HYBRID_SHARD_ZERO2", "fsdp_hybrid"),
    ("SHARD_GRAD_OP", "fsdp_shard_grad_op"), ("HSDP", "fsdp_hybrid"), ("distributed optimizer", "zero1"),
    ("DistOpt", "zero1"), ("no sharding", "none"), ("DDP", "none"), ("NO_SHARD", "none"), ("FSDP (NO_SHARD)", "none"),
    ("ZeRO-Offload", "zero2"), ("ZeRO-Infinity", "zero3"), ("ZeRO++", "zero3"), ("3", "zero3"),
    ("not sharded", "none"), ("N/A", "none"),
])
def test_sharding_spellings(text, sharding):
    assert rc.sharding_of({"id": "p", "zero_stage_or_fsdp": text}, "megatron_deepspeed", []) == sharding


@pytest.mark.parametrize("sharding,offload,expected", [
    ("none", "ZeRO-Offload", "optimizer"), ("ZeRO-Offload", "", "optimizer"), ("ZeRO-Infinity", "", "optimizer+params"),
    ("zero3", "NVMe (optimizer)", "optimizer"), ("zero3", "params + optimizer to CPU", "optimizer+params"),
    ("zero3", "offload_optimizer: cpu", "optimizer"), ("zero3", "offload_param: cpu", "optimizer+params"),
    ("zero3", "N/A", "none"), ("zero3", "No", "none"), ("zero2", "CPU", "optimizer"),
])
def test_offload_spellings(sharding, offload, expected):
    assert rc.offload_of({"id": "p", "offload": offload, "zero_stage_or_fsdp": sharding}, []) == expected


@pytest.mark.parametrize("text,gpu,cluster", [
    ("A100-SXM4-40GB", "a100-40gb", "dgx-a100-40gb"), ("A100 40G", "a100-40gb", "dgx-a100-40gb"),
    ("A100 (80GB)", "a100-80gb", "dgx-a100"), ("NVIDIA A100-SXM4-80GB", "a100-80gb", "dgx-a100"),
    ("H100 SXM5", "h100-80gb", "dgx-h100"), ("H100-SXM", "h100-80gb", "dgx-h100"), ("H100 80GB HBM3", "h100-80gb", "dgx-h100"),
    ("H800", "h800", "hgx-h800"), ("H200 SXM", "h200-141gb", "dgx-h200"), ("H200 141GB", "h200-141gb", "dgx-h200"),
    ("GH200", "gh200-96gb", "jupiter-booster"), ("MI250X GCD", "mi250x", "adastra-mi250x"), ("MI300X", "mi300x", "mi300x-8"),
    ("V100-SXM3-32GB", "v100-32gb", "dgx-v100"), ("Tesla V100 32GB", "v100-32gb", "dgx-v100"),
    ("V100-SXM2-16GB", "v100-16gb", "dgx-v100"),
])
def test_gpu_spellings(tmp_path, text, gpu, cluster):
    run = load(tmp_path, gpu_type=text, internode_network="")
    assert (run.system.gpu.name, run.system.cluster_id) == (load_gpu_name(gpu), cluster)


def load_gpu_name(gpu_id):
    from hardware.catalog import load_catalog

    return load_catalog().gpus[gpu_id].name


@pytest.mark.parametrize("cells,expected", [
    (dict(n_gpus="1,024", dp="16", tp="8", pp="8"), 1024), (dict(n_gpus="64 (8 nodes)"), 64),
    (dict(n_gpus="~64"), 64),
])
def test_number_spellings(tmp_path, cells, expected):
    assert load(tmp_path, global_batch="512", **cells).system.gpus == expected


def test_params_with_unit(tmp_path):
    run = load(tmp_path, n_layers="", hidden="", n_heads="", n_kv_heads="", ffn_hidden="", n_params_B="7B")
    assert 6e9 < run.spec.n_params < 8e9


@pytest.mark.parametrize("cell,batch", [("4M tokens", 2048), ("4M", 2048), ("4,194,304 tokens", 2048),
                                        ("2M", 1024), ("1024", 1024)])
def test_global_batch_in_tokens(tmp_path, cell, batch):
    run = load(tmp_path, global_batch=cell, tp="8", dp="8")
    assert run.plan.global_batch == batch


def test_global_batch_tokens_column(tmp_path):
    run = load(tmp_path, ("global_batch_tokens",), global_batch="", global_batch_tokens="1048576")
    assert run.plan.global_batch == 512


@pytest.mark.parametrize("cells,check", [
    (dict(seq_len="4k"), lambda r: r.plan.seq_len == 4096), (dict(seq_len="8K"), lambda r: r.plan.seq_len == 8192),
    (dict(measured_peak_mem_GB="71.5 GiB"), lambda r: r.measured_peak_mem_gib is not None),
    (dict(measured_tokens_per_sec_per_gpu="3,890 tokens/s"), lambda r: r.measured_tokens_per_s_per_gpu == 3890),
    (dict(measured_tokens_per_sec_per_gpu="", measured_iter_time_s="1.42 s"), lambda r: r.measured_iter_time_s == 1.42),
])
def test_cells_with_units(tmp_path, cells, check):
    assert check(load(tmp_path, **cells))


@pytest.mark.parametrize("mfu", ["41.5%", "41.5", "0.415"])
def test_mfu_as_percentage(tmp_path, mfu):
    a = load(tmp_path, measured_tokens_per_sec_per_gpu="", measured_mfu=mfu)
    b = load(tmp_path, measured_tokens_per_sec_per_gpu="", measured_mfu="0.415")
    assert a.measured_tokens_per_s_per_gpu == pytest.approx(b.measured_tokens_per_s_per_gpu)


@pytest.mark.parametrize("outcome,expected", [("ok", "ok"), ("OK", "ok"), ("success", "ok"), ("completed", "ok"),
                                              ("", "ok"), ("OOM", "OOM"), ("out of memory", "OOM"),
                                              ("CUDA OOM", "OOM"), ("diverged", "diverged")])
def test_outcome_spellings(tmp_path, outcome, expected):
    run = load(tmp_path, outcome=outcome)
    assert run.outcome == expected and run.scored == (expected == "ok")


def test_gh200_is_its_own_part_and_its_unstated_memory_noted(tmp_path):
    run = load(tmp_path, gpu_type="GH200 Grace Hopper", gpus_per_node="4")
    assert run.system.gpu.id == "gh200-96gb" and any("GH200 memory not stated" in n for n in run.assumptions)
