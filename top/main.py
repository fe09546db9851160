"""``gpu-eta-top`` / ``python -m gpu_eta.top`` / ``python -m gpu_eta.forecaster top``: who holds each GPU, how far their training is, when it frees up.

Reads only Prometheus' HTTP API (any server speaking it: the demo's, a cluster's,
Thanos...), with a fixed set of instant queries per refresh, so it costs the same
whatever the cluster size, all within one deadline (``--refresh-timeout``: what a slow
server has not answered by then is left out and said). It talks to Prometheus through
the forecaster's own client (``gpu_eta.forecaster.promapi``) with the forecaster's
``--prometheus.*`` flags, so a Prometheus behind auth or TLS is reached the same way
and every answer is bounded and checked in one place. The queries' results go through pure functions (``build_view``
→ ``View`` → ``render_plain`` / ``render_json`` / ``render_rich``), which the tests
drive with fixed query results; only ``fetch`` and ``main`` do I/O.

``rich`` draws the tables when stdout is a terminal (and refreshes them in place);
otherwise the output is plain text, one snapshot after the other, so it pipes and
logs well. ``--json`` prints one machine-readable snapshot.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import timezone, tzinfo
from typing import Any

from gpu_eta.common.durations import parse_duration
from gpu_eta.common.gpu_resources import MAX_GPU_RESOURCES, parse_gpu_resources
from gpu_eta.common.k8s_names import DNS_LABEL
from gpu_eta.forecaster.config import ConfigError
from gpu_eta.forecaster.promapi import PromAPIError, PromClient, PromDeadlineError
from gpu_eta.forecaster.promflags import add_prometheus_flags, prometheus_connection
from gpu_eta.forecaster.promparse import NotAVectorError, PromQueryError
from gpu_eta.forecaster.series import Sample
from gpu_eta.top.compact import LAYOUTS
from gpu_eta.top.live import LiveTop, Signals, Terminated, to_devnull
from gpu_eta.top.queries import queries
from gpu_eta.top.render import fmt_duration, render_json, render_plain, render_rich
from gpu_eta.top.view import View, build_view, evaluation_time, off_clock, only_namespaces


class ExitCode(enum.IntEnum):
    """``top``'s exit codes, in this one place."""

    OK = 0
    RUNTIME = 1  # Prometheus unreachable, its answer unusable, or too slow for the deadline
    USAGE = 2


MAX_WARNINGS = 10  # distinct server warnings kept per refresh
# the longest --interval: the wait overflows past ~9e9 s (a traceback after the first
# view), and a view refreshed less than daily is --once run by cron
MAX_INTERVAL_SECONDS = 86400.0
# the shortest --interval: each refresh asks 24 queries; below a second between them a
# refreshing view is a load on Prometheus no one reading a terminal needs
MIN_INTERVAL_SECONDS = 1.0
# the most one refresh waits for Prometheus (--refresh-timeout): a healthy server
# answers a large cluster's refresh in ~3 s (docs/top.md), one answering each query in
# 0.5 s in ~13 s; past it, what was read is shown and the rest is left out
DEFAULT_REFRESH_TIMEOUT_SECONDS = 15.0


class RefreshCutShort(PromAPIError):
    """A refresh whose deadline passed after some queries answered: ``view`` is what
    they said, its errors naming the queries left out (``late_errors``). A failed read
    for ``--once`` and ``--json`` (exit 1); a refreshing view shows ``view``."""

    def __init__(self, message: str, view: View) -> None:
        super().__init__(message)
        self.view = view


