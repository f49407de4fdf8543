"""`python -m plan_service.tune_worker CONFIG.json`: one study, run by the tuner's public API."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from planner.errors import PlanError
    from tuner import TuneConfig, start_study

    import os

    from plan_service.tune_jobs import STORAGE_ENV

    config = TuneConfig.model_validate_json(open(argv[0]).read())
    if os.environ.get(STORAGE_ENV):
        config = config.model_copy(update={"storage": os.environ[STORAGE_ENV]})
    try:
        report = start_study(config)
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"study {report.study}: {report.launched} trials launched; {report.stop_reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
