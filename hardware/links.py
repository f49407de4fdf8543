"""Collective bus bandwidth by message size, as catalog data: catalog/links/<id>.toml -> `CollectiveLink`.

A link file holds one measured all-reduce sweep (nccl-tests or a PyTorch benchmark with the same
busbw definition, NVIDIA/nccl-tests doc/PERFORMANCE.md) as shares of its own plateau, each point
with its citation, and the ranks and nodes it was measured on; the planner reads it at the
per-step chunk of a ring (planner/busbw_curve.py), so one sweep serves links of other speeds and
groups of other sizes. An inter-node link also holds the per-step latencies NCCL's own tuning model
gives its ring and tree algorithms, which set how a collective slows as it spans more nodes.
GPUs name their intra-node link (`GPU.intranode_link`), clusters their inter-node one
(`Cluster.internode_link`). Knows nothing of the planner.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BusbwPoint(_Entry):
    """One measured size of the sweep: busbw there as a share of the sweep's plateau."""

    message_bytes: float = Field(gt=0, description="all-reduce buffer, bytes (nccl-tests 'size')")
    fraction: float = Field(gt=0, le=1, description="busbw at this size / plateau_busbw_gbytes_per_s")
    source: str = Field(min_length=1)


class NvlsShare(_Entry):
    """NVLS all-reduce busbw plateau of a group of `ranks` GPUs in one node, as a share of a GPU's line rate."""

    ranks: int = Field(ge=2)
    share: float = Field(gt=0, le=2, description="busbw / the GPU's intranode line rate")
    source: str = Field(min_length=1)


class CollectiveLink(_Entry):
    id: str
    name: str
    scope: Literal["intranode", "internode"]
    # "nvls": NVLink SHARP all-reduce inside a node (GPU.nvls_link; planner/nvls.py), read at the wire time
    algorithm: Literal["ring", "nvls"] = "ring"
    ranks: int = Field(ge=2, description="GPUs of the measured all-reduce")
    nodes: int = Field(ge=1, description="nodes they sat on")
    plateau_busbw_gbytes_per_s: float = Field(gt=0, description="the sweep's busbw at its largest sizes")
    busbw_efficiency: list[BusbwPoint] = Field(min_length=2)
    # Per-step latency of NCCL's ring (Simple protocol) on this link, us (NCCL src/graph/tuning.cc hwLat):
    # weighs a ring's steps over this link against the others of the measured sweep.
    ring_step_latency_us: float = Field(gt=0)
    # NCCL's tree all-reduce across nodes (tuning.cc, LL128): latency per intra-node and per inter-node
    # step, 2((GPUs per node - 1) x intra + log2(nodes) x inter). Inter-node links only.
    tree_intranode_step_us: float | None = Field(default=None, ge=0, validate_default=True)
    tree_internode_step_us: float | None = Field(default=None, ge=0, validate_default=True)
    # NVLS only: busbw plateau by group size, as shares of the GPU's line rate; groups smaller than the first
    # entry run the ring (NVLS measured no faster there), larger than the last read the last.
    nvls_busbw_share: list[NvlsShare] = Field(default_factory=list, validate_default=True)
    source: str

    @field_validator("nvls_busbw_share")
    @classmethod
    def _nvls_table(cls, points: list[NvlsShare], info: ValidationInfo) -> list[NvlsShare]:
        if info.data.get("algorithm") == "nvls":
            if info.data.get("scope") != "intranode":
                raise ValueError("an nvls link is an intranode one (NVLink SHARP reduces in the node's NVSwitch)")
            if not points:
                raise ValueError("an nvls link needs its busbw plateau by group size (nvls_busbw_share)")
        elif points:
            raise ValueError("only an algorithm = \"nvls\" link has nvls_busbw_share")
        ranks = [p.ranks for p in points]
        if any(b <= a for a, b in zip(ranks, ranks[1:])):
            raise ValueError("ranks must increase from entry to entry")
        return points

    @field_validator("busbw_efficiency")
    @classmethod
    def _ordered(cls, points: list[BusbwPoint]) -> list[BusbwPoint]:
        sizes = [p.message_bytes for p in points]
        if any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError("message_bytes must increase from point to point")
        shares = [p.fraction for p in points]
        if any(b < a for a, b in zip(shares, shares[1:])):
            raise ValueError("fraction must not fall as messages grow (busbw rises to its plateau)")
        # busbw = bytes / time: a share growing faster than the size would mean a bigger call taking less time
        pairs = zip(zip(sizes, shares), zip(sizes[1:], shares[1:]))
        if any(fb / fa > sb / sa * (1 + 1e-6) for (sa, fa), (sb, fb) in pairs):
            raise ValueError("fraction must not grow faster than message_bytes (a bigger call never takes less time)")
        return points

    @field_validator("tree_intranode_step_us", "tree_internode_step_us")
    @classmethod
    def _tree_across_nodes(cls, value, info: ValidationInfo):
        if value is None and info.data.get("scope") == "internode":
            raise ValueError("an internode link needs NCCL's tree step latencies (tree_intranode_step_us, "
                             "tree_internode_step_us)")
        return value


__all__ = ["BusbwPoint", "CollectiveLink", "NvlsShare"]
