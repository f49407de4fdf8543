"""`Layout`: execution plans as numbers, one plan or many at once.

Every formula of the analytic model takes a `Layout` whose fields are either numpy scalars
(one plan, for `--explain`) or equal-length numpy arrays (the search evaluates every candidate
in one vectorised pass). Categorical knobs are integer codes: the index of the value in the
tuples of planner/scenario.py (e.g. `sharding == SHARD["zero3"]`).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

from planner.scenario import (
    ATTENTIONS,
    CHECKPOINTINGS,
    FP8_RECIPES,
    GRAD_REDUCE_DTYPES,
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
FP8 = {name: i for i, name in enumerate(FP8_RECIPES)}
OPTIM = {name: i for i, name in enumerate(OPTIMIZERS)}
ATTN = {name: i for i, name in enumerate(ATTENTIONS)}
STACK = {name: i for i, name in enumerate(STACKS)}
GRAD_REDUCE = {name: i for i, name in enumerate(GRAD_REDUCE_DTYPES)}

# The ExecutionPlan fields by kind, read off their types: a Literal is an int code, a bool 0/1.
_PLAN_FIELDS = ExecutionPlan.model_fields
_CATEGORICAL = {name: typing.get_args(f.annotation) for name, f in _PLAN_FIELDS.items()
                if typing.get_origin(f.annotation) is Literal}
_BOOLEAN = tuple(name for name, f in _PLAN_FIELDS.items() if f.annotation is bool)
_FLOAT = tuple(name for name, f in _PLAN_FIELDS.items() if f.annotation is float)


@dataclass(frozen=True)
class Layout:
    """Struct of arrays with the fields of `ExecutionPlan` (categoricals as int codes, booleans
    0/1, checkpoint_fraction a float): one array per field, declared by ExecutionPlan."""

    __annotations__ = {name: "np.ndarray" for name in _PLAN_FIELDS}

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
