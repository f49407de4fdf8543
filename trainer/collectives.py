"""All-reduce / all-gather / reduce-scatter bandwidth over a size ladder (nccl-tests style).

nccl-tests (doc/PERFORMANCE.md): algbw = size / time; busbw = algbw * 2(n-1)/n for
all-reduce and algbw * (n-1)/n for all-gather and reduce-scatter (size = the full buffer).
"""

from __future__ import annotations

import math
import os
import time

from pydantic import BaseModel

OPS = ("all_reduce", "all_gather", "reduce_scatter")
DEFAULT_SIZES = ("1M", "4M", "16M", "64M", "256M", "1G")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
MAX_SIZE = 2**40  # one message of 1 TiB: above any GPU's memory (the largest, B300: 288 GB)


def parse_size(text: str) -> int:
    from planner.errors import PlanError

    t = text.strip().upper().removesuffix("B")
    unit = t[-1] if t and t[-1] in _UNITS else ""
    try:
        value = float(t[:-1] if unit else t)
    except ValueError:
        raise PlanError("sizes", f"{text!r} is not a size (e.g. 1M, 256M, 1G)") from None
    if not math.isfinite(value) or value <= 0:
        raise PlanError("sizes", f"{text!r} must be a positive number of bytes (e.g. 1M, 256M, 1G)")
    size = int(value * _UNITS[unit])
    if not 1 <= size <= MAX_SIZE:
        raise PlanError("sizes", f"{text!r} is {size:,} bytes (allowed: 1 byte to 1024G: more than any GPU holds)")
    return size


def bus_factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


class CollectiveResult(BaseModel):
    op: str
    size_bytes: int
    time_s: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    error: str | None = None


class BenchReport(BaseModel):
    nproc: int
    nnodes: int
    gpus_per_node: int
    backend: str
    results: list[CollectiveResult]
    busbw_gbps: dict[str, float | None]


def iterations(size_bytes: int, on_gpu: bool = False) -> tuple[int, int]:
    """(warm-up, timed) repetitions. On GPUs nccl-tests' defaults at every size (NVIDIA/nccl-tests README: -w 5
    warm-up, -n 20 timed): even 1 GiB takes milliseconds over NVLink / xGMI. On CPU (gloo: seconds per call at
    256 MiB) more for small messages, whose timings are noisy."""
    if on_gpu:
        return 5, 20
    if size_bytes <= 16 * 2**20:
        return 3, 20
    if size_bytes <= 256 * 2**20:
        return 2, 8
    return 1, 4


