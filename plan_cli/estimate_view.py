"""How `plan estimate` shows its reports: rich tables, CSV, the explain view and sweeps."""

from __future__ import annotations

import csv
import sys

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from plan_cli.common import console, print_json
from planner import zeropp
from planner.api import EstimateReport
from planner.errors import PlanError

GIB = 2**30


def _gib(x: float) -> str:
    return f"{x / GIB:.1f}"


def _split(p) -> str:
    """An uneven pipeline split: "(first 7, last 7)" or "(emb+loss in split)" (Megatron-Core's accounting);
    parentheses, not brackets: the tables render rich markup."""
    if p.first_stage_layers or p.last_stage_layers:
        return f"(first {p.first_stage_layers or '-'}, last {p.last_stage_layers or '-'})"
    named = [n for n, on in (("emb", p.embedding_in_split), ("loss", p.loss_in_split)) if on]
    return f"({'+'.join(named)} in split)" if named else ""


def _expert(p) -> list[str]:
    """Expert parallelism: "ep8" (and "etp2" where the experts have a tensor split)."""
    return ([f"ep{p.ep}"] if p.ep > 1 else []) + ([f"etp{p.etp}"] if p.etp > 1 else [])


def _knobs(p) -> str:
    parts = [f"tp{p.tp}", f"pp{p.pp}" + (f"v{p.vpp}" if p.vpp > 1 else "") + _split(p)]
    if p.cp > 1:
        parts.append(f"cp{p.cp}" + ("" if p.cp_impl == "ring" else f"-{p.cp_impl}"))
    parts += _expert(p)
    parts.append(f"dp{p.dp}")
    if p.sequence_parallel:
        parts.append("sp")
    return " ".join(parts)


def _sharding(p, short: bool = False) -> str:
    """The sharding, with ZeRO++'s features where the plan has any ("zero3++" when short)."""
    tag = zeropp.label(p)
    return p.sharding if not tag else (f"{p.sharding}++" if short else f"{p.sharding}+{tag}")


def _header(report: EstimateReport) -> str:
    s = report.system
    where = s.cluster_id or s.gpu.id
    rule = f"\n{report.global_batch_rule}" if report.global_batch_rule else ""
    return (f"{report.model.describe()}\n{s.gpus} x {s.gpu.name} ({where}, {s.gpus_per_node}/node, "
            f"{s.internode_gbps:g} Gbps between nodes){_measured(s)}\n{_training(report)}{rule}")


def _measured(s) -> str:
    """The all-reduce bus bandwidths `--network-from` gave the plans (they replace the catalog's links)."""
    parts = [f"{v:,.4g} Gbps {where}" for v, where in ((s.measured_intranode_busbw_gbps, "within a node"),
                                                     (s.measured_internode_busbw_gbps, "between nodes")) if v]
    said = s.measured_busbw_note or ", ".join(parts)  # the note: which plateau was inferred from what
    return f"\nmeasured all-reduce busbw (--network-from): {said}" if parts else ""


def _training(report: EstimateReport) -> str:
    """The sequence length (and where an unpinned one came from) and the precision every plan runs in."""
    seq = f"seq_len {report.seq_len}" + ("" if report.scenario.seq_len else _seq_default(report.model))
    if report.seq_len > report.model.max_positions:  # RoPE: planned as asked, past what the model was built for
        seq += f" (beyond the model's maximum of {report.model.max_positions:,} positions)"
    p = report.results[0].plan if report.results else None
    if p is None:
        return seq
    grads = f", gradients reduced in {p.grad_reduce_dtype}" if p.grad_reduce_dtype != "default" else ""
    return seq + f", {p.precision}" + (f" ({p.fp8_recipe} recipe; MFU against the bf16 peak)" if p.precision == "fp8" else "") + grads


def _tier_note(report: EstimateReport, fitting) -> list[str]:
    """Why a plan ranks above a faster one, where the table shows one: plans within 2% of each
    other (well inside the model's error) go to the simpler setup (planner/api.py)."""
    from planner.api import TIE_FRACTION

    speeds = [e.performance.tokens_per_s for e in fitting if e.performance]
    out_of_order = any(b > a for a, b in zip(speeds, speeds[1:]))
    if report.objective == "memory-headroom" or not out_of_order:
        return []
    offload = any(e.plan.offload != "none" for e in fitting)
    return [f"Ranked in {TIE_FRACTION:.0%} tiers of {report.objective} (inside the model's error): within a tier a plan "
            "with memory headroom comes before a tight one (*), then the simpler plan first (less sharding, no offload, less recompute, smaller tp/pp, bigger micro batch)"
            + ("; offload plans count as slower by their stack's error." if offload else ".")]


