"""`TuneConfig`: everything one `plan tune` run needs (the CLI flags, as one model)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.bounds import InfeasibleMargin
from planner.units import Seconds, at_most

# Upper bounds a real study could want, each with the reason its error gives (99999999h, --top-k 1e8 were taken)
WEEK_S = 7 * 86400
Budget = Annotated[Seconds, at_most(WEEK_S, "a study is saved after every trial; run the same command again to go on",
                                    "7d (604,800 s)", " s")]
TrialSteps = Annotated[int, at_most(10_000, "a trial times a few steps after its warm-up; a long run is `plan train`")]
Proposals = Annotated[int, at_most(1_000, "each proposal is a real trial, launched one after another; 1,000 is more "
                                          "than a week's budget runs")]
TrialCap = Annotated[int, at_most(100_000, "each trial is a real run of seconds at least; a week's budget launches fewer")]
Rounds = Annotated[int, at_most(100, "the re-runs of the top 3 stop at a quarter of the budget")]
TrialTimeout = Annotated[Seconds, at_most(86400, "a trial times a few steps; no trial needs a day", "1d (86,400 s)", " s")]
SeqLen = Annotated[int, at_most(1 << 24, "tokens per sequence: longer than any model's trained context")]
GlobalBatch = Annotated[int, at_most(1 << 24, "sequences per optimizer step: far beyond any run's batch")]
# trainer/config.py LaunchSettings.nproc's bound
Ranks = Annotated[int, at_most(1024, "ranks on this one machine: the trainer launches at most 1,024 per node")]
# 1e308 GiB overflowed RLIMIT_AS in the rank
MemoryCap = Annotated[float, at_most(1_000_000, "a per-rank cap beyond any machine's memory", "1,000,000 GiB", " GiB")]
Seed = Annotated[int, at_most(2**32 - 1, "Optuna's samplers take numpy's seed range", "4,294,967,295")]
StartupGuess = Annotated[Seconds, at_most(3600, "a trial's start-up is seconds to minutes; the tuner measures it "
                                                "after the first trial", "1h (3,600 s)", " s")]

Backend = Literal["deepspeed", "fsdp", "any"]
SamplerName = Literal["tpe", "random"]


class TuneConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="preset id, bare size (7b) or config.json")
    # ranks on this machine: at most trainer/config.py LaunchSettings.nproc's bound
    gpus: Ranks | None = Field(default=None, gt=0, description="ranks; None: this machine's devices")
    budget_s: Budget = Field(gt=0, description="wall-clock budget of this run")
    steps: TrialSteps = Field(default=4, gt=1, description="trainer steps per trial (warm-up included)")
    warmup_steps: int = Field(default=1, ge=0)
    storage: str | None = None  # Optuna RDB URL; None: sqlite:///plan-tune.db
    study: str | None = None  # None: derived from model, ranks and device
    backend: Backend = "any"
    top_k: Proposals = Field(default=10, ge=0, description="planner-guided proposals tried before the sampler")
    explore_infeasible: bool = False
    infeasible_margin: Annotated[InfeasibleMargin, Field(description="launch memory misses below this")] = 0.10
    device_memory_gib: MemoryCap | None = Field(default=None, gt=0, allow_inf_nan=False,
                                                description="per-rank cap (CPU: RLIMIT_AS)")
    choices: dict[str, tuple] = Field(default_factory=dict, description="knob -> values to search")
    global_batch: GlobalBatch | None = Field(default=None, gt=0)
    seq_len: SeqLen | None = Field(default=None, gt=0)
    gpu: str | None = None  # catalog GPU id (GPU machines; guessed from nvidia-smi otherwise)
    cluster: str | None = None
    calibration_in: str | None = None  # a Calibration JSON to start from
    calibration_out: str | None = None
    csv: str | None = None
    max_trials: TrialCap | None = Field(default=None, gt=0, description="launched trials at most")
    trial_timeout_s: TrialTimeout | None = Field(default=None, gt=0)
    startup_s: StartupGuess | None = Field(default=None, gt=0, description="first guess of a trial's start-up")
    remeasure_rounds: Rounds = Field(default=2, ge=0, description="re-runs of the top candidates at the end")
    sampler: SamplerName = "tpe"
    seed: Seed | None = Field(default=None, ge=0)
    measure_network: bool = True
    heartbeat_interval_s: int = Field(default=10, gt=0)
    grace_period_s: int = Field(default=30, gt=0)
    workdir: str | None = None  # trial logs and result files (default: a temp dir)
    trainer_args: list[str] = Field(default_factory=list)  # extra trainer flags
    progress: bool = True
