"""How `plan estimate` shows its reports: rich tables, CSV, the explain view and sweeps."""

from __future__ import annotations

import csv
import sys

from rich.table import Table

from plan_cli.common import console, print_json
from planner.api import EstimateReport, estimate_row
from planner.errors import PlanError

GIB = 2**30


def _gib(x: float) -> str:
    return f"{x / GIB:.1f}"


def _knobs(p) -> str:
    parts = [f"tp{p.tp}", f"pp{p.pp}" + (f"v{p.vpp}" if p.vpp > 1 else "")]
    if p.cp > 1:
        parts.append(f"cp{p.cp}")
    parts.append(f"dp{p.dp}")
    if p.sequence_parallel:
        parts.append("sp")
    return " ".join(parts)


def _header(report: EstimateReport) -> str:
    s = report.system
    where = s.cluster_id or s.gpu.id
    rule = f"\n{report.global_batch_rule}" if report.global_batch_rule else ""
    return (f"{report.model.describe()}\n{s.gpus} x {s.gpu.name} ({where}, {s.gpus_per_node}/node, "
            f"{s.internode_gbps:g} Gbps between nodes), seq_len {report.seq_len}{rule}")


def show_table(report: EstimateReport, top: int) -> None:
    console.print(_header(report), highlight=False)
    fitting = [e for e in report.results if e.fits][:top]
    has_perf = any(e.performance for e in fitting)
    table = Table(title=f"{len(fitting)} best of {report.fitting} fitting / {report.evaluated} evaluated "
                        f"(ranked by {report.objective})", title_justify="left")
    for col in ("#", "layout", "sharding", "offload", "ckpt", "mb", "ga", "batch",
                "GiB/GPU", "w/g/opt/act", "host GiB/node"):
        table.add_column(col, justify="right" if col not in ("layout", "sharding", "offload", "ckpt") else "left")
    if has_perf:
        for col in ("tokens/s", "TFLOPs/GPU", "MFU", "step s", "bottleneck"):
            table.add_column(col, justify="right")
        if any(e.performance.days for e in fitting if e.performance):
            table.add_column("days", justify="right")
    for i, e in enumerate(fitting, 1):
        p, m = e.plan, e.memory
        row = [str(i), _knobs(p), p.sharding, p.offload, p.activation_checkpointing, str(p.micro_batch),
               str(p.grad_accum), str(p.global_batch), f"{_gib(m.total_bytes)}/{_gib(m.capacity_bytes)}",
               "/".join(_gib(x) for x in (m.weights_bytes, m.grads_bytes, m.optimizer_bytes, m.activations_bytes)),
               f"{m.host_bytes_per_node / GIB:.0f}"]
        if has_perf and e.performance and e.time:
            perf, t = e.performance, e.time
            band = f" (+-{perf.expected_error_pct:.0f}%, {p.stack})" if perf.expected_error_pct is not None else ""
            row += [f"{perf.tokens_per_s:,.0f}{band}", f"{perf.model_tflops_per_gpu:.0f}", f"{perf.mfu:.0%}",
                    f"{t.step_time_s:.2f}", t.bottleneck]
            if perf.days:
                row.append(f"{perf.days:.1f}")
        table.add_row(*row)
    if fitting:
        console.print(table)
    else:
        console.print("[bold red]No configuration fits.[/] Closest misses:")
        for e in report.results[:5]:
            p = e.plan
            console.print(f"  {_knobs(p)} {p.sharding} offload={p.offload} ckpt={p.activation_checkpointing} "
                          f"mb={p.micro_batch}: {e.reason}", highlight=False)
    if report.rejected:
        console.print("Rejected:", highlight=False)
        for reason, count in sorted(report.rejected.items(), key=lambda kv: -kv[1]):
            console.print(f"  {count:>8,}  {reason}", highlight=False)