def fetch(
    client: PromClient,
    idle_window: str = "5m",
    gpu_resources: Sequence[str] = (),
    skipped: dict[str, int] | None = None,
    late: list[str] | None = None,
    refresh_timeout_seconds: float = DEFAULT_REFRESH_TIMEOUT_SECONDS,
) -> tuple[dict[str, list[Sample]], dict[str, str], tuple[str, ...]]:
    """Run every query (one instant query each): (answers by query name, the queries
    Prometheus refused on its data with its reason, the answers' warnings).
    ``PromAPIError`` with one clear line when Prometheus cannot be asked (unreachable,
    not Prometheus, too large, not a vector). ``skipped``, when given, gets by query
    name how many series its answer lost to a label or sample the parser refuses (the
    client's ``stats.skipped_series``; ``skipped_errors`` says it).

    Why the warnings: a server answering from part of its sources (Thanos Query with a
    store down, a Prometheus whose remote-read source is away) says so only there, with
    ``status: success``; unsaid, half the cluster's GPUs read as all of them. The same
    warning comes with every query: each is kept once, at most ``MAX_WARNINGS``.

    Why one time: each query was evaluated at the server's "now" when it arrived, so
    a refresh's answers came from moments apart (a pod Pending in one, Running in the
    next). The first answer with a sample says the server's evaluation time
    (``evaluation_time``: a stamp a clock can read), and every later query is asked at
    it (``time=``); the workstation's clock is no choice, it may be off from the
    server's (docs/top.md, "Whose clock").

    Why the answers are bounded together (``answer_bytes``, at most
    ``client.max_response_bytes``, ``PromAPIError`` past it): a refresh holds all of them
    at once, parsed (3 times their bytes for real answers, up to 9 for odd shapes), and
    with each answer bounded alone that was as many times the cap as there are queries.

    Why a refused query is left out, not the end of the view: Prometheus refuses one
    query on its data (``PromQueryError``: a join meeting duplicate series, a sample
    limit a large cluster reaches) while the others answer; the view shows what they
    say, and names what is missing (``refused_errors``). An answer that is not a vector
    (``NotAVectorError``: a proxy's scalar, string or matrix) is refused the same way:
    read as samples, a scalar is one unlabelled series, a phantom GPU or holder.

    Why one deadline for all (``refresh_timeout_seconds`` from the first query; each
    query given what is left of it, its retries included): asked in turn, each with
    only the client's timeout and retries, a server answering just under the timeout
    holds one refresh for 24 timeouts (4 minutes, nothing on screen), and one never
    answering for every attempt's timeout (32 s).
    The queries not answered by then are not asked; their names go to ``late`` (the
    one being asked first), the answers read so far are returned. ``PromAPIError``
    when not one answered, or when the caller gave no ``late`` to say it in. Asked
    one after the other, not at once: the later ones are asked at the first answer's
    time, and the answers are bounded together as each arrives (below)."""
    deadline = time.monotonic() + refresh_timeout_seconds
    results: dict[str, list[Sample]] = {}
    refused: dict[str, str] = {}
    warnings: list[str] = []
    asked = queries(idle_window, gpu_resources)
    budget, held = client.max_response_bytes, 0
    at: float | None = None  # the evaluation time every later query is asked at
    clock = time.time()
    for i, (name, expr) in enumerate(asked.items()):
        before = client.stats.skipped_series
        try:
            results[name] = client.instant(
                expr, at, warnings=warnings, scalar=False, deadline=deadline
            )
        except (PromQueryError, NotAVectorError) as err:
            refused[name] = str(err)
            continue
        except PromDeadlineError:
            left = list(asked)[i:]
            if not results:
                raise PromAPIError(
                    f"{client.safe_url}: Prometheus answered too slowly: no answer within "
                    f"the {refresh_timeout_seconds:g}s refresh deadline (--refresh-timeout) "
                    f"to query {name}, {len(left)} of {len(asked)} queries left out"
                ) from None
            if late is None:
                (line,) = late_errors(left, len(asked), refresh_timeout_seconds)
                raise PromAPIError(f"{client.safe_url}: {line}") from None
            late.extend(left)
            break
        if skipped is not None and client.stats.skipped_series > before:
            skipped[name] = client.stats.skipped_series - before
        if at is None:
            at = evaluation_time({name: results[name]}, clock)
        held += answer_bytes(results[name])
        if held > budget:
            raise PromAPIError(
                f"{client.safe_url}: the answers of one refresh exceed {budget} bytes "
                f"together (about {held} after {len(results) + len(refused)} of "
                f"{len(asked)} queries); top bounds them all by "
                "--prometheus.max-response-bytes: raise it for a cluster this large"
            )
    if refused and not results:  # nothing answered: an error, as for an unreachable server
        raise PromAPIError(next(iter(refused.values())))
    return results, refused, tuple(dict.fromkeys(warnings))[:MAX_WARNINGS]


# a sample's JSON besides its labels: {"metric":{},"value":[1700000000.123,"0.5"]},
_SAMPLE_BYTES = 48


