"""`Layout`: execution plans as numbers, one plan or many at once.

Every formula of the analytic model takes a `Layout` whose fields are either numpy scalars
(one plan, for `--explain`) or equal-length numpy arrays (the search evaluates every candidate
in one vectorised pass). Categorical knobs are integer codes: the index of the value in the
tuples of planner/scenario.py (e.g. `sharding == SHARD["zero3"]`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from planner.scenario import (
    ATTENTIONS,
    CHECKPOINTINGS,
    OFFLOADS,
    OPTIMIZERS,
    PRECISIONS,
    SHARDINGS,
    STACKS,
    ExecutionPlan,
)

SHARD = {name: i for i, name in enumerate(SHARDINGS)}
OFFLOAD = {name: i for i, name in enumerate(OFFLOADS)}
CKPT = {name: i for i, name in enumerate(CHECKPOINTINGS)}
PREC = {name: i for i, name in enumerate(PRECISIONS)}
OPTIM = {name: i for i, name in enumerate(OPTIMIZERS)}
ATTN = {name: i for i, name in enumerate(ATTENTIONS)}
STACK = {name: i for i, name in enumerate(STACKS)}

_CATEGORICAL = {
    "sharding": SHARDINGS,
    "offload": OFFLOADS,
    "activation_checkpointing": CHECKPOINTINGS,
    "precision": PRECISIONS,
    "optimizer": OPTIMIZERS,
    "attention": ATTENTIONS,
    "stack": STACKS,
}
_BOOLEAN = ("sequence_parallel", "compile", "async_tp")
_FLOAT = ("checkpoint_fraction",)


@dataclass(frozen=True)
class Layout:
    """Struct of arrays with the fields of `ExecutionPlan` (categoricals as int codes)."""

    stack: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    sequence_parallel: np.ndarray  # 0/1
    sharding: np.ndarray
    offload: np.ndarray
    activation_checkpointing: np.ndarray
    checkpoint_fraction: np.ndarray  # float, share of blocks recomputed under "blocks"
    precision: np.ndarray
    optimizer: np.ndarray
    attention: np.ndarray
    compile: np.ndarray  # 0/1
    async_tp: np.ndarray  # 0/1
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    seq_len: np.ndarray
    reduce_bucket_elems: np.ndarray
    allgather_bucket_elems: np.ndarray
    stage3_prefetch_elems: np.ndarray
    stage3_max_live_params: np.ndarray

    # ---- construction -----------------------------------------------------------------
    @classmethod
    def from_plans(cls, plans: Sequence[ExecutionPlan]) -> "Layout":
        cols: dict[str, list] = {f.name: [] for f in fields(cls)}
        for p in plans:
            for name in cols:
                value = getattr(p, name)
                if name in _CATEGORICAL:
                    value = _CATEGORICAL[name].index(value)
                cols[name].append(value)
        return cls(**{k: np.asarray(v, dtype=np.float64 if k in _FLOAT else np.int64) for k, v in cols.items()})

    @classmethod
    def from_plan(cls, plan: ExecutionPlan) -> "Layout":
        return cls.from_plans([plan])

    def __len__(self) -> int:
        return int(np.size(self.tp))

    def take(self, index: np.ndarray) -> "Layout":
        return Layout(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def plan(self, i: int) -> ExecutionPlan:
        values = {}
        for f in fields(self):
            raw = np.asarray(getattr(self, f.name)).reshape(-1)[i]
            if f.name in _FLOAT:
                values[f.name] = float(raw)
                continue
            v = int(raw)
            if f.name in _CATEGORICAL:
                values[f.name] = _CATEGORICAL[f.name][v]
            elif f.name in _BOOLEAN:
                values[f.name] = bool(v)
            else:
                values[f.name] = v
        return ExecutionPlan(**values)

    # ---- derived quantities used by several formulas ---------------------------------
    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def global_batch(self) -> np.ndarray:
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def is_fsdp(self) -> np.ndarray:
        return self.sharding >= SHARD["fsdp_full_shard"]

    @property
    def is_deepspeed(self) -> np.ndarray:
        return (self.sharding >= SHARD["zero1"]) & (self.sharding <= SHARD["zero3"])

    @property
    def shards_grads(self) -> np.ndarray:
        s = self.sharding
        return (s >= SHARD["zero2"])

    @property
    def shards_optimizer(self) -> np.ndarray:
        return self.sharding >= SHARD["zero1"]