def network_line(report: EstimateReport, e, label: str = "plan #1") -> str:
    """Is the network the bottleneck of this plan: what the inter-node network costs its step at the nodes'
    bandwidth, and the line rate per node within 1% of an unlimited network (planner/network_need.py)."""
    perf, s = e.performance, report.system
    if perf is None or perf.network_gbps_needed is None or s.gpus <= s.gpus_per_node:
        return ""
    measured = s.measured_internode_busbw_gbps
    have = f"measured {measured:,.0f} Gbps busbw" if measured else f"{s.internode_gbps:,.0f} Gbps"
    if perf.network_gbps_needed == 0:
        return f"Network: the {have} between nodes does not slow {label} (no inter-node traffic in its step)."
    need = f"{perf.network_gbps_needed:,.0f} Gbps" + (" busbw" if measured else "")
    if measured:
        return (f"Network: the {have} between nodes costs {label} {_under(perf.network_share)} of its step; "
                + (f"{need} would do." if perf.network_gbps_needed <= measured else
                   f"{need} would bring it within 1% of an unlimited network."))
    if perf.network_gbps_needed <= s.internode_gbps:
        return (f"Network: not the bottleneck: the {have} between nodes costs {label} "
                f"{_under(perf.network_share)} of its step ({need} per node would do).")
    return (f"Network: the {have} between nodes costs {label} {_under(perf.network_share)} of its step; "
            f"{need} per node would bring it within 1% of an unlimited network.")


def _under(share: float) -> str:
    return "under 1%" if share < 0.01 else f"{share:.0%}"


def show_table(report: EstimateReport, top: int, wide: bool = False) -> None:
    """The ranked plans: a table that fits 100 columns (text folds below that, numbers never
    do), or with `wide` every column at its full width (wider than most terminals)."""
    console.print(_header(report), highlight=False)
    fitting = [e for e in report.results if e.fits][:top]
    title = (f"{len(fitting)} best of {report.fitting} fitting / {report.evaluated} evaluated "
             f"(ranked by {report.objective})")
    if fitting:
        columns, rows = (_wide_rows if wide else _compact_rows)(fitting)
        console.print(title, highlight=False, soft_wrap=True)  # a line, not a title folded to the table's width
        table = _table(columns, rows, wide)
        if wide:
            _print_uncut(table)
        else:
            console.print(table)
        for line in (_memory_notes(fitting) + [_error_note(fitting, wide)] + _tier_note(report, fitting)
                     + [network_line(report, fitting[0]), _cost_note(report)]):
            if line:
                console.print(line, highlight=False)
    else:
        console.print("[bold red]No configuration fits.[/] Closest misses:")
        for e in report.results[:5]:
            p = e.plan
            console.print(f"  {_knobs(p)} {_sharding(p)} offload={p.offload} ckpt={p.activation_checkpointing} "
                          f"mb={p.micro_batch}: {e.reason}", highlight=False)
    if report.rejected:
        console.print("Rejected:", highlight=False)
        for reason, count in sorted(report.rejected.items(), key=lambda kv: -kv[1]):
            console.print(f"  {count:>8,}  {reason}", highlight=False)


def _print_uncut(table: Table) -> None:
    """A table at least as wide as its widest row: a terminal narrower than that wraps the lines, no cell is cut."""
    natural = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
    Console(width=max(console.width, natural), file=console.file,
            force_terminal=console.is_terminal).print(table, crop=False)


# The layout wraps (at its spaces) when the terminal is narrow; every other column keeps its full width.
TEXT_COLUMNS = {"layout"}
NUMERIC_COLUMNS = {"#", "GPUs", "mb x ga", "GiB/GPU", "reserved", "tokens/s", "MFU", "days", "mb", "ga", "batch", "w/g/opt/act",
                   "host GiB/node", "TFLOPs/GPU", "step s", "cost", "net %", "net Gbps"}
_SHORT = {"none": "-", "fsdp_full_shard": "fsdp-full", "fsdp_shard_grad_op": "fsdp-grad-op",
          "fsdp_hybrid": "fsdp-hybrid", "optimizer": "opt", "optimizer+params": "opt+params", "selective": "sel"}


