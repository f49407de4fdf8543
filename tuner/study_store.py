"""Every read and write of Optuna's storage the tuner, the CLI and the service do.

tuner/storage.py opens a storage (URL, password masking, heartbeats, the claims table); this
module is what the rest of the code calls on it: list, load and create studies, a study's id,
what `plan tune` records on a study (`StudyMeta`, the fitted calibration), and, for the tuning
loop, the per-trial records Optuna's study API has no call for (a trial of
another worker failed, a configuration claimed). Only Optuna's public API is used: the
`RDBStorage` we open ourselves (`get_trial_id_from_study_id_trial_number`, `get_trial`,
`set_trial_user_attr`, `engine`) and `Study.tell` with a trial number; never a study's
`_storage` or a trial's `_trial_id`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import PlanError
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Calibration, Settings
from planner.system import System
from tuner.config import Backend
from tuner.storage import claims_table, masked_url, open_storage, sqlite_file
from tuner.worker_id import worker_alive


class UnknownStudy(PlanError):
    """No such study in the storage, or one that `plan tune` did not create (HTTP: 404)."""

    def __init__(self, message: str):
        super().__init__("study", message)


META_KEY = "plan_tune"  # the study user attribute holding its StudyMeta
CALIBRATION_KEY = "calibration"  # the calibration fitted so far (updated after every trial)
CALIBRATION_CHECK_KEY = "calibration_check"  # its held-out error against the starting calibration's


class StudyMeta(BaseModel):
    """What `plan tune` measured and chose when it created the study, stored on it (user attr
    `plan_tune`) so that every later worker, resume, report and export predicts with the same
    System and searches the same space. Studies stored before this model (a plain dict,
    possibly without the later keys) load with the defaults below."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="preset id, size or config.json the trials train")
    nproc: int = Field(gt=0, description="ranks of every trial")
    seq_len: int = Field(gt=0)
    system: System = Field(description="the system the trials run on, with the measured all-reduce busbw")
    on_gpu: bool = False
    backend: Backend = "any"
    steps: int = Field(default=4, gt=0, description="trainer steps per trial")
    warmup_steps: int = Field(default=1, ge=0)
    global_batch: int | None = None
    device_memory_gib: float | None = None
    space: dict[str, list[Any]] = Field(default_factory=dict, description="knob -> values searched")
    network_note: str | None = None  # how the network was measured (or not)
    network_effect: str | None = None  # what the measured busbw changed in the planner's ranking
    planner_top_k: list[dict] = Field(default_factory=list, description="the planner's proposals, best first")
    calibration: Calibration = Calibration()  # the calibration the study started from (--calibration-in)
    settings: Settings = Settings()  # the planner settings of the predictions

    @classmethod
    def load(cls, study: optuna.Study) -> "StudyMeta":
        stored = study.user_attrs.get(META_KEY)
        if stored is None:
            from tuner.study_setup import SETUP_KEY, describe

            if isinstance(rec := study.user_attrs.get(SETUP_KEY), dict):  # a new study, its network being measured
                info = describe(rec)
                now = f"is being set up ({info['phase']})" if info["worker"] == "alive" else \
                    f"was stopped while being set up ({info['phase']}); {info['resume']}"
                raise PlanError("study", f"{study.study_name!r} has no completed trial yet: it {now}")
            raise UnknownStudy(f"{study.study_name!r} was not created by plan tune")
        try:
            return cls.model_validate(stored)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise PlanError("study", f"{study.study_name!r}: its {META_KEY} record is not readable "
                                     f"({where}: {err['msg']})") from None

    def save(self, study: optuna.Study) -> None:
        study.set_user_attr(META_KEY, self.model_dump(mode="json"))

    @property
    def choices(self) -> dict[str, tuple]:
        return {k: tuple(v) for k, v in self.space.items()}

    def base(self) -> Scenario:
        """The scenario every trial's prediction starts from (the knobs are pinned on it)."""
        return Scenario(model=self.model, gpus=self.nproc, seq_len=self.seq_len, global_batch=self.global_batch)

    def predictor(self):
        from tuner.predict import Predictor

        return Predictor(self.base(), self.system, self.settings)

    def plan(self, knobs: dict) -> ExecutionPlan:
        """A trial's knobs as the ExecutionPlan it ran."""
        from tuner.space import to_plan

        return to_plan(knobs, dp=self.nproc, seq_len=self.seq_len)

    def run_backend(self, knobs: dict) -> str:
        """The framework a trial of `knobs` runs under in this study (tuner/trial.py)."""
        from tuner.trial import run_backend

        return run_backend(knobs, self.backend)


def current_calibration(study: optuna.Study) -> Calibration:
    """The calibration fitted so far, else the one the study started from."""
    fitted = study.user_attrs.get(CALIBRATION_KEY)
    if fitted:
        return Calibration.model_validate(fitted)
    stored = study.user_attrs.get(META_KEY) or {}
    return Calibration.model_validate(stored.get("calibration") or {})


def save_calibration(study: optuna.Study, cal: Calibration, check: dict | None = None) -> None:
    """The calibration applied now and, when given, how it was chosen (tuner/calibration_check.py)."""
    study.set_user_attr(CALIBRATION_KEY, cal.model_dump(mode="json"))
    if check is not None:
        study.set_user_attr(CALIBRATION_CHECK_KEY, check)


def calibration_check(study: optuna.Study) -> dict | None:
    """How the applied calibration was chosen: held-out vs starting error, n, which was kept."""
    return study.user_attrs.get(CALIBRATION_CHECK_KEY)


