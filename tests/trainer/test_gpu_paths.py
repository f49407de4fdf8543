"""The bundled trainer's CUDA paths on a real GPU: NCCL, the CUDA allocator's peaks, the device name the catalog
knows, SDPA's flash kernel, DeepSpeed ZeRO-2 and FSDP2 on cuda. Skipped without a GPU (the reason shows under
`pytest -rs`); the two-rank NCCL tests need two GPUs. Tiny model, few steps, no timing asserts.
The pure-function side of these paths runs everywhere: tests/trainer/test_gpu_names.py, test_device_rules.py."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hardware.catalog import load_catalog
from hardware.gpu_names import match_gpu_id

REPO = Path(__file__).resolve().parents[2]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")]
TWO_GPUS = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA GPUs for a two-rank NCCL run ({GPUS} here)")


def native_precision() -> str:
    """bf16 where the GPU has bf16 tensor cores, else fp16 (a V100: bf16 is refused there)."""
    return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"


def plan(tmp_path: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "plan_cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def plan_train(tmp_path: Path, *args: str, nproc: int = 1) -> dict:
    out = tmp_path / "result.json"
    p = plan(tmp_path, "train", "--model", "tiny", "--nproc", str(nproc), "--steps", "4", "--warmup-steps", "2",
             "--seq-len", "64", *args, "--json", str(out))
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    return json.loads(out.read_text())


def assert_ran_on_cuda(r: dict, world: int) -> None:
    assert r["status"] == "ok", r.get("error")
    assert r["device"] == f"cuda:{torch.cuda.get_device_name(0)}" and r["world_size"] == world
    assert len(r["losses"]) == 4 and all(math.isfinite(x) for x in r["losses"])
    m = r["memory"]
    total = torch.cuda.get_device_properties(0).total_memory
    assert 0 < m["cuda_peak_allocated_bytes"] <= m["cuda_peak_reserved_bytes"] <= total


@pytest.mark.parametrize("precision", list(dict.fromkeys([native_precision(), "fp32", "fp16"])))
def test_one_rank_plan_train_on_cuda(tmp_path, precision):
    """Peaks from the CUDA allocator, the model's state inside them, and the MFU peak of the catalog part the
    device's name is (or, for a GPU the catalog lacks, the measured matmul and the reason)."""
    r = plan_train(tmp_path, "--sharding", "none", "--precision", precision)
    assert_ran_on_cuda(r, 1)
    m = r["memory"]
    assert m["cuda_peak_allocated_bytes"] >= m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"]
    name = torch.cuda.get_device_name(0)
    gid = match_gpu_id(load_catalog(), name, torch.cuda.get_device_properties(0).total_memory / 2**30)
    if gid is not None:
        assert r["peak_source"] == f"catalog:{gid}"
        assert r["peak_tflops_per_device"] == load_catalog().gpus[gid].peak_tflops(precision)
    else:
        assert "is no catalog GPU" in r["peak_source"] and repr(name) in r["peak_source"]
    assert 0 < r["mfu"] <= 1


@pytest.mark.skipif(GPUS and torch.cuda.is_bf16_supported(including_emulation=False),
                    reason="this GPU has bf16 tensor cores (the refusal is for a V100-class GPU)")
def test_bf16_refused_on_a_gpu_without_bf16(tmp_path):
    p = plan(tmp_path, "train", "--model", "tiny", "--nproc", "1", "--steps", "3", "--precision", "bf16")
    assert p.returncode == 2 and "has no bf16 tensor cores" in p.stderr, p.stderr[-2000:]


def test_local_rank_picks_its_device(monkeypatch):
    from trainer.dist import pick_device

    monkeypatch.setenv("LOCAL_RANK", str(GPUS - 1))
    assert pick_device() == torch.device("cuda", GPUS - 1)
    assert torch.cuda.current_device() == GPUS - 1
    torch.cuda.set_device(0)


