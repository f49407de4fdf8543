"""Every spelling of tests/planner/unseen_spellings.py reads as the value it names, through the real
reader (planner.runs.load_runs on one generated CSV): a regression of any one spelling fails its case."""

import pytest

from planner.runs import load_runs

import unseen_spellings as us


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = tmp_path_factory.mktemp("unseen") / "unseen.csv"
    ids = [rid for rid, _ in us.write(path)]
    missed: list = []
    runs = {r.id: r for r in load_runs(path, None, missed)}
    return ids, runs, {m.id: m for m in missed}


@pytest.mark.parametrize("index", range(len(us.CASES)), ids=[f"{c.column}={c.cell!r}" for c in us.CASES])
def test_spelling_reads_as_named(loaded, index):
    ids, runs, missed = loaded
    failure = us.check(us.CASES[index], ids[index], runs, missed)
    assert failure is None, failure


def test_every_layout_column_has_spellings():
    assert set(us.layout_columns()) <= {c.column for c in us.CASES}


def test_only_the_refused_spellings_are_not_predicted(loaded):
    ids, _, missed = loaded
    refused = {rid for rid, c in zip(ids, us.CASES) if isinstance(c.expected, us.Refused)}
    assert refused and set(missed) == refused
    assert all(m.reason and "\n" not in m.reason for m in missed.values())
