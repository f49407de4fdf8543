"""`plan export` on bad input: the same one line and exit 2 as `plan estimate` for a pinned dead end
(it said "no plan fits (...); add GPUs", as if GPUs were short), and `--out` naming a folder or an
unwritable path is one line naming --out, not a traceback. The real CLI through CliRunner."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()


def one_line(res) -> str:
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return " ".join(res.output.split())


@pytest.mark.parametrize("fmt", ["deepspeed", "torchrun", "megatron"])
def test_pinned_dead_end_is_estimates_line(fmt):
    flags = ["--model", "7b", "--gpus", "16", "--tp", "8", "--vpp", "2"]
    export = one_line(runner.invoke(app, ["export", fmt, *flags], env={"COLUMNS": "400"}))
    estimate = one_line(runner.invoke(app, ["estimate", *flags], env={"COLUMNS": "400"}))
    assert export == estimate, (export, estimate)
    assert export.startswith("error: vpp: no plan satisfies the pinned knobs: vpp > 1 needs pp > 1"), export


def test_out_that_is_a_folder_says_so(tmp_path):
    line = one_line(runner.invoke(app, ["export", "deepspeed", "--model", "7b", "--gpus", "16", "--out", str(tmp_path)],
                                  env={"COLUMNS": "400"}))
    assert f"error: out: cannot write {tmp_path}: Is a directory (give a file name, e.g. {tmp_path}/ds_config.json)" in line, line


def test_out_under_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    line = one_line(runner.invoke(app, ["export", "slurm", "--model", "7b", "--gpus", "16", "--tokens", "1B",
                                        "--out", str(tmp_path / "f" / "job.sbatch")], env={"COLUMNS": "400"}))
    assert line.startswith(f"error: out: cannot write {tmp_path}/f/job.sbatch:"), line


@pytest.mark.parametrize("fmt", ["deepspeed", "megatron"])
def test_nothing_fits_is_exit_3_like_estimate(fmt):
    """Valid input that no plan fits (a 1T model on 8 GPUs) is exit 3, as `plan estimate` says for the same
    flags, not exit 2 (bad input); the one line on stderr still says why (found by validation/cli_fuzz.py)."""
    flags = ["--model", "1t", "--gpus", "8"]
    export = runner.invoke(app, ["export", fmt, *flags], env={"COLUMNS": "400"})
    estimate = runner.invoke(app, ["estimate", *flags], env={"COLUMNS": "400"})
    assert estimate.exit_code == 3, estimate.output
    assert export.exit_code == 3, export.output
    assert export.exception is None or isinstance(export.exception, SystemExit), repr(export.exception)
    lines = export.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: scenario: no plan fits ("), export.stderr
    assert "does not fit in GPU memory" in lines[0], lines[0]


def test_nothing_fits_names_the_memory_misses_first_and_the_closest_plan():
    """The one line of an export that nothing fits leads with the memory misses (not the search's own impossible
    combinations, e.g. "offload needs ZeRO or FSDP sharding") and names the closest plan and what it needs, as
    `plan estimate`'s first closest miss says."""
    flags = ["--model", "175b", "--gpus", "8", "--gpu", "v100-16gb"]
    export = runner.invoke(app, ["export", "deepspeed", *flags], env={"COLUMNS": "400"})
    assert export.exit_code == 3, export.output
    line = export.stderr.strip()
    assert line.startswith("error: scenario: no plan fits (does not fit in GPU memory: "), line
    estimate = runner.invoke(app, ["estimate", *flags], env={"COLUMNS": "400"})
    lines = estimate.output.splitlines()
    first = lines[lines.index("No configuration fits. Closest misses:") + 1].strip()  # "tp4 pp1 ... mb=1: needs ..."
    need = first.split(": ", 1)[1]
    assert f") {need}; add GPUs" in line and "; the closest (tp" in line, (line, first)