def message_bytes(size_bytes: int, world: int) -> int:
    """The bytes a collective of `size_bytes` really moves: whole float32 elements, a multiple of the
    ranks (reduce-scatter / all-gather split the buffer evenly), at least one element per rank."""
    return 4 * max(world, size_bytes // 4 // world * world)


def _one(op: str, size_bytes: int, device, world: int, group=None) -> float:
    import torch
    import torch.distributed as dist

    numel = message_bytes(size_bytes, world) // 4
    buf = torch.ones(numel, dtype=torch.float32, device=device)
    if op == "all_reduce":
        call = lambda: dist.all_reduce(buf, group=group)  # noqa: E731
    elif op == "all_gather":
        part = buf[: numel // world].clone()
        call = lambda: dist.all_gather_into_tensor(buf, part, group=group)  # noqa: E731
    else:
        part = torch.empty(numel // world, dtype=torch.float32, device=device)
        call = lambda: dist.reduce_scatter_tensor(part, buf, group=group)  # noqa: E731
    warm, reps = iterations(size_bytes, device.type == "cuda")
    for _ in range(warm):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - t0) / reps], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the time
    return float(elapsed.item())


def bench_rank(ops: list[str], sizes: list[int], progress: bool, progress_file: str | None = None) -> dict | None:
    """Runs on every rank; rank 0 returns the report as a dict; every rank {"plan_error": [field, text]} for a layout
    it refuses. `progress_file`: rank 0 keeps there which step it is at (write_progress), for a tuner watching."""
    import torch.distributed as dist

    from planner.errors import PlanError
    from trainer import dist as tdist
    from trainer.worker import _die_with_launcher

    _die_with_launcher()  # a launcher killed with -9 (a tuner worker killed mid-bench) leaves no rank benching on
    device = tdist.init(600)
    try:
        report = _bench(ops, sizes, progress, device, progress_file)
    except PlanError as e:  # every rank refuses the same layout at the same point: no collective is left waiting;
        dist.destroy_process_group()  # returned, not raised (torch's elastic agent logs a raising rank's traceback)
        return {"plan_error": [e.field, e.message]}
    # NCCL: a process group left to the interpreter's exit can hang it (torch warns so); on an error the launcher
    # ends the ranks (a teardown could wait on the other ranks' collectives)
    dist.destroy_process_group()
    return report


def _bench(ops: list[str], sizes: list[int], progress: bool, device, progress_file: str | None = None) -> dict | None:
    import torch.distributed as dist

    from trainer.nodes import gathered_node_groups

    rank, world = dist.get_rank(), dist.get_world_size()
    nodes = gathered_node_groups()  # the ranks' own nodes (an uneven layout: one line, here on every rank)
    results: list[CollectiveResult] = []
    bar = None
    if rank == 0 and progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task("collectives", total=len(ops) * len(sizes))
    steps: list[dict] = []
    for op in ops:
        for size in sizes:
            size = message_bytes(size, world)  # reported as moved (3 bytes was reported, 8 moved)
            if rank == 0 and progress_file:
                write_progress(progress_file, steps, len(ops) * len(sizes), size_label(size))
            try:
                t = _one(op, size, device, world)
                algbw = size * 8 / t / 1e9
                results.append(CollectiveResult(op=op, size_bytes=size, time_s=t, algbw_gbps=algbw,
                                                busbw_gbps=algbw * bus_factor(op, world)))
            except (RuntimeError, ValueError) as e:  # e.g. a collective the backend lacks
                results.append(CollectiveResult(op=op, size_bytes=size, time_s=None, algbw_gbps=None,
                                                busbw_gbps=None, error=str(e).splitlines()[0][:200]))
            if rank == 0 and progress_file:
                steps.append({"op": op, "size": size_label(size), "busbw_gbps": results[-1].busbw_gbps})
                write_progress(progress_file, steps, len(ops) * len(sizes), None)
            if bar is not None:
                bar.advance(task)
    if bar is not None:
        bar.stop()
    nnodes = len(nodes)  # found, not --nnodes (under srun / torchrun the launcher decides; its default was 1)
    intranode = _intranode_busbw(max(sizes), device, nodes) if "all_reduce" in ops else None
    dist.barrier()
    if rank != 0:
        return None
    ok = [r for r in results if r.op == "all_reduce" and r.busbw_gbps is not None]
    largest = max(ok, key=lambda r: r.size_bytes).busbw_gbps if ok else None
    if nnodes == 1:
        intranode = largest
    report = BenchReport(
        nproc=world, nnodes=nnodes, gpus_per_node=len(nodes[0]), backend=dist.get_backend(),
        results=results,
        busbw_gbps={"intranode": intranode, "internode": largest if nnodes > 1 else None})
    return report.model_dump(mode="json")


def size_label(n: int) -> str:
    """4194304 -> '4 MiB' (the bench's sizes are binary: parse_size)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def write_progress(path: str, done: list[dict], of: int, now: str | None) -> None:
    """The bench's step for whoever watches it (tuner/network.py): the sizes done with their busbw, the one running.
    Written whole and renamed into place: a reader never sees half a file."""
    import json
    import os

    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"of": of, "done": done, "now": now}, f)
    os.replace(tmp, path)


def _intranode_busbw(size_bytes: int, device, nodes: list[list[int]]) -> float | None:
    """With several nodes: all-reduce busbw inside each node at once, next to the all-ranks figure. `nodes`: the
    global ranks of each node as the ranks reported them (trainer/nodes.py; consecutive ranks were assumed, which
    srun --distribution=cyclic breaks: its "node" groups then spanned every node)."""
    import torch.distributed as dist

    per_node = len(nodes[0])
    if len(nodes) == 1 or per_node < 2:
        return None
    node_group, _ = dist.new_subgroups_by_enumeration(nodes)
    size_bytes = message_bytes(size_bytes, per_node)
    t = _one("all_reduce", size_bytes, device, per_node, group=node_group)
    return size_bytes * 8 / t / 1e9 * bus_factor("all_reduce", per_node)


def run_bench(ops: list[str], sizes: list[int], nproc: int, nnodes: int = 1, node_rank: int = 0,
              rdzv_endpoint: str | None = None, progress: bool = True,
              progress_file: str | None = None) -> BenchReport | None:
    from planner.errors import PlanError
    from trainer.ranks import run_on_ranks

    out = run_on_ranks(bench_rank, (ops, sizes, progress, progress_file), nproc, nnodes, node_rank, rdzv_endpoint)
    found = [v for v in out.values() if v is not None]
    for value in found:
        if "plan_error" in value:  # a layout the ranks refused (trainer/nodes.py): the CLI's one line
            raise PlanError(*value["plan_error"])
    return BenchReport.model_validate(found[0]) if found else None
