"""Launch paths a first cluster user hits (srun steps emulated by srun(1)'s OUTPUT ENVIRONMENT VARIABLES): the
rendezvous port of an srun step, a sequence longer than the learned positions, a function rank's failure text,
the all-reduce bench's ranks under srun."""

import json
import os
import time

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.errors import PlanError
from trainer.dist import env_from_slurm, rendezvous_line, slurm_master_port, step_ranks

TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_WORLD_SIZE")
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_GTIDS", "SLURM_DISTRIBUTION", "SLURM_NTASKS",
              "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
              "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
              "SLURM_NODELIST")
runner = CliRunner()


@pytest.fixture
def slurm(monkeypatch):
    for var in TORCH_VARS + SLURM_VARS:  # set first: monkeypatch then also undoes what env_from_slurm writes
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)

    def task(job="4242", step="0", procid="0", **extra):
        """One task of `srun -N 2 --ntasks-per-node=8` (16 tasks) of job `job`, step `step`."""
        values = {"SLURM_STEP_NUM_TASKS": "16", "SLURM_PROCID": procid, "SLURM_LOCALID": str(int(procid) % 8),
                  "SLURM_NODEID": str(int(procid) // 8), "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
                  "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_JOB_ID": job, "SLURM_STEP_ID": step} | extra
        for k, v in values.items():
            monkeypatch.setenv(k, v)
    return task


def _port(slurm, **task) -> int:
    for var in TORCH_VARS:
        os.environ.pop(var, None)
    slurm(**task)
    env_from_slurm(None)
    return int(os.environ["MASTER_PORT"])


def test_two_jobs_sharing_a_first_node_get_different_ports(slurm):
    """Both used 29500: the second job's rank 0 could not bind its store, or its ranks joined the first job's."""
    ports = {job: _port(slurm, job=job) for job in ("4242", "4243", "5641")}
    assert len(set(ports.values())) == 3
    assert _port(slurm, job="4242", step="1") != ports["4242"]  # two steps of one job at once (srun --overlap)
    assert _port(slurm, job="4242", procid="13") == ports["4242"]  # every task of the step agrees
    for port in ports.values():
        assert 1024 < port < 29500 and port < 32768  # unprivileged; not torchrun's default; not an ephemeral port


def test_the_port_given_wins(slurm, monkeypatch):
    monkeypatch.setenv("MASTER_PORT", "23456")
    slurm()
    assert env_from_slurm(None) == "MASTER_PORT" and os.environ["MASTER_PORT"] == "23456"
    for var in TORCH_VARS:
        os.environ.pop(var, None)
    assert env_from_slurm("gpu01:24000") == "--rdzv-endpoint" and os.environ["MASTER_PORT"] == "24000"
    for var in TORCH_VARS:
        os.environ.pop(var, None)
    env_from_slurm("gpu01")  # a host without a port: the job's port (it was 29500)
    assert (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])) == ("gpu01", slurm_master_port(os.environ)[0])


def test_the_launch_line_names_the_port_and_its_source(slurm):
    slurm(job="777", step="3")
    where = env_from_slurm("127.0.0.1")
    line = rendezvous_line(where)
    assert f"127.0.0.1:{os.environ['MASTER_PORT']}" in line and "SLURM_JOB_ID 777 step 3" in line
    assert "rank 0 of 16 (8 per node)" in line and "\n" not in line
    assert slurm_master_port({}) == (29500, "torch's default (no SLURM_JOB_ID)")


def test_seq_len_past_learned_positions_is_refused_before_launch():
    """tiny has 128 learned positions: --seq-len 256 was found by each rank after the launch."""
    from trainer.config import TrainConfig, validate_layout
    from trainer.spec import resolve_spec

    cfg = TrainConfig(model="tiny", seq_len=256)
    with pytest.raises(PlanError) as e:
        validate_layout(cfg, resolve_spec("tiny"))
    assert e.value.field == "seq_len" and "--seq-len 256" in e.value.message and "at most 128" in e.value.message
    validate_layout(TrainConfig(model="tiny", seq_len=128), resolve_spec("tiny"))


def test_plan_train_seq_len_refusal_is_one_line(tmp_path):
    t0 = time.perf_counter()
    res = runner.invoke(app, ["train", "--model", "tiny", "--seq-len", "256", "--steps", "3",
                              "--json", str(tmp_path / "r.json")], env={"COLUMNS": "400"})
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert "--seq-len 256" in lines[0] and "at most 128" in lines[0]
    assert time.perf_counter() - t0 < 10, "refused before any rank starts"
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "bad_config"


