"""Shared pieces of the sanity sweep (validation/sanity_sweep.py): the evaluated plans, the
violations found, and the monotonic / continuity comparisons along a family of plans."""

from __future__ import annotations

from collections import defaultdict

from validation.sanity_plans import Result, catalog, evaluate, model_columns

TOL = 1e-3  # relative slack of the monotonic checks (float noise)
JUMP = 0.30  # continuity: the largest relative step between adjacent grid points
TERMS = ("step_time_s", "compute_s", "comm_exposed_s", "bubble_s", "offload_s", "tp_comm_s", "cp_comm_s",
         "pp_comm_s", "dp_comm_s", "optimizer_s")
SEEN: list[Result] = []  # every plan evaluated, for the per-plan checks
VIOLATIONS: dict[str, list[str]] = defaultdict(list)
COUNTS: dict[str, int] = defaultdict(int)  # comparisons made per check


def run(**knobs) -> Result:
    r = evaluate(**knobs)
    if not r.refused:
        SEEN.append(r)
    return r


def flag(check: str, why: str, *results: Result) -> None:
    lines = [f"[{check}] {why}"] + [f"    {r.describe()}\n      {r.breakdown()}" for r in results]
    VIOLATIONS[check].append("\n".join(lines))


def _ok(*rs: Result) -> bool:
    return all(not r.refused for r in rs)


def monotonic(check: str, rs: list[Result], key: str, direction: int, label: str) -> None:
    """`direction` +1: key never falls along rs; -1: never rises."""
    rs = [r for r in rs if not r.refused]
    for a, b in zip(rs, rs[1:]):
        COUNTS[check] += 1
        va, vb = a[key], b[key]
        if direction * (vb - va) < -TOL * max(abs(va), abs(vb), 1e-30):
            flag(check, f"{key} {'falls' if direction > 0 else 'rises'} {va:.4g} -> {vb:.4g} with {label}", a, b)


def continuous(check: str, rs: list[Result], key: str, label: str, jump: float = JUMP) -> None:
    rs = [r for r in rs if not r.refused]
    for a, b in zip(rs, rs[1:]):
        COUNTS[check] += 1
        va, vb = a[key], b[key]
        if min(va, vb) <= 0 or max(va, vb) / min(va, vb) - 1 > jump:
            flag(check, f"{key} jumps {va:.4g} -> {vb:.4g} ({vb / va - 1:+.0%}) with {label}", a, b)


def node_continuous(check: str, rs: list[Result], label: str) -> None:
    """Continuity along the node count of the step less its data-parallel collectives. Doubling the
    nodes doubles a ring's steps (NCCL src/graph/tuning.cc: ring latency linear in the ranks; all-gather
    and reduce-scatter have no tree), so a step whose DP/ZeRO/FSDP collectives are latency-bound can
    lose up to half its speed per doubling (more where the exposure subtracts the hiding compute:
    tests/planner/test_dp_exposure.py): a steep power law of the node count, not a discontinuity. The
    collectives' own scaling is tested in tests/planner/test_comm.py (never faster with more nodes, at
    most the ring's step ratio, (2n - 1) / (n - 1), slower for twice the ranks); here the rest of the
    step must stay continuous."""
    for r in rs:
        if not r.refused:
            rest = r["step_time_s"] - r["dp_comm_s"]
            r.perf["tokens_per_s_per_gpu_less_dp"] = r["tokens_per_s_per_gpu"] * r["step_time_s"] / rest
    continuous(check, rs, "tokens_per_s_per_gpu_less_dp", label)


def weak_scaling(check: str, rs: list[Result]) -> None:
    """More data-parallel GPUs at the same work per GPU are never faster per GPU, except for the
    optimizer step, which ZeRO/FSDP shard over dp (it shrinks as 1/dp): the step without it never
    shrinks."""
    for r in rs:
        if not r.refused:
            r.perf["step_less_optimizer_s"] = r["step_time_s"] - r["optimizer_s"]
    monotonic(check, rs, "step_less_optimizer_s", +1, "more GPUs (dp only), same work per GPU")


def gpt(name):
    return model_columns(name)


STACK_LAYOUTS = {  # stack -> sharding and the (tp, pp) it can run
    "megatron": ("zero1", True), "megatron_deepspeed": ("zero1", True), "generic": ("zero1", True),
    "torchtitan": ("fsdp_full_shard", True), "fsdp": ("fsdp_full_shard", False), "hf": ("zero3", False),
}
GPUS = ("v100-32gb", "a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "mi250x", "mi300x", "b200")


def prec(gpu: str) -> str:
    return "bf16" if catalog().gpus[gpu].bf16_tflops else "fp16"
