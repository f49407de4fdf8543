"""Score the planner on measured runs: speed error per source, fit/OOM confusion, memory error,
and the order of configurations within groups (what `plan validate RUNS.csv` prints).

Every published knob is pinned (planner/runs.py); the planner predicts each run as it is.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from pydantic import Field, ValidationError

from planner import memory, peak_memory, rules, run_capacity, run_moe_plan, search, throughput, zeropp
from planner.layout import Layout
from planner.errors import PlanError
from planner.runs import NotPredicted, Run
from planner.scenario import Frozen, Scenario
from planner.settings import Settings, stack_profiles, with_catalog

GIB = 2**30
MIN_GROUP = 3


class RunPrediction(Frozen):
    id: str
    source: str
    stack: str
    outcome: str
    measured_tokens_per_s_per_gpu: float | None
    predicted_tokens_per_s_per_gpu: float
    measured_iter_time_s: float | None
    predicted_iter_time_s: float
    error: float | None = Field(description="predicted / measured tokens/s - 1")
    measured_mem_gib: float | None
    predicted_mem_gib: float = Field(description="the predicted peak as the run's convention reports it")
    mem_convention: str = Field(default="nvidia-smi", description="nvidia-smi | reserved | allocated")
    capacity_gib: float
    fits: bool
    verdict: str = Field(description="'' (fits), 'memory' or the structural reason")
    mfu: float
    assumptions: list[str]
    not_scored: str | None = Field(default=None, description="why a run that ran is left out of the speed "
                                   "scores (its layout contradicts its GPU count, its speed is above the GPU's "
                                   "peak, its outcome is neither ok nor OOM, no measured speed)")


def not_scored_reason(run: Run) -> str | None:
    """Why a run that ran is not scored, in the words of its notes (None: scored, or an OOM run)."""
    if run.scored or run.outcome == "OOM":
        return None
    if run.inconsistent is not None:
        return run.inconsistent.replace(": not scored", "")
    if run.outcome != "ok":
        return f"outcome {run.outcome!r}: neither ok nor OOM"
    return "no measured speed (measured_iter_time_s, measured_tflops_per_gpu or measured_tokens_per_sec_per_gpu)"


class SourceScore(Frozen):
    source: str
    rows: int
    speed_rows: int
    mape_pct: float | None
    bias_pct: float | None
    iter_mape_pct: float | None


class MemoryScore(Frozen):
    source: str
    convention: str
    rows: int
    mape_pct: float
    bias_pct: float
    worst_id: str
    worst_pct: float


class GroupScore(Frozen):
    group: str
    runs: int
    spearman: float
    top1_regret: float


class ValidationReport(Frozen):
    runs: list[RunPrediction]
    sources: list[SourceScore]
    overall_mape_pct: float | None
    overall_bias_pct: float | None
    oom_runs: int
    oom_flagged: int
    ran: int
    false_alarms_memory: int
    false_alarms_structural: int
    inconsistent_rows: int = Field(default=0, description="rows whose layout contradicts their GPU count or whose speed is above the GPU's peak or below 0.1% of it (not scored)")
    memory_rows: int
    memory_mape_pct: float | None
    memory_within_10pct: int = Field(default=0, description="runs whose predicted peak is within 10% of the measured one")
    memory_sources: list[MemoryScore] = Field(default_factory=list, description="memory error per source")
    groups: list[GroupScore]
    mean_spearman: float | None
    mean_top1_regret: float | None
    not_predicted: list[NotPredicted] = Field(default_factory=list, description="rows the planner cannot express, "
                                              "with the field and the reason (not scored)")
    repeated_ids: dict[str, list[int]] = Field(default_factory=dict, description="ids on more than one row, with "
                                               "their file lines (1 = the header): each row is scored")


def resolved_plan(run: Run, settings: Settings):
    """The run's plan; where the row states no parallel layout, the planner's best layout with
    the knobs the row does state (stack, checkpointing, precision, micro batch)."""
    if run.layout_stated:
        return run.plan if run.ep_stated else run_moe_plan.best_expert_layout(run.spec, run.system, run.plan, settings)
    p = run.plan
    # the row's ZeRO++ features are pinned too (off unless it names them: planner/run_zeropp.py)
    scenario = Scenario(stack=p.stack, activation_checkpointing=p.activation_checkpointing,
                        precision=p.precision, sharding=p.sharding, **{k: getattr(p, k) for k in zeropp.KNOBS},
                        **({"ep": p.ep, "etp": p.etp} if run.ep_stated and run.spec.moe_experts else {}))
    found = search.search(run.spec, run.system, scenario, settings, p.seq_len)
    idx = np.flatnonzero(found.fits)
    if idx.size == 0:
        return p
    perf = throughput.performance(run.spec, found.layout.take(idx), run.system, settings)
    return found.layout.plan(int(idx[int(np.argmax(perf["tokens_per_s"]))]))


def predict(run: Run, settings: Settings) -> RunPrediction:
    """The planner's prediction of one run, with every knob pinned as published."""
    settings = run_capacity.settings_for(run, settings)
    plan = resolved_plan(run, settings)
    lay = Layout.from_plan(plan)
    perf = throughput.performance(run.spec, lay, run.system, settings)
    mem = memory.memory_arrays(run.spec, lay, run.system, settings)
    reason = int(search.reject_reasons(run.spec, run.system, lay, plan.seq_len, plan.global_batch,
                                       stack_profiles(settings), mem)[0])
    verdict = "" if reason == search.FITS else "memory" if reason in rules.MEMORY else search.REASONS[reason]
    pred = float(perf["tokens_per_s_per_gpu"][0])
    meas = run.measured_tokens_per_s_per_gpu

    return RunPrediction(
        id=run.id, source=run.source, stack=run.plan.stack, outcome=run.outcome,
        measured_tokens_per_s_per_gpu=meas, predicted_tokens_per_s_per_gpu=pred,
        measured_iter_time_s=run.measured_iter_time_s, predicted_iter_time_s=float(perf["step_time_s"][0]),
        error=(pred / meas - 1.0) if run.scored else None,
        measured_mem_gib=run.measured_peak_mem_gib,
        predicted_mem_gib=float(peak_memory.peak_bytes(mem, run.mem_convention)[0] / GIB),
        mem_convention=run.mem_convention,
        capacity_gib=float(mem["capacity_bytes"][0] / GIB), fits=verdict == "", verdict=verdict,
        mfu=float(perf["mfu"][0]), assumptions=run.assumptions, not_scored=not_scored_reason(run),
    )


