"""The long-running service: cycles on a timer, ``/metrics`` from the last good set.

The cycle thread and the HTTP thread share only a ``ServiceState``. When a cycle
fails (Prometheus away, slow or answering garbage) the previous forecasts keep
being served with ``gpu_eta_forecaster_stale 1``; the next good cycle clears it.
Failures are logged once per change of state, not once per cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from gpu_eta.common.metrics_http import MetricsServer
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.publish import ServiceState

log = logging.getLogger(__name__)


class Service:
    """Runs ``cycle`` every ``interval_seconds`` and records the outcome in ``state``."""

    def __init__(
        self,
        cycle: Cycle,
        state: ServiceState,
        interval_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cycle = cycle
        self.state = state
        self.interval_seconds = interval_seconds
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def run_once(self) -> bool:
        """One cycle; True on success. Never raises (the loop must go on)."""
        started = time.monotonic()
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
            return False
        self.state.success(fs, time.monotonic() - started, self.clock())
        if self._failing:
            log.info("cycle recovered: %d running jobs forecast", len(fs.jobs))
        self._failing = False
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


def metrics_server(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """The forecaster's ``/metrics`` (``registry``, OpenMetrics when asked for) and
    ``/healthz`` (the process is up), not yet started."""

    def render(accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(registry), content_type

    return MetricsServer(
        host,
        port,
        render,
        title="gpu-eta forecaster",
        description="Predicted completion times of training runs and when each GPU frees up.",
    )
