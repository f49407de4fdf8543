"""The mixture-of-experts settings a user gives (`plan estimate` / `plan export` flags, the fields of
`POST /estimate`, the `moe_settings` of an estimate's JSON): checked here once, so that the CLI and the
HTTP service refuse the same values with the same one-line error naming the field and what is allowed.

The physics of each setting is in planner/moe_time.py (capacity factor, FP8 dispatch, node-limited
routing) and planner/moe_overlap.py (the two all-to-all overlaps); Settings carries them to the model.
"""

from __future__ import annotations

import math

from pydantic import Field

from planner.errors import PlanError
from planner.scenario import Frozen

FIELDS = ("moe_capacity_factor", "moe_fp8_dispatch", "moe_node_limit", "moe_a2a_overlap", "moe_shared_expert_overlap")


class MoeOptions(Frozen):
    """How the experts' tokens are routed and sent (None / False: Megatron-Core's defaults)."""

    moe_capacity_factor: float | None = Field(default=None, description=(
        "pad every expert's tokens to this x the mean, dropping the rest (GShard / Switch Transformer; Megatron "
        "--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity); None: dropless, the busiest "
        "expert rank at 1.25 x the mean"))
    moe_fp8_dispatch: bool = Field(default=False, description="dispatch the tokens to the experts in FP8 "
                                   "(DeepEP, DeepSeek-V3 sec. 3.3.2), combine in BF16")
    moe_node_limit: int | None = Field(default=None, description="node-limited routing: each token to at most "
                                       "this many nodes, sent once per node (DeepSeek-V3 sec. 3.2.2, DeepEP)")
    moe_a2a_overlap: bool = Field(default=False, description="hide the expert all-to-all behind another micro "
                                  "batch's compute (Megatron-Core --overlap-moe-expert-parallel-comm)")
    moe_shared_expert_overlap: bool = Field(default=False, description="hide the expert all-to-all behind the "
                                            "shared experts' GEMMs (Megatron-Core --moe-shared-expert-overlap)")

    @property
    def given(self) -> list[str]:
        """The fields set away from their defaults."""
        return [k for k in FIELDS if getattr(self, k) not in (None, False)]

    def checked(self) -> "MoeOptions":
        """Self, or a PlanError naming the first bad field and what is allowed."""
        c = self.moe_capacity_factor
        if c is not None and not (math.isfinite(c) and c > 0):
            raise PlanError("moe_capacity_factor", f"{c:g} is not allowed (allowed: a number > 0, x the mean tokens "
                            "per expert, e.g. 1.0-2.0 as in Switch Transformer; leave it out for dropless routing)")
        n = self.moe_node_limit
        if n is not None and n < 1:
            raise PlanError("moe_node_limit", f"{n} is not allowed (allowed: an integer >= 1, the nodes a token "
                            "may be sent to, e.g. 4 as in DeepSeek-V3; leave it out for no limit)")
        if self.moe_a2a_overlap and self.moe_shared_expert_overlap:
            raise PlanError("moe_shared_expert_overlap", "cannot be set with --moe-a2a-overlap (Megatron-Core: "
                            "'disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm'); "
                            "allowed: one of the two overlaps")
        return self

    def check_model(self, spec) -> None:
        """A dense model takes none of these settings: naming one is bad input, not a no-op."""
        from planner import moe

        if self.given and not moe.is_moe(spec):
            raise PlanError(self.given[0], f"{spec.name} has no experts (allowed: only with a mixture-of-experts "
                            "model, e.g. --model mixtral-8x7b)")

    def settings(self, settings=None):
        """`settings` (default Settings()) with these MoE settings."""
        from planner.settings import Settings

        return (settings or Settings()).model_copy(update=self.model_dump())

    @classmethod
    def of(cls, settings) -> "MoeOptions":
        return cls(**{k: getattr(settings, k) for k in FIELDS})
