"""Storage URLs leave the process only with the password masked (issue 13)."""

from __future__ import annotations

import optuna
import pytest

from planner.errors import PlanError
from tuner.report import load
from tuner.storage import masked_url, open_storage, scrub


@pytest.mark.parametrize("url, shown", [
    ("postgresql://alice:hunter22@db.example:5432/plan", "postgresql://alice:***@db.example:5432/plan"),
    ("postgresql+psycopg://alice:p%40ss%3Aword@db/plan", "postgresql+psycopg://alice:***@db/plan"),
    ("postgresql://alice@db/plan", "postgresql://alice@db/plan"),
    ("mysql://bob:pw123@h/d?password=zz99&x=1", "mysql://bob:***@h/d?password=***&x=1"),
    ("sqlite:///plan-tune.db", "sqlite:///plan-tune.db"),
    (None, "sqlite:///plan-tune.db"),
])
def test_masked_url(url, shown):
    assert masked_url(url) == shown


def test_scrub_removes_the_password_in_any_spelling():
    url = "postgresql://alice:p%40ss%3Aword@db/plan"
    text = f"cannot connect to {url}: password 'p@ss:word' rejected (p%40ss%3Aword)"
    out = scrub(text, url)
    assert "p@ss:word" not in out and "p%40ss%3Aword" not in out and "alice:***@db" in out


def test_storage_errors_mask_the_password():
    with pytest.raises(PlanError) as e:  # nothing listens on port 1
        open_storage("postgresql://alice:hunter22@127.0.0.1:1/plan")
    assert "hunter22" not in str(e.value) and "alice:***@127.0.0.1:1" in str(e.value)


def test_unknown_study_lists_names_only_when_asked(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="mine", storage=url)
    with pytest.raises(PlanError) as e:
        load("other", url)
    assert "mine" in str(e.value)  # the CLI user owns the storage
    with pytest.raises(PlanError) as e:
        load("other", url, list_studies=False)
    assert "mine" not in str(e.value)
