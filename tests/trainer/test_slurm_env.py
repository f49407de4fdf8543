"""Which SLURM process is a rank, and of what: trainer/dist.py reads srun's step variables (srun(1), OUTPUT
ENVIRONMENT VARIABLES: SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST are set in every task of
a step). An sbatch batch script has SLURM_NTASKS / SLURM_PROCID=0 / SLURM_LOCALID=0 but no step variables (an env
dump from a batch script: gist jerinphilip/212b3814264c3b8da512afc2cfda4bcb): it is one process, not rank 0."""

import os

import pytest

from planner.errors import PlanError
from trainer.dist import env_from_slurm, first_host, launched_externally, launcher_ranks, tasks_on_node, tasks_per_node

TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SLURM_VARS = ("SLURM_GTIDS", "SLURM_DISTRIBUTION", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE",
              "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NODELIST",
              "SLURM_JOB_NODELIST", "SLURM_NODELIST")


@pytest.fixture
def slurm(monkeypatch):
    for var in TORCH_VARS + SLURM_VARS + ("GROUP_WORLD_SIZE", "GROUP_RANK"):  # set first: monkeypatch then also undoes what env_from_slurm writes
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


@pytest.mark.parametrize("tasks, text, words", [
    ("8", "5,3", "5,3: the step's nodes hold different numbers of tasks (5, 3)"),
    ("7", "3,2(x2)", "3,2(x2): the step's nodes hold different numbers of tasks (3, 2, 2)"),
    ("20", "8(x2),4", "the step's nodes hold different numbers of tasks (8, 8, 4)"),
    ("8", "4(x3)", "4(x3): 12 tasks in all, but SLURM_STEP_NUM_TASKS is 8"),
])
def test_srun_steps_the_trainer_cannot_run_are_refused_naming_the_variable(slurm, tasks, text, words):
    """"5,3": node 0 read 5 local ranks (1 node of 8 ranks), node 1 read 3 (2 nodes): each rank computed its own
    nnodes and data-parallel size. Refused in one line naming srun's variable, on every rank."""
    var = "SLURM_STEP_TASKS_PER_NODE"
    slurm(SLURM_NTASKS=tasks, SLURM_STEP_NUM_TASKS=tasks, SLURM_PROCID="6", SLURM_LOCALID="1", SLURM_NODEID="1",
          SLURM_NTASKS_PER_NODE="4", SLURM_STEP_NODELIST="n[1-3]", **{var: text})
    with pytest.raises(PlanError) as e:
        env_from_slurm("127.0.0.1:29512")
    assert e.value.field == var and words in str(e.value) and "--ntasks-per-node" in str(e.value)
    assert "RANK" not in os.environ


def test_srun_even_steps_in_compressed_form(slurm):
    slurm(SLURM_STEP_NUM_TASKS="24", SLURM_PROCID="13", SLURM_LOCALID="5", SLURM_NODEID="1",
          SLURM_STEP_TASKS_PER_NODE="8,8(x2)", SLURM_TASKS_PER_NODE="8(x4)", SLURM_STEP_NODELIST="n[1-3]")
    env_from_slurm("127.0.0.1:29513")
    assert (os.environ["LOCAL_WORLD_SIZE"], os.environ["WORLD_SIZE"]) == ("8", "24")
    assert launcher_ranks() == (24, 8)


def test_uneven_srun_step_is_a_bad_config_result_before_any_rank_starts(slurm, tmp_path):
    from trainer.config import TrainConfig
    from trainer.launch import launch

    slurm(SLURM_STEP_NUM_TASKS="7", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
          SLURM_STEP_TASKS_PER_NODE="3,2(x2)", SLURM_STEP_NODELIST="n[1-3]")
    r = launch(TrainConfig(model="tiny", run={"steps": 3, "warmup_steps": 1, "json_out": str(tmp_path / "r.json")}))
    assert r.status == "bad_config" and r.error.startswith("SLURM_STEP_TASKS_PER_NODE: 3,2(x2): the step's nodes")


@pytest.mark.parametrize("env, words", [
    ({"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "4"}, "4 ranks on this node, but WORLD_SIZE 6 is no multiple of it"),
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "3"},
     "2 ranks on this node x GROUP_WORLD_SIZE 3 nodes, but WORLD_SIZE is 8"),  # torchruns with 4, 2, 2 ranks
])
def test_torchrun_nodes_with_different_rank_counts_are_refused(env, words):
    with pytest.raises(PlanError) as e:
        launcher_ranks(env)
    assert e.value.field == "LOCAL_WORLD_SIZE" and words in str(e.value)
    assert launcher_ranks({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "2"}) == (16, 8)
    assert launcher_ranks({"WORLD_SIZE": "4"}) == (4, 4)


