"""Which ranks share a node: by the node each rank says it runs on, never by rank arithmetic.

Consecutive ranks need not share a node: `srun --distribution=cyclic` deals tasks round robin over the nodes (srun(1),
-m/--distribution: "cyclic ... distributes tasks to a node such that consecutive tasks are distributed over consecutive
nodes"), and a step may hold different numbers of tasks per node (SLURM_STEP_TASKS_PER_NODE "3,2(x2)").
"""

from __future__ import annotations

import os
import socket

from planner.errors import PlanError


def node_key(env=None, host: str | None = None) -> str:
    """This process's node: its host name, and the launcher's node number where one set it (torch's elastic agent:
    GROUP_RANK, the agent's rank among the nodes; srun: SLURM_NODEID), so that two agents on one machine (a test, or
    two torchruns sharing a host) are two nodes as their launchers made them."""
    env = os.environ if env is None else env
    host = socket.gethostname() if host is None else host
    node = env.get("GROUP_RANK") or env.get("SLURM_NODEID")
    return f"{host}#{node}" if node not in (None, "") else host


def node_groups(keys: list[str]) -> list[list[int]]:
    """Global ranks by node (`keys[r]`: rank r's node_key), nodes in the order of their lowest rank. Nodes holding
    different numbers of ranks are refused: a per-node figure (the intranode all-reduce, ranks per node) would mix
    group sizes."""
    groups: dict[str, list[int]] = {}
    for rank, key in enumerate(keys):
        groups.setdefault(key, []).append(rank)
    sizes = {len(g) for g in groups.values()}
    if len(sizes) > 1:
        counts = ", ".join(f"{_label(k)}: {len(g)}" for k, g in list(groups.items())[:8])
        raise PlanError("nproc", f"the nodes hold different numbers of ranks ({counts}{', ...' if len(groups) > 8 else ''}): "
                        "start the same number of ranks (one per GPU) on every node")
    return list(groups.values())


def _label(key: str) -> str:
    host, _, node = key.partition("#")
    return f"{host} (node {node})" if node else host


def gathered_node_groups() -> list[list[int]]:
    """node_groups over every rank of the default process group (all_gather_object: every rank calls this)."""
    import torch.distributed as dist

    keys: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(keys, node_key())
    return node_groups([str(k) for k in keys])
