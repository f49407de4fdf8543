"""Request and response bodies of the HTTP API (the planner's own pydantic models where they
exist: Scenario, EstimateReport, GPU, Cluster, StackProfile, TuneReport)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from hardware.models import GPU, Cluster
from hardware.stacks import StackProfile
from planner.memory_recipe import MemoryRecipe
from planner.moe_options import MoeOptions
from planner.scenario import Scenario
from planner.units import Seconds, at_most
from tuner.config import (WEEK_S, Backend, GlobalBatch, MemoryCap, Ranks, SamplerName, Seed, SeqLen, StartupGuess,
                          TrialCap, TrialSteps, TrialTimeout)

GO_ON = "a study is saved after every trial: POST the same request again (same study) to go on"
# plan tune's bound (tuner/config.py Budget), said the service's way (it said "run the same command again")
Budget = Annotated[Seconds, at_most(WEEK_S, GO_ON, "7d (604,800 s)", " s")]

# catalog ids, model presets/sizes and study names: no paths (the server's files stay its own)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$"


class CatalogSummary(BaseModel):
    gpus: dict[str, GPU]
    clusters: dict[str, Cluster]
    models: list[str]
    stacks: dict[str, StackProfile]  # profiles by id: factors, fit sources and method, CV error


class EstimateRequest(Scenario, MoeOptions, MemoryRecipe):
    """A Scenario, with the MoE routing settings and memory-saving switches of `plan estimate` (checked as
    the CLI checks them); the model may also come as the body of a Hugging Face config.json."""

    hf_config: dict | None = Field(default=None, description="config.json body (instead of model)")


class StudyExportQuery(MemoryRecipe):
    """The query of GET /export/{study}/deepspeed: `plan export --from-study`'s target and memory-saving
    switches (named as POST /estimate's fields, checked by the same code); an unknown parameter is a 422."""

    target: Literal["gpu", "cpu"] | None = Field(default=None, description="gpu|cpu (default: from the GPU entry)")


class StudyList(BaseModel):
    storage: str = Field(description="the storage URL, password masked")
    studies: list[str]


class TuneRequest(BaseModel):
    """A tuning run on the server's machine (its GPUs or CPU ranks) and storage; bounds and their one-line
    reasons are `plan tune`'s (tuner/config.py)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(pattern=NAME_PATTERN, description="preset id or bare size (7b)")
    study: str | None = Field(default=None, pattern=NAME_PATTERN, description="default: generated")
    gpus: Ranks | None = Field(default=None, ge=1, description="ranks; default: the machine's devices")
    budget_s: Budget = Field(gt=0, description="wall-clock budget (seconds, or 2h, 90m)")
    steps: TrialSteps = Field(default=4, ge=2)
    max_trials: TrialCap | None = Field(default=None, ge=1)
    backend: Backend = "any"
    seq_len: SeqLen | None = Field(default=None, ge=1)
    global_batch: GlobalBatch | None = Field(default=None, ge=1)
    sampler: SamplerName = "tpe"
    seed: Seed | None = Field(default=None, ge=0)
    device_memory_gib: MemoryCap | None = Field(default=None, gt=0, allow_inf_nan=False)
    trial_timeout_s: TrialTimeout | None = Field(default=None, gt=0)
    startup_s: StartupGuess | None = Field(default=None, gt=0, description="first guess of a trial's start-up")


class TuneStarted(BaseModel):
    study: str
    status: Literal["started"] = "started"
    status_url: str
    export_url: str


class TuneStopping(BaseModel):
    study: str
    status: Literal["stopping"] = "stopping"
    pid: int = Field(description="the worker's pid, sent SIGTERM")
    status_url: str
    why: str


class TuneStatus(BaseModel):
    study: str
    status: Literal["running", "finished", "interrupted", "failed", "stored"] = Field(
        description="running; finished: the study stopped by its own rule (budget, max_trials, space); interrupted: "
                    "stopped by a signal or the server stopping (POST /tune with the same study resumes it); failed: "
                    "a refused input or a crash; stored: only in storage (no worker of this workdir)")
    why: str | None = Field(default=None, description="one line: how the worker ended")
    phase: Literal["starting", "trials", "re-measuring", "ending"] | None = Field(
        default=None, description="running: starting (from POST /tune until its first trial has ended: the worker's "
        "imports, measuring this machine, the first trial's launch), trials, re-measuring the top candidates, or "
        "ending (its rule stopped it: writing its report)")
    doing: str | None = Field(default=None, description="running: what its worker is doing now, in a line")
    phase_s: float | None = Field(default=None, description="running: seconds it has been doing it")
    stopped_by: str | None = Field(default=None, description="interrupted: who stopped it (DELETE /tune/STUDY, the "
                                   "page's Stop, the server stopping, or a signal from outside the server) and when")
    resume: str | None = Field(default=None, description="interrupted: the request that resumes it")
    stop_reason: str | None = Field(default=None, description="finished: the study's own rule that stopped it "
                                    "(budget, max_trials, the space tried)")
    exit_code: int | None = None
    log_tail: str | None = None
    report: dict | None = Field(default=None, description="trials, best, calibration (tuner.TuneReport)")


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorItem] | str
