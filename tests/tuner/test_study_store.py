"""tuner/study_store.py on a real SQLite storage: claims (one configuration, one trial)."""

from __future__ import annotations

from optuna.trial import TrialState

from tuner.storage import open_storage
from tuner.study_store import StudyStore, list_studies, study_id


def _store(tmp_path, name="s") -> StudyStore:
    return StudyStore.open(open_storage(f"sqlite:///{tmp_path / 'c.db'}"), name, create=True)


def test_a_configuration_is_claimed_once_until_its_holder_is_reclaimable(tmp_path):
    store = _store(tmp_path)
    a, b, c = (store.study.ask().number for _ in range(3))
    never = lambda holder: False  # noqa: E731
    assert store.claim("k1", a, is_reclaimable=never) is None
    assert store.claim("k1", a, is_reclaimable=never) is None  # the holder itself
    assert store.claim("k1", b, is_reclaimable=never) == a
    seen = []

    def failed(holder):
        seen.append(holder)
        return holder.state == TrialState.FAIL

    assert store.claim("k1", b, is_reclaimable=failed) == a  # a is still running
    assert [t.number for t in seen] == [a] and seen[0].state == TrialState.RUNNING
    store.study.tell(a, state=TrialState.FAIL)
    assert store.claim("k1", b, is_reclaimable=failed) is None  # taken over
    assert store.claim("k1", c, is_reclaimable=never) == b
    store.release("k1", c)  # not the holder: nothing happens
    assert store.claim("k1", c, is_reclaimable=never) == b
    store.release("k1", b)
    assert store.claim("k1", c, is_reclaimable=never) is None


def test_claims_are_per_study_and_ids_come_from_the_storage(tmp_path):
    one, two = _store(tmp_path, "one"), _store(tmp_path, "two")
    t1, t2 = one.study.ask().number, two.study.ask().number
    assert one.claim("k", t1, is_reclaimable=lambda h: False) is None
    assert two.claim("k", t2, is_reclaimable=lambda h: False) is None
    url = f"sqlite:///{tmp_path / 'c.db'}"
    assert list_studies(url) == ["one", "two"]
    assert study_id(url, "two") != study_id(url, "one")
    assert one.trial(t1).number == t1 and one.trial_id(t1) != two.trial_id(t2)


# ---- StudyMeta: what `plan tune` records on a study ------------------------------------------

def _system_json() -> dict:
    from planner.resolve import resolve_system
    from planner.scenario import Scenario

    return resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100")).model_dump(mode="json")


# What `plan tune` stored before StudyMeta existed (an early study: no settings, network effect,
# planner top-k or warm-up yet), written as the plain dict it was.
OLD_META = {"model": "tiny", "nproc": 2, "on_gpu": True, "backend": "any", "seq_len": 64, "steps": 3,
            "global_batch": None, "space": {"sharding": ["none", "zero2"], "offload": ["none"],
                                            "activation_checkpointing": ["none"], "precision": ["bf16"],
                                            "micro_batch": [1, 2]},
            "network_note": "not measured", "calibration": {"compute": 0.5, "network": 1.0},
            "calibration_default": True}
KNOBS = {"sharding": "zero2", "offload": "none", "activation_checkpointing": "none", "precision": "bf16",
         "micro_batch": 2, "grad_accum": 1}


def _old_study(tmp_path, with_trials: bool = True):
    import optuna

    url = f"sqlite:///{tmp_path / 'old.db'}"
    study = optuna.create_study(study_name="old", storage=open_storage(url), direction="maximize")
    study.set_user_attr("plan_tune", {**OLD_META, "system": _system_json()})
    if with_trials:
        for value, k in ((900.0, dict(KNOBS, micro_batch=1)), (1500.0, KNOBS)):
            study.add_trial(optuna.trial.create_trial(
                value=value, user_attrs={"knobs": k, "status": "ok", "config_key": str(sorted(k.items())),
                                         "step_time_s": 0.1, "predicted_tokens_per_s_default": 1000.0}))
    return url, study


