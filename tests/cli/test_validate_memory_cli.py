"""`plan validate`: measured peaks compared in their convention, memory error per source."""

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
DATA = Path(__file__).resolve().parents[2] / "validation" / "data"


def _mine(tmp_path, convention: str) -> Path:
    rows = list(csv.DictReader(open(DATA / "published_dev.csv")))
    mine = [dict(r, id=f"mine_{i}", measured_peak_mem_convention=convention)
            for i, r in enumerate(rows) if r["id"] in ("torchtitan_001", "bloom_prequel_009")]
    path = tmp_path / "mine.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(mine[0]))
        w.writeheader()
        w.writerows(mine)
    return path


def test_rows_show_each_peak_with_its_convention_and_sources_are_scored():
    r = runner.invoke(app, ["validate", str(DATA / "published_dev.csv"), "--rows"])
    assert r.exit_code == 0, r.output
    assert "(reserved)" in r.output and "(nvidia-smi)" in r.output
    rep = json.loads(runner.invoke(app, ["validate", str(DATA / "published_dev.csv"), "--json"]).output)
    scored = {(m["source"].split(":")[0], m["convention"]) for m in rep["memory_sources"]}
    assert scored == {("torchtitan", "reserved"), ("bloom_prequel", "nvidia-smi")}
    assert sum(m["rows"] for m in rep["memory_sources"]) == rep["memory_rows"]


def test_a_users_convention_column_changes_what_is_compared(tmp_path):
    preds = {}
    for conv in ("nvidia-smi", "reserved", "allocated"):
        rep = json.loads(runner.invoke(app, ["validate", str(_mine(tmp_path, conv)), "--json"]).output)
        preds[conv] = [p["predicted_mem_gib"] for p in rep["runs"]]
    for a, b, c in zip(preds["nvidia-smi"], preds["reserved"], preds["allocated"]):
        assert a > b > c


def test_an_unknown_convention_is_refused_by_name(tmp_path):
    r = runner.invoke(app, ["validate", str(_mine(tmp_path, "rss"))])
    assert r.exit_code == 2 and "measured_peak_mem_convention" in r.output
