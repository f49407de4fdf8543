"""Exports: one `ExecutionPlan` as files that run as they are.

Pure functions (no torch, no DeepSpeed, no accelerate): a DeepSpeed JSON config, an accelerate
config (FSDP2 or DeepSpeed plugin), a torchrun command line for the bundled trainer, and a
SLURM sbatch script. Tests validate the outputs with the real libraries.
"""

from planner.exports.accelerate import accelerate_config, to_yaml
from planner.exports.common import Recipe, Target, target_for
from planner.exports.deepspeed_json import deepspeed_config
from planner.exports.slurm import sbatch_script, slurm_time, time_limit_s
from planner.exports.torchrun import torchrun_command, trainer_args

__all__ = [
    "Recipe", "Target", "accelerate_config", "deepspeed_config", "sbatch_script", "slurm_time",
    "target_for", "time_limit_s", "to_yaml", "torchrun_command", "trainer_args",
]
