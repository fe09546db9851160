"""Pure: Prometheus answers as values (instant ``Sample``, range ``Series``) and the
query counters; what the cycle, top and the run assembly read, without ``requests``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """One element of an instant vector: its labels and value (NaN kept as NaN)."""

    labels: Mapping[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True, slots=True)
class Series:
    """One element of a range matrix: labels and ``(unix_seconds, value)`` points."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass
class QueryStats:
    """Counts of queries by outcome; read by publish for ``gpu_eta_forecaster_queries_total``."""

    success: int = 0
    error: int = 0
    # series left out of answers otherwise used (a bad label or sample costs only its
    # series: promapi); ``gpu_eta_forecaster_skipped_series_total``
    skipped_series: int = 0
