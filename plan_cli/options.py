"""Typer option types shared by several commands, so a flag reads the same everywhere.

Scenario knobs (`plan estimate`, `plan export`): Optional, blank = the planner chooses.
Launch flags (`plan train`, `plan allreduce-bench`): where the ranks run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

SCEN = "Scenario (blank = planner chooses)"


def _scen(help: str | None = None) -> typer.models.OptionInfo:
    return typer.Option(help=help, rich_help_panel=SCEN)


Model = Annotated[Optional[str], _scen("Preset id, size (7b, 52b), path to a HF config.json, or hub id (org/name)")]
Gpu = Annotated[Optional[str], _scen("GPU catalog id (plan catalog list)")]
Cluster = Annotated[Optional[str], _scen("Cluster catalog id (default dgx-a100)")]
GpusPerNode = Annotated[Optional[int], _scen()]
InternodeGbps = Annotated[Optional[float], _scen("Inter-node bandwidth per node")]
SeqLen = Annotated[Optional[int], _scen()]
Tp = Annotated[Optional[int], _scen()]
Pp = Annotated[Optional[int], _scen()]
Sharding = Annotated[Optional[str], _scen("none|zero1|zero2|zero3|fsdp_full_shard|fsdp_shard_grad_op|fsdp_hybrid")]
Offload = Annotated[Optional[str], _scen("none|optimizer|optimizer+params")]
Checkpointing = Annotated[Optional[str], _scen("none|selective|op|blocks|full (blocks: --checkpoint-fraction of the blocks)")]
CheckpointFraction = Annotated[Optional[float], _scen("Share of blocks recomputed with --activation-checkpointing blocks (default 0.5)")]
Precision = Annotated[Optional[str], _scen("fp32|fp16|bf16|bf16_pure|fp8 (fp8: H100-class GPUs)")]
Stack = Annotated[Optional[str], _scen("megatron|megatron_deepspeed|hf|fsdp|torchtitan|bundled (catalog/stacks; default: by sharding)")]
Cp = Annotated[Optional[int], _scen("Context-parallel degree (ring attention)")]
Compile = Annotated[Optional[bool], typer.Option("--compile/--no-compile", help="torch.compile (fused element-wise kernels)", rich_help_panel=SCEN)]
AsyncTp = Annotated[Optional[bool], typer.Option("--async-tp/--no-async-tp", help="TP collectives overlapped with GEMMs", rich_help_panel=SCEN)]
Optimizer = Annotated[Optional[str], _scen("adamw|adafactor|sgd")]
Attention = Annotated[Optional[str], _scen("flash|eager")]
MicroBatch = Annotated[Optional[int], _scen()]
GradAccum = Annotated[Optional[int], _scen()]
GlobalBatch = Annotated[Optional[int], _scen("Sequences per optimizer step")]
Objective = Annotated[str, typer.Option(help="tokens_per_s|days|cost|memory-headroom")]
CatalogDirs = Annotated[Optional[list[Path]], typer.Option(help="Extra catalog folder(s) (also $PLAN_CATALOG)")]

Nproc = Annotated[int, typer.Option(min=1, help="Ranks on this node.")]
Nnodes = Annotated[int, typer.Option(min=1)]
NodeRank = Annotated[int, typer.Option(min=0)]
RdzvEndpoint = Annotated[Optional[str], typer.Option(help="host:port of the rendezvous.")]
