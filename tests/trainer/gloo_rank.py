"""One rank of a multi-process CPU test (torch.multiprocessing.spawn): a gloo process group around the test's
body, torn down the way gloo survives on a busy 2-core box.

    def _worker(rank, world, init_file, out):
        with gloo_rank(rank, world, init_file):
            ...  # the rank's work; write results to a file

Every rank's collectives finish (a barrier) before any rank destroys its group: a rank that tears gloo down while
another's last collective is in flight aborts at exit ("terminate called without an active exception", ~1 run in
3). The results are on disk by then, so the process leaves with os._exit(0), skipping the interpreter's C++
teardown where gloo's threads can still abort it (as trainer/worker.py does on its error path). On an exception
the group is destroyed and the exception propagates (spawn reports it)."""

from __future__ import annotations

import contextlib
import os
import sys

import torch
import torch.distributed as dist


@contextlib.contextmanager
def gloo_rank(rank: int, world: int, init_file: str, env: dict[str, str] | None = None):
    """`env`: extra environment for the rank (e.g. DeepSpeed's RANK / WORLD_SIZE), set before the group."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.update(env or {})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
