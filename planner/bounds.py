"""Upper bounds of the planner's inputs (scenario, plan, settings, `plan estimate`'s own options), one list, each
with the reason its error gives (planner/units.at_most: "at most 1,024, got 4,096: ..."), as `plan tune`'s
(tuner/config.py) do; a bare `le=` said only "Input should be less than or equal to 1024".

Each bound is what a user could mean, not a limit of the math: a value past it is a typo or a unit slip.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from planner.errors import PlanError
from planner.units import at_most

_GROUP = "GPUs in one group: no machine's fast link joins more"
TP = at_most(1024, "tensor-parallel " + _GROUP)
CP = at_most(1024, "context-parallel " + _GROUP)
ETP = at_most(1024, "expert tensor-parallel " + _GROUP)
PP = at_most(10_000, "pipeline stages: more than any model's blocks")
VPP = at_most(1000, "virtual stages per GPU: more than any model's blocks")
STAGE_LAYERS = at_most(100_000, "blocks on one stage: more than any model has")
EP = at_most(100_000, "expert-parallel GPUs: more than any model's experts")
HPZ = at_most(1024, "ZeRO++ hpZ keeps its copy inside one node, and no node has more GPUs")
CHECKPOINT_FRACTION = at_most(1, "a share of the blocks (1: all of them)")
MICRO_BATCH = at_most(1_000_000, "sequences per GPU per pass: no GPU holds their activations")
GRAD_ACCUM = at_most(1_000_000, "micro batches per optimizer step: far beyond any run's batch")
# ModelSpec.max_positions' bound (planner/model.py): 1e9 was taken and the trainer built 1e9 positions
SEQ_LEN = at_most(100_000_000, "tokens per sequence: longer than any model's trained context")
ATTN_WINDOW = at_most(100_000_000, "keys each query sees: longer than any model's context")
ATTN_LAYERS = at_most(10_000, "layers: more than any model has")
GPUS = at_most(1_000_000, "GPUs in one job: more than any cluster holds")
GPUS_PER_NODE = at_most(1024, "GPUs per node: no node holds more")
GLOBAL_BATCH = at_most(1_000_000_000, "sequences per optimizer step: far beyond any run's batch")
GLOBAL_BATCH_TOKENS = at_most(1e12, "tokens per optimizer step: far beyond any run's batch (4M is common)",
                              "1T (1e12)")
TOKENS = at_most(1e16, "tokens to train: a thousand times the largest runs' (write 1T, 15T)", "10,000T (1e16)")
PRICE = at_most(1e6, "the price of one GPU-hour: dollars, not cents (e.g. 2.5)", "1,000,000")
# 1e7 stands for an unlimited network in tests/planner/test_network_need.py
INTERNODE_GBPS = at_most(1e8, "Gbit/s per node: far beyond any network (400-3,200 Gbps today); write Gbit/s, "
                              "not bit/s", "100,000,000 Gbps", " Gbps")
RUNTIME_OVERHEAD_GIB = at_most(1024, "GiB of CUDA context and workspaces per GPU: more than any GPU's memory",
                               "1,024 GiB", " GiB")
WITHIN_DAYS = at_most(36_500, "days: a hundred years", "36,500")
# plan tune --infeasible-margin: a memory miss this fraction over the GPU's memory still launched (1: twice it)
INFEASIBLE_MARGIN = at_most(1.0, "a plan predicted to need over twice the GPU's memory will not run; "
                                 "--explore-infeasible launches every plan", "1 (100% over)")

WithinDays = Annotated[float, Field(ge=0.001, allow_inf_nan=False), WITHIN_DAYS]
InfeasibleMargin = Annotated[float, Field(ge=0, allow_inf_nan=False), INFEASIBLE_MARGIN]


def checked(field: str, value: Any, kind: Any) -> Any:
    """`value` through the bounded type `kind`, or the PlanError naming `field` with the bound's own line
    (for a CLI option that is no model's field)."""
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as e:
        raise PlanError(field, e.errors()[0]["msg"]) from None


def model_size(limit: int):
    """A ModelSpec dimension's bound (planner/model.py): far beyond any real model, it keeps nonsense input (a
    config.json's 1e12 layers) from exhausting memory."""
    return at_most(limit, "far beyond any real model's (a typo, or a unit slip?)")
