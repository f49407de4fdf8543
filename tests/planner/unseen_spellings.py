"""A runs CSV as other people write it: one invented row per spelling, in the column layout of
validation/data/published_dev.csv, and what the planner must read each cell as.

Every case changes one or a few cells of an invented base row (a 32-layer GPT of 4096 wide on 64
H100s; no measured number of any source: the speed is a placeholder) and names the Run attribute
the cells must come back as (`Refused(field)`: the row must be reported "not predicted" naming
that field). Spellings are generic strings of the kind vendors, papers and READMEs use.

    python tests/planner/unseen_spellings.py OUT.csv   # writes the file for `plan validate OUT.csv --json`

tests/planner/test_unseen_spellings.py reads it back, case by case.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path

LAYOUT_FILE = Path(__file__).resolve().parents[2] / "validation" / "data" / "published_dev.csv"


def layout_columns() -> list[str]:
    with open(LAYOUT_FILE, newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


BASE = dict(id="", source="invented spelling probe (2024)", model_name="GPT probe", n_params_B="", n_layers="32",
            hidden="4096", n_heads="32", n_kv_heads="32", ffn_hidden="16384", vocab="50304", seq_len="2048",
            gpu_type="H100-80GB", n_gpus="64", gpus_per_node="8", internode_network="3200 Gbps", framework="Megatron-LM",
            tp="2", pp="1", dp="32", zero_stage_or_fsdp="none", offload="none", activation_checkpointing="none",
            precision="bf16", micro_batch="1", global_batch="256", measured_tflops_per_gpu="", measured_mfu="",
            measured_tokens_per_sec_per_gpu="1000", measured_iter_time_s="", measured_peak_mem_GB="", outcome="ok",
            notes="")
NO_SHAPE = dict(n_layers="", hidden="", n_heads="", n_kv_heads="", ffn_hidden="", vocab="")


@dataclass(frozen=True)
class Refused:
    field: str  # the field the "not predicted" line must name


@dataclass(frozen=True)
class Near:
    value: float
    rel: float = 1e-6


@dataclass(frozen=True)
class Same:
    cell: str  # the value the attribute takes when the case's column holds this plain spelling instead


@dataclass(frozen=True)
class Case:
    column: str  # the layout column whose spelling this is
    cell: str
    attr: str  # dotted Run attribute(s), comma-separated for a tuple
    expected: object
    cells: dict = field(default_factory=dict)  # other cells of the row
    note: str = ""  # a substring one of the run's assumptions must contain (a default taken)

    def row(self, rid: str) -> dict[str, str]:
        if self.column == "id":
            return {**BASE, **self.cells, "id": self.cell}
        return {**BASE, **self.cells, self.column: self.cell, "id": self.cells.get("id") or rid}


def _gpu(cell, gpu_id, **kw):
    return Case("gpu_type", cell, "system.gpu.id", gpu_id, kw.pop("cells", dict(internode_network="")), **kw)


GPU = [
    _gpu("NVIDIA H100 80GB HBM3", "h100-80gb"), _gpu("H100 SXM5", "h100-80gb"), _gpu("H100-SXM", "h100-80gb"),
    _gpu("H100 SXM5 80GB", "h100-80gb"), _gpu("8x H100 80GB", "h100-80gb"), _gpu("HGX H100", "h100-80gb"),
    _gpu("NVIDIA H100 Tensor Core GPU", "h100-80gb"), _gpu("h100", "h100-80gb"), _gpu("H100 PCIe", "h100-pcie-80gb"),
    _gpu("H100-96GB", "h100-96gb"), _gpu("H800", "h800"), _gpu("NVIDIA H800 80GB", "h800"),
    _gpu("GH200", "gh200-96gb", note="GH200 memory not stated"), _gpu("H200 141GB", "h200-141gb"), _gpu("H200 SXM 141GB HBM3e", "h200-141gb"),
    _gpu("NVIDIA H200", "h200-141gb"), _gpu("B200", "b200"), _gpu("NVIDIA B200 180GB", "b200"),
    _gpu("GB200 NVL72", "gb200"), _gpu("A800 80GB", "a800-80gb"),
    _gpu("A100-SXM4-80GB", "a100-80gb"), _gpu("NVIDIA A100-SXM4-80GB", "a100-80gb"), _gpu("A100 80GB", "a100-80gb"),
    _gpu("A100 SXM 80 GB", "a100-80gb"), _gpu("A100-SXM4-40GB", "a100-40gb"), _gpu("A100 40GB", "a100-40gb"),
    _gpu("A100 40GB PCIe", "a100-pcie-40gb"), _gpu("A100-PCIE-40GB", "a100-pcie-40gb"),
    _gpu("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), _gpu("A100", "a100-80gb", note="A100 memory not stated"),
    _gpu("DGX A100", "a100-80gb"), _gpu("V100-SXM2-32GB", "v100-32gb"), _gpu("V100-SXM2-16GB", "v100-16gb"),
    _gpu("Tesla V100", "v100-32gb", note="V100 memory not stated"), _gpu("Tesla V100-SXM2-32GB", "v100-32gb"),
    _gpu("V100 32GB", "v100-32gb"), _gpu("V100-PCIE-16GB", "v100-pcie-16gb"), _gpu("V100 (DGX-1)", "v100-32gb"),
    _gpu("MI250X (GCD)", "mi250x"), _gpu("AMD MI250X", "mi250x"), _gpu("AMD Instinct MI250X", "mi250x"),
    _gpu("AMD Instinct MI300X", "mi300x"), _gpu("MI300X 192GB", "mi300x"), _gpu("MI325X", "mi325x"),
    _gpu("L40S", "l40s"), _gpu("TPU v4", Refused("gpu_type")), _gpu("TPU v5p", Refused("gpu_type")),
    _gpu("Gaudi2", Refused("gpu_type")), _gpu("RTX 4090", Refused("gpu_type")), _gpu("A10G", Refused("gpu_type")),
    _gpu("", Refused("gpu_type")),
]


def _net(cell, gbps, per_node=8, **kw):
    return Case("internode_network", cell, "system.internode_gbps", Near(gbps),
                dict(gpus_per_node=str(per_node), n_gpus=str(8 * per_node), dp=str(4 * per_node)), **kw)


NETWORK = [
    _net("8x400G NDR InfiniBand", 3200), _net("3.2 Tbps RoCE", 3200), _net("RoCEv2 8x400Gbps", 3200),
    _net("Slingshot-11 4x200Gbps", 800, per_node=4), _net("100 Gbps Ethernet", 100, note="per node"),
    _net("EFA 3200 Gbps", 3200), _net("AWS EFA v2, 3200 Gbps per node", 3200), _net("8x ConnectX-7 400G", 3200),
    _net("InfiniBand NDR 400Gb/s x8", 3200), _net("NDR400", 3200, note="one NIC per GPU"),
    _net("8 x 200 Gb/s HDR", 1600), _net("1.6 Tbps", 1600), _net("1600Gbps", 1600), _net("3200 Gb/s", 3200),
    _net("400 Gbps per GPU", 3200), _net("50 GB/s per GPU", 3200), _net("8*400Gb", 3200),
    _net("2x100GbE", 200), _net("25 GbE", 25), _net("400G", 400, note="per node"),
    _net("RoCE", 3200, note="network of"), _net("InfiniBand", 3200, note="network of"),
    _net("NVLink only / single node", 3200, note="network of"), _net("single node", 3200, note="network of"),
    _net("", 3200, note="network of"), _net("N/A", 3200, note="network of"), _net("—", 3200, note="network of"),
]


def _fw(cell, stack, **kw):
    return Case("framework", cell, "plan.stack", stack, **kw)


FRAMEWORK = [
    _fw("Megatron-Core", "megatron"), _fw("Megatron-LM", "megatron"), _fw("NeMo 2.0", "megatron"),
    _fw("NVIDIA NeMo", "megatron"), _fw("NeMo Megatron", "megatron"), _fw("Megatron-DeepSpeed", "megatron_deepspeed"),
    _fw("Megatron-LM + DeepSpeed", "megatron_deepspeed"), _fw("GPT-NeoX", "megatron_deepspeed"),
    _fw("Nanotron", "megatron"), _fw("torchtitan", "torchtitan"), _fw("TorchTitan (FSDP2)", "torchtitan"),
    _fw("metaseq", "fsdp", cells=dict(tp="1", dp="64", zero_stage_or_fsdp="FULL_SHARD")),
    _fw("PyTorch FSDP2", "fsdp", cells=dict(tp="1", dp="64", zero_stage_or_fsdp="FULL_SHARD")),
    _fw("Composer", "fsdp", cells=dict(tp="1", dp="64", zero_stage_or_fsdp="FULL_SHARD")),
    _fw("llm-foundry", "fsdp", cells=dict(tp="1", dp="64", zero_stage_or_fsdp="FULL_SHARD")),
    _fw("HF Trainer", "hf", cells=dict(tp="1", dp="64")), _fw("Hugging Face Accelerate", "hf", cells=dict(tp="1", dp="64")),
    _fw("DeepSpeed ZeRO-3", "generic", cells=dict(tp="1", dp="64", zero_stage_or_fsdp="ZeRO-3"), note="generic"),
    _fw("DeepSpeed", "generic", cells=dict(tp="1", dp="64"), note="generic"),
    _fw("PyTorch DDP", "generic", cells=dict(tp="1", dp="64"), note="generic"),
    _fw("MaxText", "generic", note="JAX"), _fw("Levanter", "generic", note="JAX"), _fw("PaxML", "generic", note="JAX"),
    _fw("Colossal-AI", "generic", note="generic"), _fw("veScale", "generic", note="generic"),
    _fw("Lightning", "generic", note="generic"), _fw("", "generic", note="not stated"),
]


def _prec(cell, precision, recipe="tensorwise", **kw):
    expected = precision if isinstance(precision, Refused) else (precision, recipe)
    return Case("precision", cell, "plan.precision,plan.fp8_recipe", expected, **kw)


PRECISION = [
    _prec("bf16", "bf16"), _prec("BF16 mixed", "bf16"), _prec("bf16-mixed", "bf16"), _prec("amp_bf16", "bf16"),
    _prec("fp16 AMP", "fp16"), _prec("FP16", "fp16"), _prec("16-mixed", "fp16"), _prec("amp_fp16", "fp16"),
    _prec("apex O2", "fp16"), _prec("FP8 (TE)", "fp8", "delayed", note="delayed"), _prec("fp8 hybrid", "fp8", "delayed"),
    _prec("FP8 (Transformer Engine)", "fp8", "delayed"), _prec("MXFP8", "fp8", note="fp8 recipe"),
    _prec("fp8 rowwise", "fp8", "rowwise"), _prec("fp32", "fp32"), _prec("tf32", "fp32"), _prec("32-true", "fp32"),
    _prec("", "bf16", note="precision not stated"), _prec("int4", Refused("precision"), ""),
]


def _shard(cell, sharding, **kw):
    kw.setdefault("cells", dict(framework="", tp="1", dp="64"))
    return Case("zero_stage_or_fsdp", cell, "plan.sharding", sharding, **kw)


SHARDING = [
    _shard("ZeRO-1", "zero1"), _shard("ZeRO-2", "zero2"), _shard("ZeRO stage 3", "zero3"), _shard("stage 2", "zero2"),
    _shard("zero_stage=3", "zero3"), _shard("Z3", "zero3"), _shard("FULL_SHARD", "fsdp_full_shard"),
    _shard("FSDP", "fsdp_full_shard"), _shard("FSDP2", "fsdp_full_shard"), _shard("fully_shard", "fsdp_full_shard"),
    _shard("SHARD_GRAD_OP", "fsdp_shard_grad_op"), _shard("HYBRID_SHARD", "fsdp_hybrid"), _shard("HSDP", "fsdp_hybrid"),
    _shard("FSDP2 (reshard_after_forward=False)", "fsdp_shard_grad_op"),
    _shard("distributed optimizer", "zero1", cells=dict(tp="2", dp="32")),
    _shard("DO", "zero1", cells=dict(tp="2", dp="32")), _shard("dist. optimizer", "zero1", cells=dict(tp="2", dp="32")),
    _shard("use_distributed_optimizer", "zero1", cells=dict(tp="2", dp="32")),
    _shard("none", "none"), _shard("DDP", "none"), _shard("no", "none"), _shard("—", "none"),
    _shard("", "none", note="sharding not stated"), _shard("ZeRO", "zero1", note="ZeRO stage not stated"),
    _shard("DeepSpeed ZeRO", "zero1", note="ZeRO stage not stated"), _shard("ZeRO-Offload", "zero2"),
    _shard("tensor sharding", Refused("zero_stage_or_fsdp")),
]


def _off(cell, offload, **kw):
    return Case("offload", cell, "plan.offload", offload,
                dict(framework="DeepSpeed", tp="1", dp="64", zero_stage_or_fsdp="ZeRO-3"), **kw)


OFFLOAD = [
    _off("none", "none"), _off("no", "none"), _off("", "none", note="offload not stated"), _off("—", "none"), _off("CPU", "optimizer"),
    _off("optimizer", "optimizer"), _off("optimizer to CPU", "optimizer"), _off("yes", "optimizer"),
    _off("offload_optimizer: cpu", "optimizer"), _off("NVMe", "optimizer"), _off("ZeRO-Offload", "optimizer"),
    _off("optimizer+params", "optimizer+params"), _off("params + optimizer (CPU)", "optimizer+params"),
    _off("offload_param: cpu", "optimizer+params"), _off("CPUOffload(offload_params=True)", "optimizer+params"),
    _off("GPU", Refused("offload")),
]


def _ckpt(cell, ckpt, fraction=1.0, **kw):
    kw.setdefault("cells", dict(framework="PyTorch FSDP", tp="1", dp="64", zero_stage_or_fsdp="FULL_SHARD"))
    expected = ckpt if isinstance(ckpt, Refused) else (ckpt, fraction)
    return Case("activation_checkpointing", cell, "plan.activation_checkpointing,plan.checkpoint_fraction",
                expected, **kw)


_MEG = dict(cells=dict(framework="Megatron-LM"))
CHECKPOINTING = [
    _ckpt("selective", "selective", **_MEG), _ckpt("full", "full"), _ckpt("none", "none"), _ckpt("yes", "full"),
    _ckpt("no", "none"), _ckpt("block", "full"), _ckpt("True", "full"), _ckpt("False", "none"), _ckpt("Y", "full"),
    _ckpt("N", "none"), _ckpt("on", "full"), _ckpt("off", "none"), _ckpt("—", "none"),
    _ckpt("full (uniform)", "full", **_MEG), _ckpt("selective (attention)", "selective", **_MEG),
    _ckpt("recompute_granularity=full", "full", **_MEG), _ckpt("gradient checkpointing", "full"),
    _ckpt("1/2 of layers", "blocks", 0.5), _ckpt("50% of layers", "blocks", 0.5), _ckpt("every other layer", "blocks", 0.5),
    _ckpt("every 4th layer", "blocks", 0.25), _ckpt("8 of 32 layers", "blocks", 0.25), _ckpt("1/4", "blocks", 0.25),
    _ckpt("", "full", note="checkpointing not stated"), _ckpt("", "selective", note="checkpointing not stated", **_MEG),
    _ckpt("sometimes", Refused("activation_checkpointing"), 0),
]


def _lay(cells, layout, note=""):
    col = next(iter(cells))
    rest = {k: v for k, v in cells.items() if k != col}
    return Case(col, cells[col], "plan.tp,plan.pp,plan.cp,plan.dp,plan.vpp", layout,
                {"tp": "", "pp": "", "dp": "", "global_batch": "512", **rest}, note)


LAYOUT = [
    _lay(dict(tp="8", pp="2", dp="4"), (8, 2, 1, 4, 1)), _lay(dict(tp="TP8", pp="PP2", dp="4"), (8, 2, 1, 4, 1)),
    _lay(dict(tp="8 (SP)", pp="2", dp="4"), (8, 2, 1, 4, 1)), _lay(dict(pp="pp=2", tp="8", dp="4"), (8, 2, 1, 4, 1)), _lay(dict(tp="8-way", pp="1"), (8, 1, 1, 8, 1)),
    _lay(dict(dp="8"), (8, 1, 1, 8, 1), "tp, pp not stated"),
    _lay(dict(notes="TP=4, PP=2, DP=8"), (4, 2, 1, 8, 1)), _lay(dict(notes="TP4 PP2"), (4, 2, 1, 8, 1)),
    _lay(dict(notes="tp 4, pp 2, cp 2"), (4, 2, 2, 4, 1)),
    _lay(dict(notes="tensor parallel 4, pipeline parallel 2"), (4, 2, 1, 8, 1)),
    _lay(dict(notes="4-way tensor parallelism, 2-way pipeline parallelism"), (4, 2, 1, 8, 1)),
    _lay(dict(notes="--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2"), (4, 2, 1, 8, 1)),
    _lay(dict(notes="tensor_model_parallel_size=4, pipeline_model_parallel_size=2"), (4, 2, 1, 8, 1)),
    _lay(dict(tp="4", pp="4", notes="VPP=2"), (4, 4, 1, 4, 2)), _lay(dict(tp="2", pp="1", notes="CP=2"), (2, 1, 2, 16, 1)),
    _lay(dict(tp="2", pp="4", dp="8", notes="vpp 4"), (2, 4, 1, 8, 4)),
    _lay(dict(tp="2", pp="1", dp="32", notes=""), (2, 1, 1, 32, 1)),
]


def _num(column, cell, attr, expected, **kw):
    return Case(column, cell, attr, expected, **kw)


NUMBERS = [
    _num("seq_len", "2048 tokens", "plan.seq_len", 2048), _num("seq_len", "4k", "plan.seq_len", 4096),
    _num("seq_len", "8K tokens", "plan.seq_len", 8192), _num("seq_len", "4,096", "plan.seq_len", 4096),
    _num("seq_len", "", "plan.seq_len", 2048, note="seq_len not stated"),
    _num("global_batch", "4M tokens global batch", "plan.global_batch", 2048),
    _num("global_batch", "4M tokens", "plan.global_batch", 2048), _num("global_batch", "1.5K", "plan.global_batch", 1536),
    _num("global_batch", "2048 (4M tokens)", "plan.global_batch", 2048), _num("global_batch", "1,024", "plan.global_batch", 1024),
    _num("global_batch", "1024 sequences", "plan.global_batch", 1024),
    _num("global_batch", "512 samples", "plan.global_batch", 512),
    _num("global_batch", "", "plan.global_batch", 1024, note="global batch not stated"),
    _num("micro_batch", "2", "plan.micro_batch", 2), _num("micro_batch", "2 sequences", "plan.micro_batch", 2),
    _num("micro_batch", "", "plan.micro_batch", 1, note="micro batch not stated"),
    _num("micro_batch", "0.5", "plan.micro_batch", Refused("micro_batch")), _num("tp", "8.5", "plan.tp", Refused("tp")),
    _num("n_gpus", "1,024", "system.gpus", 1024, cells=dict(dp="512")), _num("n_gpus", "64 GPUs", "system.gpus", 64),
    _num("n_gpus", "64 (8 nodes)", "system.gpus", 64), _num("n_gpus", "8 nodes x 8 GPUs", "system.gpus", 64),
    _num("n_gpus", "", "system.gpus", 64, note="n_gpus not stated"),
    _num("gpus_per_node", "8", "system.gpus_per_node", 8), _num("gpus_per_node", "8 GPUs/node", "system.gpus_per_node", 8),
    _num("gpus_per_node", "", "system.gpus_per_node", 8, note="gpus_per_node not stated"),
    _num("vocab", "32,000", "spec.vocab", 32000), _num("vocab", "128K", "spec.vocab", 128000),
    _num("vocab", "50257 (padded to 50304)", "spec.vocab", 50257), _num("vocab", "", "spec.vocab", 51200, note="vocab"),
    _num("hidden", "4,096", "spec.hidden", 4096), _num("n_layers", "32 layers", "spec.n_layers", 32),
    _num("n_heads", "32 heads", "spec.n_heads", 32), _num("n_kv_heads", "8 (GQA)", "spec.n_kv_heads", 8),
    _num("n_kv_heads", "8", "spec.n_kv_heads", 8), _num("n_kv_heads", "", "spec.kv_heads", 32),
    _num("ffn_hidden", "14,336", "spec.ffn_hidden", 14336, cells=dict(n_kv_heads="8")),
    _num("measured_tokens_per_sec_per_gpu", "3,890 tokens/s", "measured_tokens_per_s_per_gpu", 3890),
    _num("measured_tokens_per_sec_per_gpu", "3.2k", "measured_tokens_per_s_per_gpu", 3200),
    _num("measured_tokens_per_sec_per_gpu", "3.2k tok/s/GPU", "measured_tokens_per_s_per_gpu", 3200),
    _num("measured_iter_time_s", "1.42 s", "measured_iter_time_s", 1.42, cells=dict(measured_tokens_per_sec_per_gpu="")),
    _num("measured_iter_time_s", "1420 ms", "measured_iter_time_s", Near(1.42),
         cells=dict(measured_tokens_per_sec_per_gpu="")),
    _num("measured_tflops_per_gpu", "150 TFLOP/s", "measured_tokens_per_s_per_gpu", Same("150"),
         cells=dict(measured_tokens_per_sec_per_gpu="")),
    _num("measured_tflops_per_gpu", "150 TFLOPs/GPU", "measured_tokens_per_s_per_gpu", Same("150"),
         cells=dict(measured_tokens_per_sec_per_gpu="")),
    _num("measured_mfu", "41.5 %", "measured_tokens_per_s_per_gpu", Same("0.415"),
         cells=dict(measured_tokens_per_sec_per_gpu="")),
    _num("measured_mfu", "0.415", "measured_tokens_per_s_per_gpu", Same("0.415"),
         cells=dict(measured_tokens_per_sec_per_gpu="")),
    _num("measured_peak_mem_GB", "71.5 GB", "measured_peak_mem_gib", 71.5),
    _num("measured_peak_mem_GB", "71.5GiB", "measured_peak_mem_gib", 71.5),
    _num("measured_peak_mem_GB", "N/A", "measured_peak_mem_gib", None),
    _num("outcome", "OOM", "outcome", "OOM"), _num("outcome", "ok", "outcome", "ok"), _num("outcome", "", "outcome", "ok"),
    _num("outcome", "out of memory", "outcome", "OOM"), _num("outcome", "success", "outcome", "ok"),
    _num("id", "Run #1 (a)", "id", "Run #1 (a)"), _num("source", "", "source", "blank_source", cells=dict(id="blank_source_001")),
    _num("notes", "n/a", "plan.tp", 2), _num("notes", "", "plan.attention", "flash", note="attention not stated"),
    _num("notes", "no flash attention", "plan.attention", "eager"),
    _num("notes", "", "plan.sequence_parallel", True, note="sequence parallelism not stated"),
]


def _model(name, attr, expected, params="", **kw):
    return Case("model_name", name, attr, expected, {**NO_SHAPE, "n_params_B": params, **kw.pop("cells", {})}, **kw)


def _params(cell, expected, **kw):
    return Case("n_params_B", cell, "spec.n_params", expected, {**NO_SHAPE, "model_name": "", **kw.pop("cells", {})}, **kw)


MODEL = [
    _model("LLaMA-2 70B", "spec.n_layers,spec.hidden,spec.kv_heads", (80, 8192, 8), cells=dict(tp="8", dp="8"),
           note="preset llama2-70b"),
    _model("Llama 2 7B", "spec.n_layers,spec.hidden", (32, 4096), note="preset llama2-7b"),
    _model("Llama-2-13b-hf", "spec.n_layers,spec.hidden", (40, 5120)),
    _model("meta-llama/Llama-2-7b-hf", "spec.n_layers,spec.hidden", (32, 4096)),
    _model("Llama 3 8B", "spec.n_layers,spec.hidden,spec.kv_heads", (32, 4096, 8)),
    _model("Meta-Llama-3-70B", "spec.n_layers,spec.hidden", (80, 8192), cells=dict(tp="8", dp="8")),
    _model("Mistral 7B", "spec.n_layers,spec.kv_heads", (32, 8)), _model("Falcon-40B", "spec.n_layers", 60),
    _model("GPT-J 6B", "spec.n_layers", 28), _model("GPT-NeoX-20B", "spec.n_layers", 44),
    _model("BLOOM-7B1", "spec.n_layers", 30), _model("OLMo 7B", "spec.n_layers", 32),
    _model("GPT-2 XL", "spec.n_layers", 48), _model("llama2-7b", "spec.n_layers", 32),
    _model("GPT-3 175B", "spec.n_layers", 96, cells=dict(tp="8", pp="8", dp="1")),
    _model("GPT 530B", "spec.n_params", Near(530e9, 0.05), cells=dict(tp="8", pp="8", dp="1"),
           note="no preset matches"),
    _model("GPT 1.3B", "spec.n_params", Near(1.3e9, 0.1), note="no preset matches"),
    _model("Llama 3 405B 128K", "spec.n_layers,spec.hidden", (126, 16384), cells=dict(tp="8", pp="16", dp="1"),
           note="preset llama3-405b"),
    _model("LLaMA-2 70B (4K context)", "spec.n_layers", 80, cells=dict(tp="8", dp="8"), note="preset llama2-70b"),
    _model("Llama 3 8B base", "spec.n_layers", 32, note="preset llama3-8b"),
    _model("Mystery model", "spec.n_params", Refused("model")),
    _params("7", Near(7e9, 0.1), note="bare-size rule"), _params("7B", Near(7e9, 0.1)),
    _params("350M", Near(3.5e8, 0.1)), _params("1.3 billion", Near(1.3e9, 0.1)),
    _params("175 billion", Near(175e9, 0.05), cells=dict(tp="8", pp="8", dp="1")),
    _params("1T", Near(1e12, 0.05), cells=dict(tp="8", pp="8", dp="1")), _params("", Refused("model")),
]

# cells no reader can take: each row must come back read or "not predicted", never an exception
GARBAGE = ("0", "-1", "abc", "1e9", "8.5", "nan", "inf", "None", "1/0", "99999999", "0.5", "1,2", "%", "1e-9", "yes")

CASES: list[Case] = GPU + NETWORK + FRAMEWORK + PRECISION + SHARDING + OFFLOAD + CHECKPOINTING + LAYOUT + NUMBERS + MODEL


if __name__ == "__main__":
    from spelling_check import report, write

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "unseen_spellings.csv")
    if "--check" in sys.argv:
        good, failures = report(target)
        print("\n".join(failures))
        print(f"{good}/{good + len(failures)} spellings read as expected")
    else:
        print(f"{len(write(target))} cases -> {target}")
