"""`plan allreduce-bench` / `plan train` inputs a new user gets wrong: one line naming the option, exit
code 2, before anything is launched or measured (each used to hang, end in torch's traceback, report a
size it did not move, or measure and then lose the result)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.errors import PlanError
from trainer.ranks import check_endpoint

REPO = Path(__file__).resolve().parents[2]


def plan(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "plan_cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("cmd", [["allreduce-bench", "--sizes", "1M"], ["train", "--model", "tiny", "--steps", "3"]])
def test_several_nodes_without_an_endpoint_is_an_error_not_a_hang(cmd):
    r = plan(*cmd, "--nproc", "1", "--nnodes", "2")  # the static rendezvous waited at port 0 forever
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip()
    assert line.startswith("error: rdzv_endpoint: --nnodes 2 needs --rdzv-endpoint HOST:PORT") and "\n" not in line, line


@pytest.mark.parametrize("endpoint, nnodes, words", [
    (None, 2, "needs --rdzv-endpoint"), ("node0:0", 2, "needs --rdzv-endpoint"), ("127.0.0.1:99999", 1, "0 to 65535"),
    ("localhost:x", 1, "0 to 65535"), (":29500", 1, "the host is missing"),
    ("no-such-host.invalid:29500", 2, "no address found for host 'no-such-host.invalid'"),
])
def test_endpoints_the_ranks_cannot_meet_at(endpoint, nnodes, words):
    with pytest.raises(PlanError) as e:
        check_endpoint(endpoint, nnodes)
    assert e.value.field == "rdzv_endpoint" and words in str(e.value)


@pytest.mark.parametrize("endpoint, nnodes", [(None, 1), ("127.0.0.1:0", 1), ("localhost:29500", 2), ("127.0.0.1", 1)])
def test_endpoints_that_work(endpoint, nnodes):
    check_endpoint(endpoint, nnodes)


def test_an_error_line_keeps_colons_as_typed():
    """rich turned ':x:' in a user's value into an emoji ('localhost:x:' printed as 'localhost❌')."""
    r = CliRunner().invoke(app, ["estimate", "--model", "a:x:b", "--gpus", "8"])
    assert r.exit_code == 2 and "'a:x:b'" in r.output, r.output


@pytest.mark.parametrize("args, words", [
    (["--nproc", "1"], "nproc: a collective needs at least 2 ranks; got --nproc 1 x --nnodes 1"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29500"], "node_rank: 2: must be below --nnodes 2"),
])
def test_bench_layouts_that_measure_nothing(args, words):
    r = CliRunner().invoke(app, ["allreduce-bench", "--sizes", "1M", *args])
    assert r.exit_code == 2 and words in " ".join(r.output.split()), r.output


def test_bench_json_that_is_a_folder_is_refused_before_measuring(tmp_path):
    r = CliRunner().invoke(app, ["allreduce-bench", "--sizes", "1M", "--json", str(tmp_path)])
    assert r.exit_code == 2 and f"json: {tmp_path}: is a folder" in " ".join(r.output.split()), r.output


def test_message_bytes_are_what_a_collective_moves():
    from trainer.collectives import message_bytes

    assert message_bytes(2**20, 2) == 2**20 and message_bytes(3, 2) == 8 and message_bytes(1000, 3) == 996


@pytest.mark.slow
def test_bench_reports_the_bytes_it_moved_and_makes_the_json_folder(tmp_path):
    """3 bytes is one float32 per rank on 2 ranks: 8 bytes move and 8 are reported (3 was, with its algbw);
    --json into a folder that does not exist yet is written there (the measurement was lost)."""
    out = tmp_path / "new" / "dir" / "net.json"
    r = plan("allreduce-bench", "--nproc", "2", "--sizes", "3,64K", "--json", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert [row["size_bytes"] for row in rows] == [8, 64 * 2**10]
    for row in rows:
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] * 8 / row["time_s"] / 1e9)


def test_train_json_that_is_a_folder_is_a_one_line_error(tmp_path):
    """It ended in an IsADirectoryError traceback, exit 1."""
    r = CliRunner().invoke(app, ["train", "--model", "tiny", "--nproc", "2", "--steps", "3", "--json", str(tmp_path)])
    assert r.exit_code == 2 and f"json: {tmp_path}: is a folder; give a file name" in " ".join(r.output.split()), r.output


def test_bench_rank_destroys_its_process_group():
    """A rank of the bench ends its process group (NCCL: one left to the interpreter's exit can hang it): here one
    gloo rank in a fresh interpreter, the real bench_rank."""
    code = ("import torch.distributed as d; from trainer.collectives import bench_rank; "
            "r = bench_rank(['all_reduce'], [4096], False); print(r['backend'], d.is_initialized())")
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "RANK": "0", "WORLD_SIZE": "1"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["gloo", "False"]
