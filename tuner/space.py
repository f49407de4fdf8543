"""The search space: the planner's knobs for one model and machine, as Optuna parameters.

Parameter names are the knob names of planner/scenario.py. A configuration is a dict
knob -> value; its `config_key` is the canonical string used to dedupe trials across workers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from planner.errors import PlanError, unknown
from planner.scenario import CHECKPOINTINGS, OFFLOADS, PRECISIONS, SHARDINGS, ExecutionPlan

# The knobs the trainer takes on its command line, in the order they are shown.
TUNED_KNOBS: tuple[str, ...] = (
    "sharding", "offload", "activation_checkpointing", "precision", "micro_batch", "grad_accum",
    "tp", "pp",
)
BACKEND_SHARDINGS: dict[str, tuple[str, ...]] = {
    "deepspeed": ("none", "zero1", "zero2", "zero3"),
    "fsdp": ("none", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid"),
    "any": SHARDINGS,
}
_INT_KNOBS = ("micro_batch", "grad_accum", "tp", "pp")
_ALLOWED = {
    "sharding": SHARDINGS, "offload": OFFLOADS, "activation_checkpointing": CHECKPOINTINGS,
    "precision": PRECISIONS,
}


@dataclass(frozen=True)
class Space:
    """Choices per knob (Optuna categorical distributions), in a fixed order."""

    choices: dict[str, tuple] = field(default_factory=dict)

    def configs(self) -> list[dict]:
        """Every configuration of the space (the cartesian product)."""
        names = list(self.choices)
        return [dict(zip(names, vals)) for vals in itertools.product(*self.choices.values())]

    @property
    def size(self) -> int:
        n = 1
        for v in self.choices.values():
            n *= len(v)
        return n

    def distributions(self) -> dict:
        from optuna.distributions import CategoricalDistribution

        return {k: CategoricalDistribution(list(v)) for k, v in self.choices.items()}


def config_key(params: dict) -> str:
    """Canonical, order-independent key of a configuration."""
    return ";".join(f"{k}={params[k]}" for k in sorted(params))


def default_choices(backend: str, *, on_gpu: bool, bf16: bool = True,
                    micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16)) -> dict[str, tuple]:
    if backend not in BACKEND_SHARDINGS:
        raise unknown("backend", backend, BACKEND_SHARDINGS)
    precisions = ("bf16", "fp16", "fp32") if on_gpu else ("bf16", "fp32")
    if not bf16:
        precisions = tuple(p for p in precisions if p != "bf16")
    return {
        "sharding": BACKEND_SHARDINGS[backend],
        # invalid pairs are ruled out by the planner; CPU ranks have no device memory to offload from
        "offload": ("none", "optimizer", "optimizer+params") if on_gpu else ("none",),
        "activation_checkpointing": ("none", "full"),
        "precision": precisions,
        "micro_batch": micro_batches,
        "grad_accum": (1,),
    }


def parse_choices(items: list[str]) -> dict[str, tuple]:
    """`--choices sharding=zero1,zero2 --choices micro_batch=1,2,4` -> {knob: values}."""
    out: dict[str, tuple] = {}
    for item in items:
        if "=" not in item:
            raise PlanError("choices", f"{item!r}: expected KNOB=V1,V2 (knobs: {', '.join(TUNED_KNOBS)})")
        knob, _, vals = item.partition("=")
        knob = knob.strip().replace("-", "_")
        if knob not in TUNED_KNOBS:
            raise unknown("choices", knob, TUNED_KNOBS)
        values = [v.strip() for v in vals.split(",") if v.strip()]
        if not values:
            raise PlanError("choices", f"{knob}: give at least one value")
        out[knob] = tuple(_parse_value(knob, v) for v in values)
    return out


def _parse_value(knob: str, value: str):
    if knob in _INT_KNOBS:
        try:
            n = int(value)
        except ValueError:
            raise PlanError(knob, f"{value!r} is not a whole number") from None
        if n <= 0:
            raise PlanError(knob, f"{n} must be > 0")
        most = _int_bound(knob)
        if most is not None and n > most:
            raise PlanError(knob, f"{n} is too large (at most {most:,})")
        return n
    if value not in _ALLOWED[knob]:
        raise unknown(knob, value, _ALLOWED[knob])
    return value


def _int_bound(knob: str) -> int | None:
    """The largest value ExecutionPlan takes for an integer knob (its field's `le`), None if unbounded."""
    from planner.scenario import ExecutionPlan

    return next((m.le for m in ExecutionPlan.model_fields[knob].metadata if getattr(m, "le", None) is not None), None)


def ranked_parallel_choices(scenario, system, settings=None, top: int = 1) -> dict[str, tuple]:
    """tp/pp values of the planner's best `top` plans for `scenario`, with 1, when any is > 1 (else {}).

    `top` = 1: the space grows only when the planner's own pick uses tensor or pipeline
    parallelism (a big model on many GPUs), not for every small study.
    The bundled trainer runs tensor and pipeline parallelism (with FSDP2 or none), so the
    tuner can check the planner's TP/PP picks with real trials.
    """
    from planner.api import estimate

    from planner.resolve import resolve_model

    if resolve_model(scenario).moe_experts:  # the bundled trainer runs MoE models without tp/pp (trainer_runs)
        return {}
    scenario = scenario.model_copy(update={"stack": "bundled"})
    plans = [r.plan for r in estimate(scenario, system=system, settings=settings, top=top, batch_rule=False).results]
    tps = sorted({1, *(p.tp for p in plans)})
    pps = sorted({1, *(p.pp for p in plans)})
    return {"tp": tuple(tps), "pp": tuple(pps)} if len(tps) + len(pps) > 2 else {}


def trainer_runs(knobs: dict, moe: bool = False) -> str:
    """Why the bundled trainer cannot run these knobs ('' when it can): tp/pp compose with
    FSDP2 or no sharding, without offload (trainer/config.py `validate_parallel`), and
    not with a mixture-of-experts model (`moe`; trainer/config.py `validate_layout`)."""
    if knobs.get("tp", 1) == 1 and knobs.get("pp", 1) == 1:
        return ""
    if moe:
        return "a mixture-of-experts model runs without tp/pp in the bundled trainer"
    if knobs.get("sharding", "none").startswith("zero"):
        return "tp/pp run with fsdp_* or none in the bundled trainer, not ZeRO"
    if knobs.get("offload", "none") != "none":
        return "tp/pp run without offload in the bundled trainer"
    return ""


def build_space(backend: str, *, on_gpu: bool, overrides: dict[str, tuple] | None = None,
                global_batch: int | None = None, dp: int = 1, parallel: dict[str, tuple] | None = None,
                bf16: bool = True) -> Space:
    """Default choices for the backend/device, narrowed by `--choices`; `bf16` False (a GPU without bf16
    tensor cores: the catalog's V100s) leaves bf16 out of the default precisions.

    With a global batch, grad_accum follows from micro_batch (global = micro * accum * dp)
    and micro batches that do not divide it are dropped.
    """
    choices = default_choices(backend, on_gpu=on_gpu, bf16=bf16)
    choices.update(parallel or {})  # tp/pp when the planner ranks them (ranked_parallel_choices)
    choices.update(overrides or {})
    if global_batch is not None:
        mbs = tuple(m for m in choices["micro_batch"] if global_batch % (m * dp) == 0)
        if not mbs:
            raise PlanError("global_batch", f"{global_batch} is not divisible by micro_batch x dp for any "
                            f"micro batch in {choices['micro_batch']} (dp={dp})")
        choices["micro_batch"] = mbs
        choices.pop("grad_accum", None)
    return Space(choices={k: tuple(v) for k, v in choices.items()})


def complete(params: dict, *, global_batch: int | None, dp: int) -> dict:
    """Add the derived knobs (grad_accum from a global batch) to sampled parameters."""
    out = dict(params)
    if global_batch is not None:
        dp = max(1, dp // (out.get("tp", 1) * out.get("pp", 1)))  # the ranks left for data parallelism
        out["grad_accum"] = max(1, global_batch // (out["micro_batch"] * dp))
    return out


def to_plan(knobs: dict, *, dp: int, seq_len: int) -> ExecutionPlan:
    """`dp`: the ranks of the run; tp x pp of them form one model replica."""
    fields = {k: knobs[k] for k in TUNED_KNOBS if k in knobs}
    model_ranks = fields.get("tp", 1) * fields.get("pp", 1)
    return ExecutionPlan(stack="bundled", dp=max(1, dp // model_ranks), seq_len=seq_len,
                         sequence_parallel=fields.get("tp", 1) > 1, **fields)
