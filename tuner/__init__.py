"""`plan tune`: Optuna-driven search over execution plans, every trial a real trainer run.

Programmatic use: `start_study(TuneConfig(...))`, `create_study(...)`, `best_plan(name, url)`,
`build_report(load(name, url), url)`. The trainer is only ever launched as a subprocess.
"""

from tuner.api import create_study, start_study
from tuner.config import TuneConfig
from tuner.report import TuneReport, best_plan, build_report, load, trials_frame

__all__ = ["TuneConfig", "TuneReport", "best_plan", "build_report", "create_study", "load", "start_study",
           "trials_frame"]
