"""Does `plan tune` find better configurations than random search or a grid, at equal trial
budgets, where the answer is NOT the planner's first guess? Exits 1 when it does not.

Ground truth: every configuration of a 36-point space (tiny model, 2 CPU ranks, seq 64) run
`--passes` times with the real trainer (benchmarks/results/tuner_truth.json; `--passes 4`
adds runs). A configuration's true speed is the MEDIAN of its runs; the noise (max/min of the
runs, half-range) is reported. A search never sees the truth: each trial it runs returns ONE
of the configuration's recorded runs, drawn at random (seeded) — as noisy as a live trial.

Spaces (both: the planner's first guess is not the best configuration):
  cap    a per-rank memory cap under which micro batch 256 runs out of memory. Truth: a run
         whose measured peak memory exceeds CAP_RSS_GIB is an OOM (speed 0, the trial is
         spent). The tuner's planner gets the same cap in its own memory model
         (--device-memory-gib PLANNER_CAP_GIB: it predicts every mb-256 plan over it).
  prior  the whole space, with the planner's prior off by 2x on one backend: FSDP plans are
         predicted at half the speed the planner's model gives (its top-k and every
         prediction the tuner uses), so the search must find FSDP by measuring.

Methods, each with the same number of trainer runs (`--budget`):
  tuner   planner top-k + calibration + residual re-ranking + TPE, and its final interleaved
          re-measurement of the top candidates (those runs count in the budget);
  random  uniform random subset; its score is also given EXACTLY in expectation (over all
          subsets and all draws of the noisy runs), not only simulated;
  grid    a coarse grid: evenly spaced levels of each knob (e.g. 3 shardings x 3 micro
          batches for 9 runs), at most the budget.
Each method keeps the configuration it measured fastest; its score is that configuration's
TRUE speed / the true best. `--seeds` (>= 20) repetitions; medians compared.

    python benchmarks/tuner_efficiency.py [--seeds 25] [--budget 9] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from tuner_truth import CHOICES, ground_truth, medians, noise_summary  # noqa: E402
from tuner.config import TuneConfig  # noqa: E402
from tuner.runner import TrialOutcome  # noqa: E402
from tuner.space import config_key  # noqa: E402

MODEL, NPROC, SEQ_LEN, STEPS, WARMUP = "tiny", 2, 64, 4, 1
CAP_RSS_GIB = 0.6  # measured peaks: mb 256 0.66-0.95 GiB, mb <= 32 at most 0.48 GiB
PLANNER_CAP_GIB = 1.5  # the planner's CPU-rank model: mb 256 plans need 1.58-1.74 GiB, mb <= 32 <= 1.48
PRIOR_OFF = {"fsdp": 0.5}  # the "prior" space: FSDP predicted at half speed


# ---- the truth of a space -------------------------------------------------------------------
def oom_under_cap(rec: dict, cap_gib: float | None) -> bool:
    peaks = [r.get("peak_memory_bytes") or 0 for r in rec["runs"]]
    return cap_gib is not None and max(peaks) / 2**30 > cap_gib


def space_truth(truth: dict, cap_gib: float | None) -> dict[str, dict]:
    """key -> {"value": true speed (median; 0 when OOM), "samples": what a trial can return}."""
    out = {}
    med = medians(truth)
    for key, rec in truth.items():
        if oom_under_cap(rec, cap_gib):
            out[key] = {"value": 0.0, "samples": [0.0], "oom": True}
        else:
            runs = [r["tokens_per_s"] for r in rec["runs"] if r["status"] == "ok" and r.get("tokens_per_s")]
            out[key] = {"value": med[key], "samples": runs or [0.0], "oom": False}
    return out


class ReplayRunner:
    """A trial returns one recorded run of its configuration, drawn at random."""

    def __init__(self, st: dict, rng: random.Random):
        self.st, self.rng, self.runs = st, rng, 0

    def __call__(self, knobs: dict, *, trial_number: int, timeout_s: float, on_start, **_) -> TrialOutcome:
        self.runs += 1
        rec = self.st[config_key(knobs)]
        if rec["oom"]:
            return TrialOutcome(status="oom", error="out of memory (measured peak over the cap)", wall_s=10.0)
        tps = self.rng.choice(rec["samples"])
        step = NPROC * knobs["micro_batch"] * knobs.get("grad_accum", 1) * SEQ_LEN / tps
        return TrialOutcome(status="ok", tokens_per_s=tps, step_time_s=step, step_time_s_p90=step, wall_s=10.0,
                            startup_s=9.0)


# ---- the searches ---------------------------------------------------------------------------
class PriorOff:
    """The planner's predictions with one backend's speed scaled (a prior off by 2x)."""

    def __init__(self, predictor, factors: dict[str, float]):
        self.inner, self.factors = predictor, factors
        self.model = getattr(predictor, "model", None)

    def __call__(self, knobs: dict, calibration=None):
        from tuner.trial import run_backend

        p = self.inner(knobs, calibration)
        f = self.factors.get(run_backend(knobs, "any"), 1.0)
        if f == 1.0 or p.step_time_s is None:
            return p
        return p.__class__(**{**p.__dict__, "tokens_per_s": p.tokens_per_s * f, "step_time_s": p.step_time_s / f,
                              "compute_s": p.compute_s / f, "comm_s": p.comm_s / f, "rest_s": p.rest_s / f})


def tuner_search(st: dict, space: str, budget: int, seed: int, top_k: int, template: dict | None) -> dict:
    import optuna

    from tuner.budget import Budget
    from tuner.final import best_trial
    from tuner.loop import Tuner
    from tuner.setup import open_study
    from tuner.study_store import StudyMeta

    rounds, top_n = 1, 3
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/bench.db"
        cfg = TuneConfig(model=MODEL, gpus=NPROC, budget_s=10**6, steps=STEPS, warmup_steps=WARMUP, storage=url,
                         study="b", choices=CHOICES, seq_len=SEQ_LEN, top_k=top_k, max_trials=budget - rounds * top_n,
                         seed=seed, measure_network=False, progress=False, remeasure_rounds=rounds,
                         infeasible_margin=0.0, device_memory_gib=PLANNER_CAP_GIB if space == "cap" else None)
        if template is not None:  # the same measured system for every seed
            StudyMeta.model_validate(template).save(optuna.create_study(study_name="b", storage=url, direction="maximize"))
        ctx = open_study(cfg)
        if space == "prior":
            ctx.predictor = PriorOff(ctx.predictor, PRIOR_OFF)
            from tuner.final import tie_order

            fits = [k for k in ctx.space.configs() if ctx.predictor(k).fits]  # the planner's rule, on the off prior
            order = tie_order(fits, [ctx.predictor(k).tokens_per_s for k in fits])
            ctx.meta.planner_top_k = [fits[i] for i in order][:top_k]
        runner = ReplayRunner(st, random.Random(seed))
        Tuner(ctx, Budget(10**6), runner=runner).run()
        trials = ctx.study.get_trials(deepcopy=False)
        launched = [t for t in trials if t.user_attrs.get("status") in ("ok", "oom", "timeout", "crash")]
        bad = sum(1 for t in launched if t.user_attrs.get("predicted_fits") is False)
        best = best_trial(ctx.study)
        meta = StudyMeta.load(ctx.study).model_dump(mode="json")
        return {"pick": best.user_attrs["config_key"] if best else None, "runs": runner.runs,
                "predicted_oom_launched": bad, "first_guess": config_key(meta["planner_top_k"][0]) if space != "prior"
                else config_key(ctx.meta.planner_top_k[0]), "meta": meta}


def pick_noisy(keys: list[str], st: dict, rng: random.Random) -> str:
    seen = {k: rng.choice(st[k]["samples"]) for k in keys}
    return max(seen, key=seen.get)


def random_search(st: dict, budget: int, seed: int) -> dict:
    rng = random.Random(seed)
    keys = rng.sample(sorted(st), budget)
    return {"pick": pick_noisy(keys, st, rng), "runs": budget, "predicted_oom_launched": None}


def grid_levels(choices: dict[str, tuple], budget: int) -> list[dict]:
    """A coarse grid: evenly spaced levels of each knob; the level counts whose product is
    the largest within the budget, the most even coverage of the knobs first."""
    import itertools

    multi = {k: v for k, v in choices.items() if len(v) > 1}
    combos = [c for c in itertools.product(*(range(1, len(v) + 1) for v in multi.values())) if math.prod(c) <= budget]
    cover = [[n / len(v) for n, v in zip(c, multi.values())] for c in combos]
    best = max(range(len(combos)), key=lambda i: (math.prod(combos[i]), min(cover[i]), sum(cover[i])))
    levels = dict(zip(multi, combos[best]))
    picked = {k: [v[round(i * (len(v) - 1) / (levels[k] - 1))] for i in range(levels[k])] if levels[k] > 1 else [v[0]]
              for k, v in multi.items()}
    fixed = {k: v[0] for k, v in choices.items() if len(v) == 1}
    return [fixed | dict(zip(picked, vals)) for vals in itertools.product(*picked.values())]


def grid_search(st: dict, budget: int, seed: int) -> dict:
    keys = [config_key(k) for k in grid_levels(CHOICES, budget)]
    return {"pick": pick_noisy(keys, st, random.Random(seed)), "runs": len(keys), "predicted_oom_launched": None}


def _elementary(q: list[float], m: int) -> float:
    """e_m(q): sum over m-subsets of the product of their q (dynamic programming)."""
    e = [1.0] + [0.0] * m
    for x in q:
        for j in range(m, 0, -1):
            e[j] += e[j - 1] * x
    return e[m]


def random_expected(st: dict, budget: int, true_best: float) -> tuple[float, float]:
    """EXACT expected score of random search: (noise-free pick, pick by one noisy run each).

    Noise-free: E[max true value of a uniform b-subset] = sum_i v_(i) C(i-1, b-1) / C(N, b).
    Noisy: config i is kept when its drawn run beats the drawn runs of the b-1 others; over
    uniform subsets that is e_{b-1}(q) / C(N-1, b-1) with q_j = P(run_j < run_i); ties
    between equal runs (OOMs at 0) are split evenly (counted with weight 1/2).
    """
    keys = sorted(st)
    n, b = len(keys), budget
    vals = sorted(st[k]["value"] for k in keys)
    clean = sum(v * math.comb(i, b - 1) for i, v in enumerate(vals)) / math.comb(n, b)
    noisy = 0.0
    for i in keys:
        for s in st[i]["samples"]:
            q = [sum((x < s) + 0.5 * (x == s) for x in st[j]["samples"]) / len(st[j]["samples"]) for j in keys if j != i]
            p_kept = _elementary(q, b - 1) / math.comb(n - 1, b - 1)
            noisy += (b / n) * p_kept * st[i]["value"] / len(st[i]["samples"])
    return clean / true_best, noisy / true_best


def summarize(name: str, runs: list[dict], st: dict, true_best: float) -> dict:
    scores = [st[r["pick"]]["value"] / true_best if r["pick"] else 0.0 for r in runs]
    q = statistics.quantiles(scores, n=4) if len(scores) > 1 else scores * 3
    return {"method": name, "seeds": len(runs), "median": statistics.median(scores), "mean": statistics.mean(scores),
            "q1": q[0], "q3": q[2], "min": min(scores), "hit_best_share": sum(s >= 0.999 for s in scores) / len(scores),
            "runs": statistics.mean(r["runs"] for r in runs),
            "predicted_oom_launched": sum(r["predicted_oom_launched"] or 0 for r in runs)}


def run_space(space: str, truth: dict, args) -> tuple[dict, bool]:
    st = space_truth(truth, CAP_RSS_GIB if space == "cap" else None)
    true_key = max(st, key=lambda k: st[k]["value"])
    true_best = st[true_key]["value"]
    tuner_runs, template = [], None
    for s in range(args.seeds):
        r = tuner_search(st, space, args.budget, s, args.top_k, template)
        template = r.pop("meta")
        tuner_runs.append(r)
    first = tuner_runs[0]["first_guess"]
    results = [summarize("tuner", tuner_runs, st, true_best),
               summarize("random", [random_search(st, args.budget, s) for s in range(args.seeds)], st, true_best),
               summarize("grid", [grid_search(st, args.budget, s) for s in range(args.seeds)], st, true_best)]
    clean, noisy = random_expected(st, args.budget, true_best)
    ooms = sum(1 for v in st.values() if v["oom"])
    print(f"\n== space {space}: {len(st)} configurations ({ooms} OOM), budget {args.budget} runs, {args.seeds} seeds")
    print(f"   true best {true_best:,.0f} tok/s: {true_key}")
    print(f"   planner's first guess: {first} = {st[first]['value'] / true_best:.3f} of the best")
    for r in results:
        print(f"   {r['method']:>6}: median {r['median']:.3f} (IQR {r['q1']:.3f}-{r['q3']:.3f}, min {r['min']:.3f}, "
              f"mean {r['mean']:.3f}), best found in {r['hit_best_share']:.0%}, {r['runs']:.1f} runs"
              + (f", predicted-OOM launches {r['predicted_oom_launched']}" if r["method"] == "tuner" else ""))
    print(f"   random, exact expectation: {noisy:.3f} (picking by one noisy run each), {clean:.3f} (noise-free pick)")
    tuner = results[0]
    passed = (tuner["median"] > results[1]["median"] and tuner["median"] > noisy
              and tuner["predicted_oom_launched"] == 0 and first != true_key)
    print(f"   {'PASS' if passed else 'FAIL'}: tuner median {tuner['median']:.3f} vs random median "
          f"{results[1]['median']:.3f} / exact {noisy:.3f}")
    return {"space": space, "true_best": true_best, "true_best_config": true_key, "first_guess": first,
            "first_guess_ratio": st[first]["value"] / true_best, "results": results,
            "random_exact_noisy": noisy, "random_exact_clean": clean, "passed": passed}, passed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth", type=Path, default=ROOT / "benchmarks" / "results" / "tuner_truth.json")
    ap.add_argument("--passes", type=int, default=0, help="first run the real trainer until every configuration has this many runs")
    ap.add_argument("--seeds", type=int, default=25)
    ap.add_argument("--budget", type=int, default=9, help="trainer runs per search (a quarter of the space)")
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--spaces", default="cap,prior")
    ap.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = ap.parse_args()
    if args.seeds < 20:
        print("--seeds must be >= 20", file=sys.stderr)
        return 2
    truth = ground_truth(args.truth, args.passes)
    noise = noise_summary(truth)
    print(f"truth: {len(truth)} configurations x {noise['runs_min']}-{noise['runs_max']} real runs; noise of one "
          f"configuration's runs: max/min median {noise['max_over_min_median']:.2f} (worst {noise['max_over_min_max']:.2f}), "
          f"half-range median {100 * noise['half_range_median']:.0f}%")
    out, ok = [], True
    for space in args.spaces.split(","):
        res, passed = run_space(space, truth, args)
        out.append(res)
        ok &= passed
    if args.json:
        args.json.write_text(json.dumps({"noise": noise, "spaces": out}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