def answer_bytes(samples: Sequence[Sample]) -> int:
    """About the bytes of the answer ``samples`` came in, as Prometheus writes it: each
    label's name and value with their JSON quotes, and each sample's frame, stamp and
    value (within 6 % of the JSON, measured). Pure; counted on what was kept, which is
    what a refresh holds: the 150,000 samples of 8,000 GPUs in ~0.2 s (2 cores)."""
    total = _SAMPLE_BYTES * len(samples)
    for s in samples:
        labels = s.labels
        total += sum(map(len, labels)) + sum(map(len, labels.values())) + 6 * len(labels)
    return total


def late_errors(late: Sequence[str], n_asked: int, timeout_seconds: float) -> tuple[str, ...]:
    """One line for the queries a refresh's deadline left out (``fetch``'s ``late``):
    how many, the deadline, which. Pure."""
    if not late:
        return ()
    return (
        f"Prometheus answered too slowly: {len(late)} of {n_asked} queries left out, not "
        f"answered within the {timeout_seconds:g}s refresh deadline (--refresh-timeout), "
        f"their rows missing ({', '.join(late)})",
    )


def refused_errors(refused: Mapping[str, str]) -> tuple[str, ...]:
    """One line for the queries Prometheus refused (``fetch``): how many, which, and
    the first reason (the others are most often the same)."""
    if not refused:
        return ()
    names = ", ".join(sorted(refused))
    first = refused[min(refused)]
    many = len(refused) > 1
    said = "queries refused, their" if many else "query refused, its"
    return (f"{len(refused)} {said} rows missing ({names}): {first}",)


def skipped_errors(skipped: Mapping[str, int]) -> tuple[str, ...]:
    """One line for the series the answers lost to a label or sample the parser refuses
    (``fetch``'s ``skipped``): how many, by query. Pure.

    Why in each view: the client says it on stderr once per process (again only when it
    changes), so ``--json`` said ``errors: []`` with a GPU missing, and a refreshing
    view (stderr hidden behind it) never said it."""
    total = sum(skipped.values())
    if not total:
        return ()
    by_query = ", ".join(f"{name} {n}" for name, n in sorted(skipped.items()))
    return (
        f"{total} series left out of the answers ({by_query}): a label or sample top "
        "cannot read (a label too long or not UTF-8, a malformed sample)",
    )


def refresh(
    client: PromClient,
    idle_window: str = "5m",
    idle_threshold: float = 0.05,
    namespaces: Sequence[str] = (),
    gpu_resources: Sequence[str] = (),
    refresh_timeout_seconds: float = DEFAULT_REFRESH_TIMEOUT_SECONDS,
) -> View:
    """One refresh: fetch, then build the view at the server's time of the answers
    (``evaluation_time``; the workstation's when no answer has a sample, or none a stamp
    a clock can read: ``off_clock`` says so in an error line), so a clock off from
    Prometheus' does not shift elapsed times and countdowns. ``PromAPIError`` when
    Prometheus cannot be asked (a refreshing display keeps its last view,
    ``RefreshingView``).
    ``idle_window`` is a Prometheus duration (``ValueError`` otherwise); ``namespaces``
    narrows the runs, idle holders and pending pods shown (``only_namespaces``);
    ``gpu_resources`` are the site's own GPU resources (``--gpu-resource``).
    ``refresh_timeout_seconds``: the refresh's deadline (``fetch``); past it, with some
    answers read, ``RefreshCutShort`` carries the view of them."""
    idle_seconds = parse_duration(idle_window)  # before any query: the caller's error
    skipped: dict[str, int] = {}
    late: list[str] = []
    results, refused, warnings = fetch(
        client, idle_window, gpu_resources, skipped, late, refresh_timeout_seconds
    )
    answered_at = time.time()
    served_at = evaluation_time(results, answered_at)
    now = answered_at if served_at is None else served_at  # the server's clock if it says
    view = build_view(results, now, client.safe_url, idle_threshold, idle_seconds, refused, late)
    # every query was answered, refused or left out (any other failure raised)
    asked = len(results) + len(refused) + len(late)
    cut = late_errors(late, asked, refresh_timeout_seconds)
    view = dataclasses.replace(
        view,
        errors=cut
        + view.errors
        + refused_errors(refused)
        + skipped_errors(skipped)
        + off_clock(results, answered_at),
        warnings=warnings,
        clock_offset_seconds=now - answered_at,
    )
    view = only_namespaces(view, namespaces)
    if cut:
        raise RefreshCutShort(f"{client.safe_url}: {cut[0]}", view)
    return view


