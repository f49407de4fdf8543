"""The CLI's consoles read COLUMNS when they print, not once at import: a COLUMNS set later (CliRunner's env,
an xdist worker handed the controller's terminal) is the width, and piped output without COLUMNS gets 200
columns, not rich's 80 (a long path in a hint was wrapped mid-sentence under xdist)."""

from plan_cli.common import console, err_console


def test_columns_set_after_import_is_the_width(monkeypatch, capsys):
    for c in (console, err_console):
        monkeypatch.setenv("COLUMNS", "300")
        assert c.width == 300
        monkeypatch.setenv("COLUMNS", "97")
        assert c.width == 97


def test_piped_output_without_columns_is_200_wide(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert console.width == 200 and err_console.width == 200
    console.print("x" * 150)
    assert capsys.readouterr().out == "x" * 150 + "\n"


def test_the_ranking_line_is_not_folded_to_a_narrow_table():
    """A few short rows make a narrow table: the '... best of ... (ranked by ...)' line stays whole above it
    (as a rich table title it was folded to the table's width, 'tokens_per_s)' alone on the next line)."""
    from typer.testing import CliRunner

    from plan_cli.main import app

    r = CliRunner().invoke(app, ["estimate", "--model", "7b", "--gpus", "16", "--top", "2",
                                 "--internode-gbps", "0.001"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if " best of " in x)
    assert line.rstrip().endswith("(ranked by tokens_per_s)"), line
