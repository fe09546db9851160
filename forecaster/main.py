"""``python -m gpu_eta.forecaster {serve,once,evaluate,top}``: flags → Config → service.

Exit codes are mapped in one place (``ExitCode``): 0 success, 1 runtime failure
(Prometheus away in ``once``, a push refused, an unusable history file), 2 usage
(bad flags or values). Errors are one line on stderr starting ``gpu-eta forecaster:``
(``gpu-eta top:`` for top), like the exporter's ``gpu-eta exporter:``; ``--debug``
adds the traceback. ``evaluate`` and ``top`` belong to ``gpu_eta.forecaster.evaluate`` and
``gpu_eta.top.main``; they are imported only when asked for, so a missing module is
a clear one-line error instead of breaking ``serve``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import math
import sys
import time
import traceback
from collections.abc import Mapping, Sequence

# Standard library and gpu-eta modules that need nothing else: the rest (requests,
# numpy, ...) comes with the extras, imported once the command is known to have them
# (``missing_extra``).
from gpu_eta.common.gpu_resources import MAX_GPU_RESOURCES, parse_gpu_resources
from gpu_eta.common.stop_signals import StopSignals
from gpu_eta.common.text import first_line
from gpu_eta.forecaster.config import (
    Config,
    ConfigError,
    history_retention,
    parse_listen_address,
    parse_retention,
)
from gpu_eta.forecaster.errors import ExitCode, ForecasterError
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.prom_clock import OFFSET_BOUND_SECONDS
from gpu_eta.forecaster.promflags import add_prometheus_flags, prometheus_connection
from gpu_eta.forecaster.push import NO_AUTH, add_push_auth_flags, push_auth, push_metrics
from gpu_eta.forecaster.queue_replay import parse_toleration

log = logging.getLogger("forecaster")

PREFIX = "gpu-eta forecaster: "  # every error line of serve/once (docs/forecaster.md)

DELEGATED = {
    "evaluate": (
        "gpu_eta.forecaster.evaluate",
        "backtest recorded runs from a CSV against baselines",
    ),
    "top": ("gpu_eta.top.main", "terminal table of running jobs, ETAs and GPUs"),
}

# What each command imports, as (module → distribution) of the pyproject extra that
# brings it: ``pip install gpu-eta`` alone is the progress client for training images.
FORECASTER_EXTRA = {
    "prometheus_client": "prometheus-client",
    "requests": "requests",
    "yaml": "pyyaml",
    "numpy": "numpy",
    "statsmodels": "statsmodels",
    "sklearn": "scikit-learn",
}
TOP_EXTRA = {"requests": "requests"}  # rich is optional: plain text without it
EXTRAS = {
    "serve": ("forecaster", FORECASTER_EXTRA),
    "once": ("forecaster", FORECASTER_EXTRA),
    "evaluate": ("forecaster", FORECASTER_EXTRA),
    "top": ("top", TOP_EXTRA),
}


def missing_extra(modules: Mapping[str, str]) -> list[str]:
    """The distributions of ``modules`` that are not installed (found without importing)."""
    return sorted({dist for mod, dist in modules.items() if importlib.util.find_spec(mod) is None})


def extra_message(extra: str, missing: Sequence[str]) -> str:
    """The line naming the extra to install (after the command's prefix)."""
    return (
        f"needs the {extra} extra, not installed here "
        f"(missing: {', '.join(missing)}): pip install 'gpu-eta[{extra}]'"
    )


class UsageError(Exception):
    """Bad command line (exit 2)."""


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() maps every error once
    (``evaluate`` parses its own flags with it too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sub = self.prog.removeprefix(ROOT_PROG).strip()  # "serve", "once" or ""
        raise UsageError(f"{sub}: {message}" if sub else message)


ROOT_PROG = "python -m gpu_eta.forecaster"


DESCRIPTION = """\
gpu-eta forecaster: reads the exporter's training-progress series from Prometheus,
learns how long training runs take from finished ones (kept in a SQLite history
file), and publishes when each running job and each GPU will be done, as
Prometheus metrics (see docs/metrics.md and docs/forecaster.md).

subcommands:
  serve      long-running: a cycle every --cycle.interval, /metrics on --web.listen-address
  once       one cycle, then push the metrics to --pushgateway.url (a CronJob); exit 0/1
  evaluate   backtest recorded runs (CSV) against baselines  (python -m gpu_eta.forecaster evaluate --help)
  top        terminal view of jobs and ETAs                   (python -m gpu_eta.forecaster top --help)

exit codes: 0 ok, 1 runtime failure, 2 usage error. --debug prints tracebacks."""


def build_parser() -> argparse.ArgumentParser:
    """The full parser (``evaluate``/``top`` only named: they parse their own flags)."""
    parser = Parser(
        prog=ROOT_PROG,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="{serve,once,evaluate,top}")
    common = _common_flags()
    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="run cycles on a timer and serve /metrics",
        description="Run a forecast cycle every --cycle.interval seconds and serve the "
        "results on /metrics. When Prometheus is away the last forecasts stay served "
        "with gpu_eta_forecaster_stale 1 until a cycle succeeds again.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    serve.add_argument(
        "--web.listen-address",
        dest="listen_address",
        default=":9844",
        help="[host]:port for /metrics and /healthz",
    )
    serve.add_argument(
        "--cycle.interval",
        dest="interval_seconds",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds between the starts of two cycles",
    )
    once = sub.add_parser(
        "once",
        parents=[common],
        help="run one cycle and push to a Pushgateway",
        description="Run one forecast cycle and push every forecaster metric to a "
        "Pushgateway (grouping key job=--pushgateway.job). Exit 0 when the cycle and "
        "the push succeeded, 1 otherwise. Without --pushgateway.url the metrics are "
        "printed on stdout in the text exposition format.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    once.add_argument(
        "--pushgateway.url",
        dest="pushgateway_url",
        default=None,
        help="Pushgateway base URL, e.g. http://pushgateway:9091",
    )
    once.add_argument(
        "--pushgateway.job",
        dest="pushgateway_job",
        default="gpu-eta-forecaster",
        help="job label of the pushed group (the name the rules and manifests use)",
    )
    add_push_auth_flags(once)
    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def _common_flags() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    add_prometheus_flags(p)
    h = p.add_argument_group("history")
    h.add_argument(
        "--history.db",
        "--history.path",
        dest="history_db",
        default="gpu-eta-history.sqlite",
        metavar="PATH",
        help="SQLite file of runs (created if missing; on a PVC in the cluster)",
    )
    h.add_argument(
        "--history.seed-csv",
        dest="seed_csv",
        default=None,
        metavar="FILE",
        help="runs CSV (docs/evaluate.md) whose finished runs are imported at start if not stored yet",
    )
    h.add_argument(
        "--history.retention",
        dest="history_retention",
        default="30d",
        metavar="DURATION",
        help="finished runs that finished longer ago are deleted (a Prometheus duration; 0: "
        "keep every run), never the most recent --model.fit-runs; any age beyond those while "
        "the volume is nearly full",
    )
    h.add_argument(
        "--history.lookback",
        dest="lookback_seconds",
        type=float,
        default=6 * 3600.0,
        metavar="SECONDS",
        help="how far back the first cycle reads epoch ends; later cycles read since the previous one",
    )
    h.add_argument(
        "--history.vanish-grace",
        dest="vanish_grace_seconds",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="a run whose series vanished is finished (completed or not) after this long away",
    )
    h.add_argument(
        "--history.partial-hold",
        dest="partial_hold_seconds",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="reads answered with warnings (a store or remote-read source down) do not count "
        "runs' absences for up to this long (0: they do at once)",
    )
    c = p.add_argument_group("model and stall detection")
    c.add_argument(
        "--model.refit-interval",
        dest="refit_seconds",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="refit at most this often, and only when the history changed",
    )
    c.add_argument(
        "--model.fit-runs",
        dest="fit_runs",
        type=int,
        default=100_000,
        metavar="N",
        help="fit on the most recent N finished runs (0: all), and learn at most N more "
        "between two fits: bounds memory and fit time",
    )
    c.add_argument(
        "--model.fit-points",
        dest="fit_points",
        type=int,
        default=2_000_000,
        metavar="N",
        help="of those, the most recent holding at most N progress points (0: any "
        "number): bounds memory when runs report hundreds of epochs",
    )
    c.add_argument(
        "--stall.after",
        dest="stall_after_seconds",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="no epoch end for max(this, 3 x median epoch) ...",
    )
    c.add_argument(
        "--stall.idle-ratio",
        dest="idle_ratio",
        type=float,
        default=0.05,
        help="... and GPU utilisation below this over --stall.idle-window: stalled",
    )
    c.add_argument(
        "--stall.idle-window",
        dest="idle_window_seconds",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="window of the GPU idle check",
    )
    c.add_argument(
        "--query.step",
        dest="min_step_seconds",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="step of the epoch-end range queries (about the scrape interval)",
    )
    c.add_argument(
        "--query.prometheus-clock",
        dest="follow_prometheus_clock",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="when this host's clock is more than 30 s from Prometheus' (the Date of its "
        "answers), read and forecast at Prometheus' time (docs/forecaster.md, Clocks); "
        "--no-query.prometheus-clock: always this host's clock (a proxy in front of "
        "Prometheus that dates answers from a wrong clock)",
    )
    q = p.add_argument_group("pending GPU pods (docs/pending.md)")
    q.add_argument(
        "--pending",
        dest="pending",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="predict when pods waiting for GPUs start (reads kube-state-metrics)",
    )
    q.add_argument(
        "--pending.priority-class",
        dest="priority_classes",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PriorityClass's value (kube-state-metrics exports only names; unknown: 0); repeatable",
    )
    q.add_argument(
        "--pending.request-toleration",
        dest="request_tolerations",
        action="append",
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="what a request made now tolerates (Exists without a value, Equal with one, "
        "KEY<N / KEY>N for Lt / Gt, * for KEY: every key; no effect: every effect), instead "
        "of its GPU resource's own taint as the ExtendedResourceToleration admission plugin "
        "adds; repeatable",
    )
    q.add_argument(
        "--pending.gpu-resource",
        dest="gpu_resources",
        action="append",
        default=[],
        metavar="NAME",
        help="a resource whose pods and nodes are GPUs, beside nvidia.com/gpu, "
        "nvidia.com/gpu.shared and nvidia.com/mig-*: the name a time-slicing rename: gives "
        f"(nvidia.com/a100-shared); repeatable, at most {MAX_GPU_RESOURCES}",
    )
    q.add_argument(
        "--pending.samples",
        dest="pending_samples",
        type=int,
        default=100,
        help="replays of the queue per cycle (more: smoother quantiles, slower)",
    )
    q.add_argument(
        "--pending.placement",
        dest="pending_placement",
        choices=["spread", "pack"],
        default="spread",
        help="where a pod lands among nodes that fit: at random (default scheduler) or best fit",
    )
    q.add_argument(
        "--pending.horizon",
        dest="pending_horizon_seconds",
        type=float,
        default=7 * 86400.0,
        metavar="SECONDS",
        help="no prediction further out than this",
    )
    q.add_argument(
        "--pending.arrivals-window",
        dest="pending_arrivals_seconds",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="new pods keep arriving at the rate seen over this window",
    )
    q.add_argument(
        "--pending.max-pods",
        dest="pending_max_pods",
        type=int,
        default=500,
        help="predict the first this many pending pods in queue order, pods found "
        "blocked_elsewhere after the others",
    )
    q.add_argument(
        "--pending.fail-requests-greater-than-one",
        dest="pending_one_replica_per_pod",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the NVIDIA device plugin's time-slicing sets failRequestsGreaterThanOne: a pod "
        "whose container asks more than one GPU gets no time-sliced replica (checked per "
        "container; off: the plugin's default)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--log.level",
        dest="log_level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level",
    )
    o.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    return p


def pending_settings(args: argparse.Namespace) -> PendingSettings:
    """The ``--pending.*`` flags; a bad value is a ``ConfigError`` naming the flag."""
    priorities: dict[str, int] = {}
    for item in args.priority_classes:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            priorities[name] = int(value)
        except ValueError:
            raise ConfigError(
                f"--pending.priority-class wants NAME=INTEGER, got {item!r}"
            ) from None
    tolerations = []
    for item in args.request_tolerations:
        try:
            tolerations.append(parse_toleration(item))
        except ValueError as err:
            raise ConfigError(
                f"--pending.request-toleration wants KEY[=VALUE][:EFFECT] (or KEY<N, KEY>N, *), "
                f"got {item!r}: {err}"
            ) from None
    try:
        gpu_resources = parse_gpu_resources(args.gpu_resources)
    except ValueError as err:
        raise ConfigError(f"--pending.gpu-resource: {err}") from None
    try:
        return PendingSettings(
            enabled=args.pending,
            n_samples=args.pending_samples,
            horizon_seconds=args.pending_horizon_seconds,
            placement=args.pending_placement,
            arrivals_seconds=args.pending_arrivals_seconds,
            max_pods=args.pending_max_pods,
            priorities=priorities,
            one_replica_per_pod=args.pending_one_replica_per_pod,
            request_tolerations=tuple(tolerations) if tolerations else None,
            gpu_resources=gpu_resources,
        )
    except ValueError as err:
        raise ConfigError(f"--pending.*: {err}") from None


def config_from_args(args: argparse.Namespace) -> Config:
    """Flags → Config (see ``prometheus_connection`` for the secrets)."""
    from gpu_eta.forecaster.config import CycleSettings

    settings = CycleSettings(
        lookback_seconds=args.lookback_seconds,
        min_step_seconds=args.min_step_seconds,
        stall_after_seconds=args.stall_after_seconds,
        idle_ratio=args.idle_ratio,
        idle_window_seconds=args.idle_window_seconds,
        refit_seconds=args.refit_seconds,
        vanish_grace_seconds=args.vanish_grace_seconds,
        partial_hold_seconds=args.partial_hold_seconds,
        fit_runs=args.fit_runs,
        fit_points=args.fit_points,
        pending=pending_settings(args),
        # inf: no offset is ever beyond it, so the cycle keeps this host's clock
        clock_offset_bound_seconds=(
            OFFSET_BOUND_SECONDS if args.follow_prometheus_clock else math.inf
        ),
    )
    if not settings.min_step_seconds >= 0.001:  # sent to the millisecond (promapi.range)
        raise ConfigError("--query.step must be at least 0.001 (seconds)")
    return Config(
        prometheus_url=args.prometheus_url,
        **prometheus_connection(args),
        history_db=args.history_db,
        seed_csv=args.seed_csv,
        history_retention_seconds=parse_retention(args.history_retention),
        listen_address=getattr(args, "listen_address", ":9844"),
        interval_seconds=getattr(args, "interval_seconds", 60.0),
        pushgateway_url=getattr(args, "pushgateway_url", None),
        pushgateway_job=getattr(args, "pushgateway_job", "gpu-eta-forecaster"),
        pushgateway_auth=push_auth(args),
        cycle=settings,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (``sys.exit(main())`` in ``__main__``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        try:
            return _delegate(argv[0], argv[1:])
        except KeyboardInterrupt:
            # Ctrl-C while the command's module is imported (numpy, scikit-learn: the
            # first ~1.5 s) or anywhere its own handling does not reach: one line, as
            # its own Ctrl-C is (``evaluate.main``), not a traceback and death by SIGINT
            prefix = "gpu-eta top: " if argv[0] == "top" else f"{PREFIX}{argv[0]}: "
            print(f"{prefix}interrupted", file=sys.stderr)
            return ExitCode.RUNTIME
    missing = missing_extra(FORECASTER_EXTRA)
    if missing:  # serve/once (and their --help): a client-only install
        print(PREFIX + extra_message("forecaster", missing), file=sys.stderr)
        return ExitCode.USAGE
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help(sys.stderr)
            return ExitCode.USAGE
        config = config_from_args(args)
    except (UsageError, ConfigError) as err:
        print(f"{PREFIX}{err}", file=sys.stderr)
        return ExitCode.USAGE
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "serve":
            return serve(config)
        return once(config)
    except ConfigError as err:
        _report(err, debug)
        return ExitCode.USAGE
    except ForecasterError as err:
        _report(err, debug)
        return ExitCode.RUNTIME
    except KeyboardInterrupt:
        return ExitCode.RUNTIME
    except Exception as err:  # the one place a surprise becomes an exit code
        _report(err, debug, unexpected=True)
        return ExitCode.RUNTIME


def _report(err: BaseException, debug: bool, unexpected: bool = False) -> None:
    if debug:
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    text = first_line(err)
    prefix = f"{PREFIX}{type(err).__name__}: " if unexpected else PREFIX
    print(prefix + text, file=sys.stderr)


def _delegate(name: str, rest: list[str]) -> int:
    """``evaluate``/``top``: their own module, flags and exit codes; a missing extra is
    one line naming it (exit 2) rather than an ImportError."""
    module_name = DELEGATED[name][0]
    extra, modules = EXTRAS[name]
    missing = missing_extra(modules)
    if not missing:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if (err.name or "").startswith("gpu_eta."):
                raise  # our own module missing: a broken install, not a missing extra
            missing = [err.name or str(err)]
    if missing:
        # top's own prefix for top; evaluate is a forecaster command
        prefix = "gpu-eta top: " if name == "top" else f"{PREFIX}{name} "
        print(prefix + extra_message(extra, missing), file=sys.stderr)
        return ExitCode.USAGE
    return int(module.main(rest))


def _open(config: Config):
    """Client, store (seeded) and cycle for serve/once."""
    from gpu_eta.forecaster.cycle import Cycle
    from gpu_eta.forecaster.history import HistoryStore
    from gpu_eta.forecaster.promapi import PromClient

    store = HistoryStore.open(config.history_db, retention=history_retention(config))
    try:
        if config.seed_csv:
            from gpu_eta.forecaster.runs_csv import RunsCsvError, read_runs_file

            # every CSV run is finished (completed or not); a damaged run is skipped and
            # named in one warning, never a reason to refuse the others or to stop
            try:
                seed = read_runs_file(config.seed_csv)
            except RunsCsvError as err:
                raise ForecasterError(f"history seed {config.seed_csv}: {err}") from None
            for note in seed.notes:
                log.warning("history seed %s: %s", config.seed_csv, note)
            if seed.warning():
                log.warning("history seed %s: %s", config.seed_csv, seed.warning())
            runs = seed.runs
            # a run ending after this start is no finished run: left out and named
            added = store.import_finished(runs, now=time.time())
            log.info("history seed %s: %d runs read, %d new", config.seed_csv, len(runs), added)
        # Load what the first fit reads now (cached for it): a damaged file fails at start,
        # not in a cycle. Only the most recent --model.fit-runs (and --model.fit-points):
        # all of a long history would be gigabytes (docs/scrape-tuning.md).
        loaded = len(store.finished(config.cycle.fit_runs or None, config.cycle.fit_points or None))
        log.info(
            "history %s: %d finished runs, the most recent %d loaded for the model",
            config.history_db,
            store.count_finished(),
            loaded,
        )
        client = PromClient(
            url=config.prometheus_url,
            timeout_seconds=config.timeout_seconds,
            retries=config.retries,
            backoff_seconds=config.backoff_seconds,
            bearer_token=config.bearer_token,
            basic_auth=config.basic_auth,
            headers=config.headers,
            ca_file=config.ca_file,
            insecure_skip_verify=config.insecure_skip_verify,
            max_response_bytes=config.max_response_bytes,
        )
    except BaseException:
        store.close()
        raise
    if config.insecure_skip_verify:
        log.warning("TLS certificates of %s are not verified", client.safe_url)
    return client, store, Cycle(client, store, config.cycle)


def serve(config: Config) -> int:
    """Run until SIGTERM/SIGINT; returns 0 on a clean stop."""
    from gpu_eta.forecaster.publish import Exposition, ServiceState
    from gpu_eta.forecaster.server import Service, metrics_server

    host, port = parse_listen_address(config.listen_address)
    client, store, cycle = _open(config)
    state = ServiceState(query_stats=client.stats)
    try:
        service = Service(cycle, state, config.interval_seconds)
        try:
            http = metrics_server(
                Exposition(state),
                host,
                port,
                liveness=service.liveness,
                readiness=service.readiness,
            ).serve()
        except OSError as err:
            raise ForecasterError(
                f"cannot listen on {config.listen_address}: {err.strerror or err}"
            ) from None
        log.info("serving /metrics on %s:%d, Prometheus %s", host, http.port, client.safe_url)
        signals = StopSignals().install()  # a handler taking no lock (common/stop_signals)
        service.start()
        while not signals.stopped():
            pass
        service.stop()
        http.stop()
    finally:
        client.close()
        store.close()
    return ExitCode.OK


def once(config: Config) -> int:
    """One cycle, then push (or print); 1 when either failed."""
    from prometheus_client import exposition

    from gpu_eta.forecaster.once_counters import (
        load_counters,
        load_stalled,
        save_counters,
        save_stalled,
        start_from,
    )
    from gpu_eta.forecaster.publish import ServiceState, make_registry
    from gpu_eta.forecaster.server import Service

    client, store, cycle = _open(config)
    state = ServiceState(query_stats=client.stats)
    try:
        # Counters go on from the totals of the runs before (once_counters): each run
        # is a new process, and the same values pushed every run read as no increase.
        start_from(load_counters(store), state.job_errors, state.query_stats)
        # So are the stall verdicts a failed stall-check query keeps (once_counters).
        cycle.kept_stalled = load_stalled(store)
        service = Service(cycle, state, config.interval_seconds)
        ok = service.run_once()
        *_, errors, queries = state.snapshot()
        save_counters(store, errors, queries)
        save_stalled(store, cycle.kept_stalled)
        if not ok:
            # The Pushgateway still holds the previous run's forecasts: mark them stale
            # and push only the self-monitoring series (POST keeps the others).
            state.stale = True
        if not ok:
            print(
                PREFIX + (state.last_error.splitlines()[0] if state.last_error else "cycle failed"),
                file=sys.stderr,
            )
        if config.pushgateway_url:
            push_metrics(
                config.pushgateway_url,
                config.pushgateway_job,
                state,
                ok,
                config.timeout_seconds,
                config.pushgateway_auth or NO_AUTH,
            )
        else:
            registry = make_registry(state, self_only=not ok)
            sys.stdout.write(exposition.generate_latest(registry).decode())
        log.info("once: cycle %s at %s", "ok" if ok else "failed", time.strftime("%H:%M:%S"))
    finally:
        client.close()
        store.close()
    return ExitCode.OK if ok else ExitCode.RUNTIME