def _fractional_ranks(x: np.ndarray, rel: float = 1e-9) -> np.ndarray:
    """Ranks 0..n-1 where equal values (within `rel`: one configuration measured twice is predicted the same,
    up to rounding) share their mean rank, Spearman's own rule for ties; argsort ranks broke such a tie by the
    last bits of the prediction."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and np.isclose(x[order[j + 1]], x[order[i]], rtol=rel, atol=0.0):
            j += 1
        ranks[order[i:j + 1]] = 0.5 * (i + j)
        i = j + 1
    return ranks


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = _fractional_ranks(a), _fractional_ranks(b)
    if np.std(ra) == 0 or np.std(rb) == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def score(preds: list[RunPrediction], runs: list[Run]) -> ValidationReport:
    by_source: dict[str, list[RunPrediction]] = defaultdict(list)
    for p in preds:
        by_source[p.source].append(p)
    sources = []
    for src in sorted(by_source):
        mine = by_source[src]
        errs = np.array([p.error for p in mine if p.error is not None])
        it = np.array([p.predicted_iter_time_s / p.measured_iter_time_s - 1 for p in mine
                       if p.error is not None and p.measured_iter_time_s])
        sources.append(SourceScore(
            source=src, rows=len(mine), speed_rows=int(errs.size),
            mape_pct=100 * float(np.mean(np.abs(errs))) if errs.size else None,
            bias_pct=100 * float(np.mean(errs)) if errs.size else None,
            iter_mape_pct=100 * float(np.mean(np.abs(it))) if it.size else None))
    errs = np.array([p.error for p in preds if p.error is not None])
    oom = [p for p in preds if p.outcome.upper() == "OOM"]
    # a row whose layout contradicts its GPU count is reported, not scored as a false alarm
    ran = [p for p, r in zip(preds, runs) if p.outcome.upper() != "OOM" and r.inconsistent is None]
    mem = np.array([p.predicted_mem_gib / p.measured_mem_gib - 1 for p in preds if p.measured_mem_gib])
    groups = _groups(preds, runs)
    return ValidationReport(
        runs=preds, sources=sources,
        overall_mape_pct=100 * float(np.mean(np.abs(errs))) if errs.size else None,
        overall_bias_pct=100 * float(np.mean(errs)) if errs.size else None,
        oom_runs=len(oom), oom_flagged=sum(not p.fits for p in oom), ran=len(ran),
        false_alarms_memory=sum(p.verdict == "memory" for p in ran),
        false_alarms_structural=sum(p.verdict not in ("", "memory") for p in ran),
        inconsistent_rows=sum(r.inconsistent is not None for r in runs),
        memory_rows=int(mem.size), memory_mape_pct=100 * float(np.mean(np.abs(mem))) if mem.size else None,
        memory_within_10pct=int(np.sum(np.abs(mem) <= 0.10)),
        memory_sources=_memory_by_source(preds),
        groups=groups,
        mean_spearman=float(np.mean([g.spearman for g in groups])) if groups else None,
        mean_top1_regret=float(np.mean([g.top1_regret for g in groups])) if groups else None,
    )


def _memory_by_source(preds: list[RunPrediction]) -> list[MemoryScore]:
    """Memory error (predicted / measured peak - 1) per source and convention, with the worst run."""
    keyed: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    for p in preds:
        if p.measured_mem_gib:
            keyed[(p.source, p.mem_convention)].append((p.id, p.predicted_mem_gib / p.measured_mem_gib - 1))
    out = []
    for (src, conv), rows in sorted(keyed.items()):
        errs = np.array([e for _, e in rows])
        worst = max(rows, key=lambda r: abs(r[1]))
        out.append(MemoryScore(source=src, convention=conv, rows=len(rows), mape_pct=100 * float(np.mean(np.abs(errs))),
                               bias_pct=100 * float(np.mean(errs)), worst_id=worst[0], worst_pct=100 * worst[1]))
    return out


def _groups(preds: list[RunPrediction], runs: list[Run]) -> list[GroupScore]:
    """Same model, GPU type and count, >= 3 measured configurations: does the planner order them?"""
    keyed: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for p, r in zip(preds, runs):
        if p.error is not None:
            keyed[(r.model, r.gpu_type, r.system.gpus, r.plan.seq_len)].append(
                (p.predicted_tokens_per_s_per_gpu, p.measured_tokens_per_s_per_gpu))
    out = []
    for (model, gpu, n, seq), pairs in sorted(keyed.items(), key=lambda kv: str(kv[0])):
        if len(pairs) < MIN_GROUP:
            continue
        pred, meas = np.array(pairs).T
        if np.ptp(meas) == 0:
            continue
        regret = 1.0 - meas[int(np.argmax(pred))] / meas.max()
        out.append(GroupScore(group=f"{model} | {gpu} x {n} | seq {seq}", runs=len(pairs),
                              spearman=_spearman(pred, meas), top1_regret=float(regret)))
    return out


def validate(runs: list[Run], settings: Settings | None = None,
             not_predicted: list[NotPredicted] | None = None) -> ValidationReport:
    """Predict and score every run; a run the planner cannot predict joins `not_predicted` with its
    reason (a PlanError, or a knob value the plan's fields refuse) and the others are scored."""
    settings = with_catalog(settings or Settings())
    skipped = list(not_predicted or [])
    preds, kept = [], []
    for r in runs:
        try:
            preds.append(predict(r, settings))
            kept.append(r)
        except (PlanError, ValidationError) as e:
            skipped.append(NotPredicted.of(r.id, e))
    return score(preds, kept).model_copy(update={"not_predicted": skipped})
