"""Exact bytes a rank holds: tensors counted once per storage, and bytes saved for backward."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

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
    """The rank-local part of a DTensor (FSDP2 shards), the tensor a wrapper subclass holds, or the tensor itself.

    A wrapper subclass has no storage of its own (its untyped_storage() raises "invalid python storage" on
    data_ptr()): tensor parallelism's AsyncCollectiveTensor (torch.distributed._functional_collectives, what
    DTensor.to_local and the sequence-parallel redistributions return) keeps the data in `elem`; other traceable
    wrappers name their inner tensors in __tensor_flatten__ (torch.utils._python_dispatch)."""
    if hasattr(t, "to_local"):
        t = t.to_local()
    if not is_traceable_wrapper_subclass(t):
        return t
    inner = getattr(t, "elem", None)
    if not isinstance(inner, torch.Tensor):
        names, _ = t.__tensor_flatten__()
        inner = getattr(t, names[0]) if names else None
    return t if inner is None else local_tensor(inner)


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


@contextmanager
def live_saved_tensor_meter():
    """Peak bytes saved for backward and still alive, over a block that runs forwards AND backwards.

    A pipeline schedule keeps several micro batches' activations at once (1F1B: up to pp on the
    first stage); this follows each saved storage from its pack to the release of the last graph
    node holding it. Yields a dict whose "peak_bytes" is the running maximum.
    """
    live: dict[tuple[str, int], list[int]] = {}  # storage -> [holders, bytes]
    out = {"peak_bytes": 0, "bytes": 0}

    def release(key: tuple[str, int]) -> None:
        entry = live.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            out["bytes"] -= entry[1]
            del live[key]

    def hold(t: torch.Tensor) -> tuple[str, int] | None:
        if not isinstance(t, torch.Tensor) or _is_parameter(t) or t.numel() == 0:
            return None
        key = storage_key(local_tensor(t))
        entry = live.setdefault(key, [0, local_tensor(t).untyped_storage().nbytes()])
        if entry[0] == 0:
            out["bytes"] += entry[1]
            out["peak_bytes"] = max(out["peak_bytes"], out["bytes"])
        entry[0] += 1
        return key

    class Held:
        __slots__ = ("tensor", "key", "__weakref__")

        def __init__(self, tensor: torch.Tensor, key):
            self.tensor, self.key = tensor, key

        def __del__(self):
            release(self.key)

    def pack(t: torch.Tensor):
        key = hold(t)
        return t if key is None else Held(t, key)

    def unpack(h):
        return h.tensor if isinstance(h, Held) else h

    def observe(t: torch.Tensor) -> None:  # a checkpointed region's input, kept by its closure
        key = hold(t)
        if key is not None:
            weakref.finalize(t, release, key)

    checkpointing.INPUT_OBSERVERS.append(observe)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield out
    finally:
        checkpointing.INPUT_OBSERVERS.remove(observe)
