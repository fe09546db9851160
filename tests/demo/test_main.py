"""``python -m gpu_eta.demo`` flag handling (the running stack is tested in tests/integration)."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from gpu_eta.demo import main as cli
from gpu_eta.demo import stack as demo_stack
from gpu_eta.demo import workdirs
from gpu_eta.simulation.driver import DriverStats
from gpu_eta.top.live import Signals
from tests.forecaster.test_promapi import http_server, reply  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [
        ["--seconds", "0"],
        ["--real-training", "3"],
        ["--history-days", "-1"],
        ["--nodes", "0"],
        ["--gpus-min", "9", "--gpus-max", "4"],
        ["--time-scale", "0"],
        ["--warm-start", "-1"],
        ["--warm-start", "nan"],
        ["--no-such-flag"],
        # REVIEW2 item 18: Prometheus' own error (exit 1) or a demo that ran anyway
        ["--scrape-interval", "abc"],
        ["--scrape-interval", "0s"],
        ["--scrape-interval", ""],
        ["--scrape-interval", "2h"],
        ["--scrape-interval", "5s3m"],
        ["--refresh", "0"],
        ["--refresh", "-1"],
        ["--refresh", "nan"],
        ["--prometheus-port", "70000"],
        ["--clear-workdir"],  # without --workdir
    ],
)
def test_bad_flags_exit_2_with_one_line(argv: list[str]) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        assert cli.main(argv) == 2
    assert "Traceback" not in err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["--seconds", "nan"],
        ["--seconds", "inf"],
        ["--history-days", "nan"],
        ["--history-days", "inf"],
        ["--history-days", "1e6"],
        ["--history-days", "366"],
        # a ZeroDivisionError traceback; a warm-up simulating 12 million arrivals with
        # no word; "out of pod IPs" (exit 1) once the stack ran
        ["--arrival-seconds", "inf"],
        ["--arrival-seconds", "nan"],
        ["--arrival-seconds", "0.001"],
        ["--time-scale", "5000"],
        ["--time-scale", "inf"],
        ["--time-scale", "nan"],
        ["--time-scale", "1e-300"],
        ["--time-scale", "1000", "--warm-start", "86400"],
    ],
)
def test_numbers_that_are_not_finite_are_usage_errors(argv: list[str]) -> None:
    """Refused by the flags, before anything starts: ``--seconds nan`` ended the demo at
    once, ``--history-days nan`` ran it without history and ``inf`` with a traceback
    from the history's simulation (parse_args alone: a missed one would start the
    stack)."""
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        cli.parse_args(argv)
    assert exit_.value.code == 2
    assert "Traceback" not in err.getvalue() and argv[0] in err.getvalue()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        # the exporter refused it after everything started: "seed must be >= 0" (exit 1)
        (["--seed", "-1"], "--seed"),
        # one port for two parts: the forecaster could not listen, or Prometheus did not
        # start, after the history was backfilled (exit 1)
        (["--prometheus-port", "9999", "--forecaster-port", "9999"], "--forecaster-port"),
        (["--alertmanager-port", "9095", "--prometheus-port", "9095"], "--alertmanager-port"),
        # hundreds of MB of OpenMetrics and minutes of silence (9000: 247 MB, 76 s)
        (["--history-jobs", str(cli.MAX_HISTORY_JOBS + 1)], "--history-jobs"),
        (["--history-jobs", "10000000", "--history-days", "365"], "--history-jobs"),
    ],
)
def test_flags_the_stack_would_fail_on_are_usage_errors(argv: list[str], named: str) -> None:
    """Values each check passed alone that failed the stack once it had started (exit 1
    after the history was simulated) are refused before anything starts, naming the flag."""
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        cli.parse_args(argv)
    assert exit_.value.code == 2
    last = err.getvalue().splitlines()[-1]
    assert "Traceback" not in err.getvalue() and named in last, last


def test_zero_ports_may_repeat_and_the_cap_itself_is_accepted() -> None:
    """0 is "any free port" for each part; the history cap is allowed itself."""
    args = cli.parse_args(["--prometheus-port", "0", "--forecaster-port", "0"])
    assert (args.prometheus_port, args.forecaster_port) == (0, 0)
    jobs = ["--history-jobs", str(cli.MAX_HISTORY_JOBS)]
    assert cli.parse_args(jobs).history_jobs == cli.MAX_HISTORY_JOBS
    assert cli.parse_args(["--seed", "0"]).seed == 0


def _demo_terminated_in(monkeypatch, tmp_path: Path, module: object, name: str) -> str:
    """The smallest demo (``--seconds 1``) with ``module.name`` replaced by a call that
    sends the demo SIGTERM and waits for it to interrupt; its stderr (exit 0 asserted)."""

    def terminated_meanwhile(*_args: object, **_kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the demo's handler raises in the sleep
        time.sleep(10)
        raise AssertionError(f"SIGTERM did not interrupt {name}")

    monkeypatch.setattr(module, name, terminated_meanwhile)
    argv = ["--nodes", "1", "--warm-start", "0", "--history-days", "0", "--quiet"]
    argv += ["--seconds", "1", "--workdir", str(tmp_path)]
    argv += ["--prometheus-port", "0", "--forecaster-port", "0", "--alertmanager-port", "0"]
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(argv)
    assert code == 0, err.getvalue()
    return err.getvalue()


def test_sigterm_while_the_stack_starts_stops_it_as_ctrl_c_does(monkeypatch, tmp_path) -> None:
    """SIGTERM (``timeout``, a CI job cancelled) while a part starts: the stack wraps a
    part's failure (``except Exception``) into "did not start", exit 1; the signal is
    not that part's failure. It stops the demo as Ctrl-C does: "stopping…", exit 0."""
    err = _demo_terminated_in(monkeypatch, tmp_path, demo_stack, "start_alertmanager")
    assert "stopping" in err and "did not start" not in err