def _table(columns: list[str], rows: list[list[str]], wide: bool) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  padding=(0, 1), collapse_padding=True)
    for i, col in enumerate(columns):
        width = max(len(col), *(len(r[i]) for r in rows))
        text = col not in NUMERIC_COLUMNS
        if col in TEXT_COLUMNS and not wide:  # wraps at its spaces, never inside a word
            longest_word = max(len(w) for r in rows for w in r[i].split() or [""])
            table.add_column(col, overflow="fold", min_width=max(longest_word, 6))
        else:
            table.add_column(col, justify="left" if text else "right", no_wrap=True, min_width=width)
    for row in rows:
        table.add_row(*row)
    return table


def _compact_layout(p) -> str:
    parts = ([f"tp{p.tp}"] if p.tp > 1 else []) + ([f"pp{p.pp}" + (f"v{p.vpp}" if p.vpp > 1 else "") + _split(p)] if p.pp > 1 else [])
    parts += [f"cp{p.cp}" + ("" if p.cp_impl == "ring" else f"-{p.cp_impl}")] if p.cp > 1 else []
    return " ".join(parts + _expert(p) + [f"dp{p.dp}"] + (["sp"] if p.sequence_parallel else []))


def _speed(perf) -> str:
    """tokens/s with the stack profile's cross-validated error (catalog/stacks)."""
    if perf is None:
        return ""
    band = f" +-{perf.expected_error_pct:.0f}%" if perf.expected_error_pct is not None else ""
    return f"{perf.tokens_per_s:,.0f}{band}"


def _must_fit(m, capacity: str) -> str:
    """What must fit (planner/memory_required.py; the reserved peak where it is not known) of the capacity,
    marked `*` where that is within the memory model's error of the capacity."""
    need = m.total_bytes if m.required_bytes is None else m.required_bytes
    return f"{_gib(need)}/{capacity}" + ("*" if m.tight else "")


def _memory_notes(fitting, where: str = "--wide: reserved, --explain") -> list[str]:
    """The footnotes under the ranked plans: what GiB/GPU shows, and what `*` means where a plan has it."""
    from planner.memory_required import MEMORY_ERROR_PCT

    notes = ["GiB/GPU: bytes alive at once at the peak (what must fit) / capacity; the reserved peak "
             f"nvidia-smi shows is higher ({where})."]
    if any(e.memory.tight for e in fitting):
        notes.append(f"* tight: within the memory model's error ({MEMORY_ERROR_PCT:g}% on measured peaks) of "
                     "capacity; it may not fit. --objective memory-headroom ranks by headroom.")
    return notes


def _error_note(fitting, wide: bool) -> str:
    """What the +-N% after tokens/s is, with each listed stack's error: the table names no stack unless wide."""
    errors, unknown = {}, []
    for e in fitting:
        if e.performance is not None and e.performance.expected_error_pct is not None:
            errors.setdefault(e.plan.stack, e.performance.expected_error_pct)
        elif e.performance is not None and e.plan.stack not in unknown:
            unknown.append(e.plan.stack)
    # a stack fitted on no measured runs (bundled) has no cross-validated error: say so, not a silent bare number
    none = (f"no +- on {', '.join(unknown)}: fitted on no measured runs, its error is unknown (plan calibrate, "
            "plan tune --stack-out fit one)") if unknown else ""
    if not errors:
        return f"tokens/s {none}." if none else ""
    stacks = ", ".join(f"{s} {pct:.0f}%" for s, pct in errors.items())
    where = "" if wide else "; --wide names each row's stack"
    return (f"tokens/s +-: the cross-validated error of the plan's stack profile ({stacks}; catalog/stacks{where})"
            + (f"; {none}." if none else "."))


def _compact_rows(fitting) -> tuple[list[str], list[list[str]]]:
    has_days = any(e.performance and e.performance.days for e in fitting)
    has_cost = any(e.performance and e.performance.cost is not None for e in fitting)  # --price-per-gpu-hour, --tokens
    columns = (["#", "layout", "shard/offload/ckpt", "mb x ga", "GiB/GPU", "tokens/s", "MFU"] + (["days"] if has_days else [])
               + (["cost"] if has_cost else []))
    rows = []
    for i, e in enumerate(fitting, 1):
        p, m, perf = e.plan, e.memory, e.performance
        strategy = "/".join(_SHORT.get(x, x) for x in (_sharding(p, short=True), p.offload, p.activation_checkpointing))
        row = [str(i), _compact_layout(p), strategy, f"{p.micro_batch} x {p.grad_accum}",
               _must_fit(m, f"{m.capacity_bytes / GIB:.0f}"),
               _speed(perf), f"{perf.mfu:.0%}" if perf else ""]
        if has_days:
            row.append(f"{perf.days:.1f}" if perf and perf.days else "")
        if has_cost:
            row.append(f"{perf.cost:,.0f}" if perf and perf.cost is not None else "")
        rows.append(row)
    return columns, rows


