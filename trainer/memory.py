"""Exact bytes a rank holds: tensors counted once per storage, and bytes saved for backward."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager

import torch

from trainer import checkpointing


def iter_tensors(obj) -> Iterable[torch.Tensor]:
    """Tensors inside nested lists/tuples/dicts (optimizer state, DeepSpeed groups)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from iter_tensors(v)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank-local part of a DTensor (FSDP2 shards), or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def storage_key(t: torch.Tensor) -> tuple[str, int]:
    s = t.untyped_storage()
    return (str(t.device), s.data_ptr())


class StorageCounter:
    """Bytes covered by tensors, each byte of a storage counted once across all categories.

    Views into one flat buffer (DeepSpeed's flat groups, reduce buckets) count only the bytes
    they cover: a gradient partition that lives inside a larger communication bucket counts
    as the partition, not as the bucket; a whole flat buffer counts whole.
    """

    def __init__(self) -> None:
        self.covered: dict[tuple[str, int], list[tuple[int, int]]] = {}

    def count(self, tensors: Iterable[torch.Tensor]) -> int:
        before = self.total()
        for t in tensors:
            t = local_tensor(t)
            if t.device.type == "meta" or t.numel() == 0 or t.untyped_storage().data_ptr() == 0:
                continue
            start = t.storage_offset() * t.element_size()
            end = start + _span_elems(t) * t.element_size()
            self.covered.setdefault(storage_key(t), []).append((start, end))
        return self.total() - before

    def total(self) -> int:
        return sum(_union_length(spans) for spans in self.covered.values())


def _span_elems(t: torch.Tensor) -> int:
    """Elements from the first to one past the last element a (strided) view touches."""
    return 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)


def _union_length(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, -1
    for a, b in sorted(spans):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def _is_parameter(t: torch.Tensor) -> bool:
    base = t._base if t._base is not None else t
    return bool(base.is_leaf and base.requires_grad)


@contextmanager
def saved_tensor_meter():
    """Counts bytes saved for backward (by storage, once each), excluding parameters.

    Yields a dict whose "bytes" grows while the block runs; storages are remembered by
    pointer, so keep the forward's outputs alive until the block ends.
    """
    seen: set[tuple[str, int]] = set()
    out = {"bytes": 0, "tensors": 0}

    def add(t: torch.Tensor) -> None:
        if not isinstance(t, torch.Tensor) or _is_parameter(t) or t.numel() == 0:
            return
        t = local_tensor(t)
        key = storage_key(t)
        if key in seen:
            return
        seen.add(key)
        out["bytes"] += t.untyped_storage().nbytes()
        out["tensors"] += 1

    def pack(t: torch.Tensor):
        add(t)
        return t

    checkpointing.INPUT_OBSERVERS.append(add)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield out
    finally:
        checkpointing.INPUT_OBSERVERS.remove(add)


def measure_saved_bytes(forward_loss: Callable[[], torch.Tensor]) -> int:
    """Bytes saved for backward by one micro batch forward (the graph is then dropped)."""
    with saved_tensor_meter() as out:
        loss = forward_loss()
    del loss
    return int(out["bytes"])
