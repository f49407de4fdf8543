"""`plan probe`: measure this machine and write catalog entries `local` (GPU and cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from plan_cli.common import console, handle_errors, print_json

DEFAULT_DIR = Path("~/.config/plan/catalog")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)


@handle_errors
def probe(
    out: Annotated[Path, typer.Option(help="User catalog folder to write gpus/local.toml and clusters/local.toml into.")] = DEFAULT_DIR,
    nproc: Annotated[int, typer.Option(min=1, help="Ranks per node to plan for (CPU: each gets cores/nproc threads); >1 also measures all-reduce (on GPUs: over every visible GPU unless given).")] = 1,
    sizes: Annotated[Optional[str], typer.Option(help="Matmul sizes n (n x n x n), comma-separated.")] = None,
    copy_size: Annotated[str, typer.Option(help="Buffer size of the copy-bandwidth test.")] = "256M",
    allreduce_size: Annotated[str, typer.Option(help="Message size of the all-reduce test.")] = "64M",
    json_out: Annotated[bool, typer.Option("--json", help="Print the measurements as JSON.")] = False,
) -> None:
    """Measure matmul TFLOPs per dtype, memory bandwidth and (nproc > 1) all-reduce busbw."""
    from planner.errors import PlanError
    from trainer.collectives import parse_size, run_bench
    from trainer.probe import bench_ranks, gpu_entry, probe_device, torch_device_count, write_catalog

    try:
        size_list = [int(s) for s in sizes.split(",")] if sizes else None
    except ValueError:
        raise PlanError("sizes", f"{sizes!r}: give integers, e.g. 256,512,1024") from None
    if size_list is not None and any(n <= 0 for n in size_list):
        raise PlanError("sizes", "sizes must be positive")
    report = probe_device(nproc, size_list, parse_size(copy_size))
    ranks = bench_ranks(report.device, nproc, torch_device_count() if report.device == "cuda" else 0)
    if ranks > 1:
        bench = run_bench(["all_reduce"], [parse_size(allreduce_size)], ranks, progress=False)
        report.allreduce_busbw_gbps = bench.busbw_gbps["intranode"] if bench else None
    out = out.expanduser()
    gpu_path, cluster_path = write_catalog(report, out)
    if json_out:
        print_json(report)
        return
    entry = gpu_entry(report)
    console.print(f"{report.device_name}: " + ", ".join(f"{d} {t:.3f} TFLOPs" for d, t in sorted(report.peak_tflops.items()))
                  + f"; copy {report.copy_gbytes_per_s:.1f} GB/s"
                  + (f"; all-reduce busbw {report.allreduce_busbw_gbps:.1f} Gbps" if report.allreduce_busbw_gbps else ""),
                  highlight=False)
    console.print(f"wrote {gpu_path} and {cluster_path} ({len(entry['matmul_efficiency'])} efficiency points); "
                  f"use: plan estimate --gpu local --catalog {out}", highlight=False)
