"""Measure this machine's device (a GPU, or the CPU share of one rank when there is none) and
write catalog entries `gpus/local.toml` and `clusters/local.toml` for `plan estimate --gpu local`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

DTYPES = ("fp32", "bf16", "fp16")
MAX_MATMUL_S = 1.0  # one matmul slower than this: larger sizes of that dtype are not measured


class MatmulPoint(BaseModel):
    dtype: str
    n: int
    gemm_gflop: float
    tflops: float


class ProbeReport(BaseModel):
    device: str
    device_name: str
    threads: int | None
    ranks_per_node: int
    memory_gib: float
    matmul: list[MatmulPoint]
    peak_tflops: dict[str, float]
    copy_gbytes_per_s: float
    host_to_device_gbps: float | None
    allreduce_busbw_gbps: float | None


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(n: int, dtype_name: str, device, min_time_s: float = 0.2) -> float:
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    _sync(device)
    reps, best = 1, float("inf")
    deadline = time.perf_counter() + min_time_s
    while time.perf_counter() < deadline or reps < 3:
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        reps += 1
    return 2 * n**3 / best / 1e12


def copy_gbytes_per_s(device, size_bytes: int) -> float:
    """Large-copy bandwidth: bytes read + bytes written per second (STREAM 'copy' convention)."""
    import torch

    src = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * size_bytes / best / 1e9


def host_to_device_gbps(device, size_bytes: int = 256 * 2**20) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    src = torch.ones(size_bytes // 4, dtype=torch.float32).pin_memory()
    dst = torch.empty(size_bytes // 4, dtype=torch.float32, device=device)
    dst.copy_(src, non_blocking=True)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src, non_blocking=True)
    _sync(device)
    return size_bytes * 8 * 5 / (time.perf_counter() - t0) / 1e9


def supported(dtype_name: str, device) -> bool:
    import torch

    if device.type == "cuda" and dtype_name == "bf16":  # not an emulated bf16 (a V100's): no peak to write
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return True


def probe_device(nproc: int, sizes: list[int] | None, copy_bytes: int, rounds: int = 3,
                 min_time_s: float = 0.1) -> ProbeReport:
    """Measure matmul throughput per dtype over a few shapes and the copy bandwidth."""
    import torch

    gpu = torch.cuda.is_available()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    threads = None
    if not gpu:  # one rank's share of the cores: what each of `nproc` CPU ranks gets
        threads = max(1, (os.cpu_count() or 1) // nproc)
        torch.set_num_threads(threads)
    sizes = sizes or ([1024, 2048, 4096, 8192] if gpu else [256, 512, 1024])
    # a robust peak: every shape in `rounds` interleaved rounds, the best of each (other
    # processes' load only ever slows a round down; one 512^3 matmul under load was ~2x low)
    # a dtype the CPU only emulates (fp16 without AVX512-FP16/AMX: ~100x slower than fp32) stops growing where
    # one matmul would take over MAX_MATMUL_S (the last size's time x the n^3 ratio): larger sizes add nothing
    # to its flat peak and took minutes (the smallest size is always measured)
    best: dict[tuple[str, int], float] = {}
    skip: set[tuple[str, int]] = set()
    for _ in range(rounds):
        for dtype in DTYPES:
            if not supported(dtype, device):
                continue
            last = None
            for n in sorted(sizes):
                if (dtype, n) in skip or (last and last[1] * (n / last[0]) ** 3 > MAX_MATMUL_S):
                    skip.add((dtype, n))
                    continue
                tflops = matmul_tflops(n, dtype, device, min_time_s)
                best[dtype, n] = max(best.get((dtype, n), 0.0), tflops)
                last = (n, 2 * n**3 / (tflops * 1e12))
    points = [MatmulPoint(dtype=d, n=n, gemm_gflop=2 * n**3 / 1e9, tflops=t) for (d, n), t in best.items()]
    peaks = {d: max(p.tflops for p in points if p.dtype == d) for d in {p.dtype for p in points}}
    if gpu:
        from trainer.metrics import cuda_identity, gpu_label

        gpu = cuda_identity(device)  # ROCm without amdgpu.ids: no name, its gfx target and CUs instead
        name, mem_gib = gpu_label(gpu["name"], gpu["arch"], gpu["compute_units"]), gpu["memory_gib"]
    else:
        name = _cpu_name()
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return ProbeReport(device=device.type, device_name=name, threads=threads, ranks_per_node=nproc,
                       memory_gib=mem_gib, matmul=points, peak_tflops=peaks,
                       copy_gbytes_per_s=copy_gbytes_per_s(device, copy_bytes),
                       host_to_device_gbps=host_to_device_gbps(device), allreduce_busbw_gbps=None)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def bench_ranks(device_type: str, nproc: int, gpus: int) -> int:
    """Ranks of probe's all-reduce: --nproc where given (> 1); on GPUs by default every visible one. Without a
    measurement the entry's intranode link is the copy rate x 8: on a CPU the ranks' shared memory, on a GPU its
    HBM copy (~3 TB/s on an H100, 6x its NVLink), no model of the GPU-to-GPU link the planner prices."""
    if nproc > 1:
        return nproc
    return gpus if device_type == "cuda" else 1


def torch_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def efficiency_dtype(report: ProbeReport) -> str:
    """The dtype the efficiency curve describes: bf16 on GPUs (training), fp32 on CPUs."""
    return "bf16" if report.device == "cuda" and "bf16" in report.peak_tflops else "fp32"


def gpu_entry(report: ProbeReport) -> dict:
    d = efficiency_dtype(report)
    peak = report.peak_tflops[d]
    eff = [{"gemm_gflop": round(p.gemm_gflop, 6), "fraction": round(min(1.0, p.tflops / peak), 4)}
           for p in report.matmul if p.dtype == d]
    share = f", {report.threads} threads = one of {report.ranks_per_node} ranks" if report.threads else ""
    # a CPU rank's "memory" is its share of the RAM; intranode link: measured busbw, else the copy rate
    mem = report.memory_gib / (report.ranks_per_node if report.device == "cpu" else 1)
    intranode = report.allreduce_busbw_gbps or report.copy_gbytes_per_s * 8
    entry = {
        "name": f"local: {report.device_name}{share}",
        "vendor": "local",
        "hbm_gib": round(mem, 3),
        "hbm_gbytes_per_s": round(report.copy_gbytes_per_s, 3),
        "fp32_tflops": round(report.peak_tflops["fp32"], 6),
        "fp16_tflops": round(report.peak_tflops.get("fp16", report.peak_tflops["fp32"]), 6),
        "intranode_gbps": round(intranode, 3),
        "matmul_efficiency": eff,
        "source": f"plan probe on {time.strftime('%Y-%m-%d')} (measured: matmul {sorted(report.peak_tflops)}, "
                  f"copy bandwidth{', all-reduce busbw' if report.allreduce_busbw_gbps else ''})",
    }
    if "bf16" in report.peak_tflops:
        entry["bf16_tflops"] = round(report.peak_tflops["bf16"], 6)
    return entry


def cluster_entry(report: ProbeReport) -> dict:
    import torch

    host_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpus = torch.cuda.device_count() if report.device == "cuda" else report.ranks_per_node
    h2d = report.host_to_device_gbps or report.copy_gbytes_per_s * 8
    net = report.allreduce_busbw_gbps or report.copy_gbytes_per_s * 8
    return {
        "name": f"this machine ({report.device_name})",
        "gpu": "local",
        "gpus_per_node": gpus,
        "host_ram_gib": round(host_gib, 3),
        "host_to_gpu_gbps": round(h2d, 3),
        "internode_gbps": round(net, 3),
        "cpu_cores_per_node": os.cpu_count() or 1,
        "nodes": 1,
        "source": "plan probe (single node; internode_gbps is a placeholder equal to the local busbw)",
    }


def to_toml(table: dict) -> str:
    lines = []
    for k, v in table.items():
        if isinstance(v, list):
            items = ", ".join("{ " + ", ".join(f"{ik} = {_val(iv)}" for ik, iv in item.items()) + " }" for item in v)
            lines.append(f"{k} = [{items}]")
        else:
            lines.append(f"{k} = {_val(v)}")
    return "\n".join(lines) + "\n"


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_catalog(report: ProbeReport, out_dir: Path) -> tuple[Path, Path]:
    (out_dir / "gpus").mkdir(parents=True, exist_ok=True)
    (out_dir / "clusters").mkdir(parents=True, exist_ok=True)
    gpu_path, cluster_path = out_dir / "gpus" / "local.toml", out_dir / "clusters" / "local.toml"
    gpu_path.write_text("# written by `plan probe`\n" + to_toml(gpu_entry(report)))
    cluster_path.write_text("# written by `plan probe`\n" + to_toml(cluster_entry(report)))
    return gpu_path, cluster_path
