"""Fuzz the `plan` CLI with real option combinations and print what breaks its contract.

A script, not a test: `PYTHONPATH=$PWD OMP_NUM_THREADS=1 python -m validation.cli_fuzz [--cases N] [--seed S]`.
It runs `plan estimate`, `plan export FORMAT` and `plan catalog show` in-process (typer's CliRunner on
plan_cli.main.app) over a seeded random sample of catalog presets, clusters, GPUs, GPU counts and sweeps,
pinned knobs (allowed values and edge values), objectives and output modes, and reports each case that
- raised (a traceback: result.exception other than SystemExit / typer.Exit),
- exited with a code outside {0 ok, 2 bad input, 3 nothing fits},
- exited 2 without exactly one stderr line starting `error:`,
- took longer than --slow seconds (a SIGALRM stops a case at --hang seconds: a hang).
Usage errors are handled as `plan` handles them (plan_cli.main.main: one line, click's exit code).
Findings are grouped by their cause (exception type and innermost planner frame, or the contract broken).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import time
import traceback
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

from typer.testing import CliRunner

from plan_cli.main import _CLICK_ERROR, _usage_error_line, app

OK_CODES = {0, 2, 3}
SPECIAL_MODELS = ("deepseek-v3", "deepseek-v2-lite", "mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b",  # MoE / MLA
                  "jamba-v0.1", "nemotron-h-8b", "mamba-2.8b", "mamba2-2.7b", "falcon-mamba-7b",  # Mamba / hybrid
                  "gpt-j-6b", "falcon-40b", "gpt-neox-20b",  # parallel block
                  "bloom-7b1", "bloom-176b", "tiny", "tiny4")  # ALiBi, toy
GPU_COUNTS = ("1", "2", "3", "7", "8", "12", "16", "48", "64", "1000", "8:64", "8:64:8", "8:24")
BAD_GPU_COUNTS = ("1:9", "16:8", "8:64:0", "0", "-1", "abc")
FORMATS = ("deepspeed", "fsdp", "accelerate", "torchrun", "slurm", "megatron")
# knob -> values: the allowed set plus edge values
KNOBS: dict[str, tuple[tuple, tuple]] = {  # knob -> (allowed values, edge values)
    "--tp": ((1, 2, 4, 8), (3, 16, 64, 0, -1, 1024, 1025)),
    "--pp": ((1, 2, 4, 8), (3, 16, 100, 0)),
    "--vpp": ((1, 2, 4), (3, 7, 0)),
    "--cp": ((1, 2, 4, 8), (3, 0)),
    "--cp-impl": (("ring", "ulysses", "allgather", "a2a+p2p"), ("bogus",)),
    "--ep": ((1, 2, 4, 8, 64), (3, 0)),
    "--etp": ((1, 2, 4), (0,)),
    "--sharding": (("none", "zero1", "zero2", "zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid"),
                   ("zero4",)),
    "--offload": (("none", "optimizer", "optimizer+params"), ("params",)),
    "--activation-checkpointing": (("none", "selective", "op", "blocks", "full"), ("some",)),
    "--checkpoint-fraction": ((0.5, 1.0, 0.25), (0.01, 0.0, 1.5, -1.0)),
    "--precision": (("fp8", "fp16", "bf16", "fp32", "bf16_pure"), ("int8",)),
    "--fp8-recipe": (("tensorwise", "rowwise", "delayed"), ()),
    "--optimizer": (("adamw", "adafactor", "sgd"), ()),
    "--attention": (("flash", "eager", "flash2", "cudnn", "triton"), ()),
    "--micro-batch": ((1, 2, 4), (3, 64, 0, -1, 1_000_000, 10_000_000)),
    "--grad-accum": ((1, 2, 8), (7, 0)),
    "--global-batch": ((512, 1024, 256), (1, 7, 1536, 0, -5, 10**9)),
    "--global-batch-tokens": (("4M", "1M"), ("0", "1", "abc")),
    "--seq-len": ((2048, 4096, 8192), (1, 128, 131072, 10**6, 0, -1)),
    "--stack": (("megatron", "megatron_deepspeed", "hf", "fsdp", "torchtitan", "bundled", "generic"), ("jax",)),
    "--first-stage-layers": ((0, 1, 3), (1000,)),
    "--last-stage-layers": ((0, 2), (1000,)),
    "--zeropp-hpz-partition-size": ((1, 8), (0, 3)),
    "--tokens": (("100B", "1T", "2e12"), ("1", "0", "-1", "abc", "1e400", "1e30")),
    "--price-per-gpu-hour": ((2.0,), (0.0, -1.0, 1e308)),
    "--gpus-per-node": ((4, 8), (1, 3, 0)),
    "--internode-gbps": ((100.0, 3200.0), (0.0, -5.0, 1e-300, "inf")),
    "--attn-window": ((4096,), (0, 1)),
    "--moe-experts": ((8, 64), (1, 0)),
    "--moe-top-k": ((1, 2, 8), (0, 100)),
}
BOOL_KNOBS = ("--sequence-parallel", "--no-sequence-parallel", "--activation-offload", "--compile", "--async-tp",
              "--zeropp-qwz", "--zeropp-qgz", "--embedding-in-split", "--loss-in-split", "--parallel-block")
ESTIMATE_ONLY = {"--moe-capacity-factor": ((1.0, 1.25), (0.0, -1.0)), "--moe-node-limit": ((1, 4), (0,)),
                 "--fragmentation-margin": ((0.1, 0.0), (0.99, 1.5, -0.1)),
                 "--runtime-overhead-gib": ((1.5, 0.0), (100.0, -1.0))}
ESTIMATE_FLAGS = ("--moe-fp8-dispatch", "--moe-a2a-overlap", "--moe-shared-expert-overlap", "--recompute-norms-mla-up",
                  "--fp8-activation-cache", "--optimizer-moments-bf16")
OBJECTIVES = ("tokens_per_s", "days", "cost", "memory-headroom", "speed")


@dataclass
class Case:
    args: list[str]
    code: int = 0
    seconds: float = 0.0
    problem: str = ""  # "" = kept the contract
    key: str = ""
    detail: str = ""
    reason: str = ""  # exit 2: the field its line names
    stdout: str = ""


@dataclass
class Catalog:
    models: list[str]
    clusters: list[str]
    gpus: list[str]
    stacks: list[str]
    extra: dict[str, list[str]] = field(default_factory=dict)


def load_ids() -> Catalog:
    from hardware.catalog import load_catalog
    from planner.presets import list_presets

    cat = load_catalog(None)
    return Catalog(sorted(list_presets(None)), sorted(cat.clusters), sorted(cat.gpus), sorted(cat.stacks))


def _hardware(rng: random.Random, ids: Catalog) -> list[str]:
    pick = rng.random()
    if pick < 0.45:
        return ["--cluster", rng.choice(ids.clusters)]
    if pick < 0.85:
        return ["--gpu", rng.choice(ids.gpus)]
    if pick < 0.9:
        return ["--cluster", "no-such-cluster"]
    return []


def _model(rng: random.Random, ids: Catalog) -> list[str]:
    pick = rng.random()
    if pick < 0.4:
        return ["--model", rng.choice(SPECIAL_MODELS)]
    if pick < 0.8:
        return ["--model", rng.choice(ids.models)]
    if pick < 0.93:
        return ["--model", rng.choice(("7b", "70b", "1.3b", "0b", "nope"))]
    if pick < 0.98:
        return _shape(rng)
    return []


EDGE = 0.1  # share of pinned values drawn from the edge values


# a model by its shape instead of a preset (--n-layers ...): allowed and edge values
SHAPE: dict[str, tuple[tuple, tuple]] = {
    "--hidden": ((512, 1024, 4096), (1, 100, 0)),
    "--n-heads": ((8, 16, 32), (1, 3, 0)),
    "--n-kv-heads": ((8, 4, 1), (3, 0, 64)),
    "--ffn-hidden": ((2816, 11008), (1, 0)),
    "--vocab": ((32000, 50257), (1, 0)),
    "--mlp": (("gelu", "swiglu"), ("relu",)),
    "--attn-window": ((1024,), (0,)),
    "--attn-local-layers": ((1, 2), (0, 1000)),
    "--moe-experts": ((8, 64), (1, 0)),
    "--moe-top-k": ((2, 8), (0, 100)),
    "--moe-ffn-hidden": ((1408,), (0,)),
    "--moe-shared-experts": ((1, 2), (0,)),
    "--moe-shared-ffn-hidden": ((1408,), (0,)),
    "--moe-layer-freq": ((1, 2), (0, 1000)),
    "--moe-first-dense-layers": ((0, 1), (1000,)),
}


def _shape(rng: random.Random) -> list[str]:
    layers = rng.choice(((2, 4, 24, 32), (1, 3, 0, -1))[rng.random() < EDGE])
    required = _knobs(rng, 1.0, {k: SHAPE[k] for k in ("--hidden", "--n-heads", "--vocab")}, ())
    optional = {k: v for k, v in SHAPE.items() if k not in ("--hidden", "--n-heads", "--vocab")}
    return ["--n-layers", str(layers), *required, *_knobs(rng, 0.3, optional, ("--parallel-block",))]


def _knobs(rng: random.Random, p: float, values: dict[str, tuple[tuple, tuple]], flags: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for flag, (allowed, edge) in values.items():
        if rng.random() < p:
            out += [flag, str(rng.choice(edge if edge and rng.random() < EDGE else allowed))]
    for flag in flags:
        if rng.random() < min(p, 0.3) / 3:
            out.append(flag)
    return out


def _objective(rng: random.Random, p: float) -> list[str]:
    """--objective now and then; days and cost need --tokens, given mostly."""
    if rng.random() > p:
        return []
    objective = rng.choice(OBJECTIVES)
    tokens = ["--tokens", rng.choice(("100B", "1T"))] if objective in ("days", "cost") and rng.random() < 0.8 else []
    return ["--objective", objective, *tokens]


def estimate_case(rng: random.Random, ids: Catalog) -> list[str]:
    args = ["estimate", *_model(rng, ids), *_hardware(rng, ids)]
    if rng.random() < 0.9:
        args += ["--gpus", rng.choice(BAD_GPU_COUNTS if rng.random() < EDGE else GPU_COUNTS)]
    args += _knobs(rng, rng.choice((0.0, 0.03, 0.06, 0.12)), KNOBS, BOOL_KNOBS)
    args += _knobs(rng, 0.05, ESTIMATE_ONLY, ESTIMATE_FLAGS)
    args += _objective(rng, 0.3)
    out = rng.random()
    if out < 0.2:
        args += ["--explain"] + (["--rank", str(rng.choice((1, 2, 5, 50)))] if rng.random() < 0.4 else [])
    elif out < 0.4:
        args.append("--json")
    elif out < 0.55:
        args.append("--csv")
    elif out < 0.7:
        args.append("--wide")
    if rng.random() < 0.1:
        args += ["--top", str(rng.choice((1, 3, 100)))]
    if rng.random() < 0.03:
        args += rng.choice((["--json", "--explain"], ["--csv", "--wide"], ["--json", "--csv"]))
    return args


def export_case(rng: random.Random, ids: Catalog) -> list[str]:
    fmt = rng.choice(FORMATS + ("bogus",)) if rng.random() < 0.97 else "bogus"
    args = ["export", fmt, *_model(rng, ids), *_hardware(rng, ids)]
    if rng.random() < 0.9:
        args += ["--gpus", rng.choice(tuple(g for g in GPU_COUNTS if ":" not in g))]
    args += _knobs(rng, rng.choice((0.0, 0.03, 0.06, 0.12)), KNOBS, BOOL_KNOBS)
    args += _objective(rng, 0.2)
    if rng.random() < 0.1:
        args += ["--target", rng.choice(("gpu", "cpu", "tpu"))]
    if rng.random() < 0.1:
        args += ["--steps", str(rng.choice((1, 100, 0)))]
    if rng.random() < 0.1:
        args += ["--time", rng.choice(("1:00:00", "2-00:00:00", "abc"))]
    if rng.random() < 0.05:
        args += ["--cpus-per-task", str(rng.choice((1, 32)))]
    if rng.random() < 0.08:
        args.append(rng.choice(("--moe-a2a-overlap", "--moe-shared-expert-overlap", "--recompute-norms-mla-up",
                                "--optimizer-moments-bf16", "--moe-fp8-dispatch", "--fp8-activation-cache")))
    if rng.random() < 0.05:
        args += ["--moe-node-limit", str(rng.choice((1, 4)))]
    if rng.random() < 0.05:
        args += ["--moe-capacity-factor", str(rng.choice((1.0, 2.0)))]
    if rng.random() < 0.3:
        args.append("--json")
    elif rng.random() < 0.3:
        args += ["--out", rng.choice(("out/plan.file", "."))]
    return args


def show_cases(ids: Catalog) -> list[list[str]]:
    cases = []
    for entry in [*ids.gpus, *ids.clusters, *ids.models, *ids.stacks]:
        cases += [["catalog", "show", entry], ["catalog", "show", entry, "--json"]]
    cases += [["catalog", "show", x] for x in ("7b", "nope", "x/config.json", "missing.json", "0b", "1e30b")]
    return cases + [["catalog", "list", "--kind", k] for k in ("gpus", "clusters", "models", "stacks", "bogus")]


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def _innermost(exc_info) -> str:
    """The innermost frame of the project's own code: where the finding comes from."""
    frames = [f for f in traceback.extract_tb(exc_info[2]) if "/site-packages/" not in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(exc_info[2])[-1]
    return f"{os.path.relpath(f.filename)}:{f.lineno} {f.name}"


def _non_finite_json(text: str) -> bool:
    """NaN / Infinity in printed JSON (Python writes them; strict parsers refuse them)."""
    import json

    def refuse(name):
        raise ValueError(name)

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError as e:
        return str(e) in ("NaN", "Infinity", "-Infinity")
    return False


def run_case(runner: CliRunner, args: list[str], hang_s: int, slow_s: float) -> Case:
    case = Case(args)
    signal.alarm(hang_s)
    t0 = time.perf_counter()
    try:
        result = runner.invoke(app, args, catch_exceptions=True, standalone_mode=False)
    except Hang:
        result = None
    finally:
        signal.alarm(0)
    case.seconds = time.perf_counter() - t0
    if result is None or isinstance(result.exception, Hang):
        case.problem, case.key = "hang", f"hang > {hang_s} s"
        return case
    stderr, exc = result.stderr, result.exception
    case.stdout = result.stdout
    if isinstance(exc, _CLICK_ERROR):  # what plan_cli.main.main does with a usage error
        case.code = exc.exit_code
        stderr = f"error: {_usage_error_line(exc)}\n"
    elif exc is not None and not isinstance(exc, SystemExit):
        case.code = 1
        case.problem = "traceback"
        case.key = f"{type(exc).__name__} at {_innermost(result.exc_info)}"
        case.detail = f"{type(exc).__name__}: {str(exc)[:300]}"
        return case
    else:  # without standalone mode click returns typer.Exit's code
        rv = result.return_value
        case.code = rv if isinstance(rv, int) else result.exit_code
    lines = stderr.strip().splitlines()
    case.reason = lines[0].split(":")[1].strip() if lines and lines[0].count(":") > 1 else ""
    if case.code not in OK_CODES:
        case.problem, case.key, case.detail = "exit code", f"exit {case.code}", stderr.strip()[-300:]
    elif case.code == 2 and (len(lines) != 1 or not lines[0].startswith("error:")):
        first = lines[0][:60] if lines else "(nothing on stderr)"
        case.problem, case.key = "exit-2 message", f"{len(lines)} lines, starts {first!r}"
        case.detail = stderr.strip()[:400]
    elif case.code == 2 and "no plan fits" in lines[0]:  # valid input that fits nowhere is exit 3
        case.problem, case.key, case.detail = "no fit as exit 2", "exit 2 'no plan fits'", lines[0][:300]
    elif case.code != 2 and "Warning:" in stderr:  # numpy's overflow / divide-by-zero: a NaN or inf inside
        where = next(ln for ln in lines if "Warning:" in ln)
        case.problem, case.key, case.detail = "warning", where.split(": ", 1)[-1][:80] + " " + where.split(":")[0][-40:], where
    elif "--json" in args and case.code != 2 and _non_finite_json(result.stdout):
        case.problem, case.key = "non-finite JSON", "NaN/Infinity in --json output"
    elif case.seconds > slow_s:
        case.problem, case.key = "slow", f"> {slow_s:g} s"
    elif case.code == 2:
        case.detail = lines[0][:300]
    return case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=600, help="random estimate + export cases (catalog show: all)")
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--hang", type=int, default=120, help="seconds before a case counts as a hang")
    ap.add_argument("--slow", type=float, default=60.0, help="seconds over which a case is a finding")
    ap.add_argument("--examples", action="store_true", help="one case per field of the exit-2 lines")
    ap.add_argument("--only", choices=("estimate", "export", "show"), default=None)
    a = ap.parse_args()

    rng = random.Random(a.seed)
    ids = load_ids()
    cases: list[list[str]] = [] if a.only not in (None, "show") else show_cases(ids)
    for _ in range(a.cases):
        kind = a.only or ("estimate" if rng.random() < 0.65 else "export")
        if kind == "estimate":
            cases.append(estimate_case(rng, ids))
        elif kind == "export":
            cases.append(export_case(rng, ids))
    runner = CliRunner(env={"COLUMNS": "120"})
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("always")  # every case that warns shows it, not the first only
    found: dict[tuple[str, str], list[Case]] = defaultdict(list)
    codes: dict[int, int] = defaultdict(int)
    reasons: dict[str, int] = defaultdict(int)  # exit 2: the field named
    example: dict[str, str] = {}
    t0 = time.perf_counter()
    slowest = Case([])
    with tempfile.TemporaryDirectory(prefix="plan-fuzz-") as tmp:
        os.chdir(tmp)  # exports write companion files beside --out / in the working folder
        for i, args in enumerate(cases):
            case = run_case(runner, args, a.hang, a.slow)
            codes[case.code] += 1
            if case.code == 2 and not case.problem:
                reasons[case.reason] += 1
                example.setdefault(case.reason, f"plan {' '.join(case.args)}\n      {case.detail}")
            slowest = max(slowest, case, key=lambda c: c.seconds)
            if case.problem:
                found[(case.problem, case.key)].append(case)
            if (i + 1) % 100 == 0:
                print(f"  {i + 1}/{len(cases)} cases, {len(found)} findings, {time.perf_counter() - t0:.0f} s",
                      flush=True)
    print(f"{len(cases)} cases (seed {a.seed}) in {time.perf_counter() - t0:.0f} s; exit codes "
          f"{dict(sorted(codes.items()))}; slowest {slowest.seconds:.1f} s: plan {' '.join(slowest.args)}")
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:12]
    print("exit 2 by field: " + ", ".join(f"{k or '?'} {n}" for k, n in top))
    if a.examples:
        for k, n in top:
            print(f"  {k} x{n}: {example[k]}")
    print_findings(found)


def print_findings(found: dict, show=" ".join) -> None:
    """Each distinct finding, most cases first, with its shortest case (`show` writes its arguments)."""
    print(f"{len(found)} distinct findings ({sum(len(v) for v in found.values())} cases)")
    for (problem, key), hits in sorted(found.items(), key=lambda kv: -len(kv[1])):
        shortest = min(hits, key=lambda c: len(c.args))
        print(f"\n[{problem}] {key}  x{len(hits)}\n  plan {show(shortest.args)}")
        if shortest.detail:
            print("  " + shortest.detail.replace("\n", "\n  "))


if __name__ == "__main__":
    main()
