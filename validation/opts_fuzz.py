"""Fuzz the options of `plan tune`, `plan train` and `plan allreduce-bench` with inputs that must be refused
before any process starts, and print what breaks the contract.

A script, not a test: `PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m validation.opts_fuzz [--cases N] [--seed S]`.
Each case is a working command line with one or two options made bad (zero, negative, huge, inf/nan, text,
an unknown name, a path that is a folder, missing or unwritable). It runs in-process like
validation/cli_fuzz.py, with a tripwire on every way these commands start a process (trainer ranks,
torch elastic, subprocess, multiprocessing, fork): no real trial, rank or benchmark ever runs. A case is a
finding when it trips the wire (a bad input reached a process start), raises, exits with a code other than
2, prints other than one `error:` line, or takes longer than --slow seconds.
"""

from __future__ import annotations

import argparse
import multiprocessing.process
import os
import random
import signal
import subprocess
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

from typer.testing import CliRunner

from validation.cli_fuzz import _alarm, print_findings, run_case


class Launched(Exception):
    """A process was about to start: the input got past the checks."""


def _trip(*args, **kwargs):
    raise Launched("a process was about to start")


def arm_tripwire() -> None:
    """Every process start these commands have raises Launched instead (the fuzz never runs a rank)."""
    import trainer.launch
    import trainer.ranks

    trainer.launch._elastic = _trip
    trainer.launch.run_rank = _trip
    trainer.ranks.run_on_ranks = _trip
    trainer.ranks.elastic_run = _trip
    subprocess.Popen.__init__ = _trip  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = _trip  # type: ignore[method-assign]
    os.fork = _trip  # type: ignore[assignment]
    os.posix_spawn = _trip  # type: ignore[assignment]


# numeric options: values outside what each allows (a huge count is allowed where the option has no bound)
TUNE_NUMBERS = {
    "--gpus": ("0", "-1", "abc", "1025", "1e400", ""), "--steps": ("0", "1", "-1", "abc", "99999999999999999999"),
    "--top-k": ("-1", "abc", ""), "--global-batch": ("0", "-1", "abc"), "--seq-len": ("0", "-1", "1000000000", "abc"),
    "--infeasible-margin": ("-1", "inf", "nan", "abc"), "--device-memory-gib": ("0", "-1", "inf", "nan", "1e308"),
    "--max-trials": ("0", "-1", "abc"), "--remeasure-rounds": ("-1", "abc"),
    "--seed": ("-1", "99999999999999999999", "4294967296", "abc"),
}


def _paths(tmp: Path) -> dict[str, str]:
    (tmp / "a-folder").mkdir(exist_ok=True)
    (tmp / "a-file").write_text("x\n")
    (tmp / "bad.json").write_text("{not json")
    return {"folder": str(tmp / "a-folder"), "missing": str(tmp / "no" / "such" / "file.json"),
            "unwritable": "/proc/plan-fuzz/out.json", "file as folder": str(tmp / "a-file" / "out.json"),
            "bad json": str(tmp / "bad.json"), "missing file": str(tmp / "missing.json")}


def tune_bad(rng: random.Random, p: dict[str, str]) -> list[str]:
    flag = rng.choice(("--gpus", "--budget", "--steps", "--storage", "--backend", "--sampler", "--top-k", "--choices",
                       "--global-batch", "--seq-len", "--infeasible-margin", "--device-memory-gib", "--gpu", "--cluster",
                       "--max-trials", "--remeasure-rounds", "--trial-timeout", "--seed", "--calibration",
                       "--calibration-out", "--csv", "--stack-out", "--workdir", "--model", "--study"))
    special = {
        "--budget": ("0", "-1h", "abc", "1e400s", "1.5x", "inf", "nan", "0s", "h", "1e9d", ""),
        "--trial-timeout": ("0", "-5m", "abc", "inf", "nan", "1e400"),
        "--storage": ("foo://x", "sqlite:////no/such/dir/x.db", "sqlite:///" + p["folder"], ""),
        "--backend": ("bogus", "DeepSpeed", ""), "--sampler": ("grid", ""),
        "--choices": ("bogus=1", "micro_batch=0", "micro_batch=abc", "sharding=zero9", "micro_batch=", "=", "x",
                      "precision=int8", "micro_batch=1e400", "micro_batch=-1", "grad_accum=99999999999999",
                      "activation_checkpointing=some", "offload=params"),
        "--gpu": ("nope", ""), "--cluster": ("nope", ""), "--model": ("nope", "0b", "1e30b", p["missing file"], ""),
        "--calibration": (p["folder"], p["missing file"], p["bad json"]),
        "--calibration-out": (p["folder"], p["unwritable"], p["file as folder"]),
        "--csv": (p["folder"], p["unwritable"], p["file as folder"]),
        "--stack-out": (p["folder"], p["unwritable"], "x/stacks/other.toml", "bundled.toml"),
        "--workdir": (p["file as folder"].removesuffix("/out.json"), "/proc/plan-fuzz"),
        "--study": ("", " "),
    }
    value = rng.choice(special.get(flag) or TUNE_NUMBERS[flag])
    return [flag, value]


def tune_case(rng: random.Random, p: dict[str, str], tmp: Path, i: int) -> list[str]:
    args = ["tune", "--model", "tiny", "--gpus", "2", "--budget", "1m", "--no-network-bench", "--no-progress",
            "--storage", f"sqlite:///{tmp}/tune{i}.db", "--workdir", str(tmp / f"work{i}")]
    for _ in range(rng.choice((1, 1, 2))):
        args += tune_bad(rng, p)
    return args


