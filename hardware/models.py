"""System inputs: GPUs and clusters (node type + network), as frozen pydantic models.

Units are in the key names. Bandwidths in Gbps are 1e9 bits/s; memory sizes in GiB (2^30 B).
Knows nothing of the planner.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from hardware.errors import unknown_id
from hardware.fp8 import FP8Recipe
from hardware.links import CollectiveLink
from hardware.stacks import StackProfile


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EfficiencyPoint(_Entry):
    """Achievable fraction of peak matmul throughput at a GEMM size.

    `flops` is the size of one GEMM (2*m*n*k); the fraction is interpolated in log(flops).
    """

    gemm_gflop: float = Field(gt=0)
    fraction: float = Field(gt=0, le=1)


class AttentionPoint(_Entry):
    """Achieved share of the 16-bit dense peak of the fused attention kernel (forward +
    backward, causal, head dim 128, FLOPs counted as the kernel does: causal halves them) at a
    sequence length; interpolated in log(seq_len)."""

    seq_len: int = Field(gt=0)
    fraction: float = Field(gt=0, le=1)


class GemmTile(_Entry):
    """A thread-block tile cuBLAS runs a GEMM's output in (NVIDIA 'Matrix Multiplication
    Background' guide sec. 2.3), with its throughput relative to the GPU's best tile."""

    m: int = Field(gt=0)
    n: int = Field(gt=0)
    relative_throughput: float = Field(default=1.0, gt=0, le=1)


class GPU(_Entry):
    id: str
    name: str
    vendor: str
    hbm_gib: float = Field(gt=0)
    hbm_gbytes_per_s: float = Field(gt=0)
    fp32_tflops: float = Field(gt=0)
    tf32_tflops: float | None = Field(default=None, gt=0)
    fp16_tflops: float = Field(gt=0)
    bf16_tflops: float | None = Field(default=None, gt=0)  # None: no bf16 tensor cores (V100)
    fp8_tflops: float | None = Field(default=None, gt=0)
    intranode_gbps: float = Field(gt=0, description="per-GPU, one direction (NVLink/xGMI)")
    # Share of intranode_gbps (the line rate) that collectives reach as bus bandwidth. Unset: the
    # NVLink figure of planner/comm.py (INTRANODE_LINK_EFFICIENCY). xGMI loses more to CRC and
    # protocol (RCCL models a gfx942 link at 48 of 64 GB/s, src/graph/topo.h ncclTopoXGMISpeed).
    intranode_collective_efficiency: float | None = Field(
        default=None, gt=0, le=1, description="share of intranode_gbps collectives reach (bus bandwidth)")
    # Share of hbm_gbytes_per_s that streaming kernels reach (STREAM/BabelStream triad). Unset: the
    # planner's default (planner/throughput.py HBM_EFFICIENCY), which the stack profiles were fitted with.
    hbm_efficiency: float | None = Field(default=None, gt=0, le=1, description="measured share of HBM peak")
    package: str | None = Field(default=None, description="what the framework sees vs what is sold")
    devices_per_package: int = Field(default=1, gt=0)
    # Achievable matmul efficiency by GEMM size (data, calibrated by measurement).
    matmul_efficiency: list[EfficiencyPoint] = Field(default_factory=list)
    # Fused attention (FlashAttention-2 class) efficiency by sequence length (kernel benchmarks).
    attention_efficiency: list[AttentionPoint] = Field(default_factory=list)
    # cuDNN fused attention (Transformer Engine on Hopper; planner/attention_kernel.py), same units.
    cudnn_attention_efficiency: list[AttentionPoint] = Field(default_factory=list)
    # GEMM shape effects (planner/gemm_shape.py): streaming multiprocessors, cuBLAS tiles, the K
    # step in bytes. No sm_count: no tile/wave quantization modelled for this GPU.
    sm_count: int | None = Field(default=None, gt=0)
    gemm_tiles: list[GemmTile] = Field(default_factory=list)
    gemm_k_step_bytes: int = Field(default=128, gt=0)
    # ROCm: the part's LLVM target (torch's gcnArchName before its ":" features, e.g. gfx942) and the compute units
    # one device of it has (torch's multi_processor_count): which part a device is when its driver gives no name
    # (hardware/gpu_names.py match_rocm_arch). Data, not a model input: nothing in the planner reads them.
    gcn_arch: str | None = Field(default=None, pattern=r"^gfx[0-9a-f]+$")
    compute_units: int | None = Field(default=None, gt=0)
    # Its GPUs' link inside a node: a catalog/links/<id>.toml sweep of collective busbw by message size
    # (hardware/links.py; planner/busbw_curve.py).
    intranode_link: str = Field(default="nvlink", min_length=1)
    # Its nodes' NVSwitches reduce in the fabric (NVLink SHARP): a catalog/links/<id>.toml with
    # algorithm = "nvls" (planner/nvls.py); None: all-reduce inside a node runs the ring only.
    nvls_link: str | None = Field(default=None, min_length=1)
    # Fused attention kernels the GPU can run (planner/scenario.py Attention: flash, flash2, cudnn, triton,
    # eager). Unset: all of them. V100 (sm70) has no FlashAttention-2 and no cuDNN fused flash attention.
    attention_kernels: list[str] | None = Field(default=None, min_length=1)
    source: str

    @field_validator("attention_kernels")
    @classmethod
    def _known_kernels(cls, v: list[str] | None) -> list[str] | None:
        known = ("flash", "flash2", "cudnn", "triton", "eager")
        if v is not None and (bad := [x for x in v if x not in known]):
            raise ValueError(f"unknown attention kernels {bad} (known: {', '.join(known)})")
        return v

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for a training precision (bf16/fp16 mixed use the 16-bit tensor cores)."""
        if precision in ("bf16", "bf16_pure"):
            if self.bf16_tflops is None:
                raise ValueError(f"{self.id} has no bf16 support")
            return self.bf16_tflops
        if precision == "fp16":
            return self.fp16_tflops
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "tf32":
            return self.tf32_tflops or self.fp32_tflops
        if precision == "fp8":
            if self.fp8_tflops is None:
                raise ValueError(f"{self.id} has no fp8 support")
            return self.fp8_tflops
        raise ValueError(f"unknown precision {precision!r}")

    @property
    def supports_fp8(self) -> bool:
        """True iff the GPU has fp8 tensor cores (the catalog gives an fp8 peak)."""
        return self.fp8_tflops is not None


