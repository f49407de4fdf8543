"""An `ExecutionPlan` as a torchrun command line for the bundled trainer (`-m trainer`).

The trainer's flags are the knob names of planner/scenario.py with dashes (one vocabulary).
"""

from __future__ import annotations

import shlex

from planner.errors import PlanError
from planner.exports.common import Recipe
from planner.scenario import ExecutionPlan
from planner.system import System

# knobs the bundled trainer takes as flags (tp/pp/dp come from the launch, not from flags)
TRAINER_KNOBS = (
    "sharding", "offload", "activation_checkpointing", "precision", "optimizer", "attention",
    "micro_batch", "grad_accum", "seq_len",
)


def trainer_args(
    plan: ExecutionPlan,
    *,
    model: str,
    steps: int | None = None,
    recipe: Recipe | None = None,
    deepspeed_config_file: str | None = None,
    json_out: str | None = None,
) -> list[str]:
    """`python -m trainer` arguments that run `plan` (world size comes from the launcher)."""
    if plan.tp > 1:
        raise PlanError("tp", "the bundled trainer has no tensor parallelism (allowed: 1); export deepspeed/accelerate for your own Megatron-style code")
    if plan.pp > 1:
        raise PlanError("pp", "the bundled trainer has no pipeline parallelism (allowed: 1)")
    if plan.cp > 1:
        raise PlanError("cp", f"the bundled trainer has no context parallelism (allowed: 1); export deepspeed "
                        f"(cp_impl ulysses) or accelerate (FSDP2 ring/allgather) for {plan.cp_impl} CP")
    args = ["--model", model]
    for knob in TRAINER_KNOBS:
        args += [f"--{knob.replace('_', '-')}", str(getattr(plan, knob))]
    if steps is not None:
        args += ["--steps", str(steps)]
    if recipe is not None:
        args += ["--lr", repr(recipe.lr)]
    if deepspeed_config_file:
        args += ["--deepspeed-config", deepspeed_config_file]
    if json_out:
        args += ["--json", json_out]
    return args


def torchrun_command(
    plan: ExecutionPlan,
    system: System,
    *,
    model: str,
    steps: int | None = None,
    recipe: Recipe | None = None,
    deepspeed_config_file: str | None = None,
    rdzv_endpoint: str = "$MASTER_ADDR:$MASTER_PORT",
    rdzv_id: str = "$RDZV_ID",
    nnodes: int | str | None = None,
) -> list[str]:
    """The torchrun argv for one node (run it on every node; c10d rendezvous joins them).

    One node: `--standalone`. Several: c10d rendezvous at `rdzv_endpoint` (shell variables
    are left for the shell to expand; `render` keeps them unquoted).
    """
    per_node = min(system.gpus_per_node, plan.gpus)
    if plan.gpus % per_node:
        raise PlanError("gpus", f"{plan.gpus} GPUs do not fill nodes of {system.gpus_per_node}")
    n = plan.gpus // per_node
    cmd = ["torchrun", "--nnodes", str(nnodes if nnodes is not None else n), "--nproc-per-node", str(per_node)]
    if n == 1 and nnodes is None:
        cmd += ["--standalone"]
    else:
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint, "--rdzv-id", rdzv_id]
    return cmd + ["-m", "trainer"] + trainer_args(
        plan, model=model, steps=steps, recipe=recipe, deepspeed_config_file=deepspeed_config_file)


# a word naming a file beside the script: `"$SCRIPT_DIR"/name`, the script's own folder (launched from anywhere;
# piped to bash, BASH_SOURCE is empty and dirname gives the current folder)
SCRIPT_DIR = "$SCRIPT_DIR"
_SCRIPT_DIR_LINE = 'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]:-.}")" && pwd)"'


def torchrun_script(argv: list[str]) -> str:
    """torchrun.sh: the command, after the rendezvous lines when it spans nodes (MASTER_PORT from the shared
    formula of planner/rendezvous.py, as the sbatch export; `--standalone` needs none), and the line that finds
    the script's folder where a companion file is named beside it."""
    from planner.rendezvous import shell_rendezvous_lines

    lines = [] if "--standalone" in argv else shell_rendezvous_lines()
    if any(a.startswith(SCRIPT_DIR + "/") for a in argv):
        lines.append(_SCRIPT_DIR_LINE)
    return "\n".join(["#!/bin/bash", "set -euo pipefail", *lines, render(argv)]) + "\n"


def render(argv: list[str]) -> str:
    """Shell-quote `argv`, leaving `$VAR` / `${VAR}` words (and `$VAR:$VAR`) to the shell."""
    return " ".join(_word(a) for a in argv)


def _word(arg: str) -> str:
    if arg.startswith(SCRIPT_DIR + "/"):
        return f'"{SCRIPT_DIR}"/' + shlex.quote(arg[len(SCRIPT_DIR) + 1:])
    if arg.startswith("$") and all(c.isalnum() or c in "_${}:" for c in arg):
        return f'"{arg}"'
    return shlex.quote(arg)
