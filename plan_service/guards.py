"""What the HTTP API accepts: the server's files stay its own, and its machine stays usable.

- models: a preset id, a bare size, architecture columns or an inline config.json body
  (`hf_config`); never a path or a folder name, and nothing is looked up on the server's disk;
- scenario sizes bounded (SCENARIO_LIMITS: the search's work grows with some of them);
- POST /tune: ranks <= the server's local devices, a budget cap and a cap on concurrent jobs
  (TuneLimits, configurable with `plan serve --max-tune-*`); an answer past a limit names it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from hardware.models import Catalog
from planner.errors import PlanError
from planner.model import ModelSpec
from planner.scenario import Scenario

# Upper bounds the HTTP API puts on a scenario (a public endpoint must not be made to run out
# of memory); the architecture limits also apply to a model sent as an inline config.json.
SCENARIO_LIMITS = {
    "n_layers": 4096, "hidden": 1 << 18, "n_heads": 4096, "n_kv_heads": 4096, "ffn_hidden": 1 << 20,
    "vocab": 1 << 23, "seq_len": 1 << 22, "gpus": 1 << 22, "gpus_per_node": 1024, "tp": 4096,
    "pp": 4096, "vpp": 1024, "micro_batch": 1 << 16, "grad_accum": 1 << 20, "global_batch": 1 << 30,
    "global_batch_tokens": 1 << 42, "internode_gbps": 1e7, "tokens": 1e18, "price_per_gpu_hour": 1e6,
}
_ARCH = ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden", "vocab")
MODEL_FORMS = ("a preset id or a size such as 7b, the architecture columns, or the config.json "
               "body as hf_config (paths are not accepted over HTTP)")


def request_settings(req):
    """The MoE settings and memory-saving switches of a request (POST /estimate, the planning page's form) as
    Settings, checked as the CLI checks them (planner/moe_options.py, planner/memory_recipe.py)."""
    from planner.memory_recipe import FIELDS as RECIPE_FIELDS, MemoryRecipe
    from planner.moe_options import FIELDS as MOE_FIELDS, MoeOptions

    settings = MoeOptions(**req.model_dump(include=set(MOE_FIELDS))).checked().settings()
    return MemoryRecipe(**req.model_dump(include=set(RECIPE_FIELDS))).settings(settings)


def check_scenario(scenario: Scenario) -> None:
    for name, limit in SCENARIO_LIMITS.items():
        value = getattr(scenario, name)
        if value is not None and value > limit:
            raise PlanError(name, f"must be <= {limit:g} over HTTP (got {value:g})")


def check_model_ref(ref: str, catalog: Catalog) -> None:
    """`ref` names a catalog preset or is a bare size: decided without touching the disk."""
    from planner.sizes import parse_size

    text = ref.strip()
    is_path = "/" in text or "\\" in text or text.lower().endswith(".json")
    known = text in catalog.models or text.lower() in catalog.models
    if is_path or not (known or parse_size(text) is not None):
        raise PlanError("model", f"unknown model {ref!r}; give {MODEL_FORMS}")


def service_model(scenario: Scenario, hf_config: dict | None, catalog: Catalog, catalog_dirs=None) -> ModelSpec:
    """The model of an HTTP request (see the module's rules), within SCENARIO_LIMITS."""
    from planner.resolve import resolve_model

    if hf_config is not None:
        from planner.hf_config import spec_from_config

        if scenario.model is not None:
            raise PlanError("hf_config", "give model or hf_config, not both")
        spec = resolve_model(scenario, base=spec_from_config(hf_config, "hf_config", name="custom", source="hf_config"))
    else:
        if scenario.model is not None:
            check_model_ref(scenario.model, catalog)
        spec = resolve_model(scenario, extra_dirs=catalog_dirs)
    for name in _ARCH:
        value = getattr(spec, name, None)
        if value is not None and value > SCENARIO_LIMITS[name]:
            raise PlanError(f"hf_config.{name}" if hf_config is not None else name,
                            f"must be <= {SCENARIO_LIMITS[name]:g} over HTTP (got {value:g})")
    return spec


@dataclass(frozen=True)
class TuneLimits:
    max_ranks: int | None = None  # None: the server's local devices (GPUs, else CPU cores)
    max_budget_s: float = 24 * 3600.0
    max_jobs: int = 2  # tuning workers running at once


@lru_cache(maxsize=1)
def local_devices() -> int:
    """GPUs that nvidia-smi (or on ROCm amd-smi / rocm-smi) lists, else CPU cores (what `plan tune` would use
    by default)."""
    from tuner.device import has_cuda_gpu, local_gpus

    return max(1, len(local_gpus())) if has_cuda_gpu() else (os.cpu_count() or 1)


def check_tune(gpus: int | None, budget_s: float, running_jobs: int, limits: TuneLimits) -> None:
    """Raise a LimitError (field, message naming the limit, HTTP status) past a limit."""
    max_ranks = limits.max_ranks if limits.max_ranks is not None else local_devices()
    if gpus is not None and gpus > max_ranks:
        why = "max_tune_ranks" if limits.max_ranks is not None else "the server's local devices"
        raise LimitError("gpus", f"must be <= {max_ranks} ({why}; got {gpus})", 422)
    if budget_s > limits.max_budget_s:
        from plan_service.models import GO_ON

        raise LimitError("budget_s", f"must be <= {limits.max_budget_s:g} s (max_tune_budget_s; got {budget_s:g}); "
                         f"{GO_ON}", 422)
    if running_jobs >= limits.max_jobs:
        raise LimitError("study", f"{running_jobs} tuning jobs already running: at most {limits.max_jobs} "
                         "at once (max_tune_jobs); retry when one has finished", 429)


class LimitError(PlanError):
    def __init__(self, field: str, message: str, status: int):
        super().__init__(field, message)
        self.status = status
