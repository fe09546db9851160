"""The forecaster's settings as one frozen record; validation only, no I/O.

The CLI turns flags into a ``Config``; everything else takes the pieces it needs.
Standard library only, so ``gpu_eta.forecaster.main`` can import this module
without the forecaster extra.
Secrets (bearer token, basic-auth password) are read from files by the CLI and
kept out of ``repr`` so they never reach a log line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpu_eta.common.durations import duration_seconds
from gpu_eta.common.listen import parse_listen_address as common_listen_address
from gpu_eta.common.text import query_or_fragment, url_parse_problem, without_credentials
from gpu_eta.forecaster import kube_state, queries
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.history_space import Retention
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.prom_clock import OFFSET_BOUND_SECONDS
from gpu_eta.forecaster.secret_file import SecretFile

if TYPE_CHECKING:
    from gpu_eta.forecaster.push import PushAuth

# The longest cycle interval, lookback or idle window: ten years. Prometheus takes a
# duration up to ~292 years and answers a longer one with HTTP 400, every cycle; a
# wait that long overflows; nothing useful lies past a few months.
MAX_WINDOW_SECONDS = 3650 * 86400.0


class ConfigError(ForecasterError, ValueError):
    """A setting is out of range or inconsistent (a usage error: exit code 2)."""


@dataclass(frozen=True, slots=True)
class CycleSettings:
    """Knobs of a cycle (from the CLI; see docs/forecaster.md)."""

    lookback_seconds: float = 6 * 3600.0
    overlap_seconds: float = 120.0
    min_step_seconds: float = 15.0
    max_points: int = 240
    stall_after_seconds: float = 900.0
    idle_ratio: float = 0.05
    idle_window_seconds: float = 300.0
    refit_seconds: float = 300.0
    background_refit: bool = True
    # A background refit runs in a forked child process (its own core and GIL: the
    # cycles it overlaps are not slowed); False keeps it in a thread of this process.
    refit_in_process: bool = True
    refit_timeout_seconds: float = 900.0
    vanish_grace_seconds: float = 600.0
    # reads whose answers carry warnings (partial: a Thanos store or a remote-read
    # source down) do not count runs' absences for up to this long, then they do again
    # (a setup partial for good must still finish vanished runs; cycle.partial_hold);
    # --history.partial-hold
    partial_hold_seconds: float = 3600.0
    # the model fits on the most recent this many finished runs (0: all of them):
    # bounded memory and fit time however long the history grows (docs/forecaster.md)
    fit_runs: int = 100_000
    # ... and of them the most recent holding at most this many progress points (0: any
    # number): a run reported epoch by epoch keeps every point, ~110 bytes each in memory
    # (docs/forecaster.md); 2,000,000 is what the scale benchmark's 100,000 runs hold
    fit_points: int = 2_000_000
    # runs' unchanging series (plan, start, batch size, pod labels) are read for every
    # run in one cycle of this many, otherwise only for runs not seen yet (static_series)
    static_full_every: int = 10
    # the range queries that recover every epoch end (and step) between two cycles are
    # sent one cycle in this many, covering the span since the last such read; in the
    # others each run's latest epoch end comes from the instant queries (cycle.py)
    range_every: int = 5
    # when the forecaster's clock and Prometheus' (its answers' Date) are further apart,
    # the cycle runs at Prometheus' time (prom_clock); inf: always at its own clock (a
    # replay of the past against a real Prometheus, as tests do)
    clock_offset_bound_seconds: float = OFFSET_BOUND_SECONDS
    pending: PendingSettings = field(default_factory=PendingSettings)


@dataclass(frozen=True)
class Config:
    """Every setting of ``serve`` and ``once`` (defaults match the CLI's)."""

    prometheus_url: str = "http://localhost:9090"
    timeout_seconds: float = 10.0
    retries: int = 2
    backoff_seconds: float = 0.5
    # text, or a SecretFile re-read when it changes (promflags.prometheus_connection)
    bearer_token: str | SecretFile | None = field(default=None, repr=False)
    basic_auth: tuple[str, str | SecretFile] | None = field(default=None, repr=False)
    # --prometheus.header: extra request headers (values may be secrets: not in repr)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    max_response_bytes: int = 64 * 1024 * 1024
    history_db: str = "gpu-eta-history.sqlite"
    seed_csv: str | None = None
    # finished runs that finished longer ago are deleted, never the most recent
    # ``cycle.fit_runs`` (0: none deleted); see ``history_retention``
    history_retention_seconds: float = 30 * 86400.0
    listen_address: str = ":9844"
    interval_seconds: float = 60.0
    pushgateway_url: str | None = None
    pushgateway_job: str = "gpu-eta-forecaster"  # the job name rules and manifests use
    pushgateway_auth: PushAuth | None = None  # what a push authenticates with (push.py)
    cycle: CycleSettings = field(default_factory=CycleSettings)

    def __post_init__(self) -> None:
        # the query string first: a raw '?' or '#' in a password splits the URL inside
        # it, and urllib's error then quotes the password's start (never shown)
        problem = query_or_fragment(self.prometheus_url)
        if problem:
            raise ConfigError(f"--prometheus.url {problem}")
        problem = url_parse_problem(self.prometheus_url)
        if problem:  # a bare ValueError from urlsplit would be a traceback at the CLIs
            raise ConfigError(
                "--prometheus.url must be http(s)://host:port, "
                f"got {without_credentials(self.prometheus_url)!r}: {problem}"
            )
        parts = urlsplit(self.prometheus_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                f"--prometheus.url must be http(s)://host:port, got {without_credentials(self.prometheus_url)!r}"
            )
        if self.pushgateway_url is not None:
            try:
                pg = urlsplit(
                    self.pushgateway_url
                    if "://" in self.pushgateway_url
                    else "http://" + self.pushgateway_url
                )
                pg.port  # noqa: B018 - reading it checks it
            except ValueError:
                pg = None
            if pg is None or not pg.netloc:
                raise ConfigError(
                    f"--pushgateway.url is not a URL: {without_credentials(self.pushgateway_url)!r}"
                )
            if "@" in pg.netloc:  # urllib's push would not send it: printed, never used
                raise ConfigError(
                    "--pushgateway.url must not hold a user or password, got "
                    f"{without_credentials(self.pushgateway_url)!r}: give them as "
                    "--pushgateway.basic-auth-user and --pushgateway.basic-auth-password-file"
                )
            # prometheus_client prefixes http:// to a URL not starting with http:// or
            # https:// (case matters): ftp://pg became http://ftp://pg, failing only at
            # the push, after the cycle had queried and written its history
            scheme = (
                self.pushgateway_url.partition("://")[0]
                if "://" in self.pushgateway_url
                else "http"
            )
            if scheme not in ("http", "https") or not pg.hostname:
                raise ConfigError(
                    "--pushgateway.url must be http(s)://host:port or host:port, got "
                    f"{without_credentials(self.pushgateway_url)!r}"
                )
        if not self.pushgateway_job:  # the gateway answers 400: a group needs a job
            raise ConfigError("--pushgateway.job must not be empty")
        # The other --prometheus.* values are checked where the flags are read, once
        # for serve, once and top (cli.prometheus_connection).
        for name, value in (
            ("--cycle.interval", self.interval_seconds),
            ("--history.lookback", self.cycle.lookback_seconds),
            ("--stall.after", self.cycle.stall_after_seconds),
            ("--stall.idle-window", self.cycle.idle_window_seconds),
        ):
            if not (math.isfinite(value) and value > 0):  # inf: no sleep or window takes it
                raise ConfigError(f"{name} must be a finite number > 0, got {value}")
        for name, value in (
            ("--cycle.interval", self.interval_seconds),
            ("--history.lookback", self.cycle.lookback_seconds),
            ("--stall.idle-window", self.cycle.idle_window_seconds),
        ):
            if value > MAX_WINDOW_SECONDS:  # a wait or a query's window past any use
                raise ConfigError(
                    f"{name} must be at most {MAX_WINDOW_SECONDS // 86400:.0f} days, got {value}"
                )
        if not math.isfinite(self.cycle.min_step_seconds):
            raise ConfigError(
                f"--query.step must be a finite number, got {self.cycle.min_step_seconds}"
            )
        if not 0 <= self.cycle.idle_ratio <= 1:
            raise ConfigError(f"--stall.idle-ratio must be in 0..1, got {self.cycle.idle_ratio}")
        if not (
            math.isfinite(self.cycle.vanish_grace_seconds) and self.cycle.vanish_grace_seconds >= 0
        ):
            # nan or inf: no vanished run would ever be finished and learnt from
            raise ConfigError(
                "--history.vanish-grace must be a finite number >= 0, "
                f"got {self.cycle.vanish_grace_seconds}"
            )
        if not (
            math.isfinite(self.cycle.partial_hold_seconds) and self.cycle.partial_hold_seconds >= 0
        ):
            # inf would keep every vanished run running for good in a setup partial for good
            raise ConfigError(
                "--history.partial-hold must be a finite number >= 0, "
                f"got {self.cycle.partial_hold_seconds}"
            )
        if not (
            math.isfinite(self.history_retention_seconds) and self.history_retention_seconds >= 0
        ):
            raise ConfigError(
                "--history.retention must be a duration (like 30d) or 0, "
                f"got {self.history_retention_seconds} s"
            )
        if self.cycle.fit_runs < 0:
            raise ConfigError(f"--model.fit-runs must be >= 0, got {self.cycle.fit_runs}")
        if self.cycle.fit_points < 0:
            raise ConfigError(f"--model.fit-points must be >= 0, got {self.cycle.fit_points}")
        if not (math.isfinite(self.cycle.refit_seconds) and self.cycle.refit_seconds >= 0):
            # nan: no refit after the first fit, whatever was learnt since
            raise ConfigError(
                "--model.refit-interval must be a finite number >= 0, "
                f"got {self.cycle.refit_seconds}"
            )
        parse_listen_address(self.listen_address)
        check_gpu_resources(self.cycle.pending)


def check_gpu_resources(pending: PendingSettings) -> None:
    """``ConfigError`` naming ``--pending.gpu-resource`` when the names given make some
    part of the GPU queue's queries longer than one query may be
    (``kube_state.batches``): refused at start rather than the queue left unpredicted
    each cycle. Every first-round part and the second round's ``ARRIVALS_SEEN`` hold
    the names; the node labels' and first-seen parts hold them once and are bounded by
    the pods' keys and uids (``kube_state.pending_since_query``)."""
    if not pending.enabled:
        return
    parts = {**kube_state.QUERIES, kube_state.ARRIVALS_SEEN_PART: kube_state.ARRIVALS_SEEN}
    try:
        kube_state.batches(
            kube_state.rendered(parts, pending.arrivals_seconds, pending.gpu_resources),
            queries.fold,
            queries.MAX_QUERY_CHARS,
        )
    except kube_state.QueryTooLong as err:
        raise ConfigError(
            f"--pending.gpu-resource: with these {len(pending.gpu_resources)} names "
            f"{err} (every GPU matcher of the GPU queue's queries holds them): give "
            "fewer or shorter names; MIG profiles need none (nvidia.com/mig-* is read "
            "already)"
        ) from None


def parse_retention(text: str) -> float:
    """``--history.retention``: a Prometheus duration (``30d``, ``1w2d``) or ``0`` (keep
    every run), in seconds; ``ConfigError`` otherwise. Why not plain seconds as the
    other history flags: a retention is weeks or months, as Prometheus' own
    ``--storage.tsdb.retention.time``."""
    seconds = 0.0 if text.strip() == "0" else duration_seconds(text)
    if seconds is None:
        raise ConfigError(
            "--history.retention must be a duration (like 30d, at most Prometheus' longest, "
            f"about 292y) or 0, got {text!r}"
        )
    return seconds


def history_retention(config: Config) -> Retention | None:
    """What the store deletes (``HistoryStore.retain``): finished runs older than
    ``--history.retention``, never one of the most recent ``--model.fit-runs`` (what
    the model may read: docs/forecaster.md, "History file"); None for ``0``.
    ``--model.fit-runs 0`` (fit on all) leaves no such floor: retention then bounds
    what the model reads too. A deleted completed run's mark lasts ``--history.retention``
    (at least ``--history.lookback``, the farthest back a read reaches) past the last
    read of its series. Why not the lookback alone: the series come back after any
    outage of the node's exporter (a crash loop, a node NotReady for hours), which
    publishes the Succeeded pod's row again from its state file, and a mark gone by
    then let the run be stored again as the newest; kept a retention period, the marks
    are bounded by the runs a period deletes."""
    if config.history_retention_seconds <= 0:
        return None
    return Retention(
        config.history_retention_seconds,
        keep_runs=config.cycle.fit_runs,
        linger_seconds=max(config.cycle.lookback_seconds, config.history_retention_seconds),
    )


def parse_listen_address(address: str) -> tuple[str, int]:
    """``--web.listen-address`` (``gpu_eta.common.listen``) → (host, port). The host
    stays empty for ``:PORT``: ``common.listen_socket`` then listens on every address,
    IPv4 and IPv6 where the node has IPv6, as the exporter does."""
    try:
        parsed = common_listen_address(address)
    except ValueError:
        raise ConfigError(f"--web.listen-address must be [host]:port, got {address!r}") from None
    return (parsed.host, parsed.port)