class Cluster(_Entry):
    """A node type and the network between nodes (a DGX box, or a named machine's partition)."""

    id: str
    name: str
    gpu: str
    gpus_per_node: int = Field(gt=0)
    host_ram_gib: float = Field(gt=0, description="per node")
    host_to_gpu_gbps: float = Field(gt=0, description="per GPU, one direction (PCIe or C2C)")
    internode_gbps: float = Field(gt=0, description="per node, injection bandwidth")
    # Share of internode_gbps that NCCL collectives reach as bus bandwidth on this fabric. Unset:
    # the InfiniBand/RoCE figure of planner/comm.py (INTERNODE_LINK_EFFICIENCY). A fabric NCCL
    # drives through a slow path (Omni-Path: verbs, no PSM2 transport in NCCL) sets its own.
    internode_collective_efficiency: float | None = Field(
        default=None, gt=0, le=1, description="share of internode_gbps NCCL collectives reach (bus bandwidth)")
    intranode_gbps: float | None = Field(default=None, gt=0, description="override of the GPU's")
    # GPUs that share the fast GPU fabric (NVLink/NVSwitch, xGMI) at `intranode_gbps`. Unset: one
    # node (gpus_per_node). A GB200 NVL72 rack is 18 nodes of 4 GPUs (a node = a compute tray:
    # its host RAM, CPUs and NICs) in one 72-GPU NVLink domain.
    nvlink_domain_gpus: int | None = Field(
        default=None, gt=0, description="GPUs sharing the fast GPU fabric (default: gpus_per_node)")
    cpu_cores_per_node: int | None = Field(default=None, gt=0)
    # One memory for CPU and GPU (an APU node: El Capitan's MI300A): host_ram_gib IS the GPUs' HBM, so
    # offloading states or activations to "host" frees nothing (the planner refuses it there).
    unified_memory: bool = False
    nodes: int | None = Field(default=None, gt=0, description="nodes available, if known")
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
    # The network between nodes: a catalog/links/<id>.toml sweep of collective busbw by message size.
    internode_link: str = Field(default="infiniband", min_length=1)
    source: str

    @field_validator("nvlink_domain_gpus")
    @classmethod
    def _whole_nodes(cls, value: int | None, info: ValidationInfo) -> int | None:
        per_node = info.data.get("gpus_per_node")
        if value is not None and per_node and value % per_node:
            raise ValueError(f"must be a multiple of gpus_per_node ({per_node}): whole nodes share the fabric")
        return value

    @property
    def nvlink_domain(self) -> int:
        """GPUs that share the fast GPU fabric: nvlink_domain_gpus, else one node."""
        return self.nvlink_domain_gpus or self.gpus_per_node


class ModelTable(_Entry):
    """A model preset as read from catalog/models/<id>.toml: validated by the planner (which
    owns ModelSpec), since hardware/ must not import the planner."""

    path: str
    data: dict[str, Any]


class Catalog(_Entry):
    gpus: dict[str, GPU]
    clusters: dict[str, Cluster]
    models: dict[str, ModelTable] = Field(default_factory=dict)
    stacks: dict[str, StackProfile] = Field(default_factory=dict)
    fp8_recipes: dict[str, FP8Recipe] = Field(default_factory=dict)
    links: dict[str, CollectiveLink] = Field(default_factory=dict)
    # "gpus/<id>" -> the file the entry came from (after user overrides)
    paths: dict[str, str] = Field(default_factory=dict)

    def gpu(self, gpu_id: str) -> GPU:
        """The GPU with this id; CatalogError with close-name suggestions if unknown."""
        found = self.gpus.get(gpu_id) or self.gpus.get(gpu_id.lower())
        if found is None:
            raise unknown_id("gpu", gpu_id, self.gpus)
        return found

    def cluster(self, cluster_id: str) -> Cluster:
        """The cluster with this id; CatalogError with close-name suggestions if unknown."""
        found = self.clusters.get(cluster_id) or self.clusters.get(cluster_id.lower())
        if found is None:
            raise unknown_id("cluster", cluster_id, self.clusters)
        return found

    def cluster_gpu(self, cluster_id: str) -> GPU:
        return self.gpu(self.cluster(cluster_id).gpu)