@pytest.mark.parametrize("args, backend", [
    (("--sharding", "none"), "ddp"),
    (("--sharding", "zero2"), "deepspeed"),
    (("--sharding", "zero2", "--offload", "optimizer"), "deepspeed"),  # DeepSpeedCPUAdam, pinned host memory
    (("--sharding", "fsdp_full_shard"), "fsdp2"),
    (("--sharding", "fsdp_full_shard", "--offload", "optimizer+params"), "fsdp2"),  # CPUOffloadPolicy, pinned
])
def test_backends_on_cuda(tmp_path, args, backend):
    """DDP / ZeRO-2 / FSDP2 over NCCL (two ranks where two GPUs are, else one)."""
    nproc = min(2, GPUS)
    r = plan_train(tmp_path, *args, "--precision", native_precision(), nproc=nproc)
    assert_ran_on_cuda(r, nproc)
    assert r["backend"] == backend and r["config"]["sharding"] == args[1]
    assert r["config"]["precision"] == native_precision()


@TWO_GPUS
def test_fsdp_fp16_with_cpu_offload_over_nccl(tmp_path):
    """FSDP2 fp16 with CPUOffloadPolicy on two GPUs: the gradient shards (and so the overflow flags) are on the CPU,
    the group NCCL alone. torch's GradScaler all-reduced that CPU flag through DTensor's found_inf handler ("No backend
    type associated with device type cpu", found by reading torch 2.13, not run on a GPU here); the trainer's
    ModelParallelScaler all-reduces it on the GPU. A first scale of 2**30 overflows every step of the tiny model (as in
    test_gpu_deepspeed_fp16.py): every step skipped, the scale halved each time, on both ranks alike."""
    r = plan_train(tmp_path, "--sharding", "fsdp_full_shard", "--offload", "optimizer+params", "--precision", "fp16",
                   "--loss-scale", str(2**30), nproc=2)
    assert_ran_on_cuda(r, 2)
    assert r["backend"] == "fsdp2" and r["config"]["offload"] == "optimizer+params"
    assert r["skipped_steps"] == [0, 1, 2, 3]
    assert r["loss_scales"] == [2.0**29, 2.0**28, 2.0**27, 2.0**26]


@TWO_GPUS
def test_two_rank_nccl_allreduce_bench(tmp_path):
    from trainer.collectives import bus_factor

    out = tmp_path / "bench.json"
    p = plan(tmp_path, "allreduce-bench", "--nproc", "2", "--sizes", "1M,16M",
             "--ops", "all_reduce,all_gather,reduce_scatter", "--json", str(out))
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    data = json.loads(out.read_text())
    assert (data["nproc"], data["backend"]) == (2, "nccl")
    assert len(data["results"]) == 6
    for row in data["results"]:
        assert row["error"] is None and row["time_s"] > 0
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(row["op"], 2))
    largest = max((r for r in data["results"] if r["op"] == "all_reduce"), key=lambda r: r["size_bytes"])
    assert data["busbw_gbps"] == {"intranode": largest["busbw_gbps"], "internode": None}
    assert largest["busbw_gbps"] > 0


def _qkv(heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, seq: int = 128):
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = lambda h: (2, h, seq, head_dim)  # noqa: E731
    return (torch.randn(shape(heads), device="cuda", dtype=dtype, generator=g),
            torch.randn(shape(kv_heads), device="cuda", dtype=dtype, generator=g),
            torch.randn(shape(kv_heads), device="cuda", dtype=dtype, generator=g))


@pytest.mark.skipif(GPUS and torch.cuda.get_device_capability(0) < (8, 0),
                    reason="FlashAttention-2 in SDPA needs compute capability 8.0+ (sm80)")
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(4, 4, 64), (8, 2, 128), (4, 4, 256)])
def test_sdpa_takes_the_flash_kernel_in_bf16(heads, kv_heads, head_dim):
    """The trainer's attention core ("flash" = SDPA) with only the flash backend allowed: it must not raise (GQA,
    head dims up to flash's 256) and must agree with the eager core; fp32 has no flash kernel (the
    restriction is real)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from trainer.model import AttentionCore, native_gqa

    q, k, v = _qkv(heads, kv_heads, head_dim, torch.bfloat16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = AttentionCore("flash")(q, k, v)
        if kv_heads != heads:  # flash takes GQA itself (enable_gqa): K/V are not repeated to n_heads
            assert native_gqa(q, k, v)
    ref = AttentionCore("eager")(q.float(), k.float(), v.float())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    with pytest.raises(RuntimeError), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        AttentionCore("flash")(q.float(), k.float(), v.float())


def test_sdpa_efficient_kernel_in_fp16():
    """What `flash` means on a V100 (catalog/gpus/v100-32gb.toml): SDPA's memory-efficient kernel, sm50+."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from trainer.model import AttentionCore

    q, k, v = _qkv(4, 4, 64, torch.float16)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        out = AttentionCore("flash")(q, k, v)
    torch.testing.assert_close(out.float(), AttentionCore("eager")(q.float(), k.float(), v.float()),
                               atol=2e-2, rtol=2e-2)


