"""Every infeasible request says why (issue 13): structural causes are one-line errors with
exit 2, "nothing fits" exits 3 with distinct closest misses, scenario files keep every row."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner import api
from planner.errors import PlanError
from planner.scenario import Scenario

PLAN = [sys.executable, "-m", "plan_cli.main"]


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PLAN, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, field, words", [
    (("--gpus", "1024", "--pp", "512"), "pp", "34 layers"),  # the check of search._check_pinned
    (("--gpus", "8", "--micro-batch", "3", "--global-batch", "10"), "global_batch", "micro_batch 3"),
    (("--gpus", "8", "--micro-batch", "2", "--grad-accum", "2", "--global-batch", "10"),
     "global_batch", "micro_batch x grad_accum = 2 x 2 = 4"),
    (("--gpus", "8", "--tp", "2", "--pp", "1", "--cp", "1", "--global-batch", "10"), "global_batch", "dp 4"),
    (("--gpus", "24", "--tp", "3"), "tp", "32 attention heads"),
    # cp searched: no single pinned check fails, every candidate fails on the batch: the pinned batch is named
    (("--gpus", "16", "--tp", "2", "--pp", "1", "--global-batch", "10"), "global_batch", "global_batch not divisible"),
    # the rule's knob (stack) is the search's own: no knob is named
    (("--gpus", "8", "--tp", "8", "--sharding", "fsdp_hybrid"), "scenario", "the stack cannot run this plan"),
    (("--gpus", "64", "--pp", "8", "--vpp", "8"), "vpp", "n_layers (34)"),
])
def test_structural_cause_is_one_line_exit_2(args, field, words):
    r = plan("estimate", "--model", "7b", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:") and words in lines[0], r.stderr
    assert "Traceback" not in r.stderr and "No configuration fits" not in r.stdout


def test_sequence_parallel_on_a_model_no_tp_divides_names_the_flag():
    """falcon-7b has 71 heads: no tp > 1 divides them, so --sequence-parallel rules out every plan. The flag
    the user gave is named (it said "scenario: ... tp does not divide n_heads", and tp was never given)."""
    r = plan("estimate", "--model", "falcon-7b", "--gpus", "16", "--sequence-parallel")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: sequence_parallel:"), r.stderr
    assert "71 attention heads" in lines[0] and "falcon-7b" in lines[0], r.stderr
    # pinning tp itself still names tp
    r = plan("estimate", "--model", "falcon-7b", "--gpus", "16", "--sequence-parallel", "--tp", "2")
    assert r.returncode == 2 and r.stderr.startswith("error: tp:"), r.stderr


def test_sweep_of_pinned_dead_ends_is_exit_2():
    """Every GPU count of the sweep ruled out by the pins: one line, exit 2 (it was a table of "no
    configuration fits" rows and exit 3, as if memory were short)."""
    r = plan("estimate", "--model", "7b", "--gpus", "8:16", "--tp", "8", "--vpp", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: vpp: no plan satisfies the pinned knobs: vpp > 1 needs pp > 1"), line
    assert line.endswith("at every GPU count of 8:16") and "no configuration fits" not in r.stdout


def test_sweep_where_memory_is_short_still_exits_3():
    r = plan("estimate", "--model", "70b", "--gpus", "1:2", "--offload", "none")
    assert r.returncode == 3 and r.stderr == "", r.stdout + r.stderr


def test_nothing_fits_exit_3_distinct_misses():
    r = plan("estimate", "--model", "70b", "--gpus", "8", "--sharding", "none")
    assert r.returncode == 3, r.stdout + r.stderr
    misses = [ln for ln in r.stdout.splitlines() if ln.startswith("  tp")]
    assert len(misses) == 5 and len(set(misses)) == 5, r.stdout
    j = plan("estimate", "--model", "70b", "--gpus", "8", "--sharding", "none", "--json")
    assert j.returncode == 3
    assert not any(e["fits"] for e in json.loads(j.stdout)["results"])


def test_closest_misses_are_distinct_in_the_api():
    report = api.estimate(Scenario(model="70b", gpus=8, sharding="none"), top=10, include_rejected=True)
    assert report.results and not any(e.fits for e in report.results)
    keys = [(e.plan.model_copy(update={"grad_accum": 1}).model_dump_json(), e.reason) for e in report.results]
    assert len(set(keys)) == len(keys) == 10


def test_fit_exits_0():
    assert plan("estimate", "--model", "7b", "--gpus", "8", "--top", "1").returncode == 0


def test_api_raises_the_structural_cause():
    with pytest.raises(PlanError) as e:
        api.estimate(Scenario(model="7b", gpus=1024, pp=512))
    assert e.value.field == "pp"


@pytest.mark.parametrize("text", ["a,7b,48\nb,13b,16\n", "", "\n", "modle,gpus\n7b,8\n"])
def test_headerless_or_columnless_scenario_file_is_an_error(tmp_path: Path, text):
    src, out = tmp_path / "s.csv", tmp_path / "out.csv"
    src.write_text(text)
    r = plan("estimate", "--scenarios", str(src), "--out", str(out))
    assert r.returncode == 2 and r.stderr.startswith("error: scenarios:"), r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_bad_rows_get_an_error_cell_and_the_batch_goes_on(tmp_path: Path):
    src, out = tmp_path / "s.csv", tmp_path / "out.csv"
    src.write_text("id,model,gpus,pp,micro_batch,global_batch\n"
                   "a,7b,16,,,\nb,7b,1024,512,,\nc,nosuch,8,,,\nd,7b,8,,3,10\ne,7b,8,,,\n")
    r = plan("estimate", "--scenarios", str(src), "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert [row["id"] for row in rows] == ["a", "b", "c", "d", "e"]
    errors = {row["id"]: row["error"] for row in rows}
    assert errors["a"] == errors["e"] == ""
    assert errors["b"].startswith("pp:") and errors["c"].startswith("model:")
    assert errors["d"].startswith("global_batch:")
    jl = tmp_path / "s.jsonl"
    jl.write_text('{"model": "7b", "gpus": 8}\n[1, 2]\n{"model": "7b", "gpus": 24, "tp": 3}\n')
    r = plan("estimate", "--scenarios", str(jl), "--out", str(tmp_path / "o.jsonl"))
    assert r.returncode == 0, r.stderr
    got = [json.loads(ln) for ln in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [g["error"][:4] for g in got] == ["", "row:", "tp: "]