def study_names(storage: RDBStorage) -> list[str]:
    return sorted(s.study_name for s in storage.get_all_studies())


def study_exists(storage: RDBStorage, name: str) -> bool:
    return name in study_names(storage)


def load(study_name: str, storage_url: str | None, *, list_studies: bool = True) -> optuna.Study:
    """A study of the storage; an unknown name is a PlanError that lists the storage's studies
    only with `list_studies` (the HTTP service shows them to authenticated callers only)."""
    db = sqlite_file(storage_url)
    if db is not None and not db.exists():  # opening it made an empty database in the wrong folder
        raise UnknownStudy(f"no study {study_name!r}: {db} does not exist ({db.resolve()}); run this where `plan tune` "
                           "ran, or give its --storage")
    storage = open_storage(storage_url)
    if not study_exists(storage, study_name):
        where = f"no study {study_name!r} in {masked_url(storage_url)}"
        if list_studies:
            where += f" (studies: {', '.join(study_names(storage)) or 'none'})"
        raise UnknownStudy(where)
    return optuna.load_study(study_name=study_name, storage=storage)


def list_studies(storage_url: str | None) -> list[str]:
    return study_names(open_storage(storage_url))


def study_id(storage_url: str | None, study_name: str) -> int:
    """The study's id in the storage (optuna-dashboard's URLs name studies by it)."""
    return open_storage(storage_url).get_study_id_from_name(study_name)


class StudyStore:
    """One study on the storage it was opened from: the trial records of the tuning loop."""

    def __init__(self, storage: RDBStorage, study: optuna.Study):
        self.storage = storage
        self.study = study
        self._study_id: int | None = None

    @classmethod
    def open(cls, storage: RDBStorage, name: str, *, sampler: optuna.samplers.BaseSampler | None = None,
             create: bool) -> "StudyStore":
        """Load study `name`, or create it (maximize; load_if_exists: another worker may create
        it at the same moment)."""
        if create:
            study = optuna.create_study(study_name=name, storage=storage, direction="maximize", sampler=sampler,
                                        load_if_exists=True)
        else:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        return cls(storage, study)

    # ---- trials by number -----------------------------------------------------------------
    def trial_id(self, number: int) -> int:
        if self._study_id is None:
            self._study_id = self.storage.get_study_id_from_name(self.study.study_name)
        return self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)

    def trial(self, number: int) -> FrozenTrial:
        """A trial as stored now (also one running in another process)."""
        return self.storage.get_trial(self.trial_id(number))

    def is_retry(self, number: int) -> bool:
        """The trial re-runs one whose worker died (queued by the heartbeat's retry callback,
        which marks it in the trial's system attributes)."""
        return self.trial(number).system_attrs.get("failed_trial") is not None

    # ---- dead workers ---------------------------------------------------------------------
    def fail_dead_local_trials(self) -> list[int]:
        """RUNNING trials whose worker is known dead here (its liveness lock is free): fail them
        now (no need to wait for the heartbeat grace period), then run the stale-trial callback
        on them. A worker that cannot be told here (another machine or container) is left to
        Optuna's heartbeat. Returns the numbers of the trials failed."""
        failed = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if worker_alive(t.user_attrs.get("worker_id")) is not False:
                continue
            try:
                # no Trial object for another worker's trial: the attribute goes through the storage
                self.storage.set_trial_user_attr(self.trial_id(t.number), "status", "interrupted")
                self.study.tell(t.number, state=TrialState.FAIL)
            except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
                continue  # finished (or failed by another worker) in the meantime
            failed.append(t.number)
        callback = self.storage.get_heartbeat_stale_trial_callback()
        if callback is not None:
            for number in failed:
                callback(self.study, self.trial(number))
        return failed

    # ---- claims: one configuration, one trial ----------------------------------------------
    def claim(self, config_key: str, number: int, *, is_reclaimable: Callable[[FrozenTrial], bool]) -> int | None:
        """Claim a configuration for trial `number`. Returns None when claimed, else the
        holder's trial number.

        The primary key makes the insert atomic across workers; a holder whose trial produced
        no result (`is_reclaimable(holder)`: interrupted, heartbeat-failed) is taken over with a
        compare-and-set update.
        """
        name, trial_id = self.study.study_name, self.trial_id(number)
        where = (claims_table.c.study_name == name, claims_table.c.config_key == config_key)
        try:
            with self.storage.engine.begin() as conn:
                conn.execute(claims_table.insert().values(study_name=name, config_key=config_key, trial_id=trial_id))
            return None
        except sa.exc.IntegrityError:
            pass
        with self.storage.engine.begin() as conn:
            holder_id = conn.execute(sa.select(claims_table.c.trial_id).where(*where)).scalar_one()
        holder = self.storage.get_trial(holder_id)
        if holder_id != trial_id and not is_reclaimable(holder):
            return holder.number
        with self.storage.engine.begin() as conn:
            res = conn.execute(claims_table.update().where(*where, claims_table.c.trial_id == holder_id)
                               .values(trial_id=trial_id))
        return None if res.rowcount == 1 else holder.number

    def release(self, config_key: str, number: int) -> None:
        """Give a claim back (a trial that was not run after all, e.g. it did not fit the budget)."""
        with self.storage.engine.begin() as conn:
            conn.execute(claims_table.delete().where(
                claims_table.c.study_name == self.study.study_name, claims_table.c.config_key == config_key,
                claims_table.c.trial_id == self.trial_id(number)))
