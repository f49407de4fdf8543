"""Optuna storage: SQLite by default (one embedded, resumable file), any RDB URL (PostgreSQL).

This module opens a storage; tuner/study_store.py is what reads and writes studies on it.

Heartbeats mark a trial whose worker died (kill -9) as failed; the stale-trial callback retries
it (optuna's RetryFailedTrialCallback) and ends what is left of its process group. A claims
table with a unique key on (study, configuration) makes sure that several workers on one
storage never run the same configuration twice.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage

try:  # optuna >= 4.9 renamed the callback
    from optuna.storages import RetryHeartbeatStaleTrialCallback as _Retry
except ImportError:  # pragma: no cover
    from optuna.storages import RetryFailedTrialCallback as _Retry
from optuna.trial import FrozenTrial

from planner.errors import PlanError
from tuner.runner import TRIAL_MARKER_ENV, kill_group
from tuner.worker_id import worker_alive

DEFAULT_STORAGE = "sqlite:///plan-tune.db"
HOST = socket.gethostname()

_claims_meta = sa.MetaData()
claims_table = sa.Table(
    "plan_tune_claims", _claims_meta,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("config_key", sa.String(1024), primary_key=True),
    sa.Column("trial_id", sa.Integer, nullable=False),
)


def normalize_url(url: str | None) -> str:
    """None -> the default SQLite file; a bare path -> sqlite:///path; `postgres://` (as some
    hosts print it) -> `postgresql://`, which SQLAlchemy drives with psycopg 3 (the tune
    extra); `postgresql+psycopg2://` goes to psycopg 3 too when psycopg2 is not installed."""
    if not url:
        return DEFAULT_STORAGE
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser()}"
    scheme, rest = url.split("://", 1)
    if scheme == "postgres":
        return f"postgresql://{rest}"
    if scheme == "postgresql+psycopg2":
        import importlib.util

        if importlib.util.find_spec("psycopg2") is None:
            return f"postgresql+psycopg://{rest}"
    return url


_SECRET_QUERY = re.compile(r"(?i)([?&][^=&]*(?:password|passwd|pwd|secret|token)[^=&]*=)[^&]*")
_SECRET_PARAM = re.compile(r"(?i)[?&][^=&]*(?:password|passwd|pwd|secret|token)[^=&]*=[^&]*")
_USERINFO = re.compile(r"(://[^:/@?#]*:)[^@/?#]*@")


def masked_url(url: str | None) -> str:
    """The storage URL as it may be shown (CLI, API, reports, logs, errors): password masked."""
    url = normalize_url(url)
    try:
        from sqlalchemy.engine import make_url

        shown = make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError, TypeError):
        shown = _USERINFO.sub(r"\1***@", url)
    return _SECRET_QUERY.sub(r"\1***", shown)


def scrub(text: str, url: str | None) -> str:
    """`text` (an error message) with the URL's secrets replaced by ***."""
    from urllib.parse import unquote

    url = normalize_url(url)
    secrets = {m.group(0).split(":", 2)[-1][:-1] for m in _USERINFO.finditer(url)}
    secrets |= {m.group(0).split("=", 1)[1] for m in _SECRET_PARAM.finditer(url)}
    text = text.replace(url, masked_url(url))
    for secret in sorted(secrets | {unquote(x) for x in secrets}, key=len, reverse=True):
        if len(secret) >= 3:  # a 1-2 character secret would rewrite ordinary words
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
    return text


def quiet_optuna() -> None:
    """Optuna's info lines and experimental-feature warnings would drown the progress bar."""
    import warnings

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")


def sqlite_file(url: str | None) -> Path | None:
    """The file of a SQLite storage URL (None for other databases and for ':memory:')."""
    url = normalize_url(url)
    if not url.startswith("sqlite:///") or url.endswith(":memory:"):
        return None
    return Path(url.removeprefix("sqlite:///").split("?", 1)[0])


def open_storage(url: str | None, *, heartbeat_interval_s: int = 10, grace_period_s: int = 30,
                 max_retry: int = 2) -> RDBStorage:
    url = normalize_url(url)
    quiet_optuna()
    kwargs: dict = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
    for attempt in range(SCHEMA_RACE_TRIES):
        try:
            storage = RDBStorage(
                url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_interval_s,
                grace_period=grace_period_s,
                heartbeat_stale_trial_callback=StaleTrialCallback(max_retry=max_retry),
            )
            _claims_meta.create_all(storage.engine, checkfirst=True)
            return storage
        except (sa.exc.IntegrityError, sa.exc.OperationalError) as e:
            # two processes making a brand-new storage's tables at once (the service polling
            # while its worker creates the study): the loser sees "already exists" or a
            # duplicate version row; its next try finds the tables made
            if attempt + 1 < SCHEMA_RACE_TRIES and _schema_race(e):
                time.sleep(0.2 * (attempt + 1))
                continue
            error = e
        except (sa.exc.ArgumentError, ImportError) as e:
            error = e
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise PlanError("storage", f"cannot open {masked_url(url)!r}: {scrub(first, url)}") from None
    raise AssertionError("unreachable: the last try returns or raises")


SCHEMA_RACE_TRIES = 4


def _schema_race(e: Exception) -> bool:
    text = str(e).lower()
    return isinstance(e, sa.exc.IntegrityError) or "already exists" in text or "database is locked" in text


class StaleTrialCallback:
    """A dead worker's trial: end its orphaned ranks (same host), then retry it."""

    def __init__(self, max_retry: int = 2):
        self._retry = _Retry(max_retry=max_retry, inherit_intermediate_values=False)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        end_orphan_group(trial)
        self._retry(study, trial)


def end_orphan_group(trial: FrozenTrial) -> None:
    """Kill a dead worker's trainer process group if it is still running here (the worker's
    liveness lock is here and free: tuner/worker_id.py)."""
    pgid, marker = trial.user_attrs.get("pgid"), trial.user_attrs.get("workdir")
    if not pgid or not marker or worker_alive(trial.user_attrs.get("worker_id")) is not False:
        return
    tag = f"{TRIAL_MARKER_ENV}={marker}".encode()
    for d in Path("/proc").iterdir():  # only when a member is really that trial's trainer
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) != pgid:
                continue
            # the launcher names the workdir on its command line; its ranks (spawned by
            # torch's elastic launch) carry it in their environment
            if marker.encode() in (d / "cmdline").read_bytes() or tag in (d / "environ").read_bytes().split(b"\0"):
                kill_group(pgid)
                return
        except (OSError, ProcessLookupError):
            continue
