"""Run a function on N local ranks (times nnodes) with torch's elastic launch API, or in this
process when it already is a rank (torchrun / srun)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any


def run_on_ranks(fn: Callable[..., Any], args: tuple, nproc: int, nnodes: int = 1, node_rank: int = 0,
                 rdzv_endpoint: str | None = None) -> dict[int, Any]:
    """Results by global rank of `fn(*args)` (only this node's ranks)."""
    import torch
    from torch.distributed.launcher.api import elastic_launch

    from trainer.dist import env_from_slurm, free_port, launched_externally

    if launched_externally():
        env_from_slurm(rdzv_endpoint)
        return {int(os.environ["RANK"]): fn(*args)}
    if not torch.cuda.is_available():
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    from trainer.bind import bound_stores, local_addr, loopback_comm_env

    endpoint = rdzv_endpoint or f"127.0.0.1:{free_port()}"
    loopback_comm_env(nnodes)
    lc = launch_config(nproc, nnodes, node_rank, endpoint, "plan-bench",
                       local_addr=local_addr(endpoint.rpartition(":")[0].strip("[]"), nnodes))
    with bound_stores():  # the rendezvous store listens on local_addr only (trainer/bind.py)
        return dict(elastic_launch(lc, fn)(*args))


def launch_config(nproc: int, nnodes: int, node_rank: int, endpoint: str, name: str, local_addr: str | None = None):
    """torch's elastic LaunchConfig for this node. One node: a c10d rendezvous on a free port.
    Several nodes: the static rendezvous (torchrun's --node-rank), so that node 0 holds global
    rank 0, which writes the result; a dynamic one numbers the nodes in the order they join."""
    from torch.distributed.launcher.api import LaunchConfig

    if nnodes == 1:
        return LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"{name}-{uuid.uuid4().hex[:8]}",
                            rdzv_backend="c10d", rdzv_endpoint=endpoint, max_restarts=0,
                            monitor_interval=0.1, start_method="spawn", local_addr=local_addr)
    return LaunchConfig(min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=nproc, run_id=name,
                        rdzv_backend="static", rdzv_endpoint=endpoint, rdzv_configs={"rank": node_rank},
                        max_restarts=0, monitor_interval=0.1, start_method="spawn", local_addr=local_addr)
