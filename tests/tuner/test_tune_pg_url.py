"""PostgreSQL URLs as users write them (`postgresql://`, `postgres://`) work against a real
server (psycopg 3), and its password never shows in what the tuner prints (issue 13)."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest
from tuner_pg import ensure_postgres, throwaway_cluster

from planner.errors import PlanError
from tuner.report import load
from tuner.storage import open_storage

PASSWORD = "s3cret-pw-42"


@pytest.fixture(scope="module")
def pg_url():
    bindir, why = ensure_postgres()
    if bindir is None:
        pytest.skip(why)
    with throwaway_cluster(bindir) as url:  # trust auth: the password is accepted and ignored
        yield url.replace("postgres@", f"postgres:{PASSWORD}@", 1)


def test_postgresql_urls_as_written_work(pg_url):
    assert pg_url.startswith("postgresql://")
    storage = open_storage(pg_url)
    optuna.create_study(study_name="pg-url", storage=storage)
    for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
        assert [s.study_name for s in open_storage(url).get_all_studies()] == ["pg-url"]


def test_the_password_never_shows(pg_url):
    with pytest.raises(PlanError) as e:
        load("nope", pg_url)
    assert PASSWORD not in str(e.value) and "postgres:***@" in str(e.value)
    r = subprocess.run([sys.executable, "-m", "plan_cli.main", "tune", "report", "--study", "nope",
                        "--storage", pg_url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and PASSWORD not in r.stdout + r.stderr and "***" in r.stderr, r.stderr
    wrong_port = pg_url.rsplit(":", 1)[0] + ":1/plan"
    with pytest.raises(PlanError) as e:
        open_storage(wrong_port)
    assert PASSWORD not in str(e.value)
