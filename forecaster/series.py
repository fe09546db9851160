"""Pure: Prometheus answers as values (instant ``Sample``, range ``Series``) and the
query counters; what the cycle, top and the run assembly read, without ``requests``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar


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


_S = TypeVar("_S", "Sample", "Series")


def unexported(item: _S) -> _S:
    """``exported_pod`` → ``pod`` (and namespace, container, node, ...).

    Prometheus renames a series' labels to ``exported_<name>`` when the scrape
    config does not honour labels and the target has the same label (a pod-level
    scrape of the exporter): the series' own value is the ``exported_`` one.
    """
    labels = item.labels
    # fast filter (one C-level join per sample, 100,000s per cycle); a false hit
    # only takes the exact path below
    if "exported_" not in "".join(labels) or not any(k.startswith("exported_") for k in labels):
        return item
    fixed = {k: v for k, v in labels.items() if not k.startswith("exported_")}
    for key, value in labels.items():
        if key.startswith("exported_") and key != "exported_":
            fixed[key[len("exported_") :]] = value
    return replace(item, labels=fixed)


def joined(parts: Iterable[Sequence[Series]]) -> list[Series]:
    """The answers of one range query asked in consecutive time windows
    (``queries.range_windows``), as the one answer: each series' points in window order,
    a series found in several windows once, in the order first seen. Pure."""
    points: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    labels: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
    for answer in parts:
        for series in answer:
            key = tuple(sorted(series.labels.items()))
            labels.setdefault(key, series.labels)
            points.setdefault(key, []).extend(series.points)
    return [Series(labels[key], tuple(pts)) for key, pts in points.items()]


@dataclass
class QueryStats:
    """Counts of queries by outcome; read by publish for ``gpu_eta_forecaster_queries_total``."""

    success: int = 0
    error: int = 0
    # series left out of answers otherwise used (a bad label or sample costs only its
    # series: promapi); ``gpu_eta_forecaster_skipped_series_total``
    skipped_series: int = 0
    # answers that parsed but carried warnings (a Thanos store or a VictoriaMetrics
    # storage node away: series may be missing); counted whatever the caller does with
    # them, ``gpu_eta_forecaster_partial_answers_total``
    partial: int = 0
    # the latest answer's ``Date`` header (unix seconds, whole) and ``time.monotonic()``
    # when its headers came in: Prometheus' clock as last seen (``prom_clock``); None
    # before any answer carried one
    date: tuple[float, float] | None = None