def _cost_note(report: EstimateReport) -> str:
    """A price without what to train gives no cost (the table showed none and said nothing)."""
    if report.scenario.price_per_gpu_hour is None or report.scenario.tokens is not None:
        return ""
    return "cost: --price-per-gpu-hour prices a run once --tokens says what to train (e.g. --tokens 100B)."


def _share(x: float | None) -> str:
    return "" if x is None else f"{x:.0%}"


def _gbps(x: float | None) -> str:
    return "" if x is None else f"{x:,.0f}"


def _wide_rows(fitting) -> tuple[list[str], list[list[str]]]:
    has_perf = any(e.performance for e in fitting)
    has_days = any(e.performance and e.performance.days for e in fitting)
    columns = ["#", "stack", "layout", "sharding", "offload", "ckpt", "mb", "ga", "batch", "GiB/GPU", "reserved",
               "w/g/opt/act", "host GiB/node"]
    if has_perf:
        columns += ["tokens/s", "TFLOPs/GPU", "MFU", "step s", "bottleneck", "net %", "net Gbps"] + (
            ["days", "cost"] if has_days else [])
    rows = []
    for i, e in enumerate(fitting, 1):
        p, m = e.plan, e.memory
        row = [str(i), p.stack, _knobs(p), _sharding(p), p.offload, p.activation_checkpointing, str(p.micro_batch),
               str(p.grad_accum), str(p.global_batch), _must_fit(m, _gib(m.capacity_bytes)), _gib(m.total_bytes),
               "/".join(_gib(x) for x in (m.weights_bytes, m.grads_bytes, m.optimizer_bytes, m.activations_bytes)),
               f"{m.host_bytes_per_node / GIB:.0f}"]
        if has_perf:
            perf, t = e.performance, e.time
            row += [_speed(perf), f"{perf.model_tflops_per_gpu:.0f}", f"{perf.mfu:.0%}",
                    f"{t.step_time_s:.2f}", t.bottleneck, _share(perf.network_share),
                    _gbps(perf.network_gbps_needed)] if perf and t else [""] * 7
            if has_days:
                row += [f"{perf.days:.1f}" if perf and perf.days else "",
                        f"{perf.cost:,.0f}" if perf and perf.cost is not None else ""]
        rows.append(row)
    return columns, rows


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
    if m.required_bytes is not None:  # the allocator flushes its cache before it fails
        mem.add_row("alive at once (must fit)", _gib(m.required_bytes), "")
    mem.add_row("capacity", _gib(m.capacity_bytes), "")
    mem.add_row("host RAM per node", f"{m.host_bytes_per_node / GIB:.0f} of {m.host_capacity_bytes_per_node / GIB:.0f}", "")
    console.print(mem)
    if e.time and e.performance:
        t, perf = e.time, e.performance
        speed = Table(title="step time and speed", title_justify="left", show_header=False)
        for k, v in t.model_dump().items():
            if v is not None:  # the MoE terms of a dense model
                speed.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
        for k, v in perf.model_dump().items():
            if v is not None:  # 403,765 tokens/s, not 4.038e+05
                speed.add_row(k, (f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}") if isinstance(v, float) else str(v))
        console.print(speed)
        console.print(_flops_table(report))
        line = network_line(report, e, f"plan #{rank}")
        if line:
            console.print(line, highlight=False)


def _flops_table(report: EstimateReport) -> Table:
    """Model FLOPs per token behind MFU (planner/flops_breakdown.py)."""
    from planner import flops_breakdown

    table = Table(title=f"model FLOPs per token at seq_len {report.seq_len} (MFU)", title_justify="left")
    for col, justify in (("term", "left"), ("GFLOP", "right"), ("counts", "left")):
        table.add_column(col, justify=justify)
    for term, gflop, what in flops_breakdown.rows(report.model, report.seq_len):
        table.add_row(term, f"{gflop:.4g}", what)
    return table


def print_csv(rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(sys.stdout, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)


def _seq_default(model) -> str:
    if model.train_seq_len:
        return (f" (the context the model was pretrained at; its maximum is {model.max_positions:,}: --seq-len to "
                "plan another)")
    return " (the model's maximum; --seq-len to plan another)"
