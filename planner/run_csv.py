"""A runs file as a spreadsheet or another person's script writes it (planner/runs.read_rows uses this).

Read alike: a UTF-8 byte-order mark (Excel's "CSV UTF-8"), semicolon- or tab-separated files (Excel in
locales whose decimal mark is a comma, TSV exports), blanks around header names and cells, non-breaking
and thin spaces, and typographic dashes ("—", "–", "‒", "−") for the ASCII "-" every reader knows.
"""

from __future__ import annotations

import csv
import io
import re

_DASHES = re.compile("[\u2010\u2011\u2012\u2013\u2014\u2015\u2212]")
_SPACES = re.compile("[\u00a0\u2002-\u200a\u202f\u205f\u3000]")


def cell(text: str | None) -> str:
    """A cell with its spaces and dashes in ASCII, stripped."""
    return _DASHES.sub("-", _SPACES.sub(" ", text or "")).strip()


def _delimiter(header: str) -> str:
    if "," in header:
        return ","
    return max(";\t", key=header.count) if (";" in header or "\t" in header) else ","


def header(text: str) -> list[str]:
    """The column names of a CSV text's first line (stripped), [] for an empty text."""
    text = text.lstrip("\ufeff")
    first = text.split("\n", 1)[0]
    return [cell(n) for n in next(csv.reader([first], delimiter=_delimiter(first)), [])]


def read_table(text: str, keep_empty_rows: bool = False) -> list[dict[str, str]]:
    """The rows of a CSV text (a leading byte-order mark already removed), keyed by stripped header names;
    blank lines are skipped, and rows of empty cells too unless `keep_empty_rows` (a scenario of defaults)."""
    text = text.lstrip("\ufeff")
    header = text.split("\n", 1)[0]
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(header))
    rows = list(reader)
    if not rows:
        return []
    names = [cell(n) for n in rows[0]]
    return [{n: cell(v) for n, v in zip(names, r)} for r in rows[1:]
            if any(cell(v) for v in r) or (keep_empty_rows and r)]


def repeated_ids(text: str) -> dict[str, list[int]]:
    """Ids on more than one row, each with the file lines it is on (1 = the header): a row pasted twice is
    scored twice and weighs double in a fit, so the commands say so (plan validate) or refuse (plan calibrate)."""
    text = text.lstrip("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text.split("\n", 1)[0]))
    names = [cell(n) for n in next(reader, [])]
    if "id" not in names:
        return {}
    col, lines = names.index("id"), {}
    for r in reader:
        rid = cell(r[col]) if col < len(r) else ""
        if rid:
            lines.setdefault(rid, []).append(reader.line_num)
    return {rid: at for rid, at in lines.items() if len(at) > 1}


def repeated_note(repeated: dict[str, list[int]]) -> str:
    """'id a on lines 3 and 7, id b on lines 4, 5 and 9' (the first three ids, then how many more)."""
    def lines(at: list[int]) -> str:
        return ", ".join(map(str, at[:-1])) + f" and {at[-1]}"
    named = [f"id {rid} on lines {lines(at)}" for rid, at in list(repeated.items())[:3]]
    more = len(repeated) - len(named)
    return ", ".join(named) + (f" (and {more} more repeated ids)" if more else "")
