"""`plan train --deepspeed-config F` runs F as written, its knobs read back from it: `--sharding zero3` beside a
stage-0 file ran stage 0 without a word. A knob flag the file contradicts is refused in one line naming both."""

import json

from typer.testing import CliRunner

from plan_cli.main import app
from plan_cli.train import _check_file_knobs

runner = CliRunner()


def _exported(tmp_path):
    path = tmp_path / "ds.json"
    r = runner.invoke(app, ["export", "deepspeed", "--model", "tiny", "--gpus", "2", "--gpus-per-node", "2", "--target",
                            "cpu", "--global-batch", "64", "--sharding", "zero1", "--out", str(path)])
    assert r.exit_code == 0, r.output
    assert json.loads(path.read_text())["zero_optimization"]["stage"] == 1
    return path


def test_a_knob_the_file_contradicts_is_one_line(tmp_path):
    path = _exported(tmp_path)
    r = runner.invoke(app, ["train", "--model", "tiny", "--nproc", "2", "--steps", "3", "--deepspeed-config", str(path),
                            "--sharding", "zero3"], env={"COLUMNS": "400"})
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: sharding: --sharding zero3 (the file: zero1): --deepspeed-config"), lines[0]


def test_agreeing_or_absent_flags_pass(tmp_path):
    path = str(_exported(tmp_path))
    _check_file_knobs({"deepspeed_config": path, "sharding": "zero1", "offload": "none"})
    _check_file_knobs({"deepspeed_config": path})
    _check_file_knobs({"deepspeed_config": None, "sharding": "zero3"})


def _exported_fsdp(tmp_path):
    path = tmp_path / "fsdp.json"
    r = runner.invoke(app, ["export", "fsdp", "--model", "tiny", "--gpus", "2", "--gpus-per-node", "2", "--target",
                            "cpu", "--global-batch", "64", "--sharding", "fsdp_full_shard", "--precision", "bf16",
                            "--out", str(path)])
    assert r.exit_code == 0, r.output
    return path


def test_a_knob_the_fsdp_file_contradicts_is_one_line(tmp_path):
    path = _exported_fsdp(tmp_path)
    r = runner.invoke(app, ["train", "--model", "tiny", "--nproc", "2", "--steps", "3", "--fsdp-config", str(path),
                            "--sharding", "fsdp_shard_grad_op"], env={"COLUMNS": "400"})
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: sharding: --sharding fsdp_shard_grad_op (the file: fsdp_full_shard): "
                               "--fsdp-config"), lines[0]
    assert "plan export fsdp" in lines[0]
    _check_file_knobs({"fsdp_config": str(path), "sharding": "fsdp_full_shard", "precision": "bf16"})
