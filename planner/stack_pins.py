"""A pinned stack against the other pinned knobs: which knob the stack's profile cannot run
(catalog/stacks/*.toml: `shardings`, `tensor_parallel`, ..., the same fields planner/stacks.py
`unsupported` reads for every candidate). `plan estimate` names it when no candidate survives,
instead of the most common rejection of the search ("DeepSpeed pipeline parallelism supports ZeRO-1
only" for `--stack torchtitan --sharding zero2`, "the stack cannot run this plan" for the rest)."""

from __future__ import annotations

from hardware.stacks import StackProfile
from planner.errors import PlanError
from planner.scenario import Scenario


def _flag(name: str, on: bool, field: str, what: str, stack: str) -> PlanError | None:
    return None if on else PlanError(field, f"stack {stack} does not run {what} ({name} = false in "
                                            f"catalog/stacks/{stack}.toml)")


def pinned_conflict(scenario: Scenario, profile: StackProfile) -> PlanError | None:
    """The first pinned knob the pinned stack cannot run (None: every pinned knob is one it runs)."""
    s, stack = scenario, profile.id
    if s.sharding is not None and s.sharding not in profile.shardings:
        return PlanError("sharding", f"stack {stack} does not run {s.sharding} (allowed with it: "
                         f"{', '.join(profile.shardings)})")
    checks = [
        ((s.tp or 1) > 1, "tensor_parallel", "tp", "tensor parallelism"),
        ((s.pp or 1) > 1, "pipeline_parallel", "pp", "pipeline parallelism"),
        ((s.cp or 1) > 1, "context_parallel", "cp", "context parallelism"),
        (s.precision == "fp8", "fp8", "precision", "fp8"),
        (s.offload not in (None, "none"), "offload", "offload", "offload"),
        (bool(s.compile), "compile", "compile", "torch.compile"),
        (bool(s.async_tp), "async_tp", "async_tp", "async TP"),
        (bool(s.activation_offload), "activation_offload", "activation_offload", "activation offload"),
    ]
    for pinned, name, field, what in checks:
        if pinned and (why := _flag(name, bool(getattr(profile, name)), field, what, stack)) is not None:
            return why
    if s.cp_impl is not None and (s.cp or 1) != 1 and profile.context_parallel and s.cp_impl not in profile.cp_impls:
        return PlanError("cp_impl", f"stack {stack} does not run cp_impl {s.cp_impl} (allowed with it: "
                         f"{', '.join(profile.cp_impls)})")
    return None


def report_conflict(report, stacks: dict | None) -> PlanError | None:
    """The pinned stack's conflict with another pinned knob, where it is why nothing runs: no
    candidate fits and none got as far as the memory check (`plan estimate` exits 2 with it, the
    service answers 422 with it)."""
    from planner.search import GPU_OOM, HOST_OOM, REASONS

    if any(e.fits for e in report.results) or not report.rejected:
        return None
    if {REASONS[GPU_OOM], REASONS[HOST_OOM]} & set(report.rejected):
        return None
    stack = report.scenario.stack
    if not stack or stack not in (stacks or {}):
        return None
    return pinned_conflict(report.scenario, stacks[stack])


def pinned_dead_end(report, stacks: dict | None) -> PlanError | None:
    """Why the pinned knobs rule out every plan, where they do: no candidate fits and none got as far
    as the memory check. The pinned stack's conflict when there is one, else the most common rejection,
    naming its rule's knob where that knob is pinned (else `scenario`). `plan estimate` exits 2 with it;
    `POST /estimate` answers 422 with it."""
    from planner.rules import RULES
    from planner.search import GPU_OOM, HOST_OOM, REASONS

    if any(e.fits for e in report.results) or not report.rejected:
        return None
    if {REASONS[GPU_OOM], REASONS[HOST_OOM]} & set(report.rejected):
        return None
    if (why := report_conflict(report, stacks)) is not None:
        return why
    if (why := _sp_without_tp(report)) is not None:
        return why
    reason, count = max(report.rejected.items(), key=lambda kv: kv[1])
    field = next((r.field for r in RULES if r.reason == reason), "scenario")
    if getattr(report.scenario, field, None) is None:  # the rule's knob was the search's: name no knob
        field = "scenario"
    return PlanError(field, f"no plan satisfies the pinned knobs: {reason} "
                     f"({count:,} of {report.evaluated:,} candidates)")


def _sp_without_tp(report) -> PlanError | None:
    """Sequence parallelism pinned on, tp left to the search, and every tp > 1 rejected because it does not
    divide the heads (falcon-7b's 71): the flag the user gave is why nothing runs, not the search's tp."""
    from planner.rules import BY_NAME

    heads, sp_tp = BY_NAME["tp_heads"].reason, BY_NAME["sp_needs_tp"].reason
    s = report.scenario
    if not s.sequence_parallel or s.tp is not None or heads not in report.rejected or sp_tp not in report.rejected:
        return None
    if max(report.rejected.items(), key=lambda kv: kv[1])[0] not in (heads, sp_tp):
        return None
    m = report.model
    return PlanError("sequence_parallel", f"needs tp > 1, and no tp > 1 divides the {m.n_heads} attention heads "
                     f"(n_heads) of {m.name}: leave --sequence-parallel off")
