"""`plan tune` through its faces: CliRunner for input errors and reports, a real subprocess
for a short real study on 2 CPU ranks of the tiny model."""

from __future__ import annotations

import json

import optuna
import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.settings import Calibration
from tune_helpers import FAST, plan

runner = CliRunner()


@pytest.mark.parametrize("args,field", [
    (["--model", "tiny", "--budget", "soon"], "budget"),
    (["--model", "tiny"], "budget"),
    (["--budget", "3m"], "model"),
    (["--model", "tiny", "--budget", "3m", "--backend", "megatron"], "backend"),
    (["--model", "tiny", "--budget", "3m", "--choices", "sharding=zero7"], "sharding"),
    (["--model", "tiny", "--budget", "3m", "--choices", "nope"], "choices"),
])
def test_bad_input_is_one_line_exit_2(args, field, tmp_path):
    r = runner.invoke(app, ["tune", *args, "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert r.exit_code == 2, r.output
    assert field in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_report_of_a_missing_study_is_exit_2(tmp_path):
    r = runner.invoke(app, ["tune", "report", "--study", "nope", "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert r.exit_code == 2 and "nope" in r.output


@pytest.mark.slow
def test_short_real_study_on_two_cpu_ranks(tmp_path):
    db = f"sqlite:///{tmp_path}/tune.db"
    cal = tmp_path / "cal.json"
    csv = tmp_path / "trials.csv"
    with_bench = [a for a in FAST if a != "--no-network-bench"]  # measure the network this once
    r = plan(["tune", *with_bench, "--choices", "micro_batch=2,8", "--budget", "3m", "--max-trials", "2",
              "--storage", db, "--study", "short", "--calibration-out", str(cal), "--csv", str(csv),
              "--top-k", "1"], tmp_path)
    assert "best trial" in r.stdout and "launch: torchrun" in r.stdout
    assert "prediction error" in r.stdout
    assert "re-measured top candidates" in r.stdout  # the default: the top ones run again at the end

    rep = runner.invoke(app, ["tune", "report", "--study", "short", "--storage", db, "--json"])
    assert rep.exit_code == 0, rep.output
    data = json.loads(rep.output)
    assert data["launched"] == 2 and data["by_status"].get("ok") == 2
    assert data["network"].startswith("measured")  # plan allreduce-bench ran on the same ranks
    assert "busbw" in data["network_effect"] and "network:" in r.stdout
    st = optuna.load_study(study_name="short", storage=db)
    assert st.user_attrs["plan_tune"]["system"]["measured_intranode_busbw_gbps"] > 0
    assert data["best"]["tokens_per_s"] > 0 and data["best"]["sharding"] == "none"
    assert data["launch_settings"] is not None  # DDP winner: launch settings, not a DeepSpeed JSON
    assert "--micro-batch" in data["launch_command"]
    # proposals first: trial 0 came from the planner's top-1, trial 1 from the calibrated planner
    # (after the top-k, the corrected planner and the sampler take turns)
    import pandas as pd

    df = pd.read_csv(csv)
    assert list(df.sort_values("trial")["source"]) == ["planner", "model"]
    assert df["measured_tokens_per_s"].notna().all() and df["predicted_tokens_per_s_default"].notna().all()
    # the calibration is a planner Calibration that `plan estimate` reads: the fitted one only where it predicts
    # the trials it was not fitted on better than the uncalibrated planner (tuner/calibration_check.py)
    c = Calibration.model_validate_json(cal.read_text())
    chk = data["calibration_check"]
    assert chk["n"] == 2 and chk["held_out_mean_abs_pct"] is not None and "calibration checked" in r.stdout
    if chk["kept"] == "fitted":
        assert chk["held_out_mean_abs_pct"] < chk["baseline_mean_abs_pct"] and c.compute != 1.0 and "plan tune" in c.source
    else:
        assert (c.compute, c.network) == (1.0, 1.0) and "not applied" in c.source
    est = runner.invoke(app, ["estimate", "--model", "tiny", "--gpus", "8", "--calibration", str(cal), "--json"])
    assert est.exit_code == 0, est.output
    # the bundled stack's profile fitted on the trials, read back by --catalog DIR --stack bundled
    out = tmp_path / "mine" / "stacks" / "bundled.toml"
    wr = runner.invoke(app, ["tune", "report", "--study", "short", "--storage", db, "--stack-out", str(out)])
    assert wr.exit_code == 0, wr.output
    assert "leave-one-run-out error of tokens/s over 2 trials" in " ".join(wr.output.split()) and out.is_file()
    from hardware.catalog import load_catalog

    prof = load_catalog([tmp_path / "mine"]).stacks["bundled"]
    shipped = load_catalog().stacks["bundled"]
    if "stack profile fitted on the trials written" in wr.output:  # its held-out error beat the shipped one's
        assert prof.fit_sources == ["plan tune short"] and prof.cv_by_source[0].rows == 2
        assert "leave-one-run-out" in prof.fit_method and prof.cv_mape_pct is not None
        assert prof.gemm_time_factor != shipped.gemm_time_factor  # fitted on the CPU trials, not copied
    else:
        assert "the shipped stack profile written, not the fit" in wr.output and "not refitted" in prof.fit_method
        assert prof.gemm_time_factor == shipped.gemm_time_factor
    est = runner.invoke(app, ["estimate", "--model", "tiny", "--gpus", "8", "--catalog", str(tmp_path / "mine"),
                              "--stack", "bundled", "--json"])
    assert est.exit_code == 0, est.output
    bad = runner.invoke(app, ["tune", "report", "--study", "short", "--storage", db, "--stack-out",
                              str(tmp_path / "x.toml")])
    assert bad.exit_code == 2 and "stack_out" in bad.output
    # both configurations are done: a resume has nothing left and launches nothing
    r2 = plan(["tune", *FAST, "--choices", "micro_batch=2,8", "--budget", "3m", "--storage", db,
               "--study", "short", "--remeasure-rounds", "0", "--json"], tmp_path)
    again = json.loads(r2.stdout)
    assert again["launched"] == 2 and "every configuration" in again["stop_reason"]


def test_a_misspelt_model_is_refused_before_the_study_is_opened(tmp_path, monkeypatch):
    """A typo in --model is the one-line error, said before the study is opened and the machine measured: no
    storage file is left behind in the folder (the default sqlite:///plan-tune.db)."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["tune", "--model", "tinyy", "--gpus", "2", "--budget", "1m", "--no-network-bench"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [r.output.strip()] and r.output.startswith("error: model:"), r.output
    assert "did you mean tiny" in r.output
    assert list(tmp_path.iterdir()) == []
