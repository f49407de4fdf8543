"""Megatron-LM's "local" DDP: the gradient all-reduce runs after the whole backward, hidden by nothing.

Until 2023 Megatron-LM offered two data-parallel wrappers, `--DDP-impl local` (the default:
`group.add_argument('--DDP-impl', default='local', choices=['local', 'torch'])`, megatron/arguments.py)
and `torch` (PyTorch DistributedDataParallel, whose bucketed all-reduce overlaps backward: Li et al.
VLDB 2020). The local wrapper accumulates gradients into one contiguous buffer and all-reduces it
in `train_step` after `forward_backward_func` has returned ("backward-params-all-reduce" timer,
megatron/training.py), so none of it hides behind compute. The overlapped reduce of Megatron-Core
(`--overlap-grad-reduce`) came after torch DDP was removed (commit 3fb3e95, 2023-08-31, "Deprecate
torchDDP and get rid of args.DDP_impl").

A runs-file row says so with a `ddp_impl` column (local/torch), or in its notes ("DDP-impl local",
"--DDP-impl torch"); a framework cell naming Megatron-LM with a year before 2023
("Megatron-LM (2020)") means the default, local. Otherwise nothing changes.

The local wrapper all-reduces its contiguous buffer in one call per dtype (one bucket). A row whose notes
state `--overlap-grad-reduce` ran Megatron-Core's DDP, whose buckets are max(40M, 1M x dp) parameters
(planner/grad_buckets.py). Megatron-LM's fp16 gradients are reduced in fp16: fp32
only with `--fp32-allreduce` ("All-reduce in fp32", store_true, 2019-2020) or
`--accumulate-allreduce-grads-in-fp32` (2021 on), so a Megatron-LM fp16 row moves 2 bytes a gradient, not the
4 of PyTorch AMP's fp32 gradients. These are facts of the run, kept whatever stack profile predicts it
(leave-one-stack-out included).
"""

from __future__ import annotations

import re

import numpy as np

from planner import grad_buckets
from planner.errors import PlanError

LAST_LOCAL_DDP_YEAR = 2022  # torch DDP removed and --overlap-grad-reduce added in 2023

_IN_NOTES = re.compile(r"DDP[-_ ]impl\s*[=:]?\s*(local|torch)\b", re.I)
_MEGATRON_YEAR = re.compile(r"megatron-lm\s*\((\d{4})\)", re.I)
_OVERLAP_GRAD_REDUCE = re.compile(r"--overlap-grad-reduce\b", re.I)
_MEGATRON_LM = re.compile(r"megatron[- ](lm|core)", re.I)
_NOT_MEGATRON_LM = re.compile(r"nemo|deepspeed|megascale", re.I)


def after_backward_of(row: dict, notes: list[str]) -> bool:
    """True when the row's data-parallel all-reduce runs after backward (Megatron-LM local DDP)."""
    cell = (row.get("ddp_impl") or "").strip().lower()
    if cell and cell not in ("local", "torch"):
        raise PlanError("ddp_impl", f"row {row.get('id')}: {cell!r} (allowed: local, torch)")
    impl = cell
    if not impl:
        m = _IN_NOTES.search(row.get("notes") or "")
        impl = m.group(1).lower() if m else ""
    if not impl:
        y = _MEGATRON_YEAR.search(row.get("framework") or "")
        impl = "local" if y and int(y.group(1)) <= LAST_LOCAL_DDP_YEAR else ""
    if impl == "local":
        notes.append("Megatron-LM local DDP: gradients all-reduced after backward (not overlapped)")
    return impl == "local"


def core_buckets_of(row: dict, notes: list[str]) -> bool:
    """True when the row ran Megatron-Core's overlapped, bucketed DDP (`--overlap-grad-reduce` in its notes)."""
    if not _OVERLAP_GRAD_REDUCE.search(row.get("notes") or ""):
        return False
    notes.append("Megatron-Core DDP buckets: max(40M, 1M x dp) parameters (--overlap-grad-reduce)")
    return True


def reduce_bytes_of(row: dict, precision: str, notes: list[str]) -> float | None:
    """Bytes per gradient element a Megatron-LM fp16 run reduces (2, unless its notes ask for fp32); None: the
    planner's default (planner/dp_comm.py grad_bytes). Megatron-LM's bf16 default, fp32 ("bfloat16 requires
    gradient accumulation and all-reduce to be done in fp32", arguments.py, unless --grad-reduce-in-bf16),
    is not applied: on the Megatron-Core r0.8 H100 rows it made every CV worse (their fp32 reduce-scatter would
    outlast the backward it hides behind by more than their measured steps allow; validation/worst_rows.md)."""
    fw, text = row.get("framework") or "", row.get("notes") or ""
    if precision != "fp16" or not _MEGATRON_LM.search(fw) or _NOT_MEGATRON_LM.search(fw):
        return None
    if re.search(r"fp32[-_]allreduce|accumulate[-_]allreduce[-_]grads[-_]in[-_]fp32", text, re.I):
        return None
    notes.append("Megatron-LM fp16: gradients all-reduced in fp16 (no --fp32-allreduce)")
    return 2.0


def with_ddp_overlap(prof: dict, after_backward: bool, core_buckets: bool = False,
                     reduce_bytes: float | None = None) -> dict:
    """The per-candidate profile values with the run's DDP facts: `overlap_ddp` at 0 and one bucket (the local
    DDP's contiguous buffer) when the all-reduce follows backward, Megatron-Core's bucket rule where the run used
    its DDP, and the gradient bytes its framework reduces (`grad_reduce_bytes`, planner/dp_comm.py)."""
    from planner.stacks import merged

    out = {}
    if after_backward:  # one flat buffer, all-reduced in one call (per dtype) once backward has returned
        out["overlap_ddp"] = np.zeros_like(np.asarray(prof["overlap_ddp"], dtype=np.float64))
        out["grad_bucket_params"] = np.full(np.shape(prof["grad_bucket_params"]), np.inf)
    elif core_buckets:
        shape = np.shape(prof["grad_bucket_params"])
        out["grad_bucket_params"] = np.full(shape, float(grad_buckets.MEGATRON_BUCKET_PARAMS))
        out["grad_bucket_params_per_rank"] = np.full(shape, float(grad_buckets.MEGATRON_BUCKET_PARAMS_PER_RANK))
    if reduce_bytes:
        out["grad_reduce_bytes"] = np.full(np.shape(prof["grad_bucket_params"]), float(reduce_bytes))
    return merged(prof, out)
