"""``python -m gpu_eta.demo`` / ``./demo.sh``: flags, start the stack, print where to look, stop.

Exit codes: 0 done (``--seconds`` elapsed, or Ctrl-C/SIGTERM), 1 a part failed to
start or died, 2 bad flags. Errors are one line on stderr (``--debug`` for
tracebacks).
"""

from __future__ import annotations

import argparse
import enum
import importlib.util
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_eta.common.durations import duration_seconds
from gpu_eta.demo import workdirs
from gpu_eta.demo.stack import Stack, StackConfig, StackError
from gpu_eta.launch.prometheus import PrometheusNotInstalled, ui_url
from gpu_eta.simulation.cluster import ALERT_CAUSES, ClusterConfig, ClusterConfigError
from gpu_eta.simulation.driver import DriverStats
from gpu_eta.top.live import LiveTop, Signals, Terminated, gone_quietly

if TYPE_CHECKING:  # imported where used: rich is the top extra
    from rich.console import Console

    from gpu_eta.forecaster.promapi import PromClient

SCRAPE_INTERVAL_RANGE = (1.0, 60.0)
PROG = "python -m gpu_eta.demo"  # the usage line's command, unless GPU_ETA_DEMO_PROG says
MAX_HISTORY_DAYS = 365  # --history-days: see parse_args
# --history-jobs: a day of the default cluster's arrivals (8,640) fits; more grows the
# start-up past minutes of silence (the simulation slows with its pod count: 1,000 jobs
# 0.7 s, 10,000 23-61 s; OpenMetrics ~33 KB a job, 10,000: 328 MB written in 18 s,
# promtool 23 s)
MAX_HISTORY_JOBS = 10_000


class ExitCode(enum.IntEnum):
    """The demo's exit codes, in this one place."""

    OK = 0  # finished (--seconds) or stopped by Ctrl-C / SIGTERM
    ERROR = 1  # a part failed to start or died
    USAGE = 2  # a bad flag or value