def test_a_function_ranks_failure_prints_its_message(tmp_path, monkeypatch):
    """torch's record() wrapper writes an escaped exception as {"message": {"message": ..., "extraInfo":
    {"py_callstack": ...}}}: ProcessFailure.message is that dict, which the launch error printed whole."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
    from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

    from trainer.launch import failure_text

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    try:
        raise RuntimeError("NCCL error in: init.cc:123, unhandled system error\nLast error: socket timeout")
    except RuntimeError as e:
        ErrorHandler().record_exception(e)
    failure = ProcessFailure(local_rank=1, pid=99, exitcode=1, error_file=str(error_file))
    assert isinstance(failure.message, dict)  # torch's own reading of its file
    assert failure_text(failure.message) == "RuntimeError: NCCL error in: init.cc:123, unhandled system error"
    stack_only = {"message": "", "extraInfo": {"py_callstack": "Traceback ...\n  File x\nValueError: bad\n"}}
    assert failure_text(stack_only) == "ValueError: bad"
    assert failure_text("Signal 9 (SIGKILL) received by PID 7") == "Signal 9 (SIGKILL) received by PID 7"


def test_bench_ranks_under_srun_are_the_steps(slurm):
    """`srun -N 2 --ntasks-per-node=8 plan allreduce-bench`: the step's 16 tasks, 8 per node (the default --nproc 2
    was ignored there); --nproc 8 agrees with them."""
    from plan_cli.bench import _ranks

    assert _ranks(None, 1) == (2, 1) and _ranks(4, 1) == (4, 1)  # no launcher: ours starts --nproc ranks
    slurm(procid="3")
    assert step_ranks() == (16, 8)
    assert _ranks(None, 1) == (8, 2) and _ranks(8, 1) == (8, 2)
    assert "RANK" not in os.environ  # read, not written


@pytest.mark.timeout(60)  # the old code started the bench as rank 0 of 16 and waited for the others
@pytest.mark.parametrize("nproc", ["1", "2"])
def test_bench_nproc_other_than_the_steps_is_one_line(slurm, nproc):
    """--nproc 1 with 16 tasks was refused as 'needs at least 2 ranks'; --nproc 2 was ignored."""
    slurm(procid="0")
    res = runner.invoke(app, ["allreduce-bench", "--nproc", nproc, "--sizes", "1M"], env={"COLUMNS": "400"})
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert f"--nproc {nproc}, but the launcher (srun / torchrun) started 8 rank(s) on this node" in lines[0]


def _closest(local_rank: int, env: dict, local_world: int = 8) -> int:
    from trainer.dist import local_device_index, visible_devices

    listed = visible_devices(env, rocm="ROCR_VISIBLE_DEVICES" in env)
    return local_device_index(local_rank, len(env.get("ROCR_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES", "")).split(",")),
                              listed=listed, local_world=local_world)


def test_gpu_bind_closest_maps_each_rank_to_its_own_gpu():
    """`srun --ntasks-per-node=8 --gpus-per-node=8 --gpu-bind=closest` with tasks 0-3 on socket 0: each task sees
    its socket's 4 GPUs; local rank 5 was refused ("local rank 5 but 4 GPUs are visible")."""
    near = {r: "0,1,2,3" if r < 4 else "4,5,6,7" for r in range(8)}
    picked = [int(near[r].split(",")[_closest(r, {"CUDA_VISIBLE_DEVICES": near[r]})]) for r in range(8)]
    assert picked == list(range(8))  # every rank its own GPU, the one whose node index is its local rank
    assert _closest(6, {"ROCR_VISIBLE_DEVICES": "6,7"}) == 0  # ROCm: Slurm's ROCR_VISIBLE_DEVICES
    assert _closest(3, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, local_world=4) == 3  # the job's GPUs, seen by all 4 tasks


@pytest.mark.parametrize("local_rank, env", [
    (1, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}),  # srun's default block:cyclic put task 1 on socket 1: by position it
    (4, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),  # took GPU 5, which task 5 took too
    (5, {"CUDA_VISIBLE_DEVICES": "GPU-1a,GPU-2b,GPU-3c,GPU-4d"}),  # UUIDs: no node index
    (5, {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "0,1,2,3"}),  # HIP renumbers what ROCR left
])
def test_gpu_bind_without_a_mapping_is_one_line_naming_the_variable(local_rank, env):
    with pytest.raises(PlanError) as e:
        _closest(local_rank, env)
    assert e.value.field == "nproc" and "\n" not in str(e.value) and "--gpus-per-task=1" in str(e.value)
    assert "VISIBLE_DEVICES" in str(e.value) and f"local rank {local_rank} of 8" in str(e.value)


def test_bench_nnodes_other_than_the_steps_is_refused_naming_both(slurm):
    """`srun -N 2 plan allreduce-bench --nnodes 4` measured the step's 2 nodes without a word (the bench counts its
    nodes); an --nnodes that disagrees is refused naming both numbers, one that agrees (or is left out) runs."""
    from plan_cli.bench import _ranks

    slurm(procid="3")
    assert _ranks(None, 2) == (8, 2) and _ranks(None, 1) == (8, 2)
    with pytest.raises(PlanError) as e:
        _ranks(None, 4)
    assert e.value.field == "nnodes" and "--nnodes 4" in str(e.value) and "on 2 node(s)" in str(e.value)


@pytest.mark.timeout(60)
def test_bench_nnodes_refusal_is_one_line(slurm):
    slurm(procid="0")
    res = runner.invoke(app, ["allreduce-bench", "--nnodes", "4", "--sizes", "1M"], env={"COLUMNS": "400"})
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert "--nnodes 4, but the launcher (srun / torchrun) started ranks on 2 node(s)" in lines[0]


@pytest.mark.timeout(120)
def test_train_nnodes_other_than_the_steps_is_a_bad_config(slurm, tmp_path):
    """`plan train` under the same step: the same refusal (it too took the launcher's nodes silently)."""
    slurm(procid="0")
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["train", "--model", "tiny", "--nnodes", "3", "--steps", "1", "--json", str(out)],
                        env={"COLUMNS": "400"})
    assert res.exit_code != 0
    assert "--nnodes 3, but the launcher (srun / torchrun) started ranks on 2 node(s)" in res.output + res.stderr
