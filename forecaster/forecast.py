"""The result of one prediction: what ``publish`` renders and ``evaluate`` scores."""

from __future__ import annotations

from dataclasses import dataclass

QUANTILES = (0.1, 0.5, 0.9)


@dataclass(frozen=True, slots=True)
class Forecast:
    """Remaining seconds of one run at P10 / P50 / P90, and how they were made.

    Invariants kept by the estimators: ``0 <= p10 <= p50 <= p90`` (never an ETA in
    the past). ``method`` is ``rate`` (the run's own progress), ``prior`` (history
    only) or ``blend``; ``stalled`` means the run made no progress with its GPU idle,
    so the ETA is held and the interval widened; ``converged`` is False when a
    statsmodels fit warned (the warning texts are kept).
    """

    p10: float
    p50: float
    p90: float
    method: str
    n_obs: int = 0
    stalled: bool = False
    converged: bool = True
    warnings: tuple[str, ...] = ()

    def quantile(self, q: float) -> float:
        """Remaining seconds at quantile 0.1, 0.5 or 0.9."""
        return {0.1: self.p10, 0.5: self.p50, 0.9: self.p90}[q]
