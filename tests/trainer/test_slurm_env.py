"""Which SLURM process is a rank, and of what: trainer/dist.py reads srun's step variables (srun(1), OUTPUT
ENVIRONMENT VARIABLES: SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST are set in every task of
a step). An sbatch batch script has SLURM_NTASKS / SLURM_PROCID=0 / SLURM_LOCALID=0 but no step variables (an env
dump from a batch script: gist jerinphilip/212b3814264c3b8da512afc2cfda4bcb): it is one process, not rank 0."""

import os

import pytest

from trainer.dist import env_from_slurm, first_host, launched_externally, tasks_on_node

TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SLURM_VARS = ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE",
              "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST",
              "SLURM_JOB_NODELIST", "SLURM_NODELIST")


@pytest.fixture
def slurm(monkeypatch):
    for var in TORCH_VARS + SLURM_VARS:  # set first: monkeypatch then also undoes what env_from_slurm writes
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)

    def set_env(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, v)
    return set_env


def test_a_batch_script_is_one_process_not_rank_0(slurm):
    """#SBATCH --nodes=1 --ntasks-per-node=8, then `plan train --nproc 8` (or `plan tune`, whose trials run the
    trainer) in the script itself: it was taken for rank 0 of 8 and waited for 7 ranks that never came."""
    slurm(SLURM_NTASKS="8", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NTASKS_PER_NODE="8",
          SLURM_TASKS_PER_NODE="8", SLURM_JOB_NODELIST="gpu01")
    assert not launched_externally()
    env_from_slurm(None)
    assert "RANK" not in os.environ and "WORLD_SIZE" not in os.environ


def test_srun_tasks_without_ntasks_per_node(slurm):
    """`srun -N 2 -n 16 --gpus-per-node=8`: no SLURM_NTASKS_PER_NODE (only --ntasks-per-node sets it); the node's
    8 ranks come from the step's tasks per node (LOCAL_WORLD_SIZE was 1: 16 "nodes" of one rank)."""
    slurm(SLURM_NTASKS="16", SLURM_STEP_NUM_TASKS="16", SLURM_PROCID="9", SLURM_LOCALID="1", SLURM_NODEID="1",
          SLURM_STEP_TASKS_PER_NODE="8(x2)", SLURM_TASKS_PER_NODE="8(x2)", SLURM_STEP_NODELIST="gpu[07-08]")
    assert launched_externally()
    env_from_slurm("127.0.0.1:29511")
    assert {k: os.environ[k] for k in TORCH_VARS} == {
        "RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}


def test_srun_uneven_tasks_per_node(slurm):
    slurm(SLURM_NTASKS="8", SLURM_STEP_NUM_TASKS="8", SLURM_PROCID="6", SLURM_LOCALID="1", SLURM_NODEID="1",
          SLURM_STEP_TASKS_PER_NODE="5,3", SLURM_NTASKS_PER_NODE="4", SLURM_STEP_NODELIST="n[1-2]")
    env_from_slurm("127.0.0.1:29512")
    assert (os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"], os.environ["WORLD_SIZE"]) == ("1", "3", "8")


def test_one_task_step_and_torchrun(slurm):
    slurm(SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1", SLURM_PROCID="0")  # srun -n 1 / salloc's interactive step
    assert not launched_externally()
    slurm(RANK="3", WORLD_SIZE="8")  # torchrun, also when srun started it
    assert launched_externally()


@pytest.mark.parametrize("text, node, tasks", [
    ("8", 0, 8), ("8(x2)", 1, 8), ("5,3", 0, 5), ("5,3", 1, 3), ("2(x3),1", 2, 2), ("2(x3),1", 3, 1),
    ("", 0, None), ("8(x", 0, None)])
def test_tasks_on_node(text, node, tasks):
    assert tasks_on_node(text, node) == tasks


@pytest.mark.parametrize("nodes, host", [
    ("gpu[03-04,07],cpu1", "gpu03"), ("gpu[07]", "gpu07"), ("a,b", "a"), ("node7", "node7"), ("n[1-2],m3", "n1")])
def test_first_host_without_scontrol(nodes, host):
    assert first_host(nodes) == host


def test_nproc_other_than_the_launchers_is_refused():
    """srun --ntasks-per-node=1 with `plan train --nproc 8`: one rank per node ran, on its first GPU, without a word."""
    from planner.errors import PlanError
    from trainer.config import check_launcher_ranks

    with pytest.raises(PlanError, match=r"--nproc 8, but the launcher \(srun / torchrun\) started 1 rank") as e:
        check_launcher_ranks(8, 1)
    assert e.value.field == "nproc"
    check_launcher_ranks(1, 8)  # --nproc left out: the launcher decides
    check_launcher_ranks(8, 8)
