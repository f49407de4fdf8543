"""`Settings`: the planner's tunable assumptions (margins, overheads, calibration)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from hardware.fp8 import FP8Recipe
from hardware.stacks import StackProfile
from planner import bounds as B
from planner.scenario import Frozen


class Calibration(Frozen):
    """Multiplicative corrections fitted from measured runs (written by the tuner).

    `compute` scales achievable matmul throughput, `network` scales achievable bus bandwidth.
    """

    compute: float = Field(default=1.0, gt=0)
    network: float = Field(default=1.0, gt=0)
    source: str = "default"


class Settings(Frozen):
    model_config = ConfigDict(allow_inf_nan=False)  # an inf or NaN input is bad input, not a NaN plan

    # Memory: a fraction of HBM the caching allocator loses to fragmentation (None: the stack
    # profile's allocator model), and the fixed per-GPU cost of the CUDA context, cuBLAS/NCCL
    # workspaces and the framework, outside PyTorch's caching allocator (nvidia-smi counts it,
    # torch.cuda.memory_reserved does not): BLOOM's prequel measured 1573 MiB on an A100 for
    # the context alone (`torch.ones(1).cuda()`, bigscience tr11-176B-ml/chronicles-prequel.md).
    fragmentation_margin: float | None = Field(default=None, ge=0, lt=1)
    runtime_overhead_gib: Annotated[float, B.RUNTIME_OVERHEAD_GIB] = Field(default=1.5, ge=0)
    # Host RAM per node taken by the OS, the data loader and the Python processes per rank.
    host_overhead_gib_per_rank: float = Field(default=4.0, ge=0)
    calibration: Calibration = Calibration()
    # Stack profiles by id (None: the catalog's, catalog/stacks/*.toml).
    stacks: dict[str, StackProfile] | None = None
    # fp8 recipes by id (None: the catalog's, catalog/fp8_recipes/*.toml).
    fp8_recipes: dict[str, FP8Recipe] | None = None
    # Mixture-of-experts routing (planner/moe_time.py load_factor): a capacity factor pads every
    # expert's tokens to capacity_factor x the mean (None: dropless, the busiest rank's imbalance);
    # fp8 dispatch sends the tokens' hidden states to the experts in FP8 (DeepEP), combines in BF16.
    moe_capacity_factor: float | None = Field(default=None, gt=0)
    moe_fp8_dispatch: bool = False
    # node-limited routing with hierarchical dispatch (DeepSeek-V3; DeepEP's normal kernels): each token
    # goes to at most this many nodes, once per node over the NICs, forwarded inside it over NVLink
    moe_node_limit: int | None = Field(default=None, ge=1)
    # the expert all-to-all hidden behind compute (planner/moe_overlap.py): batch-level 1F1B overlap
    # (Megatron-Core --overlap-moe-expert-parallel-comm, DeepSeek-V3's DualPipe), or behind the shared
    # experts' GEMMs (--moe-shared-expert-overlap); off: fully exposed
    moe_a2a_overlap: bool = False
    moe_shared_expert_overlap: bool = False
    # DeepSeek-V3's memory savings (planner/memory_savings.py, arXiv 2412.19437 sec. 3.2.3 and 3.3.2):
    # recompute the RMSNorms and MLA up-projections in backward; cache linear inputs in FP8 (fp8 plans);
    # AdamW moments in BF16 (masters and gradients stay FP32)
    recompute_norms_mla_up: bool = False
    fp8_activation_cache: bool = False
    optimizer_moments_bf16: bool = False
    # What to train and what it costs (for days / GPU-hours / cost columns).
    tokens: float | None = Field(default=None, gt=0)
    price_per_gpu_hour: float | None = Field(default=None, ge=0)


def stack_profiles(settings: Settings) -> dict[str, StackProfile]:
    """The settings' stack profiles, or the built-in catalog's."""
    if settings.stacks is not None:
        return settings.stacks
    from hardware.catalog import load_catalog

    return load_catalog().stacks


def with_catalog(settings: Settings) -> Settings:
    """`settings` with the catalog's stack profiles and fp8 recipes filled in where unset, read once: for a
    loop over many single plans (validate, the profile fit), as `load_catalog` stats every file per call."""
    from planner import fp8

    return settings.model_copy(update={"stacks": stack_profiles(settings), "fp8_recipes": fp8.recipes(settings)})
