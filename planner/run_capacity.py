"""A runs file's capacity factor (the `capacity_factor` column or its spellings, or the notes: planner/run_moe.py
facts_of) applied to that row's prediction: the row says how its experts were loaded, so it replaces the settings'
moe_capacity_factor for that row (planner/moe_time.py load_factor: the busiest expert rank's rows over the mean).

- Padded to capacity (GShard, Lepikhin et al. 2020, and Switch Transformer, Fedus et al. 2022, sec. 2.2: expert
  capacity = c x tokens x top-k / experts; DeepSpeed-MoE's gating, deepspeed/moe/sharded_moe.py, dispatches into an
  [experts, capacity, model] buffer; Megatron-Core with --moe-pad-expert-input-to-capacity): every expert runs
  c x the mean rows: load c.
- Megatron-Core without padding (stack megatron and no "pad" in the row: megatron/training/arguments.py
  --moe-pad-expert-input-to-capacity is off by default): tokens past capacity are dropped, none are added: the
  busiest rank runs min(c, the dropless imbalance) x the mean.
So a padded c = 1.25 predicts exactly the dropless row (the planner's dropless busiest rank is Switch's 1.25 x the
mean), a larger c slower and with more memory for the routed tokens, a smaller one faster.
"""

from __future__ import annotations

from planner import moe, run_moe
from planner.moe_time import LOAD_IMBALANCE


def capacity_of(row, spec, stack: str, notes: list[str]) -> float | None:
    """The load factor the row's capacity factor gives (None: not stated, or a dense model)."""
    c = run_moe.facts_of(row).capacity_factor if moe.is_moe(spec) else None
    if c is None:
        return None
    if c <= 0:
        from planner.errors import PlanError

        raise PlanError("capacity_factor", f"row {row.get('id')}: {c:g} is not allowed (allowed: a number > 0)")
    text = " ".join(str(v) for v in row.values() if v).lower()
    if stack == "megatron" and "pad" not in text:
        load = min(c, LOAD_IMBALANCE)
        notes.append(f"capacity factor {c:g} without padding (Megatron-Core's default): the busiest expert rank at "
                     f"min({c:g}, dropless {LOAD_IMBALANCE:g}) = {load:g} x the mean")
        return load
    notes.append(f"capacity factor {c:g}: every expert padded to {c:g} x the mean tokens")
    return c


def settings_for(run, settings):
    """`settings` with the run's capacity factor, where its row states one."""
    c = getattr(run, "moe_capacity_factor", None)
    return settings if c is None else settings.model_copy(update={"moe_capacity_factor": c})