def asking_line(url: str, refresh_timeout_seconds: float) -> str:
    """What a refreshing view shows before its first refresh is in. Pure."""
    return (
        f"gpu-eta top  {url}: asking Prometheus (at most {refresh_timeout_seconds:g}s, "
        "--refresh-timeout)…"
    )


def failed_view(url: str, error: str, now: float, namespaces: Sequence[str] = ()) -> View:
    """A view of nothing but ``error`` (a refresh that got no answer, and no earlier
    view to show); the header keeps saying the ``-n`` filter."""
    return only_namespaces(View(timestamp=now, prometheus_url=url, errors=(error,)), namespaces)


def stale_view(last_good: View, error: str, now: float) -> View:
    """``last_good`` still shown after a refresh failed with ``error``: its rows, its
    header time (when its data is from, the server's clock), and two error lines: the
    failure, and how old the rows are (``now`` is the workstation's clock: its offset
    from the server's is the view's). Pure.

    Why: Prometheus away for a moment (a restart, a timeout) blanked the refreshing
    view until it was back; what it showed a refresh ago is still the best there is,
    so long as it says it is not fresh."""
    age = fmt_duration(now + last_good.clock_offset_seconds - last_good.timestamp)
    marker = f"showing the last good view, {age} old (its time in the header); retrying"
    return dataclasses.replace(last_good, errors=(error, marker, *last_good.errors))


