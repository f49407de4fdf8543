"""An `ExecutionPlan` as a SLURM sbatch script: one torchrun per node (srun), c10d rendezvous
at the first node of the allocation, the bundled trainer as the workload.

A DeepSpeed plan carries its JSON config inside the script (a here-document), so the script
is the one file to submit.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from planner.errors import PlanError
from planner.exports.common import Recipe, Target, check_target
from planner.exports.torchrun import render, torchrun_command
from planner.rendezvous import shell_port_line
from planner.scenario import ExecutionPlan
from planner.system import System

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")


def time_limit_s(step_time_s: float, steps: int, *, margin: float = 1.2, startup_s: float = 600.0) -> float:
    """Wall-clock limit for `steps` optimizer steps: predicted time x margin + start-up."""
    assert step_time_s > 0 and steps > 0, (step_time_s, steps)
    return step_time_s * steps * margin + startup_s


def slurm_time(seconds: float) -> str:
    """SLURM's `D-HH:MM:SS` (rounded up to whole minutes, at least one minute)."""
    minutes = max(1, math.ceil(seconds / 60))
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:00" if days else f"{hours:02d}:{minutes:02d}:00"


def parse_slurm_time(text: str) -> int:
    """Seconds in a SLURM time string (`MM`, `HH:MM:SS`, `D-HH[:MM[:SS]]`); PlanError if bad."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not m:
        raise PlanError("time", f"{text!r} is not a SLURM time (allowed: MM, HH:MM:SS, D-HH:MM:SS)")
    d, a, b, c = (int(g) if g else None for g in m.groups())
    if d is None and b is None:
        seconds = a * 60  # bare minutes
    elif d is None:
        seconds = a * 3600 + b * 60 + (c or 0) if c is not None else a * 60 + b  # HH:MM:SS or MM:SS
    else:
        seconds = d * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if seconds <= 0:
        raise PlanError("time", "must be positive")
    return seconds


def sbatch_script(
    plan: ExecutionPlan,
    system: System,
    *,
    model: str,
    time_limit: str,
    cpus_per_task: int,
    target: Target = "gpu",
    job_name: str = "plan",
    partition: str | None = None,
    account: str | None = None,
    steps: int | None = None,
    recipe: Recipe | None = None,
    deepspeed_config: dict[str, Any] | None = None,
    master_port: int | None = None,
    notes: list[str] | None = None,
) -> str:
    """The sbatch script text. `cpus_per_task` is the cores of a node (one task per node). `master_port`: a fixed
    rendezvous port; None (the default) derives it from $SLURM_JOB_ID (planner/rendezvous.py)."""
    target = check_target(target)
    for field, value in (("job_name", job_name), ("partition", partition), ("account", account)):
        if value is not None and not _SAFE_NAME.match(value):
            raise PlanError(field, f"{value!r}: use letters, digits and _ . + - (at most 64)")
    if cpus_per_task <= 0:
        raise PlanError("cpus_per_task", "must be > 0")
    parse_slurm_time(time_limit)
    per_node = min(system.gpus_per_node, plan.gpus)
    nodes = plan.gpus // per_node
    ds_file = "$DS_CONFIG" if deepspeed_config is not None else None
    launch = torchrun_command(
        plan, system, model=model, steps=steps, recipe=recipe, deepspeed_config_file=ds_file,
        nnodes="$SLURM_NNODES")
    header = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={cpus_per_task}",
        f"#SBATCH --time={time_limit}",
        "#SBATCH --exclusive",
        "#SBATCH --output=%x-%j.out",
    ]
    if target == "gpu":
        header.insert(4, f"#SBATCH --gpus-per-node={per_node}")
    if partition:
        header.append(f"#SBATCH --partition={partition}")
    if account:
        header.append(f"#SBATCH --account={account}")
    body = [
        "",
        *(f"# {line}" for line in (notes or [])),
        "# One task per node runs torchrun, which starts the ranks of that node; the ranks meet",
        "# at a c10d rendezvous on the first node of the allocation.",
        "set -euo pipefail",
        "",
        # read every host name (`| head -n 1` can SIGPIPE scontrol and fail under pipefail)
        'mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'MASTER_ADDR="${HOSTS[0]}"',
        "# The rendezvous port: a MASTER_PORT exported before sbatch (sbatch passes the environment), else one from",
        "# the job id, as `plan train` under srun derives it (15000-28999): two jobs sharing a first node do not",
        "# both take 29500.",
        shell_port_line() if master_port is None else f"MASTER_PORT={int(master_port)}",
        'RDZV_ID="$SLURM_JOB_ID"',
        f"OMP_NUM_THREADS={max(1, cpus_per_task // per_node)}",
        "export MASTER_ADDR MASTER_PORT RDZV_ID OMP_NUM_THREADS",
    ]
    if deepspeed_config is not None:
        body += [
            "",
            'DS_CONFIG="${SLURM_SUBMIT_DIR:-$PWD}/ds_config.${SLURM_JOB_ID}.json"',
            "cat > \"$DS_CONFIG\" <<'PLAN_DS_JSON'",
            json.dumps(deepspeed_config, indent=2),
            "PLAN_DS_JSON",
        ]
    body += ["", "srun --kill-on-bad-exit=1 " + render(launch), ""]
    return "\n".join(header + body)
