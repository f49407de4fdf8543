"""DeepSeek-V3's memory-saving recipe as user settings (`plan estimate` flags, the fields of
`POST /estimate`, the `memory_recipe` of an estimate's JSON): checked here once, so the CLI and the HTTP
service refuse the same values with the same one-line error naming the field and what is allowed.

The physics is in planner/memory_savings.py (arXiv 2412.19437 sec. 3.2.3 and 3.3.2); Settings carries
the three switches to the model.
"""

from __future__ import annotations

from pydantic import Field

from planner.errors import PlanError
from planner.scenario import Frozen

FIELDS = ("recompute_norms_mla_up", "fp8_activation_cache", "optimizer_moments_bf16")


class MemoryRecipe(Frozen):
    """What a block keeps for backward and how wide AdamW's moments are (False: the stack's defaults)."""

    recompute_norms_mla_up: bool = Field(default=False, description=(
        "recompute the RMSNorms and MLA up-projections in backward instead of keeping their outputs "
        "(DeepSeek-V3 sec. 3.2.3; Megatron-Core --recompute-granularity selective --recompute-modules "
        "layernorm mla_up_proj); the up-projections' forward GEMMs run again"))
    fp8_activation_cache: bool = Field(default=False, description=(
        "fp8 plans: keep the linear layers' inputs in FP8, o_proj's in E5M6 and the SwiGLU inputs in FP8, "
        "recomputing SwiGLU's output (DeepSeek-V3 sec. 3.3.2)"))
    optimizer_moments_bf16: bool = Field(default=False, description=(
        "AdamW's first and second moments in BF16, masters and gradients in FP32 (DeepSeek-V3 sec. 3.3.2; "
        "Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)"))

    @property
    def given(self) -> list[str]:
        """The switches turned on."""
        return [k for k in FIELDS if getattr(self, k)]

    def check_scenario(self, scenario) -> None:
        """FP8 activation caching acts on fp8 plans only: asking for it with another number format pinned
        is bad input, not a silent no-op (precision left to the planner: it applies to the fp8 plans)."""
        if self.fp8_activation_cache and scenario.precision not in (None, "fp8"):
            raise PlanError("fp8_activation_cache", f"needs fp8 plans, the scenario's precision is "
                            f"{scenario.precision!r} (allowed: only with --precision fp8, or precision left to the planner)")

    def settings(self, settings=None):
        """`settings` (default Settings()) with these switches."""
        from planner.settings import Settings

        return (settings or Settings()).model_copy(update=self.model_dump())

    @classmethod
    def of(cls, settings) -> "MemoryRecipe":
        return cls(**{k: getattr(settings, k) for k in FIELDS})