def test_a_study_stored_as_the_old_dict_still_loads_resumes_reports_and_exports(tmp_path):
    from tuner.config import TuneConfig
    from tuner.report import build_report, chosen_from_study
    from tuner.setup import open_study
    from tuner.study_store import StudyMeta, current_calibration

    url, study = _old_study(tmp_path)
    meta = StudyMeta.load(study)
    assert (meta.model, meta.nproc, meta.seq_len, meta.steps, meta.warmup_steps) == ("tiny", 2, 64, 3, 1)
    assert meta.system.gpu.name and meta.planner_top_k == [] and meta.settings.runtime_overhead_gib == 1.5
    assert current_calibration(study).compute == 0.5  # the calibration it started from
    ctx = open_study(TuneConfig(model="tiny", gpus=2, budget_s=60, storage=url, study="old",
                                measure_network=False, progress=False), create=False)
    assert ctx.space.size == 4 and ctx.meta == meta and ctx.store.study.study_name == "old"
    assert ctx.predictor(KNOBS).tokens_per_s > 0
    rep = build_report(ctx.study, url)
    assert rep.best["trial"] == 1 and rep.ranks == 2 and rep.model == "tiny" and rep.network == "not measured"
    assert rep.deepspeed_config["zero_optimization"]["stage"] == 2 and rep.by_backend == {"deepspeed": {"ok": 2}}
    chosen = chosen_from_study("old", url)
    assert chosen.plan.sharding == "zero2" and chosen.plan.micro_batch == 2 and chosen.plan.dp == 2
    assert chosen.system == meta.system and chosen.source == "study old trial 1"


def test_meta_round_trips_in_the_stored_format(tmp_path):
    from tuner.study_store import META_KEY, StudyMeta

    _, study = _old_study(tmp_path, with_trials=False)
    meta = StudyMeta.load(study)
    meta.planner_top_k = [KNOBS]
    meta.save(study)
    stored = study.user_attrs[META_KEY]
    assert stored["system"] == _system_json() and stored["space"] == OLD_META["space"]  # JSON, as before
    assert stored["planner_top_k"] == [KNOBS] and "calibration_default" not in stored
    assert StudyMeta.load(study) == meta
    assert meta.plan(KNOBS) == StudyMeta.model_validate(stored).plan(KNOBS)


def test_studies_plan_tune_did_not_make_are_unknown_studies(tmp_path):
    import optuna
    import pytest

    from planner.errors import PlanError
    from tuner.report import chosen_from_study
    from tuner.study_store import StudyMeta, UnknownStudy, load

    url, _ = _old_study(tmp_path, with_trials=False)
    optuna.create_study(study_name="foreign", storage=url)
    with pytest.raises(UnknownStudy, match="'foreign' was not created by plan tune"):
        StudyMeta.load(load("foreign", url))
    with pytest.raises(UnknownStudy, match="no study 'nope'.*studies: foreign, old"):
        chosen_from_study("nope", url)
    with pytest.raises(PlanError, match="no completed trial") as e:
        chosen_from_study("old", url)
    assert not isinstance(e.value, UnknownStudy)
    study = load("old", url)
    study.set_user_attr("plan_tune", {**OLD_META, "system": _system_json(), "nproc": "two"})
    with pytest.raises(PlanError, match=r"'old': its plan_tune record is not readable \(nproc: "):
        StudyMeta.load(study)


OPEN_AT = """
import sys, time
from planner.errors import PlanError
from tuner.storage import open_storage
from tuner.study_store import load
while time.time() < float(sys.argv[2]):
    pass
try:
    open_storage(sys.argv[1])  # makes the brand-new tables (load alone now refuses a SQLite file that is not there)
    load("x", sys.argv[1], list_studies=False)
except PlanError as e:
    print(e.field)
"""


def test_processes_opening_a_new_storage_at_once_all_get_it(tmp_path):
    """The service polls a study while its worker makes the storage: before the fix one opener
    in six lost the race for the brand-new tables (a 500 or a dead worker)."""
    import os
    import subprocess
    import sys
    import time

    env = os.environ | {"PYTHONPATH": os.getcwd()}
    for round_ in range(3):
        url = f"sqlite:///{tmp_path / f'new{round_}.db'}"
        start = str(time.time() + 3.0)  # after the imports: all three open at once
        procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT, url, start], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [o[0].strip() for o in outs] == ["study"] * 3, outs  # "no study 'x'": the storage opened
