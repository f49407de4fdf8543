"""How `plan estimate --gpus LO:HI` shows a sweep: the best plan per GPU count, what the network costs each,
and with --within-days the fewest GPUs that train the tokens by then."""

from __future__ import annotations

from plan_cli.common import console, print_json
from plan_cli.estimate_view import (GIB, _SHORT, _compact_layout, _error_note, _knobs, _measured, _memory_notes,
                                    _must_fit, _print_uncut, _share, _sharding, _speed, _table, _training, print_csv)
from planner.api import EstimateReport, estimate_row
from planner.errors import PlanError


def _sweep_header(report: EstimateReport) -> str:
    """A sweep's model, GPU (the counts are the rows), sequence length and precision; `report` is the largest
    count's, whose GPUs per node are the cluster's (a sweep from 1 GPU said '1/node' of a dgx-a100)."""
    s = report.system
    return (f"{report.model.describe()}\n{s.gpu.name} ({s.cluster_id or s.gpu.id}, {s.gpus_per_node}/node, "
            f"{s.internode_gbps:g} Gbps between nodes){_measured(s)}\n{_training(report)}")


def fewest_within(points: list[dict], days: float) -> dict | None:
    """The sweep point with the fewest GPUs whose best plan trains the tokens within `days` (None: none does);
    days need not fall as GPUs grow (each count trains its own global batch), so every count is looked at."""
    meets = [pt for pt in points if pt["best"] is not None and pt["best"].performance is not None
             and pt["best"].performance.days is not None and pt["best"].performance.days <= days]
    return min(meets, key=lambda pt: pt["gpus"]) if meets else None


def _count(n: float) -> str:
    """1e12 -> '1T', 3e11 -> '300B', 2.5e9 -> '2.5B' (as --tokens takes them)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:g}"


def _days(days: float) -> str:
    return f"{days:g} day" + ("" if days == 1 else "s")


def _deadline_line(points: list[dict], days: float, tokens: float | None) -> str:
    what = f"{_count(tokens)} tokens" if tokens else "the tokens"
    pt = fewest_within(points, days)
    if pt is None:
        fastest = min((p for p in points if p["best"] and p["best"].performance and p["best"].performance.days),
                      key=lambda p: p["best"].performance.days, default=None)
        best = (f"; the fastest, {fastest['gpus']} GPUs, takes {fastest['best'].performance.days:.1f} days"
                if fastest else "")
        return f"No GPU count of the sweep trains {what} within {_days(days)}{best}."
    perf, p = pt["best"].performance, pt["best"].plan
    hours = f", {perf.gpu_hours:,.0f} GPU-hours" if perf.gpu_hours else ""
    return (f"Fewest GPUs that train {what} within {_days(days)}: {pt['gpus']} ({perf.days:.1f} days{hours}; "
            f"{_knobs(p)} {_sharding(p)}, micro batch {p.micro_batch} x {p.grad_accum}).")


def show_sweep(reports: list[EstimateReport], json_out: bool, csv_out: bool, plot,
               within_days: float | None = None) -> None:
    points = []
    for r in reports:
        best = r.best if r.best and r.best.fits else None
        points.append({"gpus": r.system.gpus, "best": best, "report": r})
    chosen = fewest_within(points, within_days) if within_days is not None else None
    rows = []
    for pt in points:
        row = {"gpus": pt["gpus"], "fits": pt["best"] is not None}
        if pt["best"] is not None:
            row.update(estimate_row(pt["best"], pt["report"]))
        if within_days is not None:
            row["fewest_within_days"] = pt is chosen
        rows.append(row)
    if json_out:
        print_json(rows)
    elif csv_out:
        print_csv(rows)
    else:
        has_cost = any(pt["best"] and pt["best"].performance and pt["best"].performance.cost is not None
                       for pt in points)
        has_days = any(pt["best"] and pt["best"].performance and pt["best"].performance.days for pt in points)
        columns = ["GPUs", "layout", "shard/offload/ckpt", "mb x ga", "batch", "GiB/GPU", "tokens/s",
                   "MFU"] + (["days"] if has_days else []) + (["cost"] if has_cost else []) + ["net %"]
        console.print(_sweep_header(reports[-1]), highlight=False)
        console.print("best configuration per GPU count (batch: the global batch each count trains with)",
                      highlight=False, soft_wrap=True)
        rows = []
        for pt in points:
            e = pt["best"]
            if e is None:
                rows.append([str(pt["gpus"]), "no configuration fits", *[""] * (len(columns) - 2)])
                continue
            perf, p, m = e.performance, e.plan, e.memory
            strategy = "/".join(_SHORT.get(x, x) for x in (_sharding(p, short=True), p.offload, p.activation_checkpointing))
            row = [str(pt["gpus"]), _compact_layout(p), strategy,
                   f"{p.micro_batch} x {p.grad_accum}", str(p.global_batch), _must_fit(m, f"{m.capacity_bytes / GIB:.0f}"),
                   _speed(perf), f"{perf.mfu:.0%}" if perf else ""]
            if has_days:
                row.append(f"{perf.days:.1f}" if perf and perf.days else "")
            if has_cost:
                row.append(f"{perf.cost:,.0f}" if perf and perf.cost is not None else "")
            rows.append(row + [_share(perf.network_share) if perf else ""])
        _print_uncut(_table(columns, rows, wide=False))
        best = [pt["best"] for pt in points if pt["best"] is not None]
        # what GiB/GPU, `*` and the +-N% after tokens/s mean, as under plan estimate's table
        for line in _memory_notes(best, "--explain with --gpus N") + [_error_note(best, wide=True)]:
            if line:
                console.print(line, highlight=False)
        console.print("net %: the share of the step the inter-node network costs (against an unlimited one; "
                      "--explain with --gpus N says the bandwidth it needs)", highlight=False)
        if within_days is not None:
            console.print(_deadline_line(points, within_days, reports[0].scenario.tokens), highlight=False)
    if plot is not None:
        from plan_cli.plots import plot_sweep

        if not any(pt["best"] and pt["best"].performance and pt["best"].performance.days for pt in points):
            raise PlanError("plot", "a sweep plot shows days to train: add --tokens (e.g. 100B)")
        plot_sweep([{"gpus": pt["gpus"], "plan": pt["best"].plan if pt["best"] else None,
                     "days": pt["best"].performance.days if pt["best"] and pt["best"].performance else None}
                    for pt in points], plot)
        console.print(f"plot written to {plot}")
