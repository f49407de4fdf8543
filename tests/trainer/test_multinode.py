"""Two "nodes" on one machine: two launcher agents (or SLURM's srun, emulated) each start the
ranks of their node; they meet at a loopback rendezvous. Real gloo runs, 2 x 2 ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.dist import free_port
from trainer.result import TrainResult

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def env() -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def two_nodes(argv: list[str], tmp_path: Path, nproc: tuple[int, int] = (2, 2),
              shared_json: bool = False) -> list[subprocess.CompletedProcess]:
    """Run `argv` + node flags as two agents (node 1 started first: rank 0 must still be node 0's).
    The two must agree on a port before either binds it: when another process took it in between,
    node 0 says so (exit 2, trainer/ranks.py) and both start once more on another port."""
    for attempt in (1, 2):
        port = free_port()
        procs = []
        for node in (1, 0):
            out = open(tmp_path / f"node{node}.log", "w")
            procs.append((node, out, subprocess.Popen(
                [*argv, "--nnodes", "2", "--node-rank", str(node), "--nproc", str(nproc[node]), "--rdzv-endpoint",
                 f"127.0.0.1:{port}", "--json", str(tmp_path / ("r.json" if shared_json else f"r{node}.json"))],
                env=env(), stdout=out, stderr=subprocess.STDOUT, text=True)))
        done = []
        for node, out, p in sorted(procs):
            rc = p.wait(timeout=400)
            out.close()
            done.append(subprocess.CompletedProcess(p.args, rc, (tmp_path / f"node{node}.log").read_text(), ""))
            if node == 0 and rc == 2 and "is already in use on this node" in done[0].stdout and attempt == 1:
                procs[0][2].kill()  # node 1 waits on the held port
                procs[0][2].wait()
                procs[0][1].close()
                break
        else:
            return done
    return done


def test_two_agents_train_with_hybrid_sharding(tmp_path):
    node0, node1 = two_nodes([sys.executable, "-m", "trainer", "--model", "tiny", "--sharding", "fsdp_hybrid",
                              "--steps", "3", "--seq-len", "32"], tmp_path)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stdout[-2000:] + node1.stdout[-2000:]
    r = TrainResult.model_validate_json((tmp_path / "r0.json").read_text())
    assert r.status == "ok" and r.world_size == 4 and r.steps == 3
    assert r.config["sharding"] == "fsdp_hybrid" and r.config["dp"] == 4
    assert "rank 0 writes the result" in node1.stdout


def test_nodes_sharing_one_json_keep_node_0s_result(tmp_path):
    """The same command line on every node, its --json in a directory they share (a home directory): node 1 wrote
    its empty 'ok' over node 0's result (and cleared it at start)."""
    node0, node1 = two_nodes([sys.executable, "-m", "trainer", "--model", "tiny", "--steps", "3", "--seq-len", "32"],
                             tmp_path, shared_json=True)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stdout[-2000:] + node1.stdout[-2000:]
    r = TrainResult.model_validate_json((tmp_path / "r.json").read_text())
    assert r.status == "ok" and r.world_size == 4 and len(r.losses) == 3 and r.step_time_s_median > 0


def test_allreduce_bench_intra_and_inter_node(tmp_path):
    node0, node1 = two_nodes([sys.executable, "-m", "plan_cli.main", "allreduce-bench", "--sizes", "1M,4M"], tmp_path)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stdout[-2000:] + node1.stdout[-2000:]
    report = json.loads((tmp_path / "r0.json").read_text())
    assert report["nnodes"] == 2 and report["nproc"] == 4 and report["gpus_per_node"] == 2
    assert report["busbw_gbps"]["intranode"] > 0 and report["busbw_gbps"]["internode"] > 0


def test_allreduce_bench_refuses_nodes_with_different_rank_counts(tmp_path):
    """Node 0 starts 2 ranks, node 1 one: the per-node figure has no one group size; every node says so in one
    line, exit 2 (torch's elastic traceback around it is not shown)."""
    node0, node1 = two_nodes([sys.executable, "-m", "plan_cli.main", "allreduce-bench", "--sizes", "1M"], tmp_path,
                             nproc=(2, 1))
    for node in (node0, node1):
        assert node.returncode == 2, node.stdout[-2000:]
        line = node.stdout.strip().splitlines()[-1]
        assert line.startswith("error: nproc: the nodes hold different numbers of ranks (") and "node 0): 2" in line \
            and "node 1): 1" in line, node.stdout[-2000:]
    assert "Traceback" not in node0.stdout + node1.stdout
    assert not (tmp_path / "r0.json").exists()


def test_slurm_script_srun_path_runs_two_nodes(tmp_path):
    """The exported sbatch script, with `srun` starting its command once per node here."""
    from hardware.catalog import load_catalog
    from planner.exports import sbatch_script
    from planner.scenario import ExecutionPlan
    from planner.system import System

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "127.0.0.1\\n127.0.0.1\\n"\n')
    # srun: drop its own options, start the command on each "node", fail if one fails
    (bin_dir / "srun").write_text(
        '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\npids=()\n'
        'for n in 0 1; do SLURM_NODEID=$n SLURM_PROCID=$n "$@" > "$LOGS/srun$n.log" 2>&1 & pids+=($!); done\n'
        'rc=0\nfor p in "${pids[@]}"; do wait "$p" || rc=1; done\nexit $rc\n')
    (bin_dir / "torchrun").write_text(f'#!/bin/bash\nexec {sys.executable} -m torch.distributed.run "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    system = System(gpu=load_catalog().gpus["h100-80gb"], gpus=4, gpus_per_node=2, host_ram_gib=16,
                    host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)
    plan = ExecutionPlan(dp=4, sharding="fsdp_hybrid", precision="fp32", seq_len=32, micro_batch=1)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(plan, system, model="tiny", time_limit="00:10:00", cpus_per_task=2,
                                    target="cpu", steps=3, master_port=free_port()))
    e = env() | {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "n[0-1]",
                 "SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_SUBMIT_DIR": str(tmp_path), "LOGS": str(tmp_path)}
    proc = subprocess.run(["bash", str(script)], env=e, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    logs = "".join((tmp_path / f"srun{n}.log").read_text() for n in (0, 1))
    assert proc.returncode == 0, proc.stderr[-2000:] + logs[-3000:]
    assert "ok:" in logs and "ms/step" in logs, logs[-3000:]
