"""Every spelling of tests/planner/unseen_spellings.py reads as the value it names, through the real
reader (planner.runs.load_runs on one generated CSV): a regression of any one spelling fails its case."""

import pytest

from planner.runs import load_runs

import spelling_check as sc
import unseen_spellings as us


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = tmp_path_factory.mktemp("unseen") / "unseen.csv"
    ids = [rid for rid, _ in sc.write(path)]
    missed: list = []
    runs = {r.id: r for r in load_runs(path, None, missed)}
    return ids, runs, {m.id: m for m in missed}


@pytest.mark.parametrize("index", range(len(us.CASES)), ids=[f"{c.column}={c.cell!r}" for c in us.CASES])
def test_spelling_reads_as_named(loaded, index):
    ids, runs, missed = loaded
    failure = sc.check(us.CASES[index], ids[index], runs, missed)
    assert failure is None, failure


def test_every_layout_column_has_spellings():
    assert set(us.layout_columns()) <= {c.column for c in us.CASES}


def test_only_the_refused_spellings_are_not_predicted(loaded):
    ids, _, missed = loaded
    refused = {rid for rid, c in zip(ids, us.CASES) if isinstance(c.expected, us.Refused)}
    assert refused and set(missed) == refused
    assert all(m.reason and "\n" not in m.reason for m in missed.values())


def test_garbage_cells_are_read_or_not_predicted_never_a_crash(tmp_path):
    from planner.validate import validate

    path = tmp_path / "garbage.csv"
    n = sc.write_garbage(path)
    missed: list = []
    report = validate(load_runs(path, None, missed), None, missed)
    assert len(report.runs) + len(report.not_predicted) == n
    assert all(m.field and m.reason and "\n" not in m.reason for m in report.not_predicted)


@pytest.mark.parametrize("encoding,delimiter", [("utf-8-sig", ","), ("utf-8-sig", ";"), ("utf-8", "\t")])
def test_spreadsheet_exports_read_like_the_plain_file(tmp_path, encoding, delimiter):
    """Excel's "CSV UTF-8" (byte-order mark), semicolon-separated (comma-decimal locales), TSV; typographic
    dashes and non-breaking spaces in cells."""
    import csv

    cases = [c for c in us.CASES[:40] if not isinstance(c.expected, us.Refused)]
    plain = tmp_path / "plain.csv"
    sc.write(plain, cases)
    rows = list(csv.DictReader(open(plain, encoding="utf-8")))
    other = tmp_path / "other.csv"
    with open(other, "w", newline="", encoding=encoding) as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delimiter)
        w.writeheader()
        for r in rows:
            w.writerow({k: v.replace("-", "\u2013") if k == "offload" else v.replace(" ", "\u00a0") for k, v in r.items()})
    a, b = load_runs(plain), load_runs(other)
    assert [(r.id, r.plan, r.system) for r in a] == [(r.id, r.plan, r.system) for r in b]
