"""The re-measurement line of `plan tune`'s report: the median with its half-range for candidates run more
than once, no spread for one run, and the run count in words ('1 run', not '1 runs')."""

from plan_cli.tune import remeasured


def test_remeasured_candidates_read_as_words():
    rows = [{"trial": 1, "median_tokens_per_s": 12854.2, "spread_pct": 23.4, "samples_tokens_per_s": [10000, 15700]},
            {"trial": 0, "median_tokens_per_s": 11485.0, "spread_pct": 0.0, "samples_tokens_per_s": [11485.0]}]
    assert remeasured(rows) == "#1 12,854 tok/s ±23% (2 runs); #0 11,485 tok/s (1 run)"
    assert remeasured([]) == ""
