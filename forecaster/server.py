"""The long-running service: cycles on a timer, ``/metrics`` from the last good set.

The cycle thread and the HTTP thread share only a ``ServiceState``. When a cycle
fails (Prometheus away, slow or answering garbage) the previous forecasts keep
being served with ``gpu_eta_forecaster_stale 1``; the next good cycle clears it.
Failures are logged once per change of state, not once per cycle.

Probes (docs/forecaster.md, "Health"): ``/healthz`` (liveness) fails when the cycle
loop is gone, when one cycle has run longer than ``wedged_after_seconds`` (a hung
socket, a stuck fit: only a restart helps) or when every cycle has failed for
``failing_after_seconds``; ``/readyz`` (readiness) succeeds once a cycle has
published forecasts (a fitted model, answers Prometheus gave), and stays so while
stale forecasts are served.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from gpu_eta.common.metrics_http import Health, MetricsServer, always_healthy
from gpu_eta.forecaster import queries
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.publish import Exposition, ServiceState

log = logging.getLogger(__name__)


def wedged_limit_seconds(
    interval_seconds: float,
    timeout_seconds: float,
    retries: int,
    backoff_seconds: float,
    n_queries: int = queries.MOST_QUERIES_PER_CYCLE,
) -> float:
    """How long one cycle may run before liveness calls it wedged: every query taking
    as long as the client allows, plus max(600 s, 10 × the interval) for the rest (a
    fit). Pure.

    Why derived: a query's attempt may last 5 × ``timeout_seconds`` and still succeed
    (headers within 2 ×, body within 3 ×: ``promapi``), each retry waits its backoff or
    a ``Retry-After`` of at most the timeout (a longer one is not waited for), and a
    cycle sends up to ``n_queries`` in turn. A fixed 600 s was passed by a slow server
    within every deadline (20 queries of 5 × 10 s at the default timeout: 1,000 s, no
    retry), and the pod was restarted mid-cycle for ever; a hung connection is already
    ended by those deadlines, so the limit is for what they do not bound (a stuck fit).
    """
    waits = sum(max(backoff_seconds * 2**k, timeout_seconds) for k in range(max(0, retries)))
    per_query = (max(0, retries) + 1) * 5 * timeout_seconds + waits
    return max(600.0, 10 * interval_seconds) + n_queries * per_query


class Service:
    """Runs ``cycle`` every ``interval_seconds`` and records the outcome in ``state``."""

    def __init__(
        self,
        cycle: Cycle,
        state: ServiceState,
        interval_seconds: float,
        clock: Callable[[], float] = time.time,
        wedged_after_seconds: float | None = None,
        failing_after_seconds: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cycle = cycle
        self.state = state
        self.interval_seconds = interval_seconds
        self.clock = clock
        self.monotonic = monotonic
        # generous: every query of a cycle may take as long as the client allows (the
        # default derives from the cycle's client: wedged_limit_seconds), a first fit
        # on 50,000 runs takes tens of seconds; Prometheus being away for an hour is
        # not cured by restarting the forecaster, so failing must last long
        client = getattr(cycle, "client", None)
        self.wedged_after_seconds = (
            wedged_after_seconds
            if wedged_after_seconds is not None
            else wedged_limit_seconds(
                interval_seconds,
                getattr(client, "timeout_seconds", 10.0),
                getattr(client, "retries", 2),
                getattr(client, "backoff_seconds", 0.5),
            )
        )
        self.failing_after_seconds = (
            failing_after_seconds
            if failing_after_seconds is not None
            else max(1800.0, 30 * interval_seconds)
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._cycle_started: float | None = None  # monotonic start of the running cycle
        self._failing_since: float | None = None  # monotonic end of the first failed cycle

    def liveness(self) -> tuple[bool, str]:
        """``/healthz``: (alive, one-line reason). A restart would help when False."""
        now = self.monotonic()
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return False, "cycle loop is not running"
        started = self._cycle_started
        if started is not None and now - started > self.wedged_after_seconds:
            return False, (
                f"cycle running for {now - started:.0f}s "
                f"(limit {self.wedged_after_seconds:g}s): wedged"
            )
        since = self._failing_since
        if since is not None and now - since > self.failing_after_seconds:
            return False, (
                f"every cycle failed for {now - since:.0f}s "
                f"(limit {self.failing_after_seconds:g}s): "
                + (self.state.last_error.splitlines()[0][:200] if self.state.last_error else "")
            )
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: (ready, reason): forecasts have been published at least once."""
        if self.state.forecasts is None:
            why = self.state.last_error.splitlines()[0][:200] if self.state.last_error else ""
            return False, "no forecast published yet" + (f" ({why})" if why else "")
        note = "" if getattr(self.cycle.store, "persistent", True) else " (history not persisted)"
        return True, ("ok, stale" if self.state.stale else "ok") + note

    def run_once(self) -> bool:
        """One cycle; True on success. Never raises (the loop must go on)."""
        started = time.monotonic()
        self._cycle_started = self.monotonic()
        try:
            return self._run_once(started)
        finally:
            self._cycle_started = None
            self._note_history()

    def _note_history(self) -> None:
        """Read the history's space into the state after a cycle, failed or not (a full
        volume fails every cycle, and its room is what says why); never raises."""
        space = getattr(getattr(self.cycle, "store", None), "space", None)
        if space is None:
            return
        try:
            self.state.note_history(space())
        except Exception as err:  # a closed store, a stat that fails: the gauges go
            log.debug("cannot read the history's space: %s", err)
            self.state.note_history(None)

    def _run_once(self, started: float) -> bool:
        try:
            fs = self.cycle.run()
        except Exception as err:
            message = (
                str(err) if isinstance(err, ForecasterError) else f"{type(err).__name__}: {err}"
            )
            self.state.failure(message, time.monotonic() - started)
            if not self._failing:
                what = (
                    "serving the last forecasts as stale"
                    if self.state.stale
                    else "no forecasts yet"
                )
                log.error("cycle failed (%s): %s", what, message)
                if not isinstance(err, ForecasterError):
                    log.debug("cycle failure", exc_info=True)
            self._failing = True
            if self._failing_since is None:
                self._failing_since = self.monotonic()
            return False
        # on the set's time (Prometheus' when the clocks disagree: GpuEtaForecasterStale
        # compares it with time())
        self.state.success(fs, time.monotonic() - started, self.clock() + fs.clock_offset_seconds)
        if self._failing:
            log.info("cycle recovered: %d running jobs forecast", len(fs.jobs))
        self._failing = False
        self._failing_since = None
        return True

    def start(self) -> None:
        """Start the cycle loop in a daemon thread (first cycle at once)."""
        self._thread = threading.Thread(target=self._loop, name="forecast-cycle", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            begun = time.monotonic()
            self.run_once()
            self._stop.wait(max(0.0, self.interval_seconds - (time.monotonic() - begun)))

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the loop to end and wait for the running cycle to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def metrics_server(
    source: CollectorRegistry | Exposition,
    host: str,
    port: int,
    liveness: Health = always_healthy,
    readiness: Health = always_healthy,
) -> MetricsServer:
    """The forecaster's ``/metrics`` (OpenMetrics when asked for), ``/healthz``
    (``liveness``: ``Service.liveness`` in ``serve``) and ``/readyz`` (``readiness``:
    ``Service.readiness``), not yet started.

    ``source`` is an ``Exposition`` (``serve``: the forecast families encoded once
    per published set) or any registry (encoded on every scrape).
    """
    if isinstance(source, Exposition):
        render = source.render
    else:
        registry = source

        def render(accept: str) -> tuple[bytes, str]:
            encoder, content_type = choose_encoder(accept)
            return encoder(registry), content_type

    return MetricsServer(
        host,
        port,
        render,
        health=liveness,
        ready=readiness,
        title="gpu-eta forecaster",
        description="Predicted completion times of training runs and when each GPU frees up.",
    )