@pytest.mark.integration
def test_sigterm_during_the_final_snapshot_stops_the_demo(monkeypatch, tmp_path) -> None:
    """SIGTERM while ``--seconds``' final ``top`` snapshot queries: top's ``--once``
    ends on a signal as on Ctrl-C (exit 0), so the demo must still see it and stop as
    on Ctrl-C ("stopping…"), not go on as if the snapshot had been printed."""
    from gpu_eta.top import main as top_main

    err = _demo_terminated_in(monkeypatch, tmp_path, top_main, "refresh")
    assert "stopping" in err and "epochs completed" not in err


def test_help_states_the_history_defaults_truthfully() -> None:
    """--help said "days of backfilled history" while --history-jobs (1000 jobs, about
    2.8 h at the defaults) caps it: both defaults and which one binds are stated."""
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    text = " ".join(out.getvalue().split())
    assert "days of backfilled history" not in text
    # each flag's help, after the usage lines that name the flags too
    days = text[text.rindex("--history-days HISTORY_DAYS") :]
    assert "(default 1;" in days[: days.index("--history-jobs HISTORY_JOBS")]
    jobs = text[text.rindex("--history-jobs HISTORY_JOBS") :]
    jobs = jobs[: jobs.index("--prometheus-port")]
    assert "(default 1000:" in jobs and "2.8 h" in jobs


def test_defaults_are_the_readme_demo() -> None:
    args = cli.parse_args([])
    assert (args.nodes, args.gpus_min, args.gpus_max, args.seed) == (3, 4, 8, 0)
    assert args.seconds is None and args.real_training == 0
    assert (args.arrival_seconds, args.warm_start) == (200.0, 600.0)
    assert cli.parse_args(["--real-training"]).real_training == 1


@pytest.mark.parametrize("text", ["1s", "2s", "1500ms", "30s", "1m"])
def test_good_scrape_intervals_pass_through(text: str) -> None:
    lo, hi = cli.SCRAPE_INTERVAL_RANGE
    assert cli.parse_args(["--scrape-interval", text]).scrape_interval == text
    assert cli.parse_args([]).scrape_interval == "2s"
    assert (lo, hi) == (1.0, 60.0)
    with pytest.raises(SystemExit):
        cli.parse_args(["--scrape-interval", "999ms"])


def _one_line_exit_2(argv: list[str]) -> str:
    err = io.StringIO()
    with redirect_stderr(err):
        assert cli.main(argv) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-eta demo: "), lines
    return lines[0]


