"""The command-line face of a pydantic model: one `CliField` per scalar field, from its type,
default and description, so that a knob is declared once, on the model.

plan_cli/options.py renders these as typer options (`plan estimate`, `plan export`, `plan
train`), trainer/cli.py as argparse flags (`python -m trainer`). Nested models (TrainConfig's
plan/run/launch) are flattened: their fields keep their own names. Imports no typer/argparse.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, replace
from typing import Any, Literal, Union

from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo

_UNSET: Any = object()


@dataclass(frozen=True)
class Flag:
    """Field metadata: the flag's spelling when it is not `--field-name` (e.g. `--json`)."""

    name: str


@dataclass(frozen=True)
class CliField:
    name: str  # the model field (= the keyword the model takes)
    flag: str  # "--micro-batch"
    kind: type  # str, int, float or bool: what the command line hands to the model
    default: Any
    help: str
    choices: tuple[str, ...] | None = None  # a Literal's values
    path: tuple[str, ...] = ()  # where the field sits in nested models ("plan",)

    def help_with_default(self) -> str:
        """The help text and the default a face shows for a flag left out."""
        if self.default is None:
            return self.help
        shown = str(self.default).lower() if isinstance(self.default, bool) else self.default
        return f"{self.help} (default: {shown})".strip()


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return _unwrap_optional(args[0])[0], True
    if typing.get_origin(annotation) is typing.Annotated:
        return _unwrap_optional(typing.get_args(annotation)[0])
    return annotation, False


def _takes_text(info: FieldInfo, annotation: Any) -> bool:
    """A quantity field (planner/units.py: "100B", "2h") parses text itself."""
    metadata = list(info.metadata)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if typing.get_origin(arg) is typing.Annotated:
                metadata += list(arg.__metadata__)
    return any(isinstance(m, BeforeValidator) and m.json_schema_input_type is not Any for m in metadata)


def cli_field(name: str, info: FieldInfo, *, path: tuple[str, ...] = (), default: Any = _UNSET) -> CliField | None:
    """The flag of one field, or None for a field the command line does not carry (a nested
    structure such as a ModelSpec)."""
    base, _ = _unwrap_optional(info.annotation)
    flag = next((m.name for m in info.metadata if isinstance(m, Flag)), "--" + name.replace("_", "-"))
    help_text = info.description or ""
    choices = None
    if typing.get_origin(base) is Literal:
        choices = tuple(str(v) for v in typing.get_args(base))
        kind: type = str
        help_text = f"{help_text} ({'|'.join(choices)})".strip()
    elif _takes_text(info, info.annotation):
        kind = str
    elif base in (bool, int, float, str):
        kind = base
    else:
        return None
    value = info.get_default(call_default_factory=True) if default is _UNSET else default
    return CliField(name=name, flag=flag, kind=kind, default=value, help=help_text, choices=choices, path=path)


def cli_fields(model: type[BaseModel], *, skip: tuple[str, ...] = (),
               defaults: dict[str, Any] | None = None) -> list[CliField]:
    """Every scalar field of `model` (nested models flattened), in declaration order.
    `defaults` replaces a field's default on this face (e.g. the trainer's fp32)."""
    out: list[CliField] = []
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        base, optional = _unwrap_optional(info.annotation)
        if isinstance(base, type) and issubclass(base, BaseModel):
            if optional:  # an optional structure (a resolved ModelSpec) has no flags
                continue
            nested = cli_fields(base, skip=skip, defaults=(defaults or {}).get(name))
            out += [replace(f, path=(name, *f.path)) for f in nested]
            continue
        field = cli_field(name, info, default=(defaults or {}).get(name, _UNSET))
        if field is not None:
            out.append(field)
    return out