def show_explain(report: EstimateReport, rank: int, json_out: bool) -> None:
    if rank > len(report.results):
        raise PlanError("rank", f"only {len(report.results)} configurations to explain")
    e = report.results[rank - 1]
    if json_out:
        print_json({"model": report.model, "system": report.system, "estimate": e})
        return
    console.print(_header(report), highlight=False)
    console.print(f"\n[bold]#{rank}[/] {'fits' if e.fits else 'DOES NOT FIT: ' + e.reason}")
    plan = Table(title="execution plan", title_justify="left", show_header=False)
    for k, v in e.plan.model_dump().items():
        plan.add_row(k, str(v))
    plan.add_row("global_batch", f"{e.plan.global_batch} sequences = {e.plan.global_batch * report.seq_len:,} tokens")
    console.print(plan)
    m = e.memory
    mem = Table(title="memory per GPU", title_justify="left")
    mem.add_column("term")
    mem.add_column("GiB", justify="right")
    mem.add_column("share", justify="right")
    for k in ("weights", "grads", "optimizer", "activations", "comm_buffers", "runtime", "fragmentation"):
        v = getattr(m, f"{k}_bytes")
        mem.add_row(k, _gib(v), f"{v / m.total_bytes:.0%}")
    mem.add_row("[bold]total[/]", f"[bold]{_gib(m.total_bytes)}[/]", "")
    mem.add_row("capacity", _gib(m.capacity_bytes), "")
    mem.add_row("host RAM per node", f"{m.host_bytes_per_node / GIB:.0f} of {m.host_capacity_bytes_per_node / GIB:.0f}", "")
    console.print(mem)
    if e.time and e.performance:
        t, perf = e.time, e.performance
        speed = Table(title="step time and speed", title_justify="left", show_header=False)
        for k, v in t.model_dump().items():
            speed.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
        for k, v in perf.model_dump().items():
            if v is not None:
                speed.add_row(k, f"{v:,.4g}" if isinstance(v, float) else str(v))
        console.print(speed)


def print_csv(rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(sys.stdout, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)


def show_sweep(reports: list[EstimateReport], json_out: bool, csv_out: bool, plot) -> None:
    points = []
    for r in reports:
        best = r.best if r.best and r.best.fits else None
        points.append({"gpus": r.system.gpus, "best": best, "report": r})
    rows = []
    for pt in points:
        row = {"gpus": pt["gpus"], "fits": pt["best"] is not None}
        if pt["best"] is not None:
            row.update(estimate_row(pt["best"], pt["report"]))
        rows.append(row)
    if json_out:
        print_json(rows)
    elif csv_out:
        print_csv(rows)
    else:
        table = Table(title="best configuration per GPU count", title_justify="left")
        for col in ("GPUs", "layout", "sharding", "offload", "ckpt", "mb", "ga", "tokens/s", "MFU", "days", "bottleneck"):
            table.add_column(col)
        for pt in points:
            e = pt["best"]
            if e is None:
                table.add_row(str(pt["gpus"]), "no configuration fits", *[""] * 9)
                continue
            perf = e.performance
            table.add_row(str(pt["gpus"]), _knobs(e.plan), e.plan.sharding, e.plan.offload,
                          e.plan.activation_checkpointing, str(e.plan.micro_batch), str(e.plan.grad_accum),
                          f"{perf.tokens_per_s:,.0f}" if perf else "", f"{perf.mfu:.0%}" if perf else "",
                          f"{perf.days:.1f}" if perf and perf.days else "", e.time.bottleneck if e.time else "")
        console.print(table)
    if plot is not None:
        from plan_cli.plots import plot_sweep

        if not any(pt["best"] and pt["best"].performance and pt["best"].performance.days for pt in points):
            raise PlanError("plot", "a sweep plot shows days to train: add --tokens (e.g. 100B)")
        plot_sweep([{"gpus": pt["gpus"], "plan": pt["best"].plan if pt["best"] else None,
                     "days": pt["best"].performance.days if pt["best"] and pt["best"].performance else None}
                    for pt in points], plot)
        console.print(f"plot written to {plot}")
