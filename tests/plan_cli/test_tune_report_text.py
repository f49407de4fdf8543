"""The re-measurement line of `plan tune`'s report: the median with its half-range for candidates run more
than once, no spread for one run, and the run count in words ('1 run', not '1 runs')."""

from plan_cli.tune import remeasured


def test_remeasured_candidates_read_as_words():
    rows = [{"trial": 1, "median_tokens_per_s": 12854.2, "spread_pct": 23.4, "samples_tokens_per_s": [10000, 15700]},
            {"trial": 0, "median_tokens_per_s": 11485.0, "spread_pct": None, "samples_tokens_per_s": [11485.0]}]
    assert remeasured(rows) == "#1 12,854 tok/s ±23% (2 runs); #0 11,485 tok/s (1 run)"
    assert remeasured([]) == ""


def test_the_best_line_gives_the_median_the_winner_was_judged_by():
    """'best trial 2: 37,308 tokens/s measured' stood under 'ddp won: trial 2, 26,775 tokens/s (median of
    re-measurements)': one trial, two speeds. The best line now gives the median and says so."""
    from types import SimpleNamespace

    from plan_cli.tune import best_speed

    rows = [{"trial": 2, "median_tokens_per_s": 26775.0, "spread_pct": 39.0, "samples_tokens_per_s": [37308.0, 26775.0, 16500.0]},
            {"trial": 0, "median_tokens_per_s": 22899.0, "spread_pct": 0.0, "samples_tokens_per_s": [22899.0]}]
    rep = SimpleNamespace(best={"trial": 2, "tokens_per_s": 37308.0}, final_ranking={"rows": rows})
    assert best_speed(rep) == "26,775 tokens/s, the median of 3 runs (its first 37,308)"
    rows[0]["samples_tokens_per_s"], rows[0]["median_tokens_per_s"] = [26775.0, 37308.0, 16500.0], 26775.0
    same = SimpleNamespace(best={"trial": 2, "tokens_per_s": 26775.0}, final_ranking={"rows": rows})
    assert best_speed(same) == "26,775 tokens/s, the median of 3 runs (its first run's)"  # not 26,775 twice
    once = SimpleNamespace(best={"trial": 0, "tokens_per_s": 22899.0}, final_ranking={"rows": rows})
    assert best_speed(once) == "22,899 tokens/s measured"
    assert best_speed(SimpleNamespace(best={"trial": 0, "tokens_per_s": 22899.0}, final_ranking=None)) == "22,899 tokens/s measured"


def test_a_running_trial_reads_with_what_its_log_says():
    """`plan tune report` while a study's first trial starts: its table said 'running' and nothing more for minutes
    (a first DeepSpeed run builds its ops)."""
    from plan_cli.tune import running_line

    r = {"trial": 0, "for_s": 41.4, "doing": "starting: DeepSpeed building its op cpu_adam (first run on this machine)"}
    assert running_line(r) == ("running now: trial #0 for 41 s: starting: DeepSpeed building its op cpu_adam (first run "
                               "on this machine)")
    assert running_line({"trial": 3, "for_s": None, "doing": "step 2 of 4 done"}) == "running now: trial #3: step 2 of 4 done"
