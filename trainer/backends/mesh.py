"""The device mesh of a tensor/pipeline-parallel run: (pp, dp, tp), tp innermost (torchtitan's order).

Ranks that differ only in their tp index are neighbours (same node first), the pipeline is the
outermost dimension. The data-parallel part is split into (replicate, shard) for fsdp_hybrid:
replicate across nodes, shard within one (two groups on a single node).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass
class ParallelMesh:
    """The (pp, dp_replicate, dp_shard, tp) mesh of this run and this rank's place in it."""

    mesh: DeviceMesh
    pp: int
    dp: int
    tp: int
    hybrid_replicate: int = 1  # fsdp_hybrid: replica groups of the dp dimension
    _dp_flat: DeviceMesh | None = None  # dp_replicate x dp_shard flattened (built once)

    @classmethod
    def build(cls, cfg, device_type: str) -> "ParallelMesh":
        world = dist.get_world_size()
        dp = world // (cfg.plan.tp * cfg.plan.pp)
        replicate = 1
        if cfg.plan.sharding == "fsdp_hybrid":
            replicate = cfg.launch.nnodes if cfg.launch.nnodes > 1 and dp % cfg.launch.nnodes == 0 else 2
        shape = (cfg.plan.pp, replicate, dp // replicate, cfg.plan.tp)
        mesh = init_device_mesh(device_type, shape, mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))
        out = cls(mesh=mesh, pp=cfg.plan.pp, dp=dp, tp=cfg.plan.tp, hybrid_replicate=replicate)
        out._dp_flat = mesh["dp_replicate", "dp_shard"]._flatten("dp")
        return out

    @property
    def tp_mesh(self) -> DeviceMesh:
        return self.mesh["tp"]

    @property
    def pp_group(self):
        return self.mesh["pp"].get_group()

    def dp_mesh(self) -> DeviceMesh:
        """The mesh FSDP2 shards over: 1-D (dp), or 2-D (replicate, shard) for hybrid sharding."""
        if self.hybrid_replicate > 1:
            return self.mesh["dp_replicate", "dp_shard"]
        return self._dp_flat

    @property
    def pp_rank(self) -> int:
        return self.mesh["pp"].get_local_rank()

    @property
    def tp_rank(self) -> int:
        return self.mesh["tp"].get_local_rank()

    @property
    def dp_rank(self) -> int:
        return self.mesh["dp_replicate"].get_local_rank() * (self.dp // self.hybrid_replicate) + \
            self.mesh["dp_shard"].get_local_rank()

    @property
    def dp_group(self):
        return self._dp_flat.get_group()

    def coords(self) -> dict:
        return {"pp_rank": self.pp_rank, "dp_rank": self.dp_rank, "tp_rank": self.tp_rank}


def gather_on_rank0(obj: dict) -> list[dict] | None:
    """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
    out = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def rank_memory(state: dict, saved_bytes: int) -> dict:
    return {"rank": dist.get_rank(), "params_bytes": state.get("params_bytes", 0),
            "grads_bytes": state.get("grads_bytes", 0), "optimizer_bytes": state.get("optimizer_bytes", 0),
            "saved_activations_bytes": int(saved_bytes)}