def test_tiny_gpt_trains_a_step_under_the_fused_kernel_only():
    """The whole model under autocast (DDP's path) with SDPA restricted to its fused kernels: no fallback to
    the math kernel is needed for forward and backward."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from trainer.model import GPT, loss_fn
    from trainer.spec import resolve_spec

    dtype = torch.bfloat16 if native_precision() == "bf16" else torch.float16
    model = GPT(resolve_spec("tiny"), "flash").cuda()
    x = torch.randint(0, 500, (2, 64), device="cuda")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]), \
            torch.autocast("cuda", dtype=dtype):
        loss = loss_fn(model(x), x)
    loss.backward()
    assert math.isfinite(loss.item())
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.is_cuda and torch.isfinite(g).all() for g in grads)


def test_probe_on_the_gpu(tmp_path):
    """plan probe's measurements on cuda: the device's own name, bf16 only where it is native, a measured
    peak no higher than the catalog part's datasheet peak."""
    from trainer.probe import probe_device

    report = probe_device(1, [1024, 2048], 64 * 2**20, rounds=1, min_time_s=0.05)
    name = torch.cuda.get_device_name(0)
    assert report.device == "cuda" and report.device_name == name and report.host_to_device_gbps > 0
    assert ("bf16" in report.peak_tflops) is torch.cuda.is_bf16_supported(including_emulation=False)
    gid = match_gpu_id(load_catalog(), name, report.memory_gib)
    if gid is not None:
        gpu = load_catalog().gpus[gid]
        assert report.peak_tflops["fp16"] <= gpu.peak_tflops("fp16") * 1.05


@TWO_GPUS
@pytest.mark.parametrize("sharding", ["zero2", "none"])
def test_srun_one_gpu_per_task(tmp_path, sharding):
    """`srun -n 2 --gpus-per-task=1`, emulated: each task sees ONE GPU (cuda:0) while its SLURM_LOCALID is 0 or 1;
    DeepSpeed (zero2) reads LOCAL_RANK as the device index (set_device(1): "invalid device ordinal" before)."""
    from trainer.dist import free_port

    env = os.environ | {"PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                        "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "2",
                        "SLURM_NODEID": "0"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(var, None)
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "plan_cli.main", "train", "--model", "tiny", "--nproc", "2", "--steps", "4",
           "--warmup-steps", "2", "--seq-len", "64", "--sharding", sharding, "--precision", native_precision(),
           "--json", str(out)]
    procs = [subprocess.Popen(cmd, env=env | {"SLURM_PROCID": str(i), "SLURM_LOCALID": str(i),
                                              "CUDA_VISIBLE_DEVICES": str(i)},  # HIP reads it too
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
             for i in range(2)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(log[-3000:] for log in logs)
    r = json.loads(out.read_text())
    assert r["status"] == "ok" and r["world_size"] == 2 and r["device"].startswith("cuda:"), r.get("error")


@TWO_GPUS
def test_probe_measures_all_reduce_over_the_visible_gpus(tmp_path):
    """`plan probe` on a multi-GPU node: the local entry's intranode link is the measured all-reduce busbw over
    every visible GPU, not the HBM copy rate x 8 (~6x an H100's NVLink)."""
    p = plan(tmp_path, "probe", "--out", str(tmp_path / "cat"), "--sizes", "1024,2048", "--copy-size", "64M",
             "--allreduce-size", "16M", "--json")
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    report = json.loads(p.stdout[p.stdout.index("{"):])
    assert report["allreduce_busbw_gbps"] and report["allreduce_busbw_gbps"] > 0
    assert f"intranode_gbps = {round(report['allreduce_busbw_gbps'], 3)!r}" in (tmp_path / "cat/gpus/local.toml").read_text()
