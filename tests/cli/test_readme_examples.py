"""Every `plan ...` example of the README runs (issue 13), so the README cannot drift.

Each fenced bash block runs in order in one scratch folder (files one line writes, the next
reads; HOME points there too; the README's `./config.json` is a fixture copied there; optional
parts written `[--x]` are left out; relative paths of the repository, such as
validation/data/..., are taken there). Every `plan` line is first parsed by the real CLI (unknown
commands or options, bad values fail here); then it is run: the planner's lines always, the
full-environment ones (train, allreduce-bench, probe, tune, serve) where that environment is
installed. Lines that need what a test cannot have (a cluster's PostgreSQL host, hours of
budget, a study made by hand, a server that runs until stopped) are listed in PARSE_ONLY with
the reason; every other line must exit 0. `python ...` lines of the README run too.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer

from plan_cli.main import FULL_ENV, build_app, missing_modules

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FIXTURE_CONFIG = REPO / "tests" / "fixtures" / "hf_configs" / "llama-2-7b.json"

# substring of a README line -> why it is only parsed, not run
PARSE_ONLY = {
    "--budget 2h": "hours of tuning",
    "--budget 3m": "a 3-minute study (the tuner's own tests run short studies)",
    "postgresql://user@host/db": "a placeholder PostgreSQL host",
    "--from-study NAME": "a placeholder study name",
    "--calibration cal.json": "cal.json comes from a 2-hour study",
    "plan serve": "serves until stopped (the service has its own tests)",
    "validation/sanity_sweep.py": "1-3 minutes of ~15k plans (its fixes: tests/planner/test_corner_physics.py)",
    "validation/network_check.py": "~1 minute of 288 plans (tests/planner/test_network_need.py runs its --quick)",
    "Qwen/Qwen2.5-7B": "a Hugging Face hub id: needs the network",
    "benchmarks/service_load.py": "a load test of 200 requests (a benchmark, not a test)",
}
PLANNER_COMMANDS = {"estimate", "catalog", "export"}


def readme_blocks() -> list[list[str]]:
    blocks, current = [], None
    for line in README.read_text().splitlines():
        if line.startswith("```bash"):
            current = []
        elif line.startswith("```") and current is not None:
            blocks.append(current)
            current = None
        elif current is not None and line.strip() and not line.lstrip().startswith("#"):
            current.append(line.strip())
    return blocks


def _strip_comment(line: str) -> str:
    """The command without its comment and without optional parts written `[--like this]`."""
    command = re.split(r"\s+#\s", line, maxsplit=1)[0]
    return re.sub(r"\s\[[^\]]*\]", "", command).strip()


def plan_argv(line: str) -> list[str] | None:
    """The arguments after `plan` (an env prefix like `VAR=x plan ...` allowed), else None."""
    words = shlex.split(_strip_comment(line))
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if not words or words[0] != "plan":
        return None
    return [os.path.expanduser(w) for w in words[1:]]


def in_repo(words: list[str], cwd: Path) -> list[str]:
    """README commands run from the repository root: a relative path that is not in the
    scratch folder but is in the repository (validation/data/..., benchmarks/...) is taken there."""
    return [str(REPO / w) if "/" in w and not w.startswith(("/", "~")) and not (cwd / w).exists()
            and (REPO / w).exists() else w for w in words]


def parse_only(argv: list[str]) -> None:
    """Let the real CLI parse argv (commands, options, values) without running anything."""
    cmd: click.Command = typer.main.get_command(build_app(only=argv[0]))
    ctx = cmd.make_context("plan", list(argv))
    while isinstance(cmd, click.Group):
        rest = [*getattr(ctx, "_protected_args", getattr(ctx, "protected_args", [])), *ctx.args]
        name, cmd, sub_args = cmd.resolve_command(ctx, rest)
        ctx = cmd.make_context(name, sub_args, parent=ctx)


def full_env() -> bool:
    return not missing_modules({m for mods in FULL_ENV.values() for m in mods} | {"matplotlib", "deepspeed"})


def _examples() -> list[tuple[str, int, list[str]]]:
    return [(f"block{i}", i, block) for i, block in enumerate(readme_blocks())
            if any(plan_argv(ln) or ln.startswith(("python ", "printf ")) for ln in block)]


@pytest.mark.slow
@pytest.mark.parametrize("name, index, block", _examples(), ids=[e[0] for e in _examples()])
def test_readme_block_runs(name, index, block, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # `~` in the parse below, as in the run (restored after)
    env = os.environ | {"HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    shutil.copy(FIXTURE_CONFIG, tmp_path / "config.json")  # "a local Hugging Face config.json"
    ran = 0
    for line in block:
        argv = plan_argv(line)
        if argv is None:
            if line.startswith("python "):
                cmd = [sys.executable, *in_repo(shlex.split(_strip_comment(line))[1:], tmp_path)]
                assert Path(cmd[1]).is_file(), line
                if any(marker in line for marker in PARSE_ONLY):
                    continue
                r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
                assert r.returncode == 0, f"{line}\n{r.stdout[-1500:]}{r.stderr[-1500:]}"
                ran += 1
            elif line.startswith("printf "):
                subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True)
            continue
        parse_only(argv)
        if any(marker in line for marker in PARSE_ONLY):
            continue
        if argv[0] not in PLANNER_COMMANDS and not full_env():
            continue
        if "--plot" in argv and missing_modules(["matplotlib"]):
            continue
        r = subprocess.run([sys.executable, "-m", "plan_cli.main", *in_repo(argv, tmp_path)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        expected = 3 if "(exit 3)" in line else 0  # an example of "nothing fits" says so
        assert r.returncode == expected, f"{line}\nexit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}"
        ran += 1
    assert ran or all(any(m in ln for m in PARSE_ONLY) for ln in block if plan_argv(ln)), block


def test_every_readme_plan_line_parses(monkeypatch, tmp_path):
    """Cheap and always on: every `plan` line names real commands and options."""
    monkeypatch.setenv("HOME", str(tmp_path))
    lines = [ln for block in readme_blocks() for ln in block if plan_argv(ln)]
    assert len(lines) >= 20
    for line in lines:
        try:
            parse_only(plan_argv(line))
        except click.ClickException as e:
            pytest.fail(f"README line does not parse: {line}\n{e.format_message()}")
