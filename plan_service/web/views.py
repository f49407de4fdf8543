"""What the planning page shows, computed from the planner's own reports: the ranked plans with
their memory and step-time breakdowns, the rejected counts, and the days/cost-vs-GPUs curve.

Pure functions of `planner.api.EstimateReport` (no FastAPI here), so the page and its tests
read the same numbers as `plan estimate`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from planner.api import EstimateReport
from planner.scenario import Estimate
from planner.units import format_params

GIB = 2**30
MEMORY_TERMS = ("weights", "grads", "optimizer", "activations", "comm_buffers", "runtime", "fragmentation")
TIME_TERMS = ("compute_s", "comm_exposed_s", "bubble_s", "offload_s")


class PlanRow(BaseModel):
    rank: int
    fits: bool
    reason: str = ""
    layout: str
    sharding: str
    offload: str
    activation_checkpointing: str
    micro_batch: int
    grad_accum: int
    global_batch: int
    memory_gib: dict[str, float] = Field(description="per GPU, by term")
    memory_total_gib: float = Field(description="the reserved peak (what nvidia-smi shows)")
    memory_required_gib: float = Field(description="bytes alive at once at the peak: what must fit")
    memory_tight: bool = Field(description="what must fit is within the memory model's error of capacity")
    memory_capacity_gib: float
    host_gib_per_node: float
    time_s: dict[str, float] | None = Field(default=None, description="step time by part")
    step_time_s: float | None = None
    peak_step_time_s: float | None = Field(default=None, description="the step at 100% MFU (the GPUs' peak)")
    bottleneck: str | None = None
    network_share: float | None = Field(default=None, description="share of the step the inter-node network costs")
    network_gbps_needed: float | None = Field(default=None, description="inter-node Gbps per node within 1% of an "
                                              "unlimited network (0: no inter-node traffic)")
    tokens_per_s: float | None = None
    tokens_per_s_error_pct: float | None = Field(default=None, description="the stack profile's cross-validated error")
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    days: float | None = None
    cost: float | None = None


class RejectedRow(BaseModel):
    reason: str
    count: int


class PageReport(BaseModel):
    header: str
    model: str
    params: str
    gpus: int
    gpu: str
    objective: str
    evaluated: int
    fitting: int
    plans: list[PlanRow]
    rejected: list[RejectedRow]


class CurvePoint(BaseModel):
    gpus: int
    fits: bool
    skipped: bool = Field(default=False, description="not planned: the server's curve budget was spent")
    layout: str | None = None
    tokens_per_s: float | None = None
    days: float | None = None
    cost: float | None = None


def layout_of(plan) -> str:
    parts = [f"tp{plan.tp}", f"pp{plan.pp}" + (f"v{plan.vpp}" if plan.vpp > 1 else "")]
    impl = getattr(plan, "cp_impl", "ring")
    parts += [f"cp{plan.cp}" + ("" if impl == "ring" else f"-{impl}")] if getattr(plan, "cp", 1) > 1 else []
    parts.append(f"dp{plan.dp}")
    if plan.sequence_parallel:
        parts.append("sp")
    return " ".join(parts)


def plan_row(rank: int, e: Estimate) -> PlanRow:
    p, m = e.plan, e.memory
    row = PlanRow(
        rank=rank, fits=e.fits, reason=e.reason, layout=layout_of(p), sharding=p.sharding, offload=p.offload,
        activation_checkpointing=p.activation_checkpointing, micro_batch=p.micro_batch, grad_accum=p.grad_accum,
        global_batch=p.global_batch,
        memory_gib={k: getattr(m, f"{k}_bytes") / GIB for k in MEMORY_TERMS},
        memory_total_gib=m.total_bytes / GIB, memory_capacity_gib=m.capacity_bytes / GIB,
        memory_required_gib=(m.total_bytes if m.required_bytes is None else m.required_bytes) / GIB,
        memory_tight=m.tight,
        host_gib_per_node=m.host_bytes_per_node / GIB,
    )
    if e.time is not None and e.performance is not None:
        t, perf = e.time, e.performance
        row = row.model_copy(update=dict(
            time_s={k: getattr(t, k) for k in TIME_TERMS}, step_time_s=t.step_time_s,
            peak_step_time_s=t.step_time_s * perf.mfu, bottleneck=t.bottleneck,
            network_share=perf.network_share, network_gbps_needed=perf.network_gbps_needed,
            tokens_per_s=perf.tokens_per_s, tokens_per_s_error_pct=getattr(perf, "expected_error_pct", None),
            tflops_per_gpu=perf.model_tflops_per_gpu, mfu=perf.mfu,
            days=perf.days, cost=perf.cost))
    return row


def page_report(report: EstimateReport) -> PageReport:
    s = report.system
    where = s.cluster_id or s.gpu.id
    active = report.active_params
    moe = f" ({format_params(active)} active, embeddings included)" if active and active != report.model.n_params else ""
    seq_from = report.seq_len_rule if report.seq_len_rule and not report.scenario.seq_len else ""
    header = (f"{report.model.name}: {format_params(report.model.n_params)} params{moe}, {report.model.n_layers} layers x "
              f"{report.model.hidden} hidden on {s.gpus} x {s.gpu.name} ({where}, {s.gpus_per_node}/node, "
              f"{s.internode_gbps:g} Gbps between nodes), seq_len {report.seq_len}"
              + (f" ({seq_from})" if seq_from else ""))
    rule = getattr(report, "global_batch_rule", None)
    if rule:
        header += f". {rule}"
    rejected = [RejectedRow(reason=k, count=v) for k, v in sorted(report.rejected.items(), key=lambda kv: -kv[1])]
    return PageReport(
        header=header, model=report.model.name, params=format_params(report.model.n_params), gpus=s.gpus,
        gpu=s.gpu.name, objective=report.objective, evaluated=report.evaluated, fitting=report.fitting,
        plans=[plan_row(i, e) for i, e in enumerate(report.results, 1)], rejected=rejected,
    )


def curve_gpu_counts(gpus: int, gpus_per_node: int) -> list[int]:
    """Whole-node GPU counts around `gpus`: a quarter of it up to eight times it."""
    nodes = max(1, gpus // gpus_per_node)
    counts = {max(1, round(nodes * f)) * gpus_per_node for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8)}
    if gpus < gpus_per_node:
        counts.add(gpus)
    return sorted(c for c in counts if c >= min(gpus, gpus_per_node))


def curve_order(counts: list[int], gpus: int) -> list[int]:
    """The curve's counts nearest the form's first (by ratio), so a spent budget drops the far ends."""
    import math

    return sorted(counts, key=lambda n: (abs(math.log(n / gpus)), n))


def curve_point(gpus: int, report: EstimateReport | None) -> CurvePoint:
    best = report.best if report is not None else None
    if best is None or not best.fits or best.performance is None:
        return CurvePoint(gpus=gpus, fits=False)
    perf = best.performance
    return CurvePoint(gpus=gpus, fits=True, layout=f"{layout_of(best.plan)} {best.plan.sharding}",
                      tokens_per_s=perf.tokens_per_s, days=perf.days, cost=perf.cost)
