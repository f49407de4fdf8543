"""Model references -> `ModelSpec`: a preset id, a bare size, a Hugging Face config.json or hub id.

Presets are catalog/models/<id>.toml files whose keys are ModelSpec fields (user catalog folders
from PLAN_CATALOG or `extra_dirs` add or override presets, like GPUs and clusters).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from hardware.catalog import load_catalog, validation_error
from hardware.errors import closest
from hardware.models import ModelTable
from planner.errors import PlanError
from planner.hf_config import load_hf_config
from planner.hub import hub_config_path, is_hub_id
from planner.model import ModelSpec
from planner.sizes import SIZE_FORMS, gpt_for_params, parse_size


def resolve_model(ref: str, extra_dirs: Sequence[str | Path] | None = None) -> ModelSpec:
    """A preset id ('llama2-7b'), a bare size ('7b', '350m'), a path to a config.json, or a
    Hugging Face hub id ('meta-llama/Llama-2-7b-hf', through huggingface_hub's cache)."""
    text = str(ref).strip()
    if not text:
        raise PlanError("model", f"is empty; give {_accepted_forms()}")
    if is_hub_id(text):
        return load_hf_config(hub_config_path(text), name=text, source=f"hf://{text}")
    if _looks_like_path(text):
        return load_hf_config(text)
    tables = load_catalog(extra_dirs).models
    table = tables.get(text) or tables.get(text.lower())
    if table is not None:
        return _preset(Path(table.path).stem, table)
    n_params = parse_size(text)
    if n_params is not None:
        return gpt_for_params(n_params, name=text.lower())
    if Path(text).expanduser().is_dir():  # a downloaded model folder holding config.json
        return load_hf_config(text)
    raise _unknown(text, tables)


def list_presets(extra_dirs: Sequence[str | Path] | None = None) -> dict[str, ModelSpec]:
    """Every preset of the merged catalog, by id."""
    tables = load_catalog(extra_dirs).models
    return {pid: _preset(pid, table) for pid, table in sorted(tables.items())}


def _preset(preset_id: str, table: ModelTable) -> ModelSpec:
    try:
        return ModelSpec.model_validate({"name": preset_id, **table.data})
    except ValidationError as e:
        raise validation_error(table.path, e, ModelSpec) from None


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or "/" in text or "\\" in text


def _accepted_forms() -> str:
    return (f"a preset id (see `plan catalog list --kind models`), {SIZE_FORMS}, a path to a Hugging Face "
            "config.json, or a hub id (org/name)")


def _unknown(text: str, tables: dict[str, ModelTable]) -> PlanError:
    close = closest(text.lower(), tables, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return PlanError("model", f"unknown model {text!r}; {hint}accepted: {_accepted_forms()}")
