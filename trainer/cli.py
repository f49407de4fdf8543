"""`python -m trainer`: the same flags as `plan train` (the tuner launches this as a subprocess).

Exit codes: trainer/result.py EXIT_CODES (0 ok, 2 bad_config, 3 oom, 4 timeout, 1 crash); the
result file says the same.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from planner.fields import CliField, cli_fields
from trainer.config import NOT_FLAGS, TRAINER_PLAN_DEFAULTS, TrainConfig
from trainer.result import EXIT_CODES


def trainer_fields() -> list[CliField]:
    """The trainer's flags: every field of TrainConfig (its plan, run and launch), one vocabulary
    with the planner (plan_cli/train.py renders the same fields for `plan train`)."""
    shown = TRAINER_PLAN_DEFAULTS | {"sequence_parallel": "tp > 1"}  # derived when left out
    return [_own_stack(f) if f.name == "stack" else f
            for f in cli_fields(TrainConfig, skip=NOT_FLAGS, defaults={"plan": shown})]


def _own_stack(field: CliField) -> CliField:
    """`--stack`: the trainer runs only its own (trainer/config.py validate_plan); the planner's
    other stacks are not choices here."""
    from planner.scenario import ExecutionPlan

    own = TRAINER_PLAN_DEFAULTS["stack"]
    return replace(field, choices=(own,), help=f"{ExecutionPlan.model_fields['stack'].description}: only {own}, "
                   "the trainer's own (plan estimate --stack plans the others)")


def parser() -> argparse.ArgumentParser:
    """Flags left out are not passed on: TrainConfig applies its defaults (and derives dp)."""
    p = argparse.ArgumentParser(prog="python -m trainer", description="Run the bundled GPT trainer.",
                                argument_default=argparse.SUPPRESS)
    for f in trainer_fields():
        kw: dict = {"dest": f.name, "help": f.help_with_default().replace("%", "%%")}
        if f.kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw |= {"type": f.kind, "choices": f.choices, "metavar": f.name.upper()}
        p.add_argument(f.flag, **kw)
    return p


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    from trainer.launch import launch, summary_line

    args = vars(parser().parse_args(argv))
    try:
        cfg = TrainConfig(**args)
    except ValidationError as e:
        first = e.errors()[0]
        field = [str(x) for x in first["loc"] if isinstance(x, str)][-1:] or ["input"]
        print(f"error: {field[0]}: {first['msg']}", file=sys.stderr)
        return 2
    result = launch(cfg)
    print(summary_line(result), file=sys.stderr if result.status != "ok" else sys.stdout)
    return EXIT_CODES[result.status]
