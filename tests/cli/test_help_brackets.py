"""Every command's --help shows its help text whole: rich read `[default: 2; under srun / torchrun: ...]` in
`plan allreduce-bench --nproc`'s help as a markup tag and printed "Ranks on this node" alone (the default and what
srun does were lost)."""

import re

import typer
from typer.testing import CliRunner

from plan_cli.main import app


def _commands(cmd, path):
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, [*path, name])
    else:
        yield path, cmd


def test_no_help_text_in_brackets_is_swallowed():
    runner, lost, seen = CliRunner(), [], 0
    for path, cmd in _commands(typer.main.get_command(app), []):
        texts = [(p.name, p.help) for p in cmd.params if getattr(p, "help", None)] + [("<doc>", cmd.help or "")]
        bracketed = [(name, m) for name, text in texts for m in re.findall(r"\[[^\]]*\]", text)]
        if not bracketed:
            continue
        out = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"}).output
        flat = re.sub(r"[│\s]+", " ", out)
        seen += len(bracketed)
        lost += [(path, name, m) for name, m in bracketed if re.sub(r"\s+", " ", m) not in flat]
    assert seen, "no bracketed help text left to check"
    assert not lost, lost


def test_bench_nproc_help_says_its_default():
    out = CliRunner().invoke(app, ["allreduce-bench", "--help"], env={"COLUMNS": "400"}).output
    line = next(x for x in out.splitlines() if "--nproc" in x)
    assert "default: 2" in line and "srun" in line, line