TRAIN_BAD = {
    "--tp": ("0", "-1", "3", "1024", "abc"), "--pp": ("0", "3", "1000"), "--vpp": ("0", "3"), "--cp": ("0", "3"),
    "--ep": ("0", "3"), "--etp": ("0",), "--steps": ("0", "-1", "1", "99999999999999999999"),
    "--warmup-steps": ("-1", "100", "99999999999"),
    "--seed": ("-1", "99999999999999999999"), "--seq-len": ("0", "-1", "1000000000", "abc"),
    "--micro-batch": ("0", "-1", "1000000000"), "--grad-accum": ("0", "99999999999"),
    "--data": ("missing.bin", "/proc/plan-fuzz", ""), "--timeout-s": ("abc", "0", "-1", "inf", "nan", "1e400"),
    "--nproc": ("0", "2000", "abc"), "--nnodes": ("0", "2"), "--node-rank": ("-1", "1"),
    "--rdzv-endpoint": ("nohost", "host:abc", "host:0", ""), "--lr": ("-1", "0", "nan", "inf", "1e400", "abc"),
    "--precision": ("int8", ""), "--sharding": ("zero9",), "--stack": ("jax",), "--model": ("nope", "0b", "1e30b"),
    "--checkpoint-fraction": ("2", "0", "-1", "nan"), "--activation-checkpointing": ("some",), "--offload": ("params",),
    "--pp-schedule": ("bogus",), "--attention": ("bogus",), "--optimizer": ("lion",), "--fp8-recipe": ("bogus",),
    "--cp-impl": ("bogus",), "--first-stage-layers": ("-1", "1000"), "--zeropp-hpz-partition-size": ("0", "3"),
}


def train_case(rng: random.Random, p: dict[str, str], tmp: Path, i: int) -> list[str]:
    args = ["train", "--model", "tiny", "--steps", "3"]
    for _ in range(rng.choice((1, 1, 2))):
        flag = rng.choice([*TRAIN_BAD, "--json", "--deepspeed-config", "--fsdp-config"])
        if flag == "--json":
            value = rng.choice((p["folder"], p["unwritable"], p["file as folder"]))
        elif flag in ("--deepspeed-config", "--fsdp-config"):
            value = rng.choice((p["folder"], p["missing file"], p["bad json"]))
        else:
            value = rng.choice(TRAIN_BAD[flag])
        args += [flag, value]
    return args


def bench_case(rng: random.Random, p: dict[str, str], tmp: Path, i: int) -> list[str]:
    bad = {
        "--nproc": ("0", "-1", "100000", "99999999999999999999", "abc"), "--nnodes": ("0", "-1", "2", "2000000"),
        "--node-rank": ("-1", "1", "5"), "--rdzv-endpoint": ("nohost", "host:abc", "host:99999", ":", ""),
        "--sizes": ("", "0", "-1M", "abc", "inf", "nan", "1e400", "1e30G", "1M,,x", "0.1", "1P", "99999999G",
                    ",", "1M;4M"),
        "--ops": ("bogus", "", ",", "all_reduce,bogus", "ALL_REDUCE"),
        "--json": (p["folder"], p["unwritable"], p["file as folder"]),
    }
    args = ["allreduce-bench", "--nproc", "2"]
    for _ in range(rng.choice((1, 1, 2))):
        flag = rng.choice(list(bad))
        args += [flag, rng.choice(bad[flag])]
    return args


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--hang", type=int, default=60)
    ap.add_argument("--slow", type=float, default=5.0, help="a refusal slower than this is a finding")
    ap.add_argument("--only", choices=("tune", "train", "allreduce-bench"), default=None)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    arm_tripwire()
    runner = CliRunner(env={"COLUMNS": "120"})
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("always")
    makers = {"tune": tune_case, "train": train_case, "allreduce-bench": bench_case}
    found: dict[tuple[str, str], list] = defaultdict(list)
    outcomes: dict[str, int] = defaultdict(int)
    reasons: dict[str, int] = defaultdict(int)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plan-opts-fuzz-") as d:
        tmp = Path(d)
        os.chdir(tmp)
        paths = _paths(tmp)
        for i in range(a.cases):
            command = a.only or rng.choice(list(makers))
            case = run_case(runner, makers[command](rng, paths, tmp, i), a.hang, a.slow)
            if case.problem == "traceback" and case.key.startswith("Launched"):
                case.problem, case.key = "started a process", f"{command} {_bad_flags(case.args)}"
            elif not case.problem and case.code != 2:
                case.problem, case.key = "not refused", f"{command} exit {case.code}"
            outcomes[f"{command} exit {case.code}" + (f" {case.problem}" if case.problem else "")] += 1
            if case.code == 2 and not case.problem:
                reasons[f"{command}:{case.reason}"] += 1
            if case.problem:
                found[(case.problem, case.key)].append(case)
    print(f"{a.cases} cases (seed {a.seed}) in {time.perf_counter() - t0:.0f} s")
    print("outcomes: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())))
    print("exit 2 by field: " + ", ".join(f"{k} {n}" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])))
    print_findings(found, lambda args: " ".join(repr(x) if not x or " " in x else x for x in args))


def _bad_flags(args: list[str]) -> str:
    """The options a case made bad (those after the working base line), for grouping."""
    base = {"tune": 13, "train": 5, "allreduce-bench": 3}[args[0]]
    return " ".join(args[base::2])


if __name__ == "__main__":
    main()
