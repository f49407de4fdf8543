"""Usage errors that click catches before a command runs (a bad number, an unknown option, a
missing argument, an unknown command) are one line naming the option, exit code 2, no panel
and no traceback: the same contract as the commands' own errors (README "Commands")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def plan(*args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "plan_cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, words", [
    (("estimate", "--model", "7b", "--gpus", "8", "--tp", "abc"), ["'--tp'", "integer", "estimate --help`"]),
    (("estimate", "--model", "7b", "--internode-gbps", "100Gbps"), ["'--internode-gbps'", "number"]),
    # a count with a unit suffix says to write the whole number (and, for a batch, where tokens go)
    (("estimate", "--model", "7b", "--seq-len", "4k"), ["'--seq-len'", "whole number (8192, not 8k)"]),
    (("estimate", "--model", "7b", "--global-batch", "4M"), ["'--global-batch'", "--global-batch-tokens"]),
    (("export", "deepspeed", "--model", "7b", "--gpus", "8:16"), ["'--gpus'", "one count", "plan estimate"]),
    (("estimate", "--model", "7b", "--top", "0"), ["'--top'", "greater than or equal to 1"]),
    (("estimate", "--model", "7b", "--no-such-flag"), ["--no-such-flag"]),
    (("export",), ["'format'", "deepspeed | fsdp"]),
    (("calibrate", "runs.csv", "--out", "x/stacks/fsdp.toml"), ["'--stack'", "megatron|"]),
    (("no-such-command",), ["'no-such-command'", "--help`"]),
    # a command's own error: what is allowed and what to do instead
    (("estimate", "--model", "7b", "--gpus", "8", "--seq-len", "4096"), ["seq_len", "<= 2048", "rotary", "llama2-7b"]),
    # options that cannot go together: they were silently dropped (--explain over a sweep, --csv beside --json)
    (("estimate", "--model", "7b", "--gpus", "8:16", "--explain"), ["explain:", "one GPU count", "8:16"]),
    (("estimate", "--model", "7b", "--gpus", "8", "--json", "--csv"), ["csv:", "give one"]),
])
def test_usage_errors_are_one_line_exit_2(args, words):
    r = plan(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr and "╭" not in r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_help_and_a_plain_run_keep_their_exit_codes():
    assert plan("estimate", "--help").returncode == 0
    assert plan().returncode == 2  # no command: the help, as click's no_args_is_help does
    r = plan("estimate", "--model", "125m", "--gpus", "8", "--top", "1", "--json")
    assert r.returncode == 0 and r.stdout.lstrip().startswith("{"), r.stderr


def test_no_unit_hint_where_the_value_has_no_unit():
    line = plan("estimate", "--model", "7b", "--gpus", "8", "--tp", "abc").stderr
    assert "'--tp'" in line and "whole number" not in line and "one count" not in line, line
