"""A rich progress bar: trials done, best so far, time left (re-read at every refresh)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
from rich.text import Text

from tuner.budget import Budget


class _TimeLeft(ProgressColumn):
    def __init__(self, budget: Budget):
        super().__init__()
        self.budget = budget

    def render(self, task) -> Text:
        left = int(self.budget.left_s)
        return Text(f"{left // 3600:d}:{left % 3600 // 60:02d}:{left % 60:02d} left", style="cyan")


class TuneProgress:
    """Budget bar; `update` after each trial with the study's counts and best."""

    def __init__(self, budget: Budget, console: Console | None = None, enabled: bool = True):
        self.budget = budget
        self.enabled = enabled
        self._progress = Progress(
            TextColumn("[bold]plan tune[/]"), BarColumn(), TextColumn("{task.fields[trials]}"),
            TextColumn("best {task.fields[best]}"), _TimeLeft(budget),
            console=console or Console(stderr=True), transient=False, refresh_per_second=2,
        )
        self._task = None

    def __enter__(self) -> "TuneProgress":
        if self.enabled:
            self._progress.start()
            self._task = self._progress.add_task("tune", total=self.budget.total_s, trials="0 trials", best="-")
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.update_time()
            self._progress.stop()

    def update_time(self) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=min(self.budget.total_s, self.budget.elapsed_s))

    def update(self, launched: int, total: int, best_tokens_per_s: float | None, last: str = "",
               mine: int | None = None) -> None:
        """`launched` / `total`: the study's; `mine`: launched by this run (shown when a resumed study has more)."""
        if self._task is None:
            return
        best = f"{best_tokens_per_s:,.0f} tok/s" if best_tokens_per_s else "-"
        trials = f"{launched} run / {total} trials"
        if mine is not None and mine != launched:
            trials = f"{mine} run now; the study {trials}"
        self._progress.update(self._task, completed=min(self.budget.total_s, self.budget.elapsed_s),
                              trials=trials, best=best)
        if last:
            self._progress.console.print(last, highlight=False)
