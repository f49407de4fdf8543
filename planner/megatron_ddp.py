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
"""

from __future__ import annotations

import re

import numpy as np

from planner.errors import PlanError

LAST_LOCAL_DDP_YEAR = 2022  # torch DDP removed and --overlap-grad-reduce added in 2023

_IN_NOTES = re.compile(r"DDP[-_ ]impl\s*[=:]?\s*(local|torch)\b", re.I)
_MEGATRON_YEAR = re.compile(r"megatron-lm\s*\((\d{4})\)", re.I)


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


def with_ddp_overlap(prof: dict, after_backward: bool) -> dict:
    """The per-candidate profile values with `overlap_ddp` at 0 when the all-reduce follows backward."""
    if not after_backward:
        return prof
    return {**prof, "overlap_ddp": np.zeros_like(np.asarray(prof["overlap_ddp"], dtype=np.float64))}