def test_unusable_workdir_is_one_line_exit_2(tmp_path: Path) -> None:
    """REVIEW2 item 7b: a FileNotFoundError traceback from Stack.start before."""
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert "--workdir /proc/x" in _one_line_exit_2(["--workdir", "/proc/x", "--quiet"])
    assert "not a directory" in _one_line_exit_2(["--workdir", str(a_file), "--quiet"])
    assert "cannot create" in _one_line_exit_2(["--workdir", str(a_file / "sub"), "--quiet"])
    # a usable one is accepted (created, as the demo would)
    assert cli.workdir_problem(tmp_path / "new" / "dir") is None
    assert (tmp_path / "new" / "dir").is_dir()


def test_a_workdir_of_a_previous_demo_is_refused_unless_cleared(
    monkeypatch, tmp_path: Path
) -> None:
    """Reusing --workdir appended to the previous demo's pod logs (the same seed makes
    the same pod names and UIDs) and reused its TSDB and history: refused, one line
    naming the flag that clears it; with that flag the demo's files go, the user's stay."""
    workdirs.record_entries(tmp_path, ["pod-logs", "history.sqlite"])  # as a demo does
    (tmp_path / "pod-logs" / "ml-bob_train-x_uid").mkdir(parents=True)
    (tmp_path / "history.sqlite").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr(cli, "install_parts", lambda tsdb: False)  # start nothing (exit 1)
    line = _one_line_exit_2(["--workdir", str(tmp_path), "--quiet"])
    assert "--clear-workdir" in line and "history.sqlite" in line and str(tmp_path) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        workdirs.MANIFEST_FILE,
        "history.sqlite",
        "notes.txt",
        "pod-logs",
    ]
    with redirect_stderr(io.StringIO()):
        assert cli.main(["--workdir", str(tmp_path), "--clear-workdir", "--quiet"]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_workdir_holding_the_demos_names_it_did_not_make_is_refused(
    monkeypatch, tmp_path: Path
) -> None:
    """`--workdir <a checkout of this repo> --clear-workdir` deleted the repo's tracked
    rules/ (git status: D rules/gpu-eta.rules.yaml), and a user's logs/mine/important.txt
    went with it. Entries of the demo's names that no demo recorded making are refused,
    with or without --clear-workdir, one line naming them, exit 2; nothing removed."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "gpu-eta.rules.yaml").write_text("groups: []\n")
    (tmp_path / "logs" / "mine").mkdir(parents=True)
    (tmp_path / "logs" / "mine" / "important.txt").write_text("mine")
    monkeypatch.setattr(cli, "install_parts", lambda tsdb: False)  # start nothing (exit 1)
    for clear in ([], ["--clear-workdir"]):
        line = _one_line_exit_2(["--workdir", str(tmp_path), *clear, "--quiet"])
        assert "logs, rules" in line and "no demo recorded" in line, line
    assert (tmp_path / "rules" / "gpu-eta.rules.yaml").read_text() == "groups: []\n"
    assert (tmp_path / "logs" / "mine" / "important.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "rules"]


def test_a_workdir_a_running_demo_uses_is_refused(monkeypatch, tmp_path: Path) -> None:
    """A second demo in a running demo's --workdir (with --clear-workdir it removed the
    running one's TSDB, history and logs): one line naming the running demo, exit 2,
    nothing removed."""
    from tests.demo.test_workdirs import hold_workdir

    (tmp_path / "history.sqlite").write_bytes(b"")
    running = hold_workdir(tmp_path)
    monkeypatch.setattr(cli, "install_parts", lambda tsdb: False)
    try:
        line = _one_line_exit_2(["--workdir", str(tmp_path), "--clear-workdir", "--quiet"])
    finally:
        running.kill()
        running.wait()
    assert f"pid {running.pid}" in line and str(tmp_path) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [workdirs.OWNER_FILE, "history.sqlite"]


@pytest.mark.integration
def test_a_part_killed_mid_run_is_named_with_its_log_lines_and_the_dir_kept(
    tmp_path: Path,
) -> None:
    """kill -9 of an exporter: "stopped: gpu-node-1 exited unexpectedly (logs in
    /tmp/gpu-eta-demo-XXXX/logs)", exit 1, and that directory was already removed;
    gpu-node-1 is not the log's name either. The message names the part as its log
    is named, with its exit code and the log's last lines, and the demo's temporary
    directory is kept (said so) for the logs."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    argv = ["--nodes", "1", "--warm-start", "0", "--history-days", "0", "--quiet"]
    argv += ["--seconds", "120", "--prometheus-port", "0", "--forecaster-port", "0"]
    argv += ["--alertmanager-port", "0"]
    demo = subprocess.Popen(
        [sys.executable, "-m", "gpu_eta.demo", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            if "gpu-eta demo running" in line:
                break
        (made,) = tmp_path.glob(workdirs.PREFIX + "*")
        exporter = next(
            int(pid.name)
            for pid in Path("/proc").iterdir()
            if pid.name.isdigit()
            and (cmd := _cmdline(pid))
            and "gpu_eta.exporter" in cmd
            and str(made) in cmd
        )
        os.kill(exporter, signal.SIGKILL)
        _, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 1, err
    log = made / "logs" / "exporter-gpu-node-0.log"
    assert f"stopped: exporter-gpu-node-0 exited with code -9; last lines of {log}:" in err
    assert f"files are kept in {made}" in err and log.is_file()
    tail = err.split(f"last lines of {log}:", 1)[1].splitlines()[1:]
    assert tail and tail[0].startswith("  ") and tail[0].strip() in log.read_text()
    assert not (made / workdirs.OWNER_FILE).exists()  # the next demo leaves it


def _cmdline(pid: Path) -> str:
    try:
        return (pid / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_real_training_without_torch_is_one_line_exit_2(monkeypatch) -> None:
    """REVIEW2 item 15: the trainer failed in its log and was restarted every 20 s."""
    real_find_spec = importlib.util.find_spec

    def no_torch(name: str, *args, **kwargs):
        return None if name == "torch" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", no_torch)
    line = _one_line_exit_2(["--real-training", "--quiet", "--seconds", "1"])
    assert "PyTorch" in line and "pip install torch" in line


def test_the_live_view_keeps_the_last_good_view_when_prometheus_fails(http_server) -> None:  # noqa: F811
    """A refresh Prometheus does not answer (a restart, a timeout) blanked the demo's
    live view down to the error, while ``top`` kept its last good view: the demo shows
    that view too, marked stale, through the same ``RefreshingView``."""
    from rich.console import Console

    from tests.top.test_top import answering, answers

    down = {"now": False}
    handle = answering(answers())
    url, _ = http_server(lambda r: reply(r, 500, b"restarting") if down["now"] else handle(r))
    console = Console(file=io.StringIO(), width=200, height=60, force_terminal=True, record=True)
    with cli._LiveTop(url, 0.0, True, Signals(), console=console) as live:
        live.maybe_refresh()
        first = console.export_text(clear=True)
        down["now"] = True
        live.maybe_refresh()
        last = console.export_text(clear=True)
    assert "ml/cnn-1" in first and "error:" not in first, first
    assert "ml/cnn-1" in last and "7/20" in last, last  # the last good rows, still shown
    assert "error: " in last and "HTTP 500" in last, last
    assert "error: showing the last good view, " in last, last


def demo_on_a_terminal(tmp_path: Path, until: bytes, **kwargs: object) -> tuple[bytes, int | None]:
    """The demo (the smallest stack: one node, no history) with its live ``top``
    refreshing every second on a pseudo-terminal (``on_a_terminal``)."""
    from tests.top.test_top import on_a_terminal

    argv = ["-m", "gpu_eta.demo", "--nodes", "1", "--warm-start", "0", "--history-days", "0"]
    argv += ["--refresh", "1", "--workdir", str(tmp_path / "work")]
    argv += ["--prometheus-port", "0", "--forecaster-port", "0", "--alertmanager-port", "0"]
    return on_a_terminal(argv, until, wait_seconds=30.0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("seen", [b"\x1b[?25l", b"gpu-eta top  http"], ids=["first-draw", "view"])
def test_closing_the_terminal_ends_the_demo_quietly(tmp_path: Path, seen: bytes) -> None:
    """``./demo.sh`` in a window that is closed: the kernel sends SIGHUP, and every
    write to the terminal fails (EIO). The live view stopping wrote there: exit 1 and a
    traceback; a hang-up as it started drawing was dropped inside rich ("Exception
    ignored") and the demo ran on without a terminal. It stops the stack, exit 0, with
    nothing on stderr but the start's own lines."""
    err = tmp_path / "stderr"
    out, code = demo_on_a_terminal(tmp_path, seen, hang_up=err)
    assert seen in out
    assert code == 0, err.read_text()
    assert "Traceback" not in err.read_text() and "Exception" not in err.read_text()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "seen"),
    [(signal.SIGTERM, b"\x1b[?25l"), (signal.SIGHUP, b"gpu-eta top  http")],
    ids=["SIGTERM-first-draw", "SIGHUP-view"],
)
def test_a_signal_while_the_live_view_draws_stops_the_demo_with_the_cursor_shown(
    tmp_path: Path, seen: bytes, sig: signal.Signals
) -> None:
    """SIGTERM or SIGHUP (``timeout``, a ``kill``) while the live view draws (it
    refreshes every second here): raised inside rich's drawing, it left the cursor
    hidden, or was dropped inside rich and the demo ran on. The demo stops as on
    Ctrl-C: "stopping…", the cursor shown, exit 0."""
    out, code = demo_on_a_terminal(tmp_path, seen, then=lambda p: p.send_signal(sig))
    hide, show = b"\x1b[?25l", b"\x1b[?25h"
    assert hide in out, out[-300:]
    assert out.rfind(show) > out.rfind(hide), out[-300:]
    assert code == 0 and b"Traceback" not in out and b"stopping" in out, out[-600:]


@pytest.mark.integration
@pytest.mark.slow
def test_the_live_view_fits_80x24_with_runs_and_gpus(tmp_path: Path) -> None:
    """``./demo.sh`` in an 80×24 terminal (a newcomer's default): the live view was
    ``top``'s four boxed tables, which left 3 or 4 training runs and no GPU row, and
    said ``--once`` shows them, a flag of a command the user never ran. It shows
    the runs and the GPUs, several rows each, in the terminal, and names the command
    that shows every row."""
    from tests.top.test_top import last_frame, on_a_terminal

    argv = ["-m", "gpu_eta.demo", "--history-days", "0.02", "--history-jobs", "30"]
    argv += ["--refresh", "1", "--workdir", str(tmp_path / "work")]
    argv += ["--prometheus-port", "0", "--forecaster-port", "0", "--alertmanager-port", "0"]
    out, code = on_a_terminal(
        argv,
        b"ALERTS firing",  # the first view drawn: the warm cluster's runs and GPUs
        then=lambda p: p.send_signal(signal.SIGTERM),
        wait_seconds=30.0,
        columns=80,
    )
    assert code == 0, out[-2000:]
    frame = last_frame(out)
    assert len(frame) <= 24 and all(len(line) <= 80 for line in frame), frame
    titles = [k for k, line in enumerate(frame) if line.startswith(("Training", "GPUs"))]
    assert len(titles) == 2, frame
    runs = [line for line in frame[titles[0] : titles[1]] if line.startswith("ml-")]
    gpus = [line for line in frame[titles[1] :] if line.startswith("gpu-node-")]
    assert len(runs) >= 5 and len(gpus) >= 5, frame
    assert frame[-1].startswith("full view: python3 -m gpu_eta.top --prometheus.url http://")
    assert not any("--once" in line for line in frame), frame


def test_the_printed_prometheus_pages_open(tmp_path: Path) -> None:
    """Every Prometheus URL the banner prints answers 200 on the installed Prometheus
    (the real one the launcher starts), not a 404 of a UI page this build lacks."""
    import requests

    from gpu_eta.launch.prometheus import ScrapeJob, start_prometheus

    server = start_prometheus([ScrapeJob("x", ["127.0.0.1:9"])], data_dir=tmp_path / "p")
    try:
        lines = cli.tsdb_lines("prometheus", server.url, None)
        urls = re.findall(r"https?://\S+", lines)
        assert len(urls) == 2, lines  # the graph page and the alerts page
        for url in urls:
            assert requests.get(url, allow_redirects=False, timeout=5).status_code == 200, url
    finally:
        server.stop()


WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
DOC_WARM_START = re.compile(
    r"With the defaults \(seed (?P<seed>\d+), (?P<nodes>\d+) nodes, (?P<gpus>\d+) GPUs"
    r".*?at t = 0, (?P<training>\d+) training pods running \((?P<mid_run>\d+) of them past"
    r" their first epoch and not done; (?P<planless>\d+) (?:are U-Net runs that report|is a"
    r" U-Net run that reports) no planned total, (?P<with_longer>\d+) of which (?:have|has) a"
    r" longer completed run of (?:their|its) configuration in the history\),"
    r" (?P<notebooks>\d+) idle notebooks, all (?P<sliced>\w+)"
    r" time-sliced GPUs shared by (?P<sharers>\w+) trainers, every GPU held and"
    r" (?P<queued>\d+) jobs queued.*?in the next (?P<snapshot>\d+) s .*?(?P<finish>\d+) jobs"
    r" finish, (?P<start>\d+) new ones start and (?P<stall>\d+) stalls?"
)


def test_docs_warm_start_numbers_are_the_demo_cluster() -> None:
    """docs/demo.md's "at t = 0" paragraph describes the cluster ``./demo.sh`` runs:
    the flags' defaults with the planted alert causes (``cluster_config``), warmed up
    as the stack does, its history as the stack simulates it."""
    from gpu_eta.simulation.backfill import live_load_seconds, simulate_history
    from gpu_eta.simulation.cluster import warm_start

    doc = " ".join((REPO / "docs" / "demo.md").read_text(encoding="utf-8").split())
    match = DOC_WARM_START.search(doc)
    assert match, "docs/demo.md: the warm-start paragraph's numbers were not found"
    said = {k: int(WORDS.get(v, v)) for k, v in match.groupdict().items()}
    args = cli.parse_args([])
    cluster = cli.cluster_config(args)
    sim, _ = warm_start(cluster)  # the stack's call (no --real-training: nothing kept free)

    def done(pod, t: float) -> int:
        return sum(1 for e in pod.epoch_ends if e <= t)

    training = [p for p in sim.pods if p.kind == "training" and p.alive_at(0.0)]
    mid_run = [p for p in training if p.run_start is not None and 1 <= done(p, 0.0) < p.epochs]
    planless = [p for p in training if not p.reports_plan]
    # the runs the forecaster is seeded with: the old history and the warm-up's ends
    span = live_load_seconds(cluster, args.history_days * 86400, args.history_jobs)
    history = simulate_history(cluster, -max(400.0, args.warm_start), span, args.history_jobs)
    finished = [p for p in (*history.pods, *sim.pods) if p.completed and p.end <= 0.0]

    def config(pod) -> tuple:
        return (pod.namespace, pod.job_name, pod.gpu_model, pod.batch_size, len(pod.gpus))

    def lasted_longer(pod) -> bool:
        return any(
            config(q) == config(pod) and q.end - q.run_start > -pod.run_start for q in finished
        )

    notebooks = [p for p in sim.pods if p.kind == "notebook" and p.alive_at(0.0)]
    sharers: dict[tuple[int, int], int] = {}
    for p in training:
        for g, _ in p.gpus:
            if sim.nodes[p.node].gpus[g].replicas > 1:
                sharers[(p.node, g)] = sharers.get((p.node, g), 0) + 1
    sliced = [(n.index, g) for n in sim.nodes for g, gpu in enumerate(n.gpus) if gpu.replicas > 1]
    held = {(p.node, g) for p in sim.pods if p.alive_at(0.0) for g, _ in p.gpus}
    n_gpus = sum(len(n.gpus) for n in sim.nodes)
    queued = sim.queued
    future = sim.advance(float(said["snapshot"]))
    got = {
        "seed": args.seed,
        "nodes": len(sim.nodes),
        "gpus": n_gpus,
        "training": len(training),
        "mid_run": len(mid_run),
        "planless": len(planless),
        "with_longer": sum(1 for p in planless if lasted_longer(p)),
        "notebooks": len(notebooks),
        "sliced": len(sliced),
        "sharers": min(sharers.get(s, 0) for s in sliced),
        "queued": queued,
        "snapshot": said["snapshot"],
        "finish": sum(1 for e in future if e.kind == "epoch_end" and e.epoch == e.pod.epochs),
        "start": sum(1 for e in future if e.kind == "pod_start" and e.pod.kind == "training"),
        "stall": sum(
            1
            for p in sim.pods
            if p.stalled_between and 0 < p.stalled_between[0] <= said["snapshot"]
        ),
    }
    assert len(held) == n_gpus  # "every GPU held"
    assert got == said
    # the demo's own start-up line, as quoted (Stack.start counts the same pods)
    line = f"({got['training']} training pods already running, {got['queued']} jobs queued)"
    assert line in doc


def _fake_bootstrap(tmp_path: Path, code: int) -> tuple[Path, Path]:
    """A stand-in for scripts/bootstrap.sh that records its arguments and exits ``code``."""
    log = tmp_path / "bootstrap.log"
    script = tmp_path / "bootstrap.sh"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexit {code}\n')
    script.chmod(0o755)
    return script, log


@pytest.mark.parametrize(
    "argv", [["--help"], ["--seconds", "abc"], ["--bogus"]], ids=["help", "bad", "unknown"]
)
def test_help_and_bad_flags_install_nothing(monkeypatch, tmp_path: Path, argv) -> None:
    """demo.sh installed the Debian packages (apt-get update, a download) before the
    demo read its flags: ``--help`` or a typo took minutes to answer on a fresh
    machine. The demo asks for them (``GPU_ETA_DEMO_BOOTSTRAP``) once its flags are
    good, so these never run it."""
    script, log = _fake_bootstrap(tmp_path, 0)
    monkeypatch.setenv("GPU_ETA_DEMO_BOOTSTRAP", str(script))
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    assert code == (cli.ExitCode.OK if argv == ["--help"] else cli.ExitCode.USAGE)
    assert not log.exists()


@pytest.mark.parametrize(
    ("tsdb", "asked"),
    [("prometheus", "--demo"), ("victoriametrics", "--demo --victoriametrics")],
)
def test_good_flags_install_what_that_tsdb_runs_first(
    monkeypatch, tmp_path: Path, tsdb: str, asked: str
) -> None:
    """Good flags: the install runs, for the TSDB asked for, before anything starts; a
    failing install is exit 1, one line, and nothing started."""
    script, log = _fake_bootstrap(tmp_path, 3)
    monkeypatch.setenv("GPU_ETA_DEMO_BOOTSTRAP", str(script))
    started = []
    monkeypatch.setattr(cli, "_run", lambda *a: started.append(a) or 0)
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["--tsdb", tsdb, "--seconds", "5"])
    assert log.read_text().split("\n")[0] == asked
    assert code == cli.ExitCode.ERROR and not started
    assert err.getvalue().count("\n") == 1 and "failed (exit 3)" in err.getvalue()


def _demo_sh_in(tmp_path: Path) -> None:
    """A copy of demo.sh beside a scripts/bootstrap.sh that installs nothing: demo.sh as
    users run it, without its pip and apt steps (the Python is this test's)."""
    (tmp_path / "scripts").mkdir()
    _fake_bootstrap(tmp_path / "scripts", 0)
    demo_sh = tmp_path / "demo.sh"
    demo_sh.write_text((REPO / "demo.sh").read_text())
    demo_sh.chmod(0o755)


@pytest.mark.parametrize(
    ("argv", "stream", "code"),
    [(["--help"], "stdout", 0), (["--bogus"], "stderr", 2)],
    ids=["help", "error"],
)
def test_demo_sh_usage_names_demo_sh(tmp_path: Path, argv, stream: str, code: int) -> None:
    """``./demo.sh --help`` and a usage error said ``usage: python -m gpu_eta.demo``: a
    command the user did not type (and that needs the installs demo.sh does first).
    demo.sh passes the name it was run by (``GPU_ETA_DEMO_PROG``)."""
    import subprocess
    import sys

    _demo_sh_in(tmp_path)
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("GPU_ETA_DEMO_PROG", None)
    done = subprocess.run(
        ["./demo.sh", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code, done.stderr
    said = getattr(done, stream)
    assert said.startswith("usage: ./demo.sh ["), said
    assert "gpu_eta.demo" not in said, said
    if code:
        assert "./demo.sh: error: unrecognized arguments: --bogus" in said, said


def test_python_m_usage_names_python_m(monkeypatch) -> None:
    """Run as ``python -m gpu_eta.demo`` (no ``GPU_ETA_DEMO_PROG``) it says so."""
    monkeypatch.delenv("GPU_ETA_DEMO_PROG", raising=False)
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["--help"]) == 0
    assert out.getvalue().startswith("usage: python -m gpu_eta.demo ["), out.getvalue()


@pytest.mark.integration
@pytest.mark.slow
def test_the_next_demo_removes_the_temp_dir_of_a_killed_one(monkeypatch, tmp_path: Path) -> None:
    """A demo killed with SIGKILL cannot remove its temporary directory (Prometheus'
    TSDB, logs, history): each such run left one behind for good. The next demo
    removes it, once the killed one's children are gone too, and leaves what is not a
    demo's alone: a directory of the same prefix without the owner record."""
    import subprocess
    import sys

    from gpu_eta.demo.workdirs import parse_stat
    from tests.integration.test_demo_standalone import _children, _run_and_watch

    def _started_at(pid: int) -> int | None:
        """When ``pid`` started, while it runs (not a zombie); None once it is gone."""
        try:
            state, start = parse_stat(Path(f"/proc/{pid}/stat").read_text()) or ("X", 0)
        except OSError:
            return None
        return None if state in ("Z", "X") else start

    def _cmdline(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return f"{pid}: gone"

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the demos' temporary directory
    not_ours = tmp / "gpu-eta-demo-notours1"
    (not_ours / "prometheus").mkdir(parents=True)
    # the smallest demo: a temporary directory and children are all this needs
    small = ["--nodes", "1", "--warm-start", "0", "--history-days", "0", "--quiet"]
    small += ["--prometheus-port", "0", "--forecaster-port", "0", "--alertmanager-port", "0"]
    killed, reader, children = _run_and_watch([sys.executable, "-m", "gpu_eta.demo", *small])
    try:
        assert "gpu-eta demo running" in reader.text, reader.text[-3000:]
        children |= _children(killed.pid)
        # by start time too: a short-lived child's pid (promtool's) may be reused meanwhile
        started = {p: _started_at(p) for p in children if _started_at(p) is not None}
        left = [p for p in tmp.iterdir() if p != not_ours]
        assert len(left) == 1 and (left[0] / "prometheus").is_dir(), left
    finally:
        os.killpg(killed.pid, signal.SIGKILL)  # the demo alone: its children are not in its group
    killed.wait(timeout=30)
    deadline = time.monotonic() + 60  # its children stop on their SIGTERM (PR_SET_PDEATHSIG)
    while left_running := [p for p, start in started.items() if _started_at(p) == start]:
        assert time.monotonic() < deadline, [_cmdline(p) for p in left_running]
        time.sleep(0.2)
    assert left[0].is_dir()  # left behind by the kill
    argv = [sys.executable, "-m", "gpu_eta.demo", *small, "--seconds", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not left[0].exists(), done.stderr[-3000:]
    assert f"removed {left[0]}" in done.stderr, done.stderr[-3000:]
    assert sorted(tmp.iterdir()) == [not_ours] and (not_ours / "prometheus").is_dir()


# a child that runs ``python -m gpu_eta.demo ARGV`` and is sent SIGINT (as Ctrl-C would)
# at the moment it imports MODULE: while Python still imports the demo, or before
# the demo's own handler is in place
_INTERRUPTED_AT = """
import os, runpy, signal, sys
module, *argv = sys.argv[1:]
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["gpu_eta.demo", *argv]
runpy.run_module("gpu_eta.demo", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("gpu_eta.demo.stack", ["--help"]),  # the demo's own modules are being imported
        # main() has begun and looks for PyTorch (an unusable --workdir ends it with
        # exit 2 right after, should the signal not arrive: nothing is started)
        ("torch", ["--real-training", "--workdir", "/proc/no-such-dir"]),
    ],
)
def test_ctrl_c_while_the_demo_imports_exits_0_without_a_traceback(
    module: str, argv: list[str]
) -> None:
    """docs/demo.md: Ctrl-C ends the demo with exit 0 and no traceback, also before
    its own signal handling is in place. SIGINT at its default disposition, as in a
    terminal (a CI job in the background ignores it, and Python then never raises)."""
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_AT, module, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr


def test_the_summary_says_reports_were_late_for_their_pod_not_unsent() -> None:
    """``reports_skipped`` also counts reports POSTed and answered once their pod ended
    (tests/simulation/test_driver.py), so the closing line must not say "not sent"."""
    stats = DriverStats(reports_sent=5, reports_failed=1, reports_skipped=2, epochs=7)
    line = cli.driver_summary(stats)
    assert "late for their pod (pod ended first): 2" in line
    assert "not sent" not in line
    assert "progress POSTs accepted: 5, failed: 1" in line


def test_the_summary_leaves_out_late_reports_when_there_are_none() -> None:
    """A run with no late reports says nothing about them."""
    assert "late" not in cli.driver_summary(DriverStats(reports_sent=3))
