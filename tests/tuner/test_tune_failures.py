"""Failures never stop a study: a real OOM under the per-rank memory cap, a timeout whose
process group is reaped, and configurations predicted not to fit recorded without a launch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest

from tune_helpers import FAST, plan

pytestmark = pytest.mark.slow


def _statuses(db: str, name: str) -> dict[int, str]:
    study = optuna.load_study(study_name=name, storage=db)
    return {t.number: t.user_attrs.get("status") for t in study.trials}


def test_predicted_oom_is_recorded_not_launched(tmp_path):
    """Through the programmatic API the HTTP service uses: start_study, then best_plan."""
    from tuner import TuneConfig, best_plan, start_study

    db = f"sqlite:///{tmp_path}/f.db"
    rep = start_study(TuneConfig(
        model="tiny", gpus=2, budget_s=180, steps=3, seq_len=64, storage=db, study="cap",
        device_memory_gib=1.2, measure_network=False, progress=False,
        choices={"sharding": ("none",), "offload": ("none",), "precision": ("fp32",),
                 "activation_checkpointing": ("none",), "micro_batch": (2, 2048)}))
    assert rep.by_status == {"ok": 1, "predicted_infeasible": 1}, rep.by_status
    assert rep.launched == 1
    study = optuna.load_study(study_name="cap", storage=db)
    skipped = [t for t in study.trials if t.user_attrs["status"] == "predicted_infeasible"][0]
    assert skipped.params["micro_batch"] == 2048 and "GiB" in skipped.user_attrs["reason"]
    assert "pgid" not in skipped.user_attrs  # never launched
    plan_ = best_plan("cap", db)
    assert plan_.micro_batch == 2 and plan_.dp == 2 and plan_.seq_len == 64


def test_real_oom_under_the_memory_cap_and_the_study_goes_on(tmp_path):
    db = f"sqlite:///{tmp_path}/o.db"
    r = plan(["tune", *FAST, "--seq-len", "64", "--choices", "micro_batch=2048,2", "--device-memory-gib", "1.2",
              "--explore-infeasible", "--top-k", "0", "--budget", "4m", "--storage", db, "--study", "oom",
              "--json", "--seed", "1"], tmp_path)
    rep = json.loads(r.stdout)
    assert rep["by_status"] == {"ok": 1, "oom": 1}, rep["by_status"]
    study = optuna.load_study(study_name="oom", storage=db)
    oom = [t for t in study.trials if t.user_attrs["status"] == "oom"][0]
    assert oom.state == optuna.trial.TrialState.FAIL and oom.params["micro_batch"] == 2048
    assert "allocate" in (oom.user_attrs["error"] or "").lower()
    assert rep["best"]["micro_batch"] == 2


def _procs_with(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in d.joinpath("cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def test_timeout_is_classified_and_the_group_reaped(tmp_path):
    db = f"sqlite:///{tmp_path}/t.db"
    wd = tmp_path / "trials"
    # 2000 steps cannot finish in 4 s on any machine (idle, a tiny model takes >= 5 ms a step)
    r = plan(["tune", *FAST, "--steps", "2000", "--choices", "micro_batch=2", "--trial-timeout", "4s", "--budget", "10m",
              "--storage", db, "--study", "slow", "--workdir", str(wd), "--json"], tmp_path)
    rep = json.loads(r.stdout)
    assert rep["by_status"] == {"timeout": 1}
    assert rep["best"] is None
    assert _procs_with(str(wd)) == [], "trial processes outlived their timeout"
    assert os.path.isdir(wd)
