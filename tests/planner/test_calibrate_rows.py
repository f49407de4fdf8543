"""`plan calibrate --stack S` fits S on the runs that ran S (and those that do not say), not on
every row relabelled: the seeds' 31 Megatron rows are not hf runs."""

from collections import Counter

from typer.testing import CliRunner

from hardware.catalog import load_catalog
from plan_cli.main import app
from planner.calibrate_rows import dropped_note, runs_for_stack
from planner.runs import load_runs

SEEDS = "validation/data/seed_runs.csv"


def _usable():
    return [r for r in load_runs(SEEDS, load_catalog(None)) if r.scored and r.layout_stated]


def test_only_the_named_stacks_runs_are_kept():
    runs = _usable()
    kept, dropped = runs_for_stack(runs, "hf")
    assert {r.id for r in kept} == {r.id for r in runs if r.plan.stack == "hf"}
    assert dropped == dict(Counter(r.plan.stack for r in runs if r.plan.stack != "hf"))
    assert all(r.plan.stack == "hf" for r in kept) and len(kept) + sum(dropped.values()) == len(runs)
    everything, none = runs_for_stack(runs, "hf", all_rows=True)
    assert len(everything) == len(runs) and none == {} and all(r.plan.stack == "hf" for r in everything)
    assert "--all-rows" in dropped_note("hf", len(kept), dropped) and dropped_note("hf", 3, {}) is None


def test_a_run_without_a_framework_takes_the_commands_stack(tmp_path):
    lines = open(SEEDS).read().splitlines()
    cols = lines[0].split(",")
    fw = cols.index("framework")
    rows = [ln.split(",") for ln in lines[1:]]
    megatron = [r for r in rows if r[fw] == "megatron"]
    for r in megatron:
        r[fw] = ""
    path = tmp_path / "mine.csv"
    path.write_text("\n".join([lines[0], *(",".join(r) for r in megatron)]) + "\n")
    runs = [r for r in load_runs(path, load_catalog(None)) if r.scored and r.layout_stated]
    assert runs and not any(r.framework_stated for r in runs)
    kept, dropped = runs_for_stack(runs, "torchtitan")
    assert len(kept) == len(runs) and dropped == {}


def test_calibrate_says_what_it_left_out(tmp_path):
    out = tmp_path / "stacks" / "hf.toml"
    r = CliRunner().invoke(app, ["calibrate", SEEDS, "--stack", "hf", "--out", str(out)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "name another stack in their framework column (megatron " in r.output and "--all-rows" in r.output
    r = CliRunner().invoke(app, ["calibrate", SEEDS, "--stack", "torchtitan", "--out",
                                 str(tmp_path / "stacks" / "torchtitan.toml")])
    assert r.exit_code == 2 and "no run names stack torchtitan" in r.output
