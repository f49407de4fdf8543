"""Which runs `plan calibrate RUNS.csv --stack S` fits S's profile on.

A run whose framework column names another stack (planner/run_columns.py stack_of: "megatron",
"megatron-deepspeed", ...) measured that stack, not S: fitting S on it relabels another stack's
speed. Kept: the runs on S, and the runs whose framework cell is empty (the file does not say; the
command's --stack does). `all_rows` takes every run as S (what calibrate did before).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from planner.runs import Run


def runs_for_stack(runs: Sequence[Run], stack: str, all_rows: bool = False) -> tuple[list[Run], dict[str, int]]:
    """The runs to fit `stack` on (relabelled as it), and the count of the others by the stack they name."""
    keep = [r for r in runs if all_rows or r.plan.stack == stack or not r.framework_stated]
    dropped = Counter(r.plan.stack for r in runs if not (all_rows or r.plan.stack == stack or not r.framework_stated))
    relabelled = [dataclasses.replace(r, plan=r.plan.model_copy(update={"stack": stack})) for r in keep]
    return relabelled, dict(sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0])))


def dropped_note(stack: str, kept: int, dropped: dict[str, int]) -> str | None:
    """One line on the runs left out (None: none were)."""
    if not dropped:
        return None
    n = sum(dropped.values())
    named = ", ".join(f"{s} {c}" for s, c in dropped.items())
    return (f"fitted on {kept} of {kept + n} runs: {n} name another stack in their framework column ({named}); "
            f"--all-rows fits {stack} on every run")
