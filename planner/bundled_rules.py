"""What the bundled trainer (trainer/) refuses before launch, as planner/rules.py rules of the bundled stack, so that
the planner (and `plan tune`, which searches with them) never proposes a plan the trainer cannot run: a trial lost.

Each mirrors one check of trainer/config.py (validate_config / validate_parallel), found by
validation/trainer_matrix4.py (a refusal no rule made). Other stacks are not concerned.
"""

from __future__ import annotations

import numpy as np

from planner.layout import OFFLOAD, PREC, SHARD, STACK

_BUNDLED = STACK["bundled"]
_ZERO = [SHARD[s] for s in ("zero1", "zero2", "zero3")]


def _model_parallel(k):
    return (k.stack == _BUNDLED) & ((k.tp > 1) | (k.pp > 1))


def _what(k) -> str:
    return f"tp={k.tp}, pp={k.pp}"


RULES = [
    # trainer/config.py validate_parallel: the tensor/pipeline backends build FSDP2 (DTensor) or plain modules
    dict(name="bundled_model_parallel_zero", reason="the bundled trainer runs tp/pp with FSDP2 or no sharding, "
         "not DeepSpeed ZeRO", field="sharding", inputs=("stack", "tp", "pp", "sharding"), relaxed={"tp": 1, "pp": 1},
         bad=lambda k: _model_parallel(k) & np.isin(k.sharding, _ZERO),
         message=lambda k: f"{_what(k)}: the bundled trainer composes tensor/pipeline parallelism with FSDP2 or none, "
                           "not DeepSpeed ZeRO (allowed: none, fsdp_*)"),
    dict(name="bundled_model_parallel_offload", reason="the bundled trainer runs tp/pp without offload",
         field="offload", inputs=("stack", "tp", "pp", "offload"), relaxed={"tp": 1, "pp": 1},
         bad=lambda k: _model_parallel(k) & (k.offload != OFFLOAD["none"]),
         message=lambda k: f"{_what(k)}: the bundled trainer offloads nothing under tensor/pipeline parallelism "
                           "(allowed: none)"),
    dict(name="bundled_model_parallel_compile", reason="the bundled trainer runs tp/pp without torch.compile",
         field="compile", inputs=("stack", "tp", "pp", "compile"), relaxed={"tp": 1, "pp": 1},
         bad=lambda k: _model_parallel(k) & (k.compile == 1),
         message=lambda k: f"{_what(k)}: the bundled trainer does not compile under tensor/pipeline parallelism "
                           "(allowed: false)"),
    # DDP wraps plain tensors: a tp-sharded (DTensor) model needs FSDP2 to be replicated over dp
    dict(name="bundled_tp_ddp", reason="the bundled trainer replicates tp over dp with FSDP2 only", field="sharding",
         inputs=("stack", "tp", "sharding", "dp"),
         bad=lambda k: (k.stack == _BUNDLED) & (k.tp > 1) & (k.sharding == SHARD["none"]) & (k.dp > 1),
         message=lambda k: f"tp={k.tp} with dp={k.dp}: DDP cannot replicate the bundled trainer's tensor-parallel "
                           "DTensors (allowed: fsdp_full_shard, fsdp_shard_grad_op, fsdp_hybrid)"),
    # trainer/backends/mesh.py: hybrid sharding splits dp into 2 replicas (or the nodes) x a shard group
    dict(name="bundled_hybrid_dp", reason="the bundled trainer's fsdp_hybrid needs an even dp >= 2", field="sharding",
         inputs=("stack", "sharding", "dp"),
         bad=lambda k: (k.stack == _BUNDLED) & (k.sharding == SHARD["fsdp_hybrid"]) & ((k.dp < 2) | (k.dp % 2 != 0)),
         message=lambda k: f"fsdp_hybrid with dp={k.dp}: the bundled trainer replicates over 2 groups (or the nodes) "
                           "and shards within each, which needs an even data-parallel size >= 2 (allowed: "
                           "fsdp_full_shard, fsdp_shard_grad_op)"),
    # DeepSpeed keeps fp32 master weights and optimizer states under bf16 (its bf16 optimizer, ZeRO's fp32
    # partitions: deepspeed/runtime/bf16_optimizer.py, zero/stage_1_and_2.py): no pure-bf16 mode to run
    dict(name="bundled_deepspeed_bf16_pure", reason="the bundled trainer's DeepSpeed runs no bf16_pure",
         field="precision", inputs=("stack", "sharding", "precision"),
         bad=lambda k: (k.stack == _BUNDLED) & np.isin(k.sharding, _ZERO) & (k.precision == PREC["bf16_pure"]),
         message=lambda k: "bf16_pure with DeepSpeed ZeRO: DeepSpeed keeps fp32 master weights under bf16 (allowed "
                           "with zero*: bf16, fp16, fp32; bf16_pure runs with none or fsdp_*)"),
]