def scrape_interval(text: str) -> str:
    """``--scrape-interval``: a Prometheus duration from 1s to 1m, returned as given.

    Checked here so a typo is a usage error (exit 2) and not Prometheus' config error
    after the history was simulated (exit 1); 0s would make Prometheus refuse its
    config, and the demo's exporters and forecaster move every few seconds, so an
    interval past a minute shows nothing moving.
    """
    seconds = duration_seconds(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 2s, 1500ms or 1m")
    low, high = SCRAPE_INTERVAL_RANGE
    if not low <= seconds <= high:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 1s and 1m")
    return text.strip()


def workdir_problem(path: Path) -> str | None:
    """Why ``--workdir`` cannot hold the demo's files, or None when it can.

    Creates the directory (as the demo would) and checks it is writable, so an
    unusable path is one line and exit 2 before anything starts.
    """
    if path.exists() and not path.is_dir():
        return f"--workdir {path}: not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return f"--workdir {path}: cannot create it ({err.strerror or err})"
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        return f"--workdir {path}: not writable ({err.strerror or err})"
    return None


def torch_missing() -> bool:
    """True when PyTorch cannot be imported by the interpreter that runs the trainers."""
    return importlib.util.find_spec("torch") is None


def parse_args(argv: Sequence[str] | None, prog: str = PROG) -> argparse.Namespace:
    """The command line (docs/demo.md, "Options"); ``prog``: the command the usage line
    and errors name, the one the user ran."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "A simulated GPU cluster (real exporters on simulated nodes), a real Prometheus "
            "with backfilled history (about 2.8 hours at the defaults), the real forecaster "
            "and `top`, all on 127.0.0.1. Ctrl-C stops everything."
        ),
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="run N seconds, print a final top snapshot, exit 0",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the whole simulation, >= 0 (default 0)"
    )
    p.add_argument("--nodes", type=int, default=3, help="simulated nodes (default 3)")
    p.add_argument("--gpus-min", type=int, default=4, help="fewest GPUs per node (default 4)")
    p.add_argument("--gpus-max", type=int, default=8, help="most GPUs per node (default 8)")
    p.add_argument(
        "--time-scale",
        type=float,
        default=20.0,
        help="simulated seconds per wall second: 20 turns 4-minute epochs into 12 s (default 20)",
    )
    p.add_argument(
        "--arrival-seconds",
        type=float,
        default=200.0,
        help="mean simulated seconds between job arrivals (default 200)",
    )
    p.add_argument(
        "--warm-start",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help=(
            "wall seconds the cluster already ran before the demo starts: jobs at every "
            "stage, their earlier epochs backfilled (default 600; 0: start empty)"
        ),
    )
    p.add_argument(
        "--history-days",
        type=float,
        default=1.0,
        help="the backfilled history spans at most this many days (default 1; 0: no history)",
    )
    p.add_argument(
        "--history-jobs",
        type=int,
        default=1000,
        help="about this many jobs in the backfilled history, arriving at the live "
        "cluster's rate (default 1000: about 2.8 h at the defaults, so the jobs, not "
        f"--history-days, set its span unless that is shorter; at most {MAX_HISTORY_JOBS:,})",
    )
    p.add_argument(
        "--prometheus-port", type=int, default=9090, help="Prometheus port if free (default 9090)"
    )
    p.add_argument(
        "--forecaster-port", type=int, default=9844, help="forecaster port if free (default 9844)"
    )
    p.add_argument(
        "--alertmanager-port",
        type=int,
        default=9093,
        help="Alertmanager port if free (default 9093)",
    )
    p.add_argument(
        "--tsdb",
        choices=("prometheus", "victoriametrics"),
        default="prometheus",
        help="the server that scrapes and answers queries: Prometheus, or VictoriaMetrics "
        "with vmalert for the rules (default prometheus)",
    )
    p.add_argument(
        "--alert-for",
        type=scrape_interval,
        default="30s",
        metavar="DURATION",
        help="every alert's for: in the demo's copy of the rules, 1s to 1m (default 30s)",
    )
    p.add_argument(
        "--scrape-interval",
        type=scrape_interval,
        default="2s",
        help="Prometheus scrape interval, 1s to 1m (default 2s)",
    )
    p.add_argument(
        "--real-training",
        type=int,
        nargs="?",
        const=1,
        default=0,
        help="add N (default 1, at most 2) real PyTorch CPU training runs reporting like user jobs",
    )
    p.add_argument(
        "--workdir", type=Path, default=None, help="keep files here (default: a temp dir, removed)"
    )
    p.add_argument(
        "--clear-workdir",
        action="store_true",
        help="remove a previous demo's files from --workdir first (else refused); the "
        "directory's other files stay",
    )
    p.add_argument(
        "--refresh", type=float, default=5.0, help="seconds between top refreshes (default 5)"
    )
    p.add_argument("--quiet", action="store_true", help="no live top view, just wait")
    p.add_argument("--debug", action="store_true", help="tracebacks on errors")
    args = p.parse_args(argv)
    # finite, as the comparisons alone do not say: NaN passes "<= 0" (a demo that ended
    # at once; no history at all), infinite history days failed in its simulation
    if args.seconds is not None and not (math.isfinite(args.seconds) and args.seconds > 0):
        p.error("--seconds must be a finite number > 0")
    if args.clear_workdir and args.workdir is None:
        p.error("--clear-workdir needs --workdir (the default temp dir starts empty)")
    if not 0 <= args.real_training <= 2:
        p.error("--real-training takes 1 or 2")
    # at most a year: more starts the simulated history before 1970 (1e6 days) or
    # gives Prometheus a retention it refuses ("duration out of range")
    if (
        not (math.isfinite(args.history_days) and 0 <= args.history_days <= MAX_HISTORY_DAYS)
        or args.history_jobs < 1
    ):
        p.error(
            f"--history-days must be a number from 0 to {MAX_HISTORY_DAYS} and --history-jobs >= 1"
        )
    # see MAX_HISTORY_JOBS: past it the start-up is minutes of simulation and backfill
    if args.history_jobs > MAX_HISTORY_JOBS:
        p.error(
            f"--history-jobs must be at most {MAX_HISTORY_JOBS:,} (a day of the default "
            "cluster's arrivals; more takes minutes to simulate and backfill)"
        )
    # the exporters' simulated backends refuse a negative seed, after the stack started
    if args.seed < 0:
        p.error(f"--seed must be >= 0, got {args.seed}")
    if not (math.isfinite(args.refresh) and args.refresh > 0):
        p.error("--refresh must be a number of seconds > 0")
    # one port preferred for two parts: the second cannot listen once the first does,
    # which the demo found only after everything before it had started
    chosen: dict[int, str] = {}
    for flag, port in (
        ("--prometheus-port", args.prometheus_port),
        ("--forecaster-port", args.forecaster_port),
        ("--alertmanager-port", args.alertmanager_port),
    ):
        if not 0 <= port <= 65535:
            p.error(f"{flag} must be 0 (any free port) to 65535")
        if port and port in chosen:
            p.error(f"{flag} {port} is also {chosen[port]}'s: each part needs its own port")
        chosen.setdefault(port, flag)
    # the cluster's own bounds (time scale, arrival rate, warm-up) are usage errors too,
    # reported before anything is installed or started
    try:
        cluster_config(args)
    except ClusterConfigError as err:
        p.error(str(err))
    return args


def tsdb_lines(tsdb: str, url: str, alertmanager_url: str | None) -> str:
    """The banner's lines for the query server and the alert chain.

    Prometheus' UI pages are asked for the path this server answers (``ui_url``): the
    classic UI's on a build without the React UI, where ``/alerts`` is a 404.
    """
    if tsdb == "victoriametrics":
        lines = f"  VictoriaMetrics: {url}/api/v1/query (vmalert evaluates the rules)\n"
    else:
        lines = (
            f"  Prometheus UI:  {ui_url(url, 'graph')}\n  alerts:         {ui_url(url, 'alerts')}\n"
        )
    if am := alertmanager_url:
        lines += f"  Alertmanager:   {am}/#/alerts  (amtool --alertmanager.url={am} alert query)\n"
    return lines


def top_command(url: str) -> str:
    """The command that runs ``top`` on the demo's Prometheus at ``url`` (the banner's,
    and the live view's pointer to every row and column)."""
    return f"python3 -m gpu_eta.top --prometheus.url {url}"


class _LiveTop:
    """``top``'s view refreshing in place under the demo's banner, laid out to fit a
    newcomer's 80×24 terminal (``top.live.LiveTop`` in ``top``'s compact layout, as
    ``top`` itself: signals held while it draws, a closed terminal ends it quietly),
    on a terminal only, every ``refresh_seconds`` from the demo's wait loop
    (``maybe_refresh``). A placeholder until the first refresh: the stack has just
    started and the forecaster has not run yet. ``console``: rich's, or the tests'."""

    def __init__(
        self,
        url: str,
        refresh_seconds: float,
        enabled: bool,
        signals: Signals,
        console: Console | None = None,
    ):
        self.url = url
        self.refresh_seconds = refresh_seconds
        self.enabled = enabled
        self.signals = signals
        self.console = console
        self._live: LiveTop | None = None
        self._client: PromClient | None = None
        self._next = time.monotonic() + min(refresh_seconds, 10.0)

    def __enter__(self) -> _LiveTop:
        if self.enabled:
            from rich.text import Text

            from gpu_eta.forecaster.promapi import PromClient
            from gpu_eta.top.main import RefreshingView

            self._client = PromClient(self.url, timeout_seconds=10.0)
            self._live = LiveTop(
                RefreshingView(self._client),
                self.signals,
                console=self.console,
                # compact at any size: the full layout is what the footer's command
                # shows, in a terminal of the user's own
                layout="compact",
                footer=f"full view: {top_command(self.url)}",
            )
            try:  # a signal held while it drew is raised as it ends: no __exit__ then
                self._live.start(Text("waiting for the first forecasts…"))
            except BaseException:
                self.close()
                raise
        return self

    def maybe_refresh(self) -> None:
        if self._live is None or time.monotonic() < self._next:
            return
        self._live.refresh()
        self._next = time.monotonic() + self.refresh_seconds

    def close(self) -> None:
        # the display stopped before it is forgotten: a signal in between would leave
        # it drawn, the cursor hidden, with nothing left to stop it (stop is idempotent)
        try:
            if self._live is not None:
                self._live.stop()
                self._live = None
        finally:
            client, self._client = self._client, None
            if client is not None:
                client.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _top(url: str, plain: bool) -> None:
    from gpu_eta.top import main as top_main

    argv = ["--prometheus.url", url, "--once"]
    if plain:
        argv.append("--plain")
    top_main.main(argv)


def driver_summary(d: DriverStats) -> str:
    """The demo's closing line on what the driver did.

    ``reports_skipped`` counts reports the driver got to, or got an answer for, only
    after their pod ended (some were POSTed): its label says they were late, not that
    none went out.
    """
    posts = f"progress POSTs accepted: {d.reports_sent}, failed: {d.reports_failed}"
    if d.reports_skipped:
        posts += f", late for their pod (pod ended first): {d.reports_skipped}"
    return (
        f"gpu-eta demo: epochs completed: {d.epochs}, jobs finished: {d.finished}, "
        f"cancelled: {d.cancelled}; {posts}; log lines written: {d.log_lines}"
    )


def cluster_config(args: argparse.Namespace) -> ClusterConfig:
    """The simulated cluster the flags ask for, with the causes the demo plants so its
    alerts fire (``ALERT_CAUSES``): one place, so docs/demo.md's numbers are checked
    against the cluster the demo runs. Raises ``ClusterConfigError``."""
    return ClusterConfig(
        nodes=args.nodes,
        gpus_min=args.gpus_min,
        gpus_max=args.gpus_max,
        seed=args.seed,
        time_scale=args.time_scale,
        arrival_seconds=args.arrival_seconds,
        warm_start_seconds=args.warm_start,
        **ALERT_CAUSES,
    )


def stack_config(args: argparse.Namespace, cluster: ClusterConfig) -> StackConfig:
    """The stack the flags ask for, on ``cluster`` (``cluster_config``'s): one place, so
    ``bench/demo_startup.py`` times the stack the demo starts."""
    return StackConfig(
        cluster=cluster,
        history_days=args.history_days,
        history_jobs=args.history_jobs,
        prometheus_port=args.prometheus_port,
        forecaster_port=args.forecaster_port,
        alertmanager_port=args.alertmanager_port,
        tsdb=args.tsdb,
        alert_for=args.alert_for,
        scrape_interval=args.scrape_interval,
        real_training=args.real_training,
        workdir=args.workdir,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo (see the module docstring for exit codes). ``GPU_ETA_DEMO_PROG``:
    the command usage lines name (demo.sh passes its own), so ``./demo.sh --help`` does
    not tell the user to run ``python -m gpu_eta.demo``, which skips demo.sh's installs."""
    try:
        args = parse_args(argv, os.environ.get("GPU_ETA_DEMO_PROG") or PROG)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    if args.real_training and torch_missing():
        print(
            "gpu-eta demo: --real-training needs PyTorch, which this Python cannot import "
            f"({sys.executable}); install it (pip install torch) or drop the flag",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.workdir is not None and (problem := workdir_problem(args.workdir)):
        print(f"gpu-eta demo: {problem}", file=sys.stderr)
        return ExitCode.USAGE
    if args.workdir is not None:
        try:
            claim = workdirs.claim_workdir(args.workdir)
        except workdirs.WorkdirBusy as busy:
            print(
                f"gpu-eta demo: --workdir {args.workdir} {busy}: stop it first, or choose"
                " another directory",
                file=sys.stderr,
            )
            return ExitCode.USAGE
        except OSError as err:
            print(f"gpu-eta demo: --workdir {args.workdir}: {err}", file=sys.stderr)
            return ExitCode.ERROR
        try:
            return _claimed(args)
        finally:
            claim.release()
    return _claimed(args)


def _claimed(args: argparse.Namespace) -> int:
    """The demo once its ``--workdir`` (if any) is its own: a previous demo's files
    there refused or cleared, the parts installed, the stack run."""
    foreign = [] if args.workdir is None else workdirs.foreign_files(args.workdir)
    if foreign:
        names = ", ".join(p.name for p in foreign)
        print(
            f"gpu-eta demo: --workdir {args.workdir} holds {names}, which no demo recorded"
            f" making ({workdirs.MANIFEST_FILE}): the demo writes entries of these names"
            " and --clear-workdir removes only its own; choose another directory",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    left = [] if args.workdir is None else workdirs.previous_demo_files(args.workdir)
    if left and not args.clear_workdir:
        names = ", ".join(p.name for p in left)
        print(
            f"gpu-eta demo: --workdir {args.workdir} holds a previous demo's files ({names}),"
            " which this demo would mix with its own (the same seed makes the same pods):"
            " pass --clear-workdir to remove them first, or choose another directory",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    cluster = cluster_config(args)  # parse_args refused a config it cannot make
    if left:
        try:
            workdirs.clear_previous_demo(args.workdir)
        except OSError as err:
            print(f"gpu-eta demo: --clear-workdir: {err}", file=sys.stderr)
            return ExitCode.ERROR
    config = stack_config(args, cluster)
    if not install_parts(args.tsdb):
        return ExitCode.ERROR
    with Signals().caught() as signals:
        return _run(args, config, signals)


def install_parts(tsdb: str) -> bool:
    """Run ``$GPU_ETA_DEMO_BOOTSTRAP --demo`` (demo.sh sets it to scripts/bootstrap.sh),
    with ``--victoriametrics`` for that TSDB, once the flags are checked: whether it
    succeeded (it says why not). Without the variable (``python -m gpu_eta.demo``)
    nothing is installed.

    Why here, not in demo.sh before the demo: installing Debian packages (apt-get
    update, a download) before ``--help`` or before a typo is refused was minutes of
    work for a one-line answer."""
    script = os.environ.get("GPU_ETA_DEMO_BOOTSTRAP")
    if not script:
        return True
    argv = [script, "--demo", *(["--victoriametrics"] if tsdb == "victoriametrics" else [])]
    try:
        done = subprocess.run(argv, check=False)
    except OSError as err:
        print(f"gpu-eta demo: cannot run {script}: {err.strerror}", file=sys.stderr)
        return False
    if done.returncode != 0:
        print(f"gpu-eta demo: {' '.join(argv)} failed (exit {done.returncode})", file=sys.stderr)
        return False
    return True


def _run(args: argparse.Namespace, config: StackConfig, signals: Signals) -> int:
    """Start the stack, print where to look, wait (the live view refreshing), stop.
    SIGTERM and SIGHUP end it as Ctrl-C does (``signals``, checked as it waits)."""
    stack = Stack(config)
    try:
        with stack:
            print(
                f"\ngpu-eta demo running: {len(stack.nodes)} simulated nodes, "
                f"{sum(len(n.spec.gpus) for n in stack.nodes)} GPUs, seed {args.seed}\n"
                + tsdb_lines(
                    stack.config.tsdb,
                    stack.prometheus_url,
                    stack.alertmanager.url if stack.alertmanager else None,
                )
                + f"  forecaster:     {stack.forecaster_url}/metrics\n"
                + "".join(f"  exporter {n.name}: http://{n.target}/metrics\n" for n in stack.nodes)
                + f"  top:            {top_command(stack.prometheus_url)}\n"
                + ("  Ctrl-C stops everything.\n" if args.seconds is None else ""),
                flush=True,
            )
            deadline = None if args.seconds is None else time.monotonic() + args.seconds
            live = sys.stdout.isatty() and not args.quiet and args.seconds is None
            with _LiveTop(stack.prometheus_url, args.refresh, live, signals) as view:
                while deadline is None or time.monotonic() < deadline:
                    signals.check()
                    dead = stack.poll()
                    if dead:
                        view.close()
                        for part in dead:
                            print(f"gpu-eta demo: stopped: {part.message()}", file=sys.stderr)
                        stack.keep_files()
                        stack.stop()
                        _say_kept(stack)
                        return ExitCode.ERROR
                    view.maybe_refresh()
                    left = None if deadline is None else deadline - time.monotonic()
                    signals.wait(0.5 if left is None else max(0.0, min(0.5, left)))
            print("final top snapshot:", flush=True)
            with gone_quietly(signals):
                _top(stack.prometheus_url, plain=not sys.stdout.isatty())
            # top --once ends on a signal as on Ctrl-C (exit 0); the demo's handler
            # remembered it, and the demo stops as on Ctrl-C too
            signals.check()
            if stack.driver is not None:
                print(driver_summary(stack.driver.stats), file=sys.stderr)
        return ExitCode.OK
    except (KeyboardInterrupt, Terminated):
        with gone_quietly(signals):  # the terminal closed (SIGHUP): nowhere to say it
            print("\ngpu-eta demo: stopping…", file=sys.stderr)
        stack.stop()
        return ExitCode.OK
    except (StackError, PrometheusNotInstalled, ClusterConfigError) as err:
        if args.debug:
            raise
        print(f"gpu-eta demo: {err}", file=sys.stderr)
        _say_kept(stack)
        return ExitCode.ERROR


def _say_kept(stack: Stack) -> None:
    """Where the failed demo's temporary directory, which its error named, is kept."""
    if stack.kept is not None:
        print(
            f"gpu-eta demo: its files are kept in {stack.kept} for the logs above "
            "(remove it when done; the next demo leaves it)",
            file=sys.stderr,
        )
