"""Request and response bodies of the HTTP API (the planner's own pydantic models where they
exist: Scenario, EstimateReport, GPU, Cluster, StackProfile, TuneReport)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hardware.models import GPU, Cluster
from hardware.stacks import StackProfile
from planner.memory_recipe import MemoryRecipe
from planner.moe_options import MoeOptions
from planner.scenario import Scenario
from planner.units import Seconds

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
    """A tuning run on the server's machine (its GPUs or CPU ranks) and storage."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(pattern=NAME_PATTERN, description="preset id or bare size (7b)")
    study: str | None = Field(default=None, pattern=NAME_PATTERN, description="default: generated")
    gpus: int | None = Field(default=None, ge=1, le=1024, description="ranks; default: the machine's devices")
    budget_s: Seconds = Field(gt=0, le=7 * 86400, description="wall-clock budget (seconds, or 2h, 90m)")
    steps: int = Field(default=4, ge=2, le=10_000)
    max_trials: int | None = Field(default=None, ge=1, le=10_000)
    backend: Literal["deepspeed", "fsdp", "any"] = "any"
    seq_len: int | None = Field(default=None, ge=1, le=1 << 20)
    global_batch: int | None = Field(default=None, ge=1, le=1 << 24)
    sampler: Literal["tpe", "random"] = "tpe"
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    device_memory_gib: float | None = Field(default=None, gt=0, le=1 << 20)
    trial_timeout_s: float | None = Field(default=None, gt=0, le=86400)
    startup_s: float | None = Field(default=None, gt=0, le=3600, description="first guess of a trial's start-up")


class TuneStarted(BaseModel):
    study: str
    status: Literal["started"] = "started"
    status_url: str
    export_url: str


class TuneStatus(BaseModel):
    study: str
    status: Literal["running", "finished", "failed", "stored"] = Field(
        description="running/finished/failed: a worker this server started; stored: only in storage")
    exit_code: int | None = None
    log_tail: str | None = None
    report: dict | None = Field(default=None, description="trials, best, calibration (tuner.TuneReport)")


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorItem] | str
