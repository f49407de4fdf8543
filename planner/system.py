"""`System`: the hardware one scenario runs on, resolved from the catalog and overrides."""

from __future__ import annotations

from pydantic import Field

from hardware.links import CollectiveLink
from hardware.models import GPU
from planner.scenario import Frozen


class System(Frozen):
    gpu: GPU
    cluster_id: str | None = None
    gpus: int = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    host_ram_gib: float = Field(gt=0, description="per node")
    host_to_gpu_gbps: float = Field(gt=0, description="per GPU, one direction")
    intranode_gbps: float = Field(gt=0, description="per GPU, one direction")
    internode_gbps: float = Field(gt=0, description="per node")
    # The cluster's internode_collective_efficiency (None: comm.INTERNODE_LINK_EFFICIENCY)
    internode_efficiency: float | None = Field(default=None, gt=0, le=1)
    # Measured bus bandwidths (from `plan allreduce-bench --json`), overriding the link
    # numbers above in the comm model when present.
    measured_intranode_busbw_gbps: float | None = None
    measured_internode_busbw_gbps: float | None = None
    # Which plateau above was inferred from what measurement (planner/network.py with_measured), for the
    # reports' header; not written out with the system
    measured_busbw_note: str | None = Field(default=None, exclude=True)
    # Collective busbw by message size inside a node / between nodes (catalog/links; None: the catalog's
    # for the GPU's intranode_link and the default network): planner/busbw_curve.py. Not written out
    # with the system (reports, --json): catalog data, named by the GPU and the cluster.
    intranode_link: CollectiveLink | None = Field(default=None, exclude=True)
    internode_link: CollectiveLink | None = Field(default=None, exclude=True)
    # The GPU's NVLink SHARP link (catalog/links; None: the catalog's for gpu.nvls_link, if it names one)
    nvls_link: CollectiveLink | None = Field(default=None, exclude=True)
    # The job runs with CUDA_LAUNCH_BLOCKING=1 (every kernel launch waits for its kernel; the
    # host's per-op time adds to the GPU's: planner/launch_sync.py)
    launch_blocking: bool = False
    # The DeepSpeed version the job ran ("0.3.17"), when stated: before 0.6 ZeRO-3 fetches block
    # the device and hide behind nothing (planner/deepspeed_era.py)
    deepspeed_version: str | None = None
    # Megatron-LM's local DDP: the gradient all-reduce follows backward (planner/megatron_ddp.py)
    ddp_after_backward: bool = False
    # Megatron-Core's overlapped DDP (--overlap-grad-reduce): its buckets, max(40M, 1M x dp) parameters
    # (planner/grad_buckets.py)
    megatron_core_buckets: bool = False
    # Bytes per gradient element the run's DP collectives carry where its framework fixes them (Megatron-LM
    # fp16: 2, planner/megatron_ddp.py); None: planner/dp_comm.py grad_bytes
    grad_reduce_bytes: float | None = None
    # Host RAM and GPU memory are one pool (an APU node, hardware.models.Cluster.unified_memory)
    unified_memory: bool = False

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)
