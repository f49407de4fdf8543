"""What the planner predicts for one configuration of the space (memory, fit, speed).

Every prediction goes through planner.api.evaluate with all tuned knobs pinned, on the System
the tuner measured (CPU ranks or catalog GPUs, measured all-reduce bus bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.api import Searched, best_of, ranked, search
from planner.errors import PlanError
from planner.scenario import Estimate, Scenario
from planner.settings import Calibration, Settings
from planner.system import System
from tuner.calibrate import Observation
from tuner.space import trainer_runs

_MEMORY_REASONS = ("needs ", "does not fit")


@dataclass(frozen=True)
class Prediction:
    fits: bool
    reason: str
    memory_ratio: float  # predicted bytes / capacity, per device (host RAM when that is worse)
    total_bytes: float
    capacity_bytes: float
    step_time_s: float | None
    tokens_per_s: float | None
    compute_s: float = 0.0
    comm_s: float = 0.0
    rest_s: float = 0.0

    @property
    def memory_only(self) -> bool:
        """Rejected only for memory (so a margin applies), not for an invalid combination."""
        return not self.fits and self.reason.startswith(_MEMORY_REASONS)

    def launchable(self, margin: float) -> bool:
        """Fits, or misses only on memory by less than `margin` (the model may be pessimistic)."""
        return self.fits or (self.memory_only and self.memory_ratio <= 1.0 + margin)

    def calibrated_step_s(self, cal: Calibration) -> float | None:
        """Step time under a calibration, from this (default-calibration) breakdown: the same
        linear model the fit uses (tuner/calibrate.py), so ranking costs no planner calls."""
        if self.step_time_s is None:
            return None
        return self.compute_s / cal.compute + self.comm_s / cal.network + self.rest_s

    def calibrated_tokens_per_s(self, cal: Calibration) -> float | None:
        step = self.calibrated_step_s(cal)
        if not step or not self.tokens_per_s or not self.step_time_s:
            return None
        return self.tokens_per_s * self.step_time_s / step

    def observation(self, measured_step_s: float) -> Observation:
        return Observation(self.compute_s, self.comm_s, self.rest_s, measured_step_s)


class Predictor:
    """Cached planner predictions for knob dicts, at a given calibration."""

    def __init__(self, base: Scenario, system: System, settings: Settings | None = None):
        self.base = base
        self.system = system
        self.settings = settings or Settings()
        self._cache: dict[tuple, Prediction] = {}
        self._searched: dict[tuple, Searched] = {}  # by knobs: a search is the same under every calibration
        self._moe_model: bool | None = None

    @property
    def _moe(self) -> bool:
        """The study's model is a mixture of experts (resolved once)."""
        if self._moe_model is None:
            from planner.resolve import resolve_model

            self._moe_model = bool(resolve_model(self.base).moe_experts)
        return self._moe_model

    def __call__(self, knobs: dict, calibration: Calibration | None = None, *, cache: bool = True) -> Prediction:
        """`cache=False`: a one-off calibration (a held-out fit, tuner/calibration_check.py), not kept."""
        cal = calibration or Calibration()
        key = (tuple(sorted(knobs.items())), cal.compute, cal.network)
        if key in self._cache:
            return self._cache[key]
        pred = self._predict(knobs, cal)
        if cache:
            self._cache[key] = pred
        return pred

    def _predict(self, knobs: dict, cal: Calibration) -> Prediction:
        why_not = trainer_runs(knobs, moe=knobs.get("tp", 1) * knobs.get("pp", 1) > 1 and self._moe)
        if why_not:
            return Prediction(False, why_not, float("inf"), 0.0, 0.0, None, None)
        try:
            # planner.api.evaluate under `cal`, its search done once per knobs (no calibration enters it); the
            # network need (planner/network_need.py) is no part of a Prediction: not assessed (2/3 of the call)
            est = best_of(ranked(self._search(knobs), calibration=cal, top=1, include_rejected=True,
                                 network_need=False))
        except PlanError as e:
            return Prediction(False, e.message, float("inf"), 0.0, 0.0, None, None)
        return _from_estimate(est)

    def _search(self, knobs: dict) -> Searched:
        key = tuple(sorted(knobs.items()))
        if key not in self._searched:
            scenario = self.base.model_copy(update={"tp": 1, "pp": 1, "vpp": 1, "stack": "bundled", **knobs,
                                                    "sequence_parallel": knobs.get("tp", 1) > 1})
            self._searched[key] = search(scenario, settings=self.settings, system=self.system)
        return self._searched[key]


def _from_estimate(est: Estimate) -> Prediction:
    m = est.memory
    ratio = max(m.total_bytes / m.capacity_bytes,
                m.host_bytes_per_node / m.host_capacity_bytes_per_node if m.host_capacity_bytes_per_node else 0)
    step = est.time.step_time_s if est.time else None
    tps = est.performance.tokens_per_s if getattr(est, "performance", None) else None
    compute = comm = rest = 0.0
    if est.time is not None:
        compute = est.time.compute_s
        comm = est.time.comm_exposed_s
        rest = max(0.0, est.time.step_time_s - compute - comm)
    return Prediction(est.fits, est.reason, ratio, m.total_bytes, m.capacity_bytes, step, tps,
                      compute, comm, rest)
