"""Real multi-rank runs of the bundled trainer (gloo on CPU): every backend, status handling."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import TrainConfig
from trainer.launch import collect, launch
from trainer.result import TrainResult

FIXTURE = str(Path(__file__).parent / "fixtures" / "hamlet.txt")
pytestmark = pytest.mark.slow


def run(out, **kw) -> TrainResult:
    base = dict(model="tiny", nproc=2, steps=4, warmup_steps=2, seq_len=32, timeout_s=240, json_out=out)
    result = launch(TrainConfig(**(base | kw)))
    on_disk = TrainResult.model_validate_json(Path(out).read_text())
    assert on_disk.status == result.status
    return result


def assert_ok(r: TrainResult, world=2):
    assert r.status == "ok", r.error
    assert r.world_size == world and len(r.losses) == r.steps
    assert r.step_time_s_median > 0 and r.tokens_per_s > 0 and 0 < r.mfu <= 1  # never above 1, whatever the load (the peak is robust)
    assert r.memory.params_bytes > 0 and r.memory.saved_activations_bytes > 0


@pytest.mark.parametrize("kw, backend", [
    (dict(sharding="none", precision="bf16", grad_accum=2, micro_batch=2), "ddp"),
    (dict(sharding="zero1", precision="bf16", activation_checkpointing="selective", attention="eager"), "deepspeed"),
    (dict(sharding="zero3", activation_checkpointing="full", optimizer="sgd"), "deepspeed"),
    (dict(sharding="fsdp_shard_grad_op", precision="bf16", grad_accum=2), "fsdp2"),
    (dict(sharding="fsdp_hybrid", precision="bf16_pure"), "fsdp2"),
    (dict(sharding="fsdp_full_shard", offload="optimizer+params", optimizer="sgd"), "fsdp2"),
    (dict(sharding="zero2", optimizer="adafactor"), "deepspeed"),
    (dict(sharding="none", precision="fp16"), "ddp"),
])
def test_backends_run(out_json, kw, backend):
    r = run(out_json, **kw)
    assert_ok(r)
    assert r.backend == backend
    for k, v in kw.items():
        assert r.config[k] == v
    assert r.config["global_batch"] == r.config["micro_batch"] * r.config["grad_accum"] * 2


def test_deepspeed_offload_with_cpu_adam(out_json):
    # DeepSpeedCPUAdam (prebuilt by set-up). ZeRO-3 with parameter offload runs in ~25 s beside two busy
    # cores, but its many small gloo collectives slow down >15x at load ~14 (seen: 400 s): a hang guard
    # near pytest's own 600 s limit, and the fewest steps that still give a median step time
    r = run(out_json, sharding="zero3", offload="optimizer+params", precision="bf16", steps=3, warmup_steps=1,
            timeout_s=560)
    assert_ok(r)
    assert r.config["offload"] == "optimizer+params"


def test_deepspeed_json_config_runs_as_is(out_json, tmp_path):
    conf = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "train_batch_size": 8,
            "zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(conf))
    r = run(out_json, deepspeed_config=str(path))
    assert_ok(r)
    assert (r.config["sharding"], r.config["precision"], r.config["micro_batch"], r.config["grad_accum"]) == \
        ("zero2", "bf16", 2, 2)
    assert r.tokens_per_step == 2 * 2 * 2 * 32


def test_loss_falls_on_real_text(out_json):
    r = run(out_json, nproc=1, steps=30, warmup_steps=2, micro_batch=8, lr=3e-3, data=FIXTURE)
    assert r.status == "ok", r.error
    first, last = sum(r.losses[:3]) / 3, sum(r.losses[-3:]) / 3
    assert last < first - 1.5, r.losses


@pytest.mark.parametrize("kw, field", [(dict(offload="optimizer"), "offload"), (dict(tp=3), "tp"),
                                       (dict(sharding="fsdp_full_shard", optimizer="adafactor"), "optimizer")])
def test_bad_config_is_reported_without_launching(out_json, kw, field):
    r = run(out_json, **kw)
    assert r.status == "bad_config" and r.error.startswith(field)


def test_oom_is_classified(out_json, tmp_path):
    huge = tmp_path / "huge.json"  # a 10^7 x 10^4 fp32 embedding: 400 GB, beyond this machine
    huge.write_text(json.dumps(dict(name="huge", n_layers=1, hidden=10240, n_heads=8, vocab=10_000_000,
                                    max_positions=64)))
    r = run(out_json, model=str(huge), nproc=1)
    assert r.status == "oom", r.error
    assert "allocate" in r.error or "Memory" in r.error


def test_timeout_is_classified(out_json):
    r = run(out_json, nproc=2, steps=100000, warmup_steps=2, timeout_s=8)
    assert r.status == "timeout", r.error


def test_result_file_wins_over_exit_code(tmp_path):
    """A rank that aborts at exit after rank 0 wrote its result leaves the run ok."""
    out = tmp_path / "r.json"
    out.write_text(TrainResult(status="ok", steps=3).model_dump_json())
    r = collect(TrainConfig(json_out=str(out)), str(out), {"0": 0, "1": 250}, "rank 1: exit 250")
    assert r.status == "ok" and r.exit_codes["1"] == 250
    out.unlink()
    r = collect(TrainConfig(json_out=str(out)), str(out), {"0": -9}, "rank 0: exit -9 Signal 9")
    assert r.status == "crash"


def test_python_m_trainer_subprocess(out_json):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "trainer", "--model", "tiny", "--nproc", "2", "--sharding",
                        "zero2", "--steps", "3", "--seq-len", "32", "--json", out_json],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert TrainResult.model_validate_json(Path(out_json).read_text()).status == "ok"
    p = subprocess.run([sys.executable, "-m", "trainer", "--tp", "3", "--json", out_json],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and "tp" in p.stderr


def test_plan_train_cli(out_json):
    from typer.testing import CliRunner

    from plan_cli.main import app

    res = CliRunner().invoke(app, ["train", "--model", "tiny", "--nproc", "2", "--sharding", "fsdp_full_shard",
                                   "--steps", "3", "--seq-len", "32", "--json", out_json])
    assert res.exit_code == 0, res.output
    assert "ok:" in res.output
    assert json.loads(Path(out_json).read_text())["backend"] == "fsdp2"
    res = CliRunner().invoke(app, ["train", "--tp", "4"])
    assert res.exit_code == 2


def test_under_torchrun(out_json):
    """Started by torchrun, the trainer joins as a rank instead of launching its own."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "trainer",
                        "--sharding", "zero1", "--steps", "3", "--seq-len", "32",
                        "--json", out_json], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = TrainResult.model_validate_json(Path(out_json).read_text())
    assert r.status == "ok" and r.world_size == 2


def test_under_srun_an_other_nproc_is_refused(out_json):
    """`srun -N 2 --ntasks-per-node=1 python -m trainer --nproc 8`, task 0 (srun's step variables, emulated):
    each node ran ONE rank on its first GPU and --nproc 8 was dropped without a word. It stops before any
    rendezvous. (torchrun's own parser takes --nproc as its --nproc-per-node, so there the clash cannot arise.)"""
    env = dict(os.environ, OMP_NUM_THREADS="1", SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2", SLURM_PROCID="0",
               SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_STEP_TASKS_PER_NODE="1(x2)", MASTER_ADDR="127.0.0.1",
               MASTER_PORT="29499")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(var, None)
    p = subprocess.run([sys.executable, "-m", "trainer", "--nproc", "8", "--steps", "3", "--seq-len", "32",
                        "--json", out_json], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    r = TrainResult.model_validate_json(Path(out_json).read_text())
    assert r.status == "bad_config" and "--nproc 8, but the launcher (srun / torchrun) started 1 rank" in r.error
