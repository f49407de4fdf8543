"""SLURM export: header values, time limit from the prediction, `bash -n`, and a dry run of
the script with SLURM's two commands replaced by recorders (no SLURM on this machine)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

import pytest

from hardware.models import GPU
from planner.errors import PlanError
from planner.exports import deepspeed_config, sbatch_script, slurm_time, time_limit_s
from planner.exports.slurm import parse_slurm_time
from planner.rendezvous import slurm_port
from planner.scenario import ExecutionPlan
from planner.system import System

GPU_A100 = GPU(id="a100-sxm-80", name="A100", vendor="nvidia", hbm_gib=80, hbm_gbytes_per_s=2039,
               fp32_tflops=19.5, fp16_tflops=312, bf16_tflops=312, intranode_gbps=2400, source="test")
SYSTEM = System(gpu=GPU_A100, cluster_id="dgx-a100", gpus=32, gpus_per_node=8, host_ram_gib=1024,
                host_to_gpu_gbps=256, intranode_gbps=2400, internode_gbps=1600)
PLAN = ExecutionPlan(dp=32, sharding="zero2", offload="optimizer", micro_batch=2, grad_accum=8)


def header(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", script, flags=re.M))


def test_time_limit_from_prediction():
    assert time_limit_s(2.0, 1000) == pytest.approx(2.0 * 1000 * 1.2 + 600)
    assert slurm_time(59) == "00:01:00"
    assert slurm_time(3 * 86400 + 3600 + 1) == "3-01:01:00"
    assert parse_slurm_time("3-01:01:00") == 3 * 86400 + 3660
    assert parse_slurm_time("90") == 5400 and parse_slurm_time("02:00:00") == 7200
    with pytest.raises(PlanError) as e:
        parse_slurm_time("two hours")
    assert e.value.field == "time"


def test_header_and_bash_syntax(tmp_path):
    limit = slurm_time(time_limit_s(1.5, 20_000))
    script = sbatch_script(PLAN, SYSTEM, model="13b", time_limit=limit, cpus_per_task=96,
                           partition="gpu", account="proj-1", steps=20_000,
                           deepspeed_config=deepspeed_config(PLAN))
    h = header(script)
    assert h == {"job-name": "plan", "nodes": "4", "ntasks-per-node": "1", "gpus-per-node": "8",
                 "cpus-per-task": "96", "time": limit, "output": "%x-%j.out", "partition": "gpu",
                 "account": "proj-1"}
    assert limit == "10:10:00"
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in script
    assert "--rdzv-backend c10d" in script


def test_cpu_target_asks_for_no_gpus():
    script = sbatch_script(ExecutionPlan(dp=2), SYSTEM.model_copy(update={"gpus": 2}), model="tiny",
                           time_limit="00:10:00", cpus_per_task=2, target="cpu")
    assert "gpus-per-node" not in header(script)


def test_bad_names_are_refused():
    with pytest.raises(PlanError) as e:
        sbatch_script(PLAN, SYSTEM, model="7b", time_limit="1:00:00", cpus_per_task=8, partition="gpu; rm -rf /")
    assert e.value.field == "partition"


def test_script_runs_under_recorded_slurm_commands(tmp_path):
    """Run the script with `scontrol` and `srun` as recorders: MASTER_ADDR is the first host,
    the DeepSpeed JSON lands on disk intact, and srun gets the torchrun command."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "node-a\\nnode-b\\n"\n')
    (bin_dir / "srun").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$RECORD"\nenv | grep -E "^(MASTER_|RDZV_ID|OMP_)" | sort > "$RECORD.env"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    ds = deepspeed_config(PLAN)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(PLAN, SYSTEM, model="13b", time_limit="01:00:00", cpus_per_task=96,
                                    steps=50, deepspeed_config=ds))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node-[a-b]",
           "SLURM_JOB_ID": "4242", "SLURM_NNODES": "4", "SLURM_SUBMIT_DIR": str(tmp_path),
           "RECORD": str(tmp_path / "srun.args")}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "srun.args").read_text().splitlines()
    assert argv[:6] == ["--kill-on-bad-exit=1", "torchrun", "--nnodes", "4", "--nproc-per-node", "8"]
    assert argv[argv.index("--rdzv-endpoint") + 1] == f"node-a:{slurm_port(4242)}"
    assert argv[argv.index("--rdzv-id") + 1] == "4242"
    ds_path = argv[argv.index("--deepspeed-config") + 1]
    assert ds_path == str(tmp_path / "ds_config.4242.json")
    assert json.loads(open(ds_path).read()) == ds
    assert "OMP_NUM_THREADS=12" in (tmp_path / "srun.args.env").read_text()
    assert shlex.join(argv[argv.index("-m"):][:2]) == "-m trainer"


def port_after(line: str, env: dict[str, str]) -> str:
    """What bash makes of the script's MASTER_PORT line under `set -euo pipefail`, in the environment `env`."""
    proc = subprocess.run(["bash", "-c", f'set -euo pipefail; {line}; printf "%s" "$MASTER_PORT"'],
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_port_line_is_the_trainers_port_of_the_job():
    """Two jobs whose first node is the same got MASTER_PORT=29500 both; the script's line gives each job the port
    `plan train` under the job's first srun step derives (trainer/dist.py), and keeps a MASTER_PORT exported."""
    from trainer.dist import slurm_master_port

    script = sbatch_script(PLAN, SYSTEM, model="13b", time_limit="01:00:00", cpus_per_task=96)
    line = next(x for x in script.splitlines() if x.startswith("MASTER_PORT="))
    assert "29500" not in line and "SLURM_JOB_ID" in line
    ports = [port_after(line, {"SLURM_JOB_ID": job}) for job in ("4242", "4243", "1405")]
    assert ports == [str(slurm_master_port({"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0"})[0])
                     for job in ("4242", "4243", "1405")]
    assert len(set(ports)) == 3 and all(15000 <= int(p) < 29000 for p in ports)
    assert port_after(line, {"SLURM_JOB_ID": "4242", "MASTER_PORT": "31337"}) == "31337"
    fixed = sbatch_script(PLAN, SYSTEM, model="13b", time_limit="01:00:00", cpus_per_task=96, master_port=23456)
    assert "MASTER_PORT=23456" in fixed.splitlines()
