"""The planner's public entry points: `estimate` (search and rank) and `evaluate` (one plan).

Everything the faces (CLI, HTTP service, tuner, exports) need from the planner goes through here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from hardware.models import Catalog
from planner import search as search_mod
from planner import moe, network_need, rules, throughput
from planner.errors import PlanError, unknown
from planner.layout import Layout
from planner.model import ModelSpec
from planner.memory_recipe import MemoryRecipe
from planner.memory_required import is_tight
from planner.moe_options import MoeOptions
from planner.resolve import resolve_model, resolve_system, seq_len_of, seq_len_rule
from planner.scenario import (
    STACKS,
    Estimate,
    Frozen,
    MemoryBreakdown,
    Scenario,
)
from planner.settings import Calibration, Settings, stack_profiles
from planner.system import System

Objective = Literal["tokens_per_s", "days", "cost", "memory-headroom"]
OBJECTIVES: tuple[str, ...] = Objective.__args__  # type: ignore[attr-defined]
GIB = 2**30


class EstimateReport(Frozen):
    scenario: Scenario
    model: ModelSpec
    system: System
    seq_len: int
    objective: str
    evaluated: int = Field(description="candidate plans considered")
    fitting: int = Field(description="candidates that fit")
    rejected: dict[str, int] = Field(description="rejected candidates by reason")
    global_batch_rule: str = Field(default="", description="how the global batch was chosen")
    seq_len_rule: str = Field(default="", description="where seq_len came from: pinned, the context the model was "
                              "pretrained at (train_seq_len) or its maximum positions (max_positions)")
    n_params: int | None = Field(default=None, description="the model's parameters (embeddings included)")
    active_params: int | None = Field(default=None, description="parameters one token runs through (a mixture of "
                                      "experts: top-k routed + shared experts; embeddings included; = n_params dense)")
    flops_convention: str | None = Field(default=None, description="how model FLOPs (MFU) count a mixture of "
                                         "experts (None: a dense model, ~6N + attention)")
    moe_settings: MoeOptions | None = Field(default=None, description="the expert routing and all-to-all "
                                            "settings the plans were estimated with (None: a dense model)")
    memory_recipe: MemoryRecipe | None = Field(default=None, description="the memory-saving switches the plans "
                                               "were estimated with (None: none on)")
    results: list[Estimate] = Field(description="best first")

    @property
    def best(self) -> Estimate | None:
        return self.results[0] if self.results else None


def _settings_for(scenario: Scenario, settings: Settings | None) -> Settings:
    settings = settings or Settings()
    update = {}
    if scenario.tokens is not None:
        update["tokens"] = scenario.tokens
    if scenario.price_per_gpu_hour is not None:
        update["price_per_gpu_hour"] = scenario.price_per_gpu_hour
    return settings.model_copy(update=update) if update else settings


def estimate(
    scenario: Scenario,
    *,
    catalog: Catalog | None = None,
    settings: Settings | None = None,
    objective: str = "tokens_per_s",
    top: int | None = 10,
    include_rejected: bool = False,
    system: System | None = None,
    catalog_dirs=None,
    spec: ModelSpec | None = None,
    batch_rule: bool = True,
    network_need: bool = True,
) -> EstimateReport:
    """Search every plan of `scenario`, drop what does not fit, rank the rest.

    `batch_rule`: without a pinned global batch or grad_accum, every plan gets the planner's one
    global batch (False: the batch follows micro_batch x grad_accum x dp, as the tuner searches).
    `top` limits the results (None: all that fit). With `include_rejected`, when nothing fits
    the closest misses are returned (fits=False) so the caller can show why. `network_need=False`: the plans'
    network need is not assessed (None; ~2 more evaluations per plan, planner/network_need.py), for callers
    that read the step time alone (the tuner's predictions, tuner/predict.py).
    """
    if objective not in OBJECTIVES:
        raise unknown("objective", objective, tuple(OBJECTIVES))
    checked = _settings_for(scenario, settings)
    if objective == "days" and checked.tokens is None:
        raise PlanError("objective", "days needs tokens (e.g. --tokens 100B)")
    if objective == "cost" and (checked.tokens is None or checked.price_per_gpu_hour is None):
        missing = [w for w, v in (("tokens (e.g. --tokens 100B)", checked.tokens),
                                  ("price_per_gpu_hour (e.g. --price-per-gpu-hour 2.5)", checked.price_per_gpu_hour))
                   if v is None]  # the one given was named as missing too
        raise PlanError("objective", f"cost needs {' and '.join(missing)}")
    if objective == "cost" and checked.price_per_gpu_hour == 0:
        raise PlanError("objective", "cost is 0 for every plan at price_per_gpu_hour 0: rank by time "
                        "(--objective days), or give the price")
    found = search(scenario, catalog=catalog, settings=settings, system=system, catalog_dirs=catalog_dirs, spec=spec,
                   batch_rule=batch_rule)
    return ranked(found, objective=objective, top=top, include_rejected=include_rejected, network_need=network_need)


@dataclass(frozen=True)
class Searched:
    """A scenario's candidates, memory and rejections: estimate's search, before any speed is computed. No
    calibration enters it (only planner/comm.py and throughput.py read one), so the tuner ranks one search
    under several calibrations (tuner/predict.py)."""

    scenario: Scenario
    spec: ModelSpec
    system: System
    settings: Settings
    seq_len: int
    rule: str  # how the global batch was chosen
    found: search_mod.SearchResult
    moe_settings: MoeOptions
    recipe: MemoryRecipe


def search(scenario: Scenario, *, catalog: Catalog | None = None, settings: Settings | None = None,
           system: System | None = None, catalog_dirs=None, spec: ModelSpec | None = None,
           batch_rule: bool = True) -> Searched:
    """Every candidate plan of `scenario` with its memory and the first rule it breaks (estimate's arguments)."""
    settings = _settings_for(scenario, settings)
    spec = spec or resolve_model(scenario, extra_dirs=catalog_dirs)  # `spec`: already resolved (HTTP)
    moe_settings = MoeOptions.of(settings).checked()
    moe_settings.check_model(spec)
    recipe = MemoryRecipe.of(settings)
    recipe.check_scenario(scenario)
    if catalog is None:
        from hardware.catalog import load_catalog

        catalog = load_catalog(catalog_dirs)
    if settings.stacks is None:  # the stack profiles of the same catalog (--catalog DIR overrides)
        settings = settings.model_copy(update={"stacks": catalog.stacks})
    system = system or resolve_system(scenario, catalog)
    seq_len = seq_len_of(scenario, spec)
    global_batch, rule = _global_batch(scenario, spec, system, seq_len, batch_rule)
    found = search_mod.search(spec, system, scenario, settings, seq_len, global_batch)
    return Searched(scenario=scenario, spec=spec, system=system, settings=settings, seq_len=seq_len, rule=rule,
                    found=found, moe_settings=moe_settings, recipe=recipe)


def ranked(searched: Searched, *, calibration: Calibration | None = None, objective: str = "tokens_per_s",
           top: int | None = 10, include_rejected: bool = False, network_need: bool = True) -> EstimateReport:
    """The plans of a search that fit, scored and ranked (estimate's arguments); `calibration`: in place of
    the search's settings' one."""
    spec, system, found = searched.spec, searched.system, searched.found
    settings = searched.settings
    if calibration is not None:
        settings = settings.model_copy(update={"calibration": calibration})
    idx = np.flatnonzero(found.fits)
    lay = found.layout.take(idx)
    perf = throughput.performance(spec, lay, system, settings) if idx.size else None
    order = _rank(lay, found, idx, perf, objective, stack_profiles(settings))
    chosen = idx[order] if top is None else idx[order[:top]]
    chosen_perf_pos = order if top is None else order[:top]
    errors = {k: v.cv_mape_pct for k, v in stack_profiles(settings).items()}
    results = [
        _estimate_at(found, int(i), perf, int(j), errors)
        for i, j in zip(chosen, chosen_perf_pos)
    ]
    head = np.asarray(chosen_perf_pos[:NETWORK_ASSESSED if top is None else top], dtype=int)
    if network_need:
        results = _with_network_need(results, spec, lay.take(head), system, settings)
    if not results and include_rejected:
        results = _closest_misses(spec, found, system, settings, top or 10)
    return EstimateReport(
        scenario=searched.scenario, model=spec, system=system, seq_len=searched.seq_len, objective=objective,
        evaluated=len(found.layout), fitting=int(idx.size),
        rejected=found.rejected_counts(), global_batch_rule=searched.rule, results=results,
        seq_len_rule=seq_len_rule(searched.scenario, spec), n_params=spec.n_params,
        active_params=moe.active_params(spec) if spec.moe_experts else spec.n_params,
        flops_convention=moe.FLOPS_CONVENTION if moe.is_moe(spec) else None,
        moe_settings=searched.moe_settings if moe.is_moe(spec) else None,
        memory_recipe=searched.recipe if searched.recipe.given else None,
    )


def _global_batch(scenario: Scenario, spec: ModelSpec, system: System, seq_len: int,
                  batch_rule: bool = True) -> tuple[int | None, str]:
    """The scenario's global batch, or the planner's one for every plan (a training
    hyper-parameter, not a speed knob); None when micro batch x grad accum are pinned instead."""
    pinned = search_mod._global_batch(scenario, seq_len)
    if pinned is not None:
        return pinned, f"global batch {pinned} sequences (given)"
    if scenario.grad_accum is not None or not batch_rule:
        return None, "global batch = micro_batch x grad_accum x dp (searched)"
    return search_mod.default_global_batch(spec, system.gpus, seq_len)


def evaluate(scenario: Scenario, **kwargs) -> Estimate:
    """The best plan of a (usually fully pinned) scenario, fitting or not, with its reason."""
    return best_of(estimate(scenario, top=1, include_rejected=True, **kwargs))


def best_of(report: EstimateReport) -> Estimate:
    """evaluate's answer from a report ranked with top=1, include_rejected=True; PlanError where it has none."""
    if not report.results:
        reasons = "; ".join(f"{k}: {v}" for k, v in report.rejected.items())
        raise PlanError("scenario", f"no valid plan ({reasons})")
    return report.results[0]


# Plans within this fraction of each other on the objective count as tied (well inside the
# model's own error, so the simpler plan is the better advice).
TIE_FRACTION = 0.02


# An offload plan's speed counts as if it were this much slower, unless its stack profile states
# its own cross-validated error: offload outranks a plan without offload only when faster
# beyond the model's error (offload speed depends on host links and CPU Adam, seldom measured).
DEFAULT_OFFLOAD_ERROR_PCT = 25.0


def _rank(lay: Layout, found, idx: np.ndarray, perf, objective: str, profiles=None) -> np.ndarray:
    """Best first. Plans within 2% of each other (in steps of 2% from the best) are ordered by
    memory first, then simplicity: a plan that fits by less than the memory model's error (`tight`, the
    table's `*`: it may not run) after the plans with headroom; then less sharding, no offload, no
    recompute, smaller tp/pp, bigger micro batch, smaller gradient accumulation. Offload plans are
    discounted by the model's error."""
    simple = search_mod.simplicity(lay)
    need = found.mem.get("required_bytes", found.mem["total_bytes"])[idx]
    headroom = found.mem["capacity_bytes"][idx] - need
    tight = is_tight(need, found.mem["capacity_bytes"][idx]).astype(np.int8)
    if objective == "memory-headroom" or perf is None:
        score = headroom + 1.0  # higher is better, > 0 for plans that fit
    elif objective == "tokens_per_s":
        score = perf["tokens_per_s"]
    else:  # days or cost: lower is better
        score = 1.0 / perf[objective]
    score = np.maximum(np.nan_to_num(score, nan=0.0), 1e-300)
    if perf is not None and objective != "memory-headroom":
        err = np.array([((profiles or {}).get(name).cv_mape_pct if (profiles or {}).get(name) else None)
                        or DEFAULT_OFFLOAD_ERROR_PCT for name in STACKS])[np.asarray(lay.stack)]
        score = np.where(np.asarray(lay.offload) > 0, score / (1.0 + err / 100.0), score)
    tier = np.floor(np.log(score.max() / score) / np.log1p(TIE_FRACTION)) if score.size else score
    return np.lexsort((-score, simple, tight, tier))


def _estimate_at(found, i: int, perf: dict | None, j: int, errors: dict | None = None) -> Estimate:
    mem = MemoryBreakdown(**{k: float(v[i]) for k, v in found.mem.items()})
    time, speed = throughput.at(perf, j) if perf is not None else (None, None)
    plan = found.layout.plan(i)
    if speed is not None and errors:
        speed = speed.model_copy(update={"expected_error_pct": errors.get(plan.stack)})
    reason_i = int(found.reason[i])
    reason = "" if reason_i < 0 else rules.RULES[reason_i].reason
    if reason_i in rules.MEMORY:  # with the numbers: "needs 93.1 GiB per GPU > 80.0 GiB"
        reason = rules.RULES[reason_i].explain(rules.Knobs(mem=mem.model_dump()))
    return Estimate(plan=plan, memory=mem, time=time, performance=speed,
                    fits=reason_i < 0, reason=reason)


# The best plans assessed for their network (planner/network_need.py: ~66 evaluations each); the rest of a
# long list (top=None: the tuner's proposals) keep None. A list the caller sized (`top`: what a table, --json or
# --csv prints) is assessed whole, NETWORK_CHUNK plans at a time (~0.5 s per 1,000 plans; a cap of 1,000 left
# the rest of a long --top blank).
NETWORK_ASSESSED = 100
NETWORK_CHUNK = 1000  # plans per vectorised assessment (~66 step evaluations each)


def _with_network_need(results: list[Estimate], spec: ModelSpec, lay: Layout, system: System,
                       settings: Settings) -> list[Estimate]:
    """The first len(lay) ranked plans with what the inter-node network costs each and the bandwidth it
    needs (planner/network_need.py); the others as they are."""
    if not results or len(lay) == 0:
        return results

    def step_of(index, scale):
        return throughput.performance(spec, lay.take(index), system, settings, internode_scale=scale)["step_time_s"]

    # in the unit of the bandwidth the plans were given: a measured busbw (--network-from, the tuner), else the
    # cluster's line rate per node
    available = system.measured_internode_busbw_gbps or system.internode_gbps
    parts = [network_need.assess(lambda index, scale, lo=lo: step_of(index + lo, scale), min(NETWORK_CHUNK, len(lay) - lo),
                                 available) for lo in range(0, len(lay), NETWORK_CHUNK)]  # bounded memory per call
    needed, share = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return [e.model_copy(update={"performance": e.performance.model_copy(update={
        "network_gbps_needed": float(needed[r]), "network_share": float(share[r])})})
        if e.performance and r < len(lay) else e for r, e in enumerate(results)]


def _closest_misses(spec, found, system, settings, k: int) -> list[Estimate]:
    """Candidates that failed only on memory, least overshoot first."""
    mem_fail = np.isin(found.reason, sorted(rules.MEMORY))
    idx = np.flatnonzero(mem_fail)
    if idx.size == 0:
        idx = np.arange(len(found.layout))
    gpu = found.mem["required_bytes"][idx] / found.mem["capacity_bytes"][idx]
    over = np.maximum(gpu, found.mem["host_bytes_per_node"][idx] / found.mem["host_capacity_bytes_per_node"][idx])
    # the larger overshoot first, then the GPU's: where host RAM overshoots alike, the GPU memory orders them
    order = idx[np.lexsort((gpu, over))]
    # distinct misses: candidates that differ only in grad_accum repeat the same line
    lay = found.layout
    key = np.stack([found.reason[order]] + [getattr(lay, f)[order] for f in _MISS_KEY], axis=1)
    first = np.sort(np.unique(key, axis=0, return_index=True)[1])[:k]
    return [_estimate_at(found, int(order[o]), None, 0) for o in first]


_MISS_KEY = ("stack", "tp", "pp", "vpp", "cp", "cp_impl", "dp", "sequence_parallel", "sharding", "offload",
             "activation_checkpointing", "checkpoint_fraction", "precision", "micro_batch")


def params_columns(report: EstimateReport) -> dict:
    """The model's total and active parameter counts, as --json's report names them (= for a dense model)."""
    return {"n_params": report.n_params, "active_params": report.active_params}


def estimate_row(est: Estimate, report: EstimateReport | None = None) -> dict:
    """A flat row (the scenario interface's output columns) for CSV/JSONL."""
    row: dict = {}
    if report is not None:
        row.update(model=report.model.name, **params_columns(report), gpu=report.system.gpu.id, gpus=report.system.gpus,
                   gpus_per_node=report.system.gpus_per_node, cluster=report.system.cluster_id,
                   internode_gbps=report.system.internode_gbps, seq_len=report.seq_len)
    plan = est.plan.model_dump()
    plan["global_batch"] = est.plan.global_batch
    row.update(plan)
    row["fits"] = est.fits
    row["reason"] = est.reason
    m = est.memory
    row["mem_gpu_gib"] = round(m.total_bytes / GIB, 3)
    for k in ("weights", "grads", "optimizer", "activations", "comm_buffers", "runtime", "fragmentation"):
        row[f"mem_{k}_gib"] = round(getattr(m, f"{k}_bytes") / GIB, 3)
    row["mem_capacity_gib"] = round(m.capacity_bytes / GIB, 3)
    # what must fit (the table's GiB/GPU; mem_gpu_gib is the reserved peak) and its `*` (within the model's error)
    row["mem_required_gib"] = None if m.required_bytes is None else round(m.required_bytes / GIB, 3)
    row["mem_tight"] = m.tight
    row["mem_host_gib_per_node"] = round(m.host_bytes_per_node / GIB, 2)
    if est.time is not None:
        row.update(est.time.model_dump())
    if est.performance is not None:
        row.update(est.performance.model_dump())
    return row
