"""The rendezvous port of a SLURM job step, one formula for both of its users: `plan train` / `plan allreduce-bench`
under srun (trainer/dist.py, in Python) and the exported sbatch script / accelerate YAML (planner/exports, the same
in shell). planner/ imports no trainer (docs: design.md), so the trainer imports it from here.

A fixed 29500 made the second of two jobs whose first node is the same fail to bind (EADDRINUSE) or its ranks join
the first's store. Any 1400 consecutive job ids, each with steps 0-9, get different ports."""

from __future__ import annotations

TORCH_DEFAULT_PORT = 29500  # torchrun's / accelerate's default --master_port (no SLURM job to derive one from)
SLURM_PORT_BASE = 15000  # 15000-28999: unprivileged, below torchrun's 29500 and Linux's ephemeral 32768-60999
SLURM_PORT_JOBS = 1400  # (net.ipv4.ip_local_port_range's default): a port the OS hands out is never one of ours
SLURM_PORT_STEPS = 10


def slurm_port(job_id: int, step_id: int = 0) -> int:
    """Port of step `step_id` of job `job_id` (srun(1) OUTPUT ENVIRONMENT VARIABLES SLURM_JOB_ID, SLURM_STEP_ID)."""
    assert job_id >= 0 and step_id >= 0, (job_id, step_id)
    return SLURM_PORT_BASE + (job_id % SLURM_PORT_JOBS) * SLURM_PORT_STEPS + step_id % SLURM_PORT_STEPS


def shell_port_line(var: str = "MASTER_PORT") -> str:
    """bash: `var` as the user exported it, else slurm_port($SLURM_JOB_ID, 0): the port of the job's first srun step,
    the one an sbatch script's `srun` starts (a `plan train` under that step derives the same)."""
    return (f'{var}="${{{var}:-$(( {SLURM_PORT_BASE} + SLURM_JOB_ID % {SLURM_PORT_JOBS} * {SLURM_PORT_STEPS} ))}}"')


def shell_rendezvous_lines() -> list[str]:
    """bash for a script run on every node (the torchrun export): MASTER_ADDR required; MASTER_PORT / RDZV_ID as
    exported, else under SLURM from the job (shell_port_line, the sbatch export's formula), else torchrun's
    defaults (--master-port 29500, --rdzv-id none: torch/distributed/run.py)."""
    return [
        "# The rendezvous on the first node: export MASTER_ADDR (its address) on every node; a MASTER_PORT / RDZV_ID",
        "# you export is kept, else under SLURM both come from the job (the port as the sbatch export and",
        f"# `plan train` under srun derive it, 15000-28999), else torchrun's defaults ({TORCH_DEFAULT_PORT}, none).",
        ': "${MASTER_ADDR:?export MASTER_ADDR=the address of the first node, on every node}"',
        'if [ -n "${SLURM_JOB_ID:-}" ]; then',
        f"  {shell_port_line()}",
        '  RDZV_ID="${RDZV_ID:-$SLURM_JOB_ID}"',
        "else",
        f'  MASTER_PORT="${{MASTER_PORT:-{TORCH_DEFAULT_PORT}}}"',
        '  RDZV_ID="${RDZV_ID:-none}"',
        "fi",
    ]
