"""One real trial: the DeepSpeed config it runs (the shared builder), stale build locks, the
trainer subprocess, and how a cut-off trial is told apart from a slow one."""

from __future__ import annotations

import time
from pathlib import Path

from planner.exports.common import Recipe
from planner.exports.deepspeed_json import config_for_knobs, config_text
from planner.exports.fsdp_settings import FSDP_FILE, settings_for_knobs
from planner.model import ModelSpec
from trainer.result import STEP_MARK
from trainer import ext_locks as locks
from tuner.runner import TRIAL_MARKER_ENV, TrialOutcome, fresh_workdir, rank_env, run_command, trainer_command

GIB = 2**30
DS_FILE = "ds_config.json"
# Start-up of a trial (launch, imports, process group, backend init) before its first step,
# per backend, until the study has measured it (notes/cpu-runs.md: DeepSpeed is the slowest
# to start: its imports, its op loading, and on a busy 2-core machine 60 s and more).
DEFAULT_STARTUP_S = {"cpu": {"ddp": 15.0, "fsdp": 20.0, "deepspeed": 45.0},
                     "gpu": {"ddp": 60.0, "fsdp": 60.0, "deepspeed": 90.0}}


def run_backend(knobs: dict, study_backend: str) -> str:
    """The framework a trial runs under: in a `--backend deepspeed` study every trial is a
    DeepSpeed run (sharding none is ZeRO stage 0), otherwise the sharding says."""
    sharding = knobs.get("sharding", "none")
    if study_backend == "deepspeed" or sharding.startswith("zero"):
        return "deepspeed"
    return "fsdp" if sharding.startswith("fsdp") else "ddp"


def deepspeed_json(knobs: dict, *, dp: int, seq_len: int, model: ModelSpec, on_gpu: bool,
                   study_backend: str = "any") -> str | None:
    """The exact DeepSpeed JSON text a trial of `knobs` runs (None: not a DeepSpeed plan).

    The export's default recipe (planner/exports/common.Recipe): what `plan export deepspeed
    --from-study` writes is this text, byte for byte; the schedule does not change the speed.
    """
    if run_backend(knobs, study_backend) != "deepspeed":
        return None
    return config_text(config_for_knobs(knobs, dp=dp, seq_len=seq_len, model=model,
                                        target="gpu" if on_gpu else "cpu", recipe=Recipe()))


def fsdp_json(knobs: dict, *, dp: int, seq_len: int, on_gpu: bool, study_backend: str = "any") -> str | None:
    """The exact FSDP settings text a trial of `knobs` runs (None: not an FSDP plan); what
    `plan export fsdp --from-study` writes, byte for byte."""
    if run_backend(knobs, study_backend) != "fsdp":
        return None
    return config_text(settings_for_knobs(knobs, dp=dp, seq_len=seq_len, target="gpu" if on_gpu else "cpu"))


def started_steps(outcome: TrialOutcome) -> bool:
    """True when the trainer finished at least one step before it ended (or was killed)."""
    return STEP_MARK in outcome.log_tail or outcome.step_time_s is not None


class SubprocessRunner:
    """Runs a configuration with `python -m trainer` in its own process group; a DeepSpeed
    (FSDP) plan runs from the JSON file the tuner stored on the trial (`--deepspeed-config`,
    `--fsdp-config`)."""

    def __init__(self, ctx):
        self.ctx = ctx
        cap = ctx.meta.device_memory_gib
        self.memory_cap_bytes = int(cap * GIB) if cap and not ctx.on_gpu else None

    def __call__(self, knobs: dict, *, trial_number: int, timeout_s: float, on_start,
                 deepspeed_json: str | None = None, fsdp_json: str | None = None) -> TrialOutcome:
        cfg, ctx = self.ctx.config, self.ctx
        wd = fresh_workdir(Path(cfg.workdir) if cfg.workdir else None, trial_number)
        json_out = wd / "result.json"
        extra = ["--seq-len", str(ctx.seq_len), "--warmup-steps", str(ctx.meta.warmup_steps),
                 "--timeout-s", str(int(timeout_s)), *cfg.trainer_args]
        run_knobs = dict(knobs)
        if deepspeed_json is not None:
            (wd / DS_FILE).write_text(deepspeed_json)
            extra += ["--deepspeed-config", str(wd / DS_FILE)]
        if fsdp_json is not None:
            (wd / FSDP_FILE).write_text(fsdp_json)
            extra += ["--fsdp-config", str(wd / FSDP_FILE)]
        cmd = trainer_command(run_knobs, model=ctx.meta.model, nproc=ctx.nproc, steps=ctx.steps,
                              json_out=json_out, extra_args=extra)
        return run_guarded(cmd, json_out=json_out, timeout_s=timeout_s, memory_cap_bytes=self.memory_cap_bytes,
                           env={**rank_env(ctx.nproc), TRIAL_MARKER_ENV: str(wd)}, log_path=wd / "trainer.log",
                           on_start=lambda pid: on_start(pid, str(wd)))


def run_guarded(cmd: list[str], *, env: dict, **kw) -> TrialOutcome:
    """`run_command` with the extensions cache kept usable: locks older than any plausible
    build are removed before the run, and the locks a killed run left behind after it."""
    root = locks.extensions_dir(env)
    cleared = locks.clear_stale_locks(root, older_than_s=locks.stale_after_s(env))
    started = time.time()
    out = run_command(cmd, env=env, **kw)
    if out.status != "ok":
        cleared += locks.clear_stale_locks(root, older_than_s=locks.stale_after_s(env), created_after=started)
    if cleared:
        out = out.model_copy(update={"notes": out.notes + [c.describe() for c in cleared]})
    return out
