"""Run a function on N local ranks (times nnodes) with torch's elastic launch API, or in this
process when it already is a rank (torchrun / srun)."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable
from typing import Any


def run_on_ranks(fn: Callable[..., Any], args: tuple, nproc: int, nnodes: int = 1, node_rank: int = 0,
                 rdzv_endpoint: str | None = None) -> dict[int, Any]:
    """Results by global rank of `fn(*args)` (only this node's ranks)."""
    import torch

    from trainer.dist import env_from_slurm, launched_externally, rendezvous_line

    if launched_externally():
        port_from = env_from_slurm(rdzv_endpoint)
        if os.environ["RANK"] == "0":
            print(rendezvous_line(port_from), file=sys.stderr, flush=True)
        return {int(os.environ["RANK"]): fn(*args)}
    if not torch.cuda.is_available():
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from planner.errors import PlanError
    from trainer.launch import failures_line

    try:
        with _agent_logs_without_traceback():
            return elastic_run(fn, args, nproc, nnodes, node_rank, rdzv_endpoint, "plan-bench")
    except ChildFailedError as e:  # a rank raised or died: its message in one line, not torch's traceback and table
        raise PlanError("ranks", f"a rank failed: {failures_line(e.failures)}") from None


@contextlib.contextmanager
def _agent_logs_without_traceback():
    """torch's elastic agent logs a raising rank's whole traceback (multiprocessing/api.py: logger.exception "failed
    (exitcode: ...)"); its one line stays, the traceback goes: the launcher's own line says what the rank raised."""
    import logging

    def drop_traceback(record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True

    log = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    log.addFilter(drop_traceback)
    try:
        yield
    finally:
        log.removeFilter(drop_traceback)


def elastic_run(fn: Callable[..., Any], args: tuple, nproc: int, nnodes: int, node_rank: int,
                rdzv_endpoint: str | None, name: str) -> dict[int, Any]:
    """torch's elastic_launch of `fn(*args)` on this node's ranks, its rendezvous store listening on
    this node's address only (trainer/bind.py).

    No port is ever picked first and bound later (another process could take it in between):
    one node without an endpoint binds a port the OS picks when the store listens (torchrun
    --standalone's "localhost:0"); one node whose given port is held launches once more on an
    OS-picked port (its rendezvous is its own: the ranks learn the workers' store from it).
    Several nodes must meet at the agreed port: a held one is a one-line error naming it."""
    from torch.distributed.launcher.api import elastic_launch

    from planner.errors import PlanError
    from trainer.bind import PortInUse, bound_stores, check_store_host, local_addr, loopback_comm_env

    check_endpoint(rdzv_endpoint, nnodes)
    endpoint = rdzv_endpoint or "127.0.0.1:0"
    host = endpoint.rpartition(":")[0]
    check_store_host(host, nnodes, node_rank)
    loopback_comm_env(nnodes)
    while True:
        lc = launch_config(nproc, nnodes, node_rank, endpoint, name, local_addr=local_addr(host.strip("[]"), nnodes))
        try:
            with bound_stores():
                return dict(elastic_launch(lc, fn)(*args))
        except PortInUse as e:
            if nnodes > 1 or endpoint == f"{host}:0":
                raise PlanError("rdzv_endpoint", f"{endpoint}: port {e.port} is already in use on this node "
                                                 "(give every node a free port)") from None
            print(f"rendezvous {endpoint}: port in use; launching on a port the OS picks", file=sys.stderr)
            endpoint = f"{host}:0"


def check_endpoint(endpoint: str | None, nnodes: int) -> None:
    """A one-line error for a rendezvous the ranks could never meet at (each used to hang silently or end
    in torch's traceback): several nodes without an agreed port, a port out of range, a host that does
    not resolve here."""
    import socket

    from planner.errors import PlanError

    want = "HOST:PORT: node 0's address and a free port, the same on every node, e.g. node0:29500"
    host, sep, port = (endpoint or "").rpartition(":")
    if not sep:
        host, port = endpoint or "", ""
    if nnodes > 1 and (not endpoint or port in ("", "0")):
        raise PlanError("rdzv_endpoint", f"--nnodes {nnodes} needs --rdzv-endpoint {want}; got {endpoint or 'none'}")
    if endpoint is None:
        return
    if port and (not port.isdigit() or int(port) > 65535):
        raise PlanError("rdzv_endpoint", f"{endpoint}: the port must be a number from 0 to 65535; give {want}")
    host = host.strip("[]")
    if not host:
        raise PlanError("rdzv_endpoint", f"{endpoint}: the host is missing; give {want}")
    try:
        socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        raise PlanError("rdzv_endpoint", f"{endpoint}: no address found for host {host!r} on this node; give {want}") from None


def launch_config(nproc: int, nnodes: int, node_rank: int, endpoint: str, name: str, local_addr: str | None = None):
    """torch's elastic LaunchConfig for this node. One node: a c10d rendezvous at `endpoint`.
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