class RefreshingView:
    """The views of a display refreshed in place: top's watch mode and the demo's live
    view, so both show a failed refresh the same way. ``view()`` refreshes: the fresh
    view when Prometheus answers; else the last good one marked stale
    (``stale_view``), or, before any, the failure alone (``failed_view``).

    Why one object: the demo's live view made its own, and blanked its view on every
    failed refresh (a Prometheus restart, a timeout) while top kept the last one."""

    def __init__(
        self,
        client: PromClient,
        idle_window: str = "5m",
        idle_threshold: float = 0.05,
        namespaces: Sequence[str] = (),
        gpu_resources: Sequence[str] = (),
        refresh_timeout_seconds: float = DEFAULT_REFRESH_TIMEOUT_SECONDS,
    ) -> None:
        self.client = client
        self.idle_window = idle_window
        self.idle_threshold = idle_threshold
        self.namespaces = namespaces
        self.gpu_resources = gpu_resources
        self.refresh_timeout_seconds = refresh_timeout_seconds
        self.last_good: View | None = None

    def view(self) -> View:
        """Refresh once: the view to show now (never raises ``PromAPIError``). A
        refresh cut short by its deadline is shown as read (``RefreshCutShort``), and
        is not kept as the last good view: a later failure shows the last whole one."""
        try:
            fresh = refresh(
                self.client,
                self.idle_window,
                self.idle_threshold,
                self.namespaces,
                self.gpu_resources,
                self.refresh_timeout_seconds,
            )
        except RefreshCutShort as err:
            return err.view
        except PromAPIError as err:
            if self.last_good is None:
                return failed_view(self.client.safe_url, str(err), time.time(), self.namespaces)
            return stale_view(self.last_good, str(err), time.time())
        self.last_good = fresh
        return fresh


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``gpu-eta top: …``, exit 2 (the usage
    text is ``--help``'s job), like the forecaster's commands."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(ExitCode.USAGE)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see docs/top.md)."""
    p = _Parser(
        prog="gpu-eta top",
        description=(
            "Training runs, their progress and predicted completion, idle GPU holders and "
            "when each GPU frees up, read from Prometheus only."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="print one JSON snapshot and exit")
    p.add_argument(
        "--interval",
        type=float,
        default=5.0,
        help=f"seconds between refreshes (at least {MIN_INTERVAL_SECONDS:g})",
    )
    p.add_argument(
        "--refresh-timeout",
        dest="refresh_timeout_seconds",
        type=float,
        default=DEFAULT_REFRESH_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="the most one refresh waits for Prometheus, its queries and their retries "
        "together (each query is given what is left, at most --prometheus.timeout); the "
        "queries not answered by then are left out and the view says so",
    )
    p.add_argument(
        "--idle-threshold",
        type=float,
        default=0.05,
        help="a holder whose average GPU utilisation is below this ratio is idle",
    )
    p.add_argument(
        "--idle-window",
        type=_duration_flag,
        default="5m",
        help="Prometheus duration: the average's range, and how long a pod must have held "
        "its GPU before it can be called idle",
    )
    p.add_argument(
        "-n",
        "--namespace",
        dest="namespaces",
        action="append",
        default=argparse.SUPPRESS,  # no "(default: None)" in --help
        metavar="NAMESPACE",
        help="only the runs, idle holders and pending pods of this namespace (repeatable; "
        "every GPU is still shown)",
    )
    p.add_argument(
        "--gpu-resource",
        dest="gpu_resources",
        action="append",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="a resource whose pending pods are GPU pods, beside nvidia.com/gpu, "
        "nvidia.com/gpu.shared and nvidia.com/mig-* (the forecaster's --pending.gpu-resource; "
        f"repeatable, at most {MAX_GPU_RESOURCES})",
    )
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        # absent unless given: given with --once, --plain or --json it is a usage error
        default=argparse.SUPPRESS,
        help="the refreshing view on a terminal: full (every table, boxed), compact (the "
        "runs and GPUs, unboxed, the pending pods in a line) or auto (full when all its rows "
        "fit the terminal's height, else compact); not allowed with --once, --plain and "
        "--json, which print every row (default: auto)",
    )
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal (no rich)")
    p.add_argument("--utc", action="store_true", help="clock times in UTC instead of local time")
    p.add_argument("--debug", action="store_true", help="tracebacks on errors")
    add_prometheus_flags(p, default_url="http://127.0.0.1:9090")
    # the flag's name before top shared the forecaster's flags; kept so scripts still work
    p.add_argument("--timeout", dest="timeout_seconds", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    printing = [flag for flag in ("--once", "--plain", "--json") if getattr(args, flag[2:])]
    if hasattr(args, "layout") and printing:
        p.error(
            f"argument --layout: not allowed with {', '.join(printing)} (it lays out the "
            "view refreshed in place on a terminal; every row is printed instead)"
        )
    args.layout = getattr(args, "layout", "auto")
    if not MIN_INTERVAL_SECONDS <= args.interval <= MAX_INTERVAL_SECONDS:  # "nan", "inf", 1e10
        p.error(
            f"--interval must be at least {MIN_INTERVAL_SECONDS:g} and at most "
            f"{MAX_INTERVAL_SECONDS:g} seconds, got {args.interval:g}"
        )
    if not 0 < args.refresh_timeout_seconds <= MAX_INTERVAL_SECONDS:
        p.error(
            f"--refresh-timeout must be > 0 and at most {MAX_INTERVAL_SECONDS:g} seconds, "
            f"got {args.refresh_timeout_seconds:g}"
        )
    args.namespaces = getattr(args, "namespaces", [])
    for ns in args.namespaces:
        if not DNS_LABEL.match(ns):
            p.error(f"--namespace {ns!r} is no Kubernetes namespace name (a DNS-1123 label)")
    if not 0 <= args.idle_threshold <= 1:
        p.error("--idle-threshold must be a ratio in 0..1")
    try:
        args.gpu_resources = parse_gpu_resources(getattr(args, "gpu_resources", []))
    except ValueError as err:
        p.error(f"--gpu-resource: {err}")
    return args  # the --prometheus.* values: prometheus_connection (make_client)


def _duration_flag(text: str) -> str:
    """argparse type: a valid Prometheus duration, kept as text for the query."""
    try:
        parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text.strip()


def make_client(args: argparse.Namespace) -> PromClient:
    """The Prometheus client of the command line (``ConfigError``/``PromAPIError`` on
    bad values: a usage error); says once when TLS is not verified, as ``serve`` does."""
    client = PromClient(args.prometheus_url, **prometheus_connection(args))
    if args.insecure_skip_verify:
        print(
            f"gpu-eta top: TLS certificates of {client.safe_url} are not verified", file=sys.stderr
        )
    return client


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m gpu_eta.forecaster top`` (exit 0 ok, 1 Prometheus error, 2 usage)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        client = make_client(args)
    except (ConfigError, PromAPIError) as err:
        print(f"gpu-eta top: {err}", file=sys.stderr)
        return ExitCode.USAGE
    tz = timezone.utc if args.utc else None  # None: each time in its own local offset
    lines = _StderrLines()
    logging.getLogger("gpu_eta").addHandler(lines)
    strict = _replacing_unencodable(sys.stdout)
    try:
        use_rich = not args.json and sys.stdout.isatty() and not args.plain and _has_rich()
        if args.json or args.once:
            code = ExitCode.OK
            try:
                view = refresh(
                    client,
                    args.idle_window,
                    args.idle_threshold,
                    namespaces=args.namespaces,
                    gpu_resources=args.gpu_resources,
                    refresh_timeout_seconds=args.refresh_timeout_seconds,
                )
            except RefreshCutShort as err:  # what was read is shown; a failed read
                print(f"gpu-eta top: {err}", file=sys.stderr)
                view, code = err.view, ExitCode.RUNTIME
            _print_snapshot(view, args.json, use_rich, tz)
            return code
        return _loop(client, args, tz, use_rich)
    except BrokenPipeError:
        return _reader_gone()
    except PromAPIError as err:
        if args.debug:
            raise
        print(f"gpu-eta top: {err}", file=sys.stderr)
        return ExitCode.RUNTIME
    except (KeyboardInterrupt, Terminated):
        return ExitCode.OK
    finally:
        logging.getLogger("gpu_eta").removeHandler(lines)
        if strict:
            with contextlib.suppress(ValueError, OSError):  # closed: nothing to restore
                sys.stdout.reconfigure(errors="strict")  # type: ignore[union-attr]
        client.close()


def _print_snapshot(view: View, as_json: bool, use_rich: bool, tz: tzinfo | None) -> None:
    """``--json``'s or ``--once``'s one snapshot of ``view`` on stdout."""
    if as_json:
        # strict: a NaN or infinity left would be a traceback here, not "Infinity" a
        # JSON parser refuses (the view has none: _finite_sum, _value)
        print(json.dumps(render_json(view), indent=2, allow_nan=False))
    elif use_rich:
        from rich.console import Console

        Console().print(render_rich(view, tz))
    else:
        sys.stdout.write(render_plain(view, tz))
    sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit


def _replacing_unencodable(stream: Any) -> bool:
    """Make ``stream`` (stdout) write ``?`` for what its encoding cannot hold, instead of
    raising; True when it did (it raised before). Why: on a stdout that is not UTF-8
    (``PYTHONIOENCODING=latin-1``, a C locale's ASCII) the headers' ``–``, ``×`` and
    ``…`` and any label's characters ended top in a UnicodeEncodeError traceback;
    ``--json`` is ASCII already."""
    if getattr(stream, "errors", None) != "strict" or not hasattr(stream, "reconfigure"):
        return False
    try:
        stream.reconfigure(errors="replace")
    except (ValueError, OSError):  # closed, or a stream that cannot change now
        return False
    return True


class _StderrLines(logging.Handler):
    """The client's warnings (series it left out of an answer) as ``gpu-eta top: …``
    lines on the current stderr, like top's own errors. Why: without a handler they
    reached Python's last-resort handler, unprefixed; with rich's live view they are
    shown above it (it redirects stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"gpu-eta top: {record.getMessage()}", file=sys.stderr)
        except Exception:  # a log line must never end the view
            self.handleError(record)


def _reader_gone() -> int:
    """stdout's reader closed the pipe (``top | head``): that is how pipes end, not an
    error, so exit 0 quietly. stdout is pointed at /dev/null first, or Python's own
    flush at exit would print a second BrokenPipeError."""
    to_devnull(sys.stdout)
    return ExitCode.OK


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _loop(client: PromClient, args: argparse.Namespace, tz: tzinfo | None, use_rich: bool) -> int:
    """Refresh until Ctrl-C, SIGTERM or SIGHUP: in place with rich on a terminal
    (``LiveTop``, which holds the signals while it draws; in ``--layout``), appended
    otherwise. A
    refresh Prometheus does not answer shows the last good view (``RefreshingView``)."""
    views = RefreshingView(
        client,
        args.idle_window,
        args.idle_threshold,
        args.namespaces,
        args.gpu_resources,
        args.refresh_timeout_seconds,
    )
    with Signals().caught() as signals:
        if use_rich:
            from rich.text import Text

            with LiveTop(views, signals, tz, layout=args.layout) as live:
                # the first refresh may take all of --refresh-timeout: say what it waits for
                live.start(Text(asking_line(client.safe_url, args.refresh_timeout_seconds)))
                while True:
                    live.refresh()
                    signals.wait(args.interval)
        while True:
            sys.stdout.write(render_plain(views.view(), tz) + "\n")
            sys.stdout.flush()
            signals.wait(args.interval)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
