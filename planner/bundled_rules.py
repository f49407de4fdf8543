"""What the bundled trainer (trainer/) refuses before launch, as planner/rules.py rules of the bundled stack, so that
the planner (and `plan tune`, which searches with them) never proposes a plan the trainer cannot run: a trial lost.

Each mirrors one check of trainer/config.py (validate_config / validate_parallel), found by
validation/trainer_matrix4.py (a refusal no rule made). Other stacks are not concerned.
"""

from __future__ import annotations

import numpy as np

from planner.layout import OFFLOAD, OPTIM, PREC, SHARD, STACK
from planner.scenario import SHARDINGS

_BUNDLED = STACK["bundled"]
_ZERO = [SHARD[s] for s in ("zero1", "zero2", "zero3")]
_FSDP = [SHARD[s] for s in ("fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid")]


def _model_parallel(k):
    return (k.stack == _BUNDLED) & ((k.tp > 1) | (k.pp > 1))


def _what(k) -> str:
    return f"tp={k.tp}, pp={k.pp}"


def _sharding(k) -> str:
    return SHARDINGS[int(k.sharding)]


# the rules trainer/config.py checks by name (the optimizer the trainer can step): one wording for both
OPTIMIZER_RULES = ("bundled_adafactor_dtensor", "bundled_offload_optimizer")


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
    # torch.optim.Adafactor factors its second moment over a matrix's full rows and columns and scales by the full
    # parameter's RMS (torch/optim/_adafactor.py): on a DTensor shard (tensor parallelism, FSDP2) its in-place ops
    # have no sharding strategy (aten.pow_ on a _NormPartial placement). Plain tensors (DDP, DeepSpeed, pp with no
    # sharding) it steps.
    dict(name="bundled_adafactor_dtensor", reason="the bundled trainer runs adafactor without DTensor shards",
         field="optimizer", inputs=("stack", "optimizer", "tp", "sharding"), relaxed={"tp": 1},
         bad=lambda k: (k.stack == _BUNDLED) & (k.optimizer == OPTIM["adafactor"]) & ((k.tp > 1) | np.isin(k.sharding,
                                                                                                          _FSDP)),
         message=lambda k: f"adafactor with tp={k.tp}, sharding={_sharding(k)}: torch's Adafactor cannot step the "
                           "bundled trainer's DTensor shards (tensor parallelism, FSDP2) (allowed: adamw, sgd; or "
                           "adafactor with tp 1 and sharding none or zero*)"),
    # trainer/backends/deepspeed_backend.py: an offloaded optimizer is DeepSpeedCPUAdam (ZeRO-Offload's CPU Adam)
    dict(name="bundled_offload_optimizer", reason="the bundled trainer's DeepSpeed offload runs Adam only",
         field="optimizer", inputs=("stack", "optimizer", "sharding", "offload"),
         bad=lambda k: (k.stack == _BUNDLED) & (k.optimizer != OPTIM["adamw"]) & np.isin(k.sharding, _ZERO)
         & (k.offload != OFFLOAD["none"]),
         message=lambda k: "DeepSpeed offload in the bundled trainer steps DeepSpeedCPUAdam (allowed with an offload "
                           "and zero*: adamw)"),
    # DeepSpeed keeps fp32 master weights and optimizer states under bf16 (its bf16 optimizer, ZeRO's fp32
    # partitions: deepspeed/runtime/bf16_optimizer.py, zero/stage_1_and_2.py): no pure-bf16 mode to run
    dict(name="bundled_deepspeed_bf16_pure", reason="the bundled trainer's DeepSpeed runs no bf16_pure",
         field="precision", inputs=("stack", "sharding", "precision"),
         bad=lambda k: (k.stack == _BUNDLED) & np.isin(k.sharding, _ZERO) & (k.precision == PREC["bf16_pure"]),
         message=lambda k: "bf16_pure with DeepSpeed ZeRO: DeepSpeed keeps fp32 master weights under bf16 (allowed "
                           "with zero*: bf16, fp16, fp32; bf16_pure runs with none or fsdp_*)"),
]
