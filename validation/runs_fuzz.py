"""Fuzz `plan validate` and `plan calibrate` with damaged runs files and print what breaks their contract.

A script, not a test: `PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m validation.runs_fuzz [--cases N] [--seed S]`.
Each case is a small runs CSV made of real rows of validation/data/published_dev.csv or seed_runs.csv with
cells damaged at random (blank, typo, another row's value, negative, zero, huge, inf/nan, unit words, odd
separators) or the file damaged (BOM, `;` delimiter, duplicate ids, a column dropped or renamed, non-UTF-8
bytes, an empty file, a header only), run in-process like validation/cli_fuzz.py. On top of cli_fuzz's
contract (no traceback, exit 0/2/3, one `error:` line for exit 2, no RuntimeWarning, no NaN/inf in --json,
no hang) a damaged row must not be scored: with --json, a row whose numeric cell became garbage (<= 0, huge,
non-finite, text) must be listed as not predicted, not among the predicted runs.
`plan calibrate` also gets --out a folder / a missing parent / an existing file / an unwritable place and
an unknown --stack.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import signal
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from validation.cli_fuzz import Case, _alarm, run_case

DATA = Path(__file__).parent / "data"
# numeric columns the reader takes as numbers (planner/run_text.number): garbage there must not be scored
NUMERIC = ("n_params_B", "n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden", "vocab", "seq_len", "n_gpus",
           "gpus_per_node", "tp", "pp", "dp", "micro_batch", "grad_accum", "global_batch", "measured_tflops_per_gpu",
           "measured_mfu", "measured_tokens_per_sec_per_gpu", "measured_iter_time_s", "measured_peak_mem_GB",
           "days_per_100B_tokens")
MEASURED = ("measured_", "days_")  # a garbage measurement may be kept but not scored (inconsistent)
# tiny ('1e-6') is garbage in a count (not whole); a 1 kB peak or a 1000-parameter model is odd, not impossible
GARBAGE = {"negative", "zero", "huge", "huge int", "inf", "nan", "overflow", "typo"}
STACKS = ("megatron", "megatron_deepspeed", "hf", "fsdp", "torchtitan", "bundled")


@dataclass
class Damage:
    row: int  # index into the case's rows (-1: the file)
    column: str
    kind: str
    value: str


def load_rows(name: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(DATA / name, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _cell(rng: random.Random, value: str, column: str, others: list[dict[str, str]]) -> tuple[str, str]:
    """(kind, damaged text) of one cell."""
    v = value or "8"
    kinds = {
        "blank": lambda: "",
        "typo": lambda: rng.choice((v[:-1] + "x", "abc", v + "?", "o" + v[1:], "#REF!", "1..5")),
        "other row": lambda: rng.choice(others).get(column, ""),
        "negative": lambda: "-" + v.lstrip("-"),
        "zero": lambda: rng.choice(("0", "0.0", "0 GPUs")),
        "huge": lambda: rng.choice(("1e30", "1e300", "1e18")),
        "huge int": lambda: "9" * rng.choice((12, 20, 40)),
        "tiny": lambda: rng.choice(("1e-300", "1e-30", "0.000001")),
        "inf": lambda: rng.choice(("inf", "-inf", "Infinity", "∞")),
        "nan": lambda: rng.choice(("nan", "NaN", "N/A", "null", "#N/A")),
        "overflow": lambda: rng.choice(("1e400", "1e309", "-1e400")),
        "unit": lambda: rng.choice((f"{v} GB", f"{v}k", "1.2k", "80 GB", f"{v} GPUs", f"{v} ms", f"{v} %", "4k",
                                    f"{v}B", f"{v} tok/s/GPU", f"{v} TFLOPs")),
        "separator": lambda: rng.choice(("1,024", "1.024,5", "1 024", "1_000", "1'024", f"{v},", f",{v}",
                                         f"{v};{v}", "1\u00a0024", "\u22128", f"{v}\t")),
        "fraction": lambda: rng.choice(("8.5", "0.5", "1/2", "2.0")),
    }
    kind = rng.choice(list(kinds))
    return kind, kinds[kind]()


def make_case(rng: random.Random, files: dict[str, tuple[list[str], list[dict[str, str]]]]) -> tuple[bytes, list[Damage]]:
    """A runs file (bytes) of 1-5 real rows with damage, and the damage done."""
    names, pool = files[rng.choice(list(files))]
    rows = [dict(r) for r in rng.sample(pool, rng.randint(1, 5))]
    names = list(names)
    damage: list[Damage] = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        i = rng.randrange(len(rows))
        column = rng.choice(NUMERIC if rng.random() < 0.75 else names)
        if column not in names:
            continue
        kind, value = _cell(rng, rows[i].get(column, ""), column, pool)
        rows[i][column] = value
        damage = [d for d in damage if (d.row, d.column) != (i, column)] + [Damage(i, column, kind, value)]
    if rng.random() < 0.1:  # a duplicate id
        j, k = rng.randrange(len(rows)), rng.randrange(len(rows))
        rows.append(dict(rows[j], **{k2: rows[k][k2] for k2 in ("n_gpus",)}))
        damage.append(Damage(-1, "id", "duplicate id", rows[j]["id"]))
    file_kind = rng.choices(("none", "bom", "semicolon", "tab", "drop column", "rename column", "latin-1", "bad byte",
                             "empty", "header only", "crlf", "blank lines", "short row", "long row"),
                            (60, 4, 4, 2, 5, 5, 3, 3, 2, 2, 2, 2, 3, 3))[0]
    if file_kind == "drop column" or file_kind == "rename column":
        column = rng.choice(names)
        names = [n for n in names if n != column] if file_kind == "drop column" else \
            [(rng.choice((column.upper(), column + "_x", " " + column, column.replace("_", " "))) if n == column else n)
             for n in names]
        if file_kind == "rename column":
            old = column
            rows = [{(names[list(r).index(old)] if k == old else k): v for k, v in r.items()} for r in rows]
        damage.append(Damage(-1, column, file_kind, ""))
    elif file_kind != "none":
        damage.append(Damage(-1, "", file_kind, ""))
    delimiter = {"semicolon": ";", "tab": "\t"}.get(file_kind, ",")
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\r\n" if file_kind == "crlf" else "\n")
    writer.writerow(names)
    if file_kind != "header only":
        for r in rows:
            cells = [r.get(n, "") for n in names]
            if file_kind == "short row":
                cells = cells[: rng.randrange(1, len(cells))]
            elif file_kind == "long row":
                cells += ["extra", "1"]
            writer.writerow(cells)
            if file_kind == "blank lines":
                out.write("\n")
    text = out.getvalue()
    if file_kind == "empty":
        return b"", damage
    data = text.encode("utf-8")
    if file_kind == "bom":
        data = b"\xef\xbb\xbf" + data
    elif file_kind == "latin-1":
        data = text.replace("a", "\u00e9", 3).encode("latin-1", errors="replace")
    elif file_kind == "bad byte":
        at = rng.randrange(len(data))
        data = data[:at] + b"\xff\xfe" + data[at:]
    return data, damage


def validate_args(path: str, rng: random.Random) -> list[str]:
    return ["validate", path, *rng.choice((["--json"], ["--json"], ["--rows"], []))]


def calibrate_args(path: str, rng: random.Random, tmp: str, rows_text: str, i: int) -> list[str]:
    stack = rng.choice(STACKS) if rng.random() < 0.95 else rng.choice(("jax", "Megatron", ""))
    if rows_text and rng.random() < 0.7:  # mostly the stack the runs name, so that the fit runs
        from planner.run_columns import stack_of

        stack = stack_of(next(csv.DictReader(io.StringIO(rows_text)), {}) or {}, [])
    where = rng.choices(("ok", "folder", "missing parent", "existing file", "not stacks", "wrong name", "unwritable",
                         "file as parent"), (70, 5, 5, 5, 3, 3, 4, 5))[0]
    base = Path(tmp) / f"cal{i}"
    out = base / "stacks" / f"{stack}.toml"
    if where == "folder":
        out.mkdir(parents=True, exist_ok=True)  # a folder where the profile goes
    elif where == "missing parent":
        out = base / "a" / "b" / "stacks" / f"{stack}.toml"
    elif where == "existing file":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("not a profile\n")
    elif where == "not stacks":
        out = base / f"{stack}.toml"
    elif where == "wrong name":
        out = base / "stacks" / "other.toml"
    elif where == "unwritable":
        out = Path("/proc/plan-fuzz/stacks") / f"{stack}.toml"
    elif where == "file as parent":
        base.mkdir(parents=True, exist_ok=True)
        (base / "stacks").write_text("a file, not a folder\n")
    args = ["calibrate", path, "--stack", stack, "--out", str(out)]
    if rng.random() < 0.3:
        args.append("--all-rows")
    if rng.random() < 0.4:
        args.append("--json")
    return args


def garbage_scored(case: Case, damage: list[Damage], ids: list[str]) -> str:
    """The damage a `validate --json` case scored anyway ('' if none): a row whose numeric cell became garbage
    among the predicted runs, or a predicted run with a non-positive or non-finite speed."""
    try:
        report = json.loads(case.stdout)
    except ValueError:
        return ""
    predicted = {r["id"]: r for r in report.get("runs", [])}
    if any(d.kind in ("short row", "drop column", "rename column") for d in damage):
        return ""  # the damaged cell may be gone
    for run in predicted.values():
        if run["error"] is None:  # kept, not scored
            continue
        for key in ("measured_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu", "predicted_mem_gib"):
            v = run.get(key)
            if v is not None and not (0 < v < 1e12):
                return f"{key} {v:g} scored"
    for d in damage:
        if d.row >= 0 and d.kind in GARBAGE and d.column in NUMERIC and d.value.strip() not in ("N/A", "#N/A") \
                and ids.count(ids[d.row]) == 1 and ids[d.row] in predicted \
                and (predicted[ids[d.row]]["error"] is not None or not d.column.startswith(MEASURED)):
            return f"{d.column} {d.kind} ({d.value!r}) scored"
    return ""


def fields_named(case: Case, damage: list[Damage], ids: list[str]) -> list[str]:
    """For each damaged row listed as not predicted: 'its field' where the reason names the damaged column,
    else 'another field: COLUMN -> FIELD' (a cell damaged, the row refused for another reason)."""
    try:
        missed = {m["id"]: m for m in json.loads(case.stdout).get("not_predicted", [])}
    except ValueError:
        return []
    out = []
    if any(d.row < 0 for d in damage):
        return out  # a cut row or a renamed column may be what is named
    for d in damage:
        if sum(e.row == d.row for e in damage) > 1:
            continue  # another damaged cell of the row may be the one named
        if d.row >= 0 and ids.count(ids[d.row]) == 1 and ids[d.row] in missed:
            field = missed[ids[d.row]]["field"]
            out.append("its field" if field == d.column else f"another field: {d.column} -> {field}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--hang", type=int, default=60)
    ap.add_argument("--slow", type=float, default=20.0)
    ap.add_argument("--calibrate", type=float, default=0.3, help="share of cases that run plan calibrate")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    files = {n: load_rows(n) for n in ("published_dev.csv", "seed_runs.csv")}
    runner = CliRunner(env={"COLUMNS": "120"})
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("always")
    found: dict[tuple[str, str], list[tuple[Case, list[Damage]]]] = defaultdict(list)
    outcomes: dict[str, int] = defaultdict(int)
    reasons: dict[str, int] = defaultdict(int)
    named_fields: dict[str, int] = defaultdict(int)  # a damaged row not predicted: its field named or another
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plan-runs-fuzz-") as tmp:
        os.chdir(tmp)
        for i in range(a.cases):
            data, damage = make_case(rng, files)
            path = Path(tmp) / f"runs{i}.csv"
            path.write_bytes(data)
            rows = list(csv.DictReader(io.StringIO(data.decode("utf-8", "replace"))))
            ids = [r.get("id") or "" for r in rows]
            calibrate = rng.random() < a.calibrate
            text = data.decode("utf-8", "replace")
            args = calibrate_args(str(path), rng, tmp, text, i) if calibrate else validate_args(str(path), rng)
            case = run_case(runner, args, a.hang, a.slow)
            if not case.problem and not calibrate and case.code == 0 and "--json" in args:
                scored = garbage_scored(case, damage, ids)
                if scored:
                    case.problem, case.key = "garbage scored", scored.split(" (")[0]
                    case.detail = scored
            if not case.problem and not calibrate and case.code == 0 and "--json" in args:
                for named in fields_named(case, damage, ids):
                    named_fields[named] += 1
            outcomes[f"{args[0]} exit {case.code}" + (f" {case.problem}" if case.problem else "")] += 1
            if case.code == 2 and not case.problem:
                reasons[case.reason] += 1
            if case.problem:
                found[(case.problem, case.key)].append((case, damage))
            if (i + 1) % 100 == 0:
                print(f"  {i + 1}/{a.cases} cases, {len(found)} findings, {time.perf_counter() - t0:.0f} s", flush=True)
    print(f"{a.cases} cases (seed {a.seed}) in {time.perf_counter() - t0:.0f} s")
    print("outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())))
    print("exit 2 by field: " + ", ".join(f"{k or '?'} {n}" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:15]))
    print("damaged rows not predicted (exit 0): " + ", ".join(f"{k} {n}" for k, n in sorted(named_fields.items())))
    print(f"{len(found)} distinct findings ({sum(len(v) for v in found.values())} cases)")
    for (problem, key), hits in sorted(found.items(), key=lambda kv: -len(kv[1])):
        case, damage = hits[0]
        print(f"\n[{problem}] {key}  x{len(hits)}\n  plan {' '.join(case.args)}\n  damage: "
              + "; ".join(f"row {d.row} {d.column} {d.kind} {d.value!r}" for d in damage))
        if case.detail:
            print("  " + case.detail.replace("\n", "\n  "))


if __name__ == "__main__":
    main()
