"""`plan allreduce-bench`'s table and last line keep a small reading's digits: gloo at 2K over 2 CPU ranks printed
'0.0 Gbps' (read as nothing measured) and a 1.5K size printed as '1536'."""

from trainer.collectives import BenchReport, CollectiveResult

from plan_cli.bench import _gbps, _size, _summary


def test_a_small_busbw_keeps_its_digits():
    assert _gbps(0.0307) == "0.031" and _gbps(1.94) == "1.9" and _gbps(3846.2) == "3,846"
    assert _size(1536) == "1,536 B" and _size(2048) == "2K" and _size(64 * 2**20) == "64M"


def test_the_summary_line_of_a_cpu_bench():
    res = [CollectiveResult(op="all_reduce", size_bytes=2048, time_s=5e-4, algbw_gbps=0.0328, busbw_gbps=0.0328)]
    report = BenchReport(nproc=2, nnodes=1, gpus_per_node=2, backend="gloo", results=res,
                         busbw_gbps={"intranode": 0.0328, "internode": None})
    line = _summary(report)
    assert line.startswith("All-reduce bus bandwidth within one node: 0.033 Gbps at 2K over 2 ranks (gloo)"), line
