"""`plan allreduce-bench`: collective bandwidth between N local ranks (or many nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli import options as opts
from plan_cli.common import console, handle_errors, writable_file


def register(app: typer.Typer) -> None:
    app.command("allreduce-bench")(allreduce_bench)


@handle_errors
def allreduce_bench(
    nproc: Annotated[Optional[int], typer.Option(
        min=1, max=1024, help="Ranks on this node (default: 2; under srun / torchrun: the tasks the launcher started)")] = None,
    nnodes: opts.Nnodes = 1,
    node_rank: opts.NodeRank = 0,
    rdzv_endpoint: opts.RdzvEndpoint = None,
    sizes: Annotated[str, typer.Option(help="Comma-separated message sizes, e.g. 1M,16M,256M.")] = "1M,4M,16M,64M,256M,1G",
    ops: Annotated[str, typer.Option(help="Comma-separated: all_reduce, all_gather, reduce_scatter.")] = "all_reduce",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the summary JSON here.")] = None,
    progress_file: Annotated[Optional[Path], typer.Option(hidden=True, help="Keep the step (sizes done, the one "
                                                          "running) here as JSON, for `plan tune` watching")] = None,
) -> None:
    """Measure algbw and busbw (nccl-tests definitions) over a ladder of message sizes."""
    from planner.errors import PlanError, unknown
    from trainer.collectives import OPS, parse_size, run_bench
    from trainer.config import check_launch

    op_list = [o.strip() for o in ops.split(",") if o.strip()]
    for o in op_list:
        if o not in OPS:
            raise unknown("ops", o, OPS)
    if not op_list:
        raise PlanError("ops", f"give at least one of {', '.join(OPS)}")
    size_list = [parse_size(s) for s in sizes.split(",") if s.strip()]
    if not size_list:
        raise PlanError("sizes", "give at least one size")
    check_launch(nnodes, node_rank, rdzv_endpoint)
    nproc, nnodes = _ranks(nproc, nnodes)
    if nproc * nnodes < 2:  # one rank moves nothing: its busbw is 0, which --network-from refuses
        raise PlanError("nproc", f"a collective needs at least 2 ranks; got --nproc {nproc} x --nnodes {nnodes}")
    if json_out is not None:  # before the measurement, not after it (a missing folder lost it)
        writable_file(json_out, "json", "net.json")
    report = run_bench(op_list, size_list, nproc, nnodes, node_rank, rdzv_endpoint, progress=console.is_terminal,
                       progress_file=str(progress_file) if progress_file else None)
    if report is None:
        return  # not the node of rank 0
    from rich.table import Table

    table = Table(title=f"{report.backend}: {report.nproc} ranks on {report.nnodes} node(s)")
    for col in ("op", "size", "time (ms)", "algbw (Gbps)", "busbw (Gbps)"):
        table.add_column(col, justify="right")
    for r in report.results:
        if r.time_s is None:
            table.add_row(r.op, _size(r.size_bytes), "-", "-", f"unsupported: {r.error}")
        else:
            table.add_row(r.op, _size(r.size_bytes), f"{r.time_s * 1e3:.3f}", _gbps(r.algbw_gbps), _gbps(r.busbw_gbps))
    console.print(table)
    if json_out is not None:
        json_out.write_text(report.model_dump_json(indent=2))
    console.print(_summary(report, json_out), highlight=False, soft_wrap=True)  # a path is never cut


def _ranks(nproc: int | None, nnodes: int) -> tuple[int, int]:
    """(ranks per node, nodes): under srun / torchrun the step's tasks, an --nproc / --nnodes given there checked
    against them (they were ignored, and --nproc 1 refused as one rank while 16 tasks ran); else --nproc (default 2)
    x --nnodes."""
    from trainer.config import check_launcher_nodes, check_launcher_ranks
    from trainer.dist import step_ranks

    step = step_ranks()
    if step is None:
        return (2 if nproc is None else nproc), nnodes
    world, local = step
    check_launcher_ranks(nproc, local, default=None)
    check_launcher_nodes(nnodes, world // local)  # an --nnodes 4 in a 2-node step was dropped without a word
    return local, world // local


def _size(n: int) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n:,} B"


def _gbps(v: float) -> str:
    """1,234, 12.3, 0.031: a small CPU reading keeps its digits (gloo at 2K printed '0.0 Gbps')."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2g}"


def _summary(report, json_out: Path | None = None) -> str:
    """The last line: what the planner will use (`plan estimate --network-from`), in words, and where the
    JSON it reads went (or how to write it)."""
    reduces = [r for r in report.results if r.op == "all_reduce" and r.busbw_gbps is not None]
    if not reduces:
        return (f"No all-reduce was measured over {report.backend} ({report.nproc} ranks): "
                "nothing for `plan estimate --network-from`.")
    largest = max(reduces, key=lambda r: r.size_bytes)
    where = "within one node" if report.nnodes == 1 else f"between {report.nnodes} nodes"
    then = (f"wrote {json_out}: plan with `plan estimate ... --network-from {json_out}`." if json_out is not None
            else "save it with --json FILE for `plan estimate --network-from FILE`.")
    return (f"All-reduce bus bandwidth {where}: {_gbps(largest.busbw_gbps)} Gbps at {_size(largest.size_bytes)} "
            f"over {report.nproc} ranks ({report.backend}); {then}")