def test_one_task_step_and_torchrun(slurm):
    slurm(SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1", SLURM_PROCID="0")  # srun -n 1 / salloc's interactive step
    assert not launched_externally()
    slurm(RANK="3", WORLD_SIZE="8")  # torchrun, also when srun started it
    assert launched_externally()


@pytest.mark.parametrize("text, node, tasks", [
    ("8", 0, 8), ("8(x2)", 1, 8), ("5,3", 0, 5), ("5,3", 1, 3), ("2(x3),1", 2, 2), ("2(x3),1", 3, 1),
    ("", 0, None), ("8(x", 0, None), ("5,3", 2, None), ("8(x2)", -1, None)])  # no node 2: it read as node 1's 3
def test_tasks_on_node(text, node, tasks):
    assert tasks_on_node(text, node) == tasks


@pytest.mark.parametrize("text, counts", [
    ("8(x2),4", [8, 8, 4]), ("3,2(x2)", [3, 2, 2]), (" 4 (x2)", None), ("4(x2)", [4, 4]), ("0", None),
    ("2(x0)", None), ("8,", None), ("x", None)])
def test_tasks_per_node_expands_slurms_compressed_form(text, counts):
    assert tasks_per_node(text) == counts


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


def _step(slurm, **extra):
    """Task 1 of `srun -N 2 -n 8`: on node 1 under --distribution=cyclic, on node 0 under block."""
    slurm(SLURM_STEP_NUM_TASKS="8", SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_NODEID="1",
          SLURM_STEP_TASKS_PER_NODE="4(x2)", SLURM_STEP_NODELIST="n[1-2]", **extra)


@pytest.mark.parametrize("extra, var, words", [
    ({"SLURM_GTIDS": "1,3,5,7", "SLURM_DISTRIBUTION": "cyclic"}, "SLURM_GTIDS", "1,3,5,7: srun placed non-consecutive"),
    ({"SLURM_GTIDS": "0,1,4,5", "SLURM_DISTRIBUTION": "plane=2"}, "SLURM_GTIDS", "0,1,4,5"),
    ({"SLURM_DISTRIBUTION": "cyclic:block"}, "SLURM_DISTRIBUTION", "cyclic:block: srun deals consecutive ranks"),
])
def test_srun_cyclic_placement_is_refused_for_the_trainer(slurm, extra, var, words):
    """Rank 1 on node 1: the trainer's tensor-parallel / FSDP-hybrid groups (consecutive ranks, one node's) spanned
    the nodes without a word. Every rank refuses (each node's SLURM_GTIDS is non-consecutive)."""
    _step(slurm, **extra)
    with pytest.raises(PlanError) as e:
        env_from_slurm(None, block_ranks=True)
    assert e.value.field == var and words in str(e.value) and "--distribution=block" in str(e.value)


@pytest.mark.parametrize("extra", [{"SLURM_GTIDS": "0,1,2,3", "SLURM_DISTRIBUTION": "block:cyclic"}, {},
                                   {"SLURM_GTIDS": "4,5,6,7", "SLURM_DISTRIBUTION": "cyclic"}])  # GTIDS decide
def test_srun_block_placement_is_taken(slurm, extra):
    _step(slurm, **extra)
    env_from_slurm("[::1]:29514", block_ranks=True)
    assert (os.environ["RANK"], os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("1", "::1", "29514")


def test_the_bench_takes_any_placement(slurm):
    _step(slurm, SLURM_GTIDS="1,3,5,7", SLURM_DISTRIBUTION="cyclic")  # it groups ranks by host (trainer/nodes.py)
    env_from_slurm(None)
    assert os.environ["RANK"] == "1"


@pytest.mark.parametrize("env, owner", [
    ({}, True), ({"SLURM_PROCID": "0"}, True), ({"RANK": "0", "SLURM_PROCID": "3"}, True),  # torchrun in srun
    ({"SLURM_PROCID": "5"}, False), ({"RANK": "2"}, False)])
def test_only_rank_0_writes_the_result_file(env, owner):
    from trainer.launch import result_owner

    assert result_owner(env) is owner
