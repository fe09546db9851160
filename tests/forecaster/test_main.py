"""gpu_eta.forecaster.main: help, usage errors (exit 2), runtime errors (exit 1), one line, no traceback."""

from __future__ import annotations

import logging
import math
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from gpu_eta.forecaster.history_space import Retention
from gpu_eta.forecaster.main import (
    ExitCode,
    ForecasterError,
    build_parser,
    config_from_args,
    main,
    push_metrics,
)
from gpu_eta.forecaster.publish import ServiceState
from gpu_eta.forecaster.queue_replay import Toleration
from gpu_eta.forecaster.secret_file import reveal
from gpu_eta.launch.prometheus import free_port
from tests.forecaster.test_promapi import http_server, reply  # noqa: F401 (fixture)
from tests.support.installed_tree import installed_tree
from tests.support.net import dead_port, has_ipv6_loopback
from tests.support.zygote import run_module

REPO = Path(__file__).resolve().parents[2]


# the third-party libraries ``python -m gpu_eta.forecaster`` imports (~1.5 s of CPU a
# process), imported once in a zygote (tests/support/zygote.py) that forks each run
FORECASTER_PRELOAD = (
    "import numpy, requests, requests.adapters, sklearn.exceptions, sklearn.ensemble",
    "import statsmodels.robust.norms, statsmodels.robust.scale, statsmodels.tools.sm_exceptions",
)


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m gpu_eta.forecaster ARGS``, run as its own process (forked from a
    zygote that imported ``FORECASTER_PRELOAD``)."""
    return run_module(
        "gpu_eta.forecaster", list(args), FORECASTER_PRELOAD, dict(os.environ), timeout
    )


def test_help_of_every_own_subcommand(capsys) -> None:
    for argv in (["--help"], ["serve", "--help"], ["once", "--help"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--prometheus.url",
        "--prometheus.bearer-token-file",
        "--prometheus.ca-file",
        "--history.db",
        "--history.seed-csv",
        "--web.listen-address",
        "--pushgateway.url",
        "--stall.after",
    ):
        assert flag in out, flag


def test_no_subcommand_is_usage(capsys) -> None:
    assert main([]) == ExitCode.USAGE


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--bogus"], "unrecognized arguments: --bogus"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["serve", "--prometheus.url", "localhost:9090"], "--prometheus.url must be"),
        (["serve", "--prometheus.url", "http://127.0.0.1:99999"], "--prometheus.url must be"),
        (["once", "--prometheus.url", "http://prom:abc"], "--prometheus.url must be"),
        (["serve", "--prometheus.url", "http://[::1"], "--prometheus.url must be"),
        (["once", "--prometheus.url", "http://prom:9090/?x=1"], "query string or fragment"),
        (["once", "--pushgateway.url", "http://[::1"], "--pushgateway.url is not a URL"),
        (["serve", "--web.listen-address", "nope"], "--web.listen-address must be"),
        (["serve", "--cycle.interval", "0"], "--cycle.interval must be a finite number > 0"),
        (["serve", "--cycle.interval", "inf"], "--cycle.interval must be a finite number > 0"),
        (["once", "--history.lookback", "inf"], "--history.lookback must be a finite number"),
        (["serve", "--stall.after", "nan"], "--stall.after must be a finite number > 0"),
        (["once", "--history.partial-hold", "inf"], "--history.partial-hold must be a finite"),
        (["serve", "--history.partial-hold=-1"], "--history.partial-hold must be a finite"),
        (["once", "--stall.idle-ratio", "2"], "--stall.idle-ratio must be in 0..1"),
        (["once", "--prometheus.bearer-token-file", "/nonexistent/t"], "bearer-token-file"),
        (["once", "--prometheus.header", "X-Scope-OrgID"], "expected NAME=VALUE"),
        (["serve", "--prometheus.header", "X-A=a\nb"], "X-A: value holds a control"),
        (["once", "--prometheus.header", "Authorization=Bearer x"], "bearer-token-file"),
        # a long query is POSTed as a form: a Content-Type of the user's replaced that
        # encoding's, and Prometheus answered 400 "no expression found in input"
        (["once", "--prometheus.header", "Content-Type=text/plain"], "Content-Type cannot be"),
        (["once", "--prometheus.timeout", "abc"], "invalid float value"),
        (["once", "--prometheus.timeout", "0"], "--prometheus.timeout must be > 0"),
        (["serve", "--prometheus.timeout", "inf"], "--prometheus.timeout must be > 0 and finite"),
        (["once", "--prometheus.timeout", "nan"], "--prometheus.timeout must be > 0 and finite"),
        (["serve", "--prometheus.backoff", "nan"], "--prometheus.backoff must be >= 0"),
        (["once", "--prometheus.backoff=-inf"], "--prometheus.backoff must be >= 0"),
        (["serve", "--prometheus.retries", "-1"], "--prometheus.retries must be >= 0"),
        (["serve", "--model.fit-points", "-1"], "--model.fit-points must be >= 0"),
        (["serve", "--history.retention", "30"], "--history.retention must be a duration"),
        (["once", "--history.retention=-1d"], "--history.retention must be a duration"),
        # past Prometheus' longest duration (2^63-1 ns), which the flag's syntax is
        (["once", "--history.retention", "300y"], "--history.retention must be a duration"),
        (["once", "--query.step", "0.0004"], "--query.step must be at least 0.001"),
        # accepted at start, then every cycle failed (inf: OverflowError; a window past
        # Prometheus' duration range: HTTP 400), or nothing vanished nor refitted (nan)
        (["once", "--query.step", "inf"], "--query.step must be a finite number"),
        (["once", "--query.step", "nan"], "--query.step must be at least 0.001"),
        (["serve", "--history.vanish-grace", "nan"], "--history.vanish-grace must be a finite"),
        (["serve", "--history.vanish-grace", "inf"], "--history.vanish-grace must be a finite"),
        (["serve", "--model.refit-interval", "nan"], "--model.refit-interval must be a finite"),
        (["once", "--history.lookback", "1e12"], "--history.lookback must be at most 3650 days"),
        (["once", "--stall.idle-window", "1e12"], "--stall.idle-window must be at most 3650 days"),
        (["serve", "--cycle.interval", "1e12"], "--cycle.interval must be at most 3650 days"),
        (["once", "--prometheus.max-response-bytes", "10"], "must be >= 1024"),
        (["once", "--pending.request-toleration", "sku=gpu:Never"], "effect must be one of"),
        (["once", "--pending.request-toleration", "=gpu"], "wants KEY[=VALUE][:EFFECT]"),
        (["once", "--pending.request-toleration", "k" * 5000], "longer than 400"),
        (
            ["serve", "--pending.gpu-resource", "gpu.shared"],
            "--pending.gpu-resource: not a Kubernetes extended resource name (DOMAIN/NAME",
        ),
        (
            ["once", *[f"--pending.gpu-resource=example.com/g{i}" for i in range(33)]],
            "--pending.gpu-resource: at most 32 resource names, got 33",
        ),
        (  # 32 names too long for one part of the queue's queries (docs/pending.md)
            [
                "once",
                *[
                    f"--pending.gpu-resource={'d' * 60}.example.com/{'n' * 60}{i}"
                    for i in range(32)
                ],
            ],
            "--pending.gpu-resource: with these 32 names the query part ksm_",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, message, capsys) -> None:
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("gpu-eta forecaster: ") and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_partial_hold_reaches_the_cycle_settings() -> None:
    argv = ["once", "--history.partial-hold", "120"]
    assert config_from_args(build_parser().parse_args(argv)).cycle.partial_hold_seconds == 120
    default = config_from_args(build_parser().parse_args(["once"])).cycle
    assert default.partial_hold_seconds == 3600


def test_the_retention_is_a_duration_with_the_fit_runs_as_its_floor() -> None:
    from gpu_eta.forecaster.config import history_retention

    parse = build_parser().parse_args
    default = config_from_args(parse(["once"]))
    assert history_retention(default) == Retention(
        30 * 86400.0, keep_runs=100_000, linger_seconds=30 * 86400.0
    )
    argv = ["serve", "--history.retention", "1w2d", "--model.fit-runs", "500"]
    assert history_retention(config_from_args(parse(argv))) == Retention(
        9 * 86400.0, 500, linger_seconds=9 * 86400.0
    )
    # a deleted completed run's mark lasts the retention, at least as far back as a
    # read reaches
    argv = ["once", "--history.lookback", "3600"]
    assert history_retention(config_from_args(parse(argv))).linger_seconds == 30 * 86400.0  # type: ignore[union-attr]
    argv = ["once", "--history.lookback", "86400", "--history.retention", "1h"]
    assert history_retention(config_from_args(parse(argv))).linger_seconds == 86400.0  # type: ignore[union-attr]
    assert history_retention(config_from_args(parse(["once", "--history.retention", "0"]))) is None


def test_once_deletes_old_runs_beyond_the_floor_and_publishes_the_file_s_size(
    empty_prometheus_api, tmp_path
) -> None:
    """The flag reaches the store: the run's cycle deletes what retention allows."""
    from gpu_eta.forecaster.history import HistoryStore
    from gpu_eta.forecaster.runs import RunUpdate, run_key

    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    long_ago = time.time() - 400 * 86400.0
    for i in range(5):
        up = RunUpdate(
            run_id=f"r{i}",
            epochs_planned=1,
            start_timestamp=long_ago + i,
            epoch_ends=((1.0, long_ago + i + 60.0),),
            namespace="ns",
            pod=f"p{i}",
            container="c",
        )
        store.record([up])
        store.finish([run_key(up)], long_ago + i + 100.0)
    store.close()
    proc = run_cli(
        "once",
        "--prometheus.url",
        empty_prometheus_api,
        "--history.db",
        str(db),
        "--history.retention",
        "90d",
        "--model.fit-runs",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    store = HistoryStore.open(db)
    assert [r.run_id for r in store.finished()] == ["r3", "r4"]
    store.close()
    assert f"gpu_eta_forecaster_history_bytes {float(db.stat().st_size)}" in proc.stdout


def test_request_tolerations_reach_the_pending_settings() -> None:
    """``--pending.request-toleration`` (repeatable) replaces what a request made now is
    taken to tolerate; without it the default stays (None: the resource's own taint)."""
    argv = ["once", "--pending.request-toleration", "sku=gpu:NoSchedule"]
    argv += ["--pending.request-toleration", "nvidia.com/gpu"]
    argv += ["--pending.request-toleration", "*:NoExecute", "--pending.request-toleration", "gen<4"]
    settings = config_from_args(build_parser().parse_args(argv)).cycle.pending
    assert settings.request_tolerations == (
        Toleration("sku", "Equal", "gpu", "NoSchedule"),
        Toleration("nvidia.com/gpu", "Exists", "", ""),
        Toleration("", "Exists", "", "NoExecute"),
        Toleration("gen", "Lt", "4", ""),
    )
    default = config_from_args(build_parser().parse_args(["once"])).cycle.pending
    assert default.request_tolerations is None


def test_the_device_plugins_one_replica_setting_reaches_the_pending_settings() -> None:
    """Off by default, as the NVIDIA device plugin's ``failRequestsGreaterThanOne``."""
    default = config_from_args(build_parser().parse_args(["once"])).cycle.pending
    assert default.one_replica_per_pod is False
    argv = ["once", "--pending.fail-requests-greater-than-one"]
    assert config_from_args(build_parser().parse_args(argv)).cycle.pending.one_replica_per_pod


def test_once_pushes_under_the_job_name_the_rules_and_manifests_use() -> None:
    """``up{job="gpu-eta-forecaster"}`` in the rules, the CronJob's explicit flag: a
    hand-run ``once`` pushes under the same name by default."""
    config = config_from_args(build_parser().parse_args(["once"]))
    assert config.pushgateway_job == "gpu-eta-forecaster"
    rules = (REPO / "rules" / "gpu-eta.rules.yaml").read_text()
    cronjob = (REPO / "manifests/variants/forecaster-cronjob/forecaster-cronjob.yaml").read_text()
    assert f'job="{config.pushgateway_job}"' in rules
    assert f"--pushgateway.job={config.pushgateway_job}" in cronjob


def test_top_help_shows_the_prometheus_flags_defaults(capsys) -> None:
    from gpu_eta.top import main as top

    with pytest.raises(SystemExit):
        top.parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for text in (
        "(default: http://127.0.0.1:9090)",
        "timeout of one HTTP request (default: 10.0)",
        "(default: 2)",
        "(doubles each retry) (default: 0.5)",
        "(default: 67108864)",
        "(default: 5m)",
    ):
        assert text in help_text, text


def test_secrets_are_read_from_files_and_not_in_repr(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("abc123\n")
    (tmp_path / "pw").write_text("hunter2\n")
    args = build_parser().parse_args(
        [
            "once",
            "--prometheus.bearer-token-file",
            str(tmp_path / "tok"),
            "--prometheus.basic-auth-user",
            "me",
            "--prometheus.basic-auth-password-file",
            str(tmp_path / "pw"),
        ]
    )
    config = config_from_args(args)
    assert config.bearer_token is not None and config.basic_auth is not None
    assert reveal(config.bearer_token) == "abc123"
    assert config.basic_auth[0] == "me" and reveal(config.basic_auth[1]) == "hunter2"
    assert "abc123" not in repr(config) and "hunter2" not in repr(config)


def test_once_with_prometheus_down_exits_1_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    proc = run_cli(
        "once",
        "--prometheus.url",
        f"http://127.0.0.1:{port}",
        "--prometheus.retries",
        "0",
        "--history.db",
        str(tmp_path / "h.sqlite"),
        "--log.level",
        "error",
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gpu-eta forecaster: ")]
    assert len(errors) == 1 and "cannot connect" in errors[0]


def test_foreign_history_exits_1_and_keeps_the_file(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "h.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE dashboard (id INTEGER)")  # another program's database
    conn.commit()
    conn.close()
    before = db.read_bytes()
    proc = run_cli("once", "--history.db", str(db))
    assert proc.returncode == 1
    assert (
        proc.stderr.strip().startswith("gpu-eta forecaster: history file")
        and "Traceback" not in proc.stderr
    )
    assert db.read_bytes() == before
    debug = run_cli("once", "--history.db", str(db), "--debug")
    assert "Traceback" in debug.stderr and debug.returncode == 1


def test_corrupt_history_is_set_aside_and_the_forecaster_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"garbage" * 1000)
    prometheus = f"http://127.0.0.1:{dead_port()}"  # no Prometheus: the cycle fails
    proc = run_cli("once", "--history.db", str(db), "--prometheus.url", prometheus)
    assert "moved to h.sqlite.corrupt-" in proc.stderr and "Traceback" not in proc.stderr
    (aside,) = tmp_path.glob("h.sqlite.corrupt-*")
    assert aside.read_bytes() == b"garbage" * 1000
    assert "once: cycle failed" in proc.stderr and proc.returncode == 1  # it ran a cycle


def test_a_damaged_index_is_rebuilt_at_start_and_the_forecaster_goes_on(tmp_path: Path) -> None:
    from tests.forecaster.test_history_faults import LAST_RUN_GONE, behind_index, history_of

    db = tmp_path / "h.sqlite"
    history_of(db, 50)
    behind_index(db, ("runs_finished",), LAST_RUN_GONE)
    prometheus = f"http://127.0.0.1:{dead_port()}"  # no Prometheus: the cycle fails
    proc = run_cli("once", "--history.db", str(db), "--prometheus.url", prometheus)
    assert "rebuilding its indexes (REINDEX)" in proc.stderr and "Traceback" not in proc.stderr
    assert "49 finished runs" in proc.stderr  # every run the table holds, read at start
    assert "once: cycle failed" in proc.stderr and proc.returncode == 1  # it ran a cycle
    assert not list(tmp_path.glob("h.sqlite.corrupt-*"))


def test_bad_seed_csv_is_one_line(tmp_path: Path) -> None:
    seed = tmp_path / "runs.csv"
    seed.write_text("run_id,epoch\nx,1\n")
    proc = run_cli(
        "once", "--history.db", str(tmp_path / "h.sqlite"), "--history.seed-csv", str(seed)
    )
    assert proc.returncode == 1
    assert (
        proc.stderr.startswith("gpu-eta forecaster: ")
        and len(proc.stderr.strip().splitlines()) == 1
    )
    assert f"history seed {seed}: line 1: missing required column(s)" in proc.stderr
    proc = run_cli(
        "once",
        "--history.db",
        str(tmp_path / "h.sqlite"),
        "--history.seed-csv",
        str(tmp_path / "missing.csv"),
    )
    assert proc.returncode == 1
    assert f"history seed {tmp_path / 'missing.csv'}: cannot read: " in proc.stderr


def _seed_skips(tmp_path: Path, csv_text: str, said: str, named: str) -> list[str]:
    """``once`` with ``csv_text`` as its seed and no Prometheus (the cycle fails, the seed
    stays): one stderr line with ``said`` naming ``named``, no traceback; the run ids
    the file holds."""
    seed = tmp_path / "runs.csv"
    seed.write_text(csv_text)
    db = tmp_path / "h.sqlite"
    args = ["once", "--history.db", str(db), "--history.seed-csv", str(seed)]
    args += ["--prometheus.url", f"http://127.0.0.1:{free_port()}", "--prometheus.retries", "0"]
    proc = run_cli(*args)
    assert proc.returncode == 1
    warned = [line for line in proc.stderr.splitlines() if said in line]
    assert len(warned) == 1 and named in warned[0] and "Traceback" not in proc.stderr
    conn = sqlite3.connect(db)
    try:
        return [row[0] for row in conn.execute("SELECT run_id FROM runs")]
    finally:
        conn.close()


def test_a_damaged_run_in_the_seed_csv_is_skipped_and_named(tmp_path: Path) -> None:
    csv_text = (
        "run_id,epoch,epochs_planned,timestamp_seconds\n"
        "a,0,2,100\na,1,2,160\na,2,2,220\nbad,0,2,0\nbad,1,2,soon\n"
    )
    assert _seed_skips(tmp_path, csv_text, "skipped 1 malformed run", "'bad'") == ["a"]


def test_a_seed_run_ending_after_the_imports_time_is_skipped_and_named(tmp_path: Path) -> None:
    """A run ending in the year 3000 (a typo, a clock far ahead) is no finished run: stored,
    it would be the newest run for ever and retention would measure every other against
    it; the others are imported."""
    csv_text = (
        "run_id,epoch,epochs_planned,timestamp_seconds\n"
        "a,0,2,100\na,1,2,160\na,2,2,220\n"
        "late,0,2,100\nlate,1,2,160\nlate,2,2,32503680000\n"
    )
    assert _seed_skips(tmp_path, csv_text, "after the import's time", "'late'") == ["a"]


def test_seed_csv_is_imported_once(tmp_path: Path) -> None:
    seed = tmp_path / "runs.csv"
    seed.write_text(
        "run_id,epoch,epochs_planned,timestamp_seconds,job_name\n"
        "a,0,2,100,resnet\na,1,2,160,resnet\na,2,2,220,resnet\n"
        "b,0,3,300,resnet\nb,1,3,360,resnet\n"
    )
    db = tmp_path / "h.sqlite"
    args = ["once", "--history.db", str(db), "--history.seed-csv", str(seed)]
    args += ["--prometheus.url", f"http://127.0.0.1:{free_port()}", "--prometheus.retries", "0"]
    for _ in range(2):
        assert run_cli(*args).returncode == 1  # no Prometheus: the cycle fails, the seed stays
    from gpu_eta.forecaster.history import HistoryStore

    store = HistoryStore.open(db)
    try:
        runs = {r.run_id: r for r in store.finished()}
    finally:
        store.close()
    assert sorted(runs) == ["a", "b"]
    assert runs["a"].completed is True and runs["b"].completed is False
    assert runs["a"].features["job_name"] == "resnet"


def test_evaluate_and_top_are_delegated() -> None:
    for sub in ("evaluate", "top"):
        proc = run_cli(sub, "--help")
        assert (proc.returncode, proc.stderr) == (0, "")
        assert proc.stdout.startswith("usage: ") and "--help" in proc.stdout


def run_client_only(*args: str) -> subprocess.CompletedProcess:
    """This checkout's packages on a Python without site-packages (``-S``): what
    ``pip install gpu-eta`` without an extra gives."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpu-eta-bare-") as tmp:
        tree = installed_tree(Path(tmp))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONPATH"] = str(tree)
        return subprocess.run(
            [sys.executable, "-S", *args], capture_output=True, text=True, timeout=120, env=env
        )


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["-m", "gpu_eta.forecaster", "--help"], "forecaster"),
        (["-m", "gpu_eta.forecaster"], "forecaster"),
        (["-m", "gpu_eta.forecaster", "serve"], "forecaster"),
        (["-m", "gpu_eta.forecaster", "once", "--pushgateway.url", "http://pg:9091"], "forecaster"),
        (["-m", "gpu_eta.forecaster", "evaluate", "--runs", "x.csv"], "forecaster"),
        (["-m", "gpu_eta.forecaster", "top", "--once"], "top"),
        # the gpu-eta-forecaster console script: gpu_eta.forecaster.main:main
        (["-c", "import sys; from gpu_eta.forecaster.main import main; sys.exit(main())", "serve"],
         "forecaster"),
    ],
)  # fmt: skip
def test_without_the_extra_one_line_names_it_and_exits_2(argv: list[str], extra: str) -> None:
    assert run_client_only("-c", "import requests").returncode != 0, "site-packages leaked in"
    proc = run_client_only(*argv)
    assert proc.returncode == ExitCode.USAGE and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"pip install 'gpu-eta[{extra}]'" in proc.stderr and "requests" in proc.stderr


def test_top_imports_nothing_of_the_forecaster_extra_but_requests() -> None:
    """``gpu-eta[top]`` (requests, rich) is enough for top: it needs neither numpy nor
    the model libraries nor prometheus_client."""
    code = (
        "import sys, gpu_eta.top.main, gpu_eta.forecaster.main; "
        "print(sorted(m for m in ('numpy', 'statsmodels', 'sklearn', 'prometheus_client', "
        "'yaml') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr


@pytest.fixture
def empty_prometheus_api():
    """A minimal server speaking the Prometheus query API with no series at all (GET,
    and POST for a long query, as the real API takes both)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            rtype = "matrix" if self.path.startswith("/api/v1/query_range") else "vector"
            body = json.dumps({"status": "success", "data": {"resultType": rtype, "result": []}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.do_GET()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_once_without_pushgateway_prints_the_exposition(empty_prometheus_api, tmp_path) -> None:
    proc = run_cli(
        "once", "--prometheus.url", empty_prometheus_api, "--history.db", str(tmp_path / "h.sqlite")
    )
    assert proc.returncode == 0, proc.stderr
    assert "gpu_eta_forecaster_stale 0.0" in proc.stdout
    from gpu_eta.forecaster.queries import QUERIES_PER_CYCLE

    # an empty Prometheus: no run reports only steps and none may be stalled, so
    # neither step query nor the stall check's GPU use, no pod selecting a node label
    want = f'gpu_eta_forecaster_queries_total{{result="success"}} {QUERIES_PER_CYCLE - 4:.1f}'
    assert want in proc.stdout


def test_once_runs_count_on_from_the_totals_of_the_runs_before(
    empty_prometheus_api, tmp_path
) -> None:
    """Each run is a new process: its counters start from the totals saved in the
    history file (once_counters), or pushing the same values every run reads as no
    increase; a damaged saved value starts them from 0, one ERROR line, exit 0."""
    from gpu_eta.forecaster.history import HistoryStore
    from gpu_eta.forecaster.once_counters import COUNTERS_KEY
    from gpu_eta.forecaster.queries import QUERIES_PER_CYCLE

    db = str(tmp_path / "h.sqlite")
    per_run = QUERIES_PER_CYCLE - 4  # an empty Prometheus (as above)
    for run in (1, 2):
        proc = run_cli("once", "--prometheus.url", empty_prometheus_api, "--history.db", db)
        assert proc.returncode == 0, proc.stderr
        want = f'gpu_eta_forecaster_queries_total{{result="success"}} {run * per_run:.1f}'
        assert want in proc.stdout
    store = HistoryStore.open(db)
    try:
        store.set_meta(COUNTERS_KEY, "{damaged")
    finally:
        store.close()
    proc = run_cli("once", "--prometheus.url", empty_prometheus_api, "--history.db", db)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f'gpu_eta_forecaster_queries_total{{result="success"}} {per_run:.1f}' in proc.stdout
    assert proc.stderr.count("once counters in the history file") == 1


def test_once_with_pushgateway_away_exits_1(empty_prometheus_api, tmp_path) -> None:
    proc = run_cli(
        "once",
        "--prometheus.url",
        empty_prometheus_api,
        "--history.db",
        str(tmp_path / "h.sqlite"),
        "--pushgateway.url",
        f"http://127.0.0.1:{dead_port()}",
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gpu-eta forecaster: ")]
    assert len(errors) == 1 and "push to" in errors[0] and "Traceback" not in proc.stderr


def test_a_pushgateway_password_is_refused_at_start(capsys) -> None:
    """urllib ignores a URL's ``user:password@`` (the push went out without them), and
    every failed push would print the URL: refused at start, naming the flags to use."""
    assert main(["once", "--pushgateway.url", "http://alice:s3cret@pg:9091"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "--pushgateway.url" in err and "--pushgateway.basic-auth-user" in err, err
    assert "s3cret" not in err


def test_a_failed_push_shows_the_url_without_its_password() -> None:
    with pytest.raises(ForecasterError) as info:
        push_metrics(f"http://alice:s3cret@127.0.0.1:{dead_port()}", "j", ServiceState(), True, 5)
    assert "s3cret" not in str(info.value) and "***@127.0.0.1" in str(info.value), info.value


def test_serve_on_a_hostless_address_answers_over_ipv4_and_ipv6(
    empty_prometheus_api, tmp_path
) -> None:
    """``--web.listen-address=:PORT`` (the manifests' form) binds the exporter's way: one
    dual-stack socket, so the kubelet's probes reach an IPv6-only pod IP as well."""
    if not (socket.has_dualstack_ipv6() and has_ipv6_loopback()):
        pytest.skip("this machine has no usable IPv6 (no ::1 to connect to)")
    port = free_port()
    argv = ["serve", "--prometheus.url", empty_prometheus_api]
    argv += ["--history.db", str(tmp_path / "h.sqlite"), f"--web.listen-address=:{port}"]
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_eta.forecaster", *argv], stdout=out, stderr=out
        )
    try:
        answers: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while len(answers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            for host in ("127.0.0.1", "[::1]"):
                try:
                    answers[host] = requests.get(
                        f"http://{host}:{port}/healthz", timeout=2
                    ).status_code
                except requests.ConnectionError:
                    time.sleep(0.2)
        assert proc.poll() is None, log.read_text()
        assert answers == {"127.0.0.1": 200, "[::1]": 200}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--prometheus.url", "ftp://alice:s3cret@prom:9090"],
        ["once", "--prometheus.url", "http://alice:s3cret@[::1"],
        ["once", "--pushgateway.url", "http://alice:s3cret@[::1"],
        ["once", "--prometheus.url", "http://alice:s3?cret@127.0.0.1:9090"],
        ["once", "--prometheus.url", "http://alice:s3#cret@127.0.0.1:9090"],
        ["once", "--prometheus.url", "http://alice:s3/cret@127.0.0.1:9090"],
        ["serve", "--prometheus.url", "alice:s3cret@prom:9090"],
        ["once", "--pushgateway.url", "alice:s3/cret@pg:9091"],
        ["once", "--pushgateway.url", "http://alice:s3cret@pg:9091"],
        ["once", "--pushgateway.url", "alice:s3cret@pg:9091"],
    ],
)
def test_a_refused_url_is_shown_without_its_password(argv, capsys) -> None:
    """Usage errors end up in pod logs: a URL's ``user:password@`` is shown as ``***@``,
    also when a raw '?', '#' or '/' in the password splits the URL inside it (urllib's
    own error then quotes the password's start: never echoed)."""
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "s3" not in err and "***" in err and "could not be cast" not in err, err


def test_the_sites_gpu_resources_reach_the_queue_queries(http_server, tmp_path: Path) -> None:  # noqa: F811
    """``--pending.gpu-resource`` (repeatable, checked as the exporter's
    ``--kubelet.gpu-resource``) reaches the settings and the kube-state-metrics queries
    ``once`` sends, in KSM's spelling beside the built-in GPU resources."""
    import json
    from urllib.parse import parse_qs

    sent: list[str] = []

    def handle(req) -> None:
        body = req.rfile.read(int(req.headers.get("Content-Length", 0))).decode()
        sent.extend(
            parse_qs(body).get("query", []) + parse_qs(req.path.partition("?")[2]).get("query", [])
        )
        rtype = "matrix" if req.path.startswith("/api/v1/query_range") else "vector"
        reply(
            req,
            200,
            json.dumps({"status": "success", "data": {"resultType": rtype, "result": []}}).encode(),
        )

    url, _ = http_server(handle)
    flags = ["--pending.gpu-resource", "nvidia.com/a100-shared"]
    flags += ["--pending.gpu-resource=example.com/gpu", "--pending.gpu-resource", "example.com/gpu"]
    pending = config_from_args(build_parser().parse_args(["once", *flags])).cycle.pending
    assert pending.gpu_resources == ("nvidia.com/a100-shared", "example.com/gpu")
    assert config_from_args(build_parser().parse_args(["once"])).cycle.pending.gpu_resources == ()
    argv = ["once", "--prometheus.url", url, "--history.db", str(tmp_path / "h.sqlite")]
    assert main([*argv, *flags]) == ExitCode.OK
    regex = "nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+|nvidia_com_a100_shared|example_com_gpu"
    (queue,) = [q for q in sent if "kube_node_status_allocatable" in q]
    assert queue.count(f'resource=~"{regex}"') >= 10
    assert queue.count('resource=~"') == queue.count(f'resource=~"{regex}"')


def test_once_sends_the_extra_headers_mimir_needs(http_server, tmp_path: Path, capsys) -> None:  # noqa: F811
    """``--prometheus.header`` reaches ``once``'s client: a Mimir-like server answers
    401 "no org id" without X-Scope-OrgID."""
    import json

    def handle(req) -> None:
        if req.command == "POST":
            req.rfile.read(int(req.headers.get("Content-Length", 0)))
        if req.headers.get("X-Scope-OrgID") != "team-a":
            reply(req, 401, b"no org id\n", "text/plain")
            return
        rtype = "matrix" if req.path.startswith("/api/v1/query_range") else "vector"
        body = {"status": "success", "data": {"resultType": rtype, "result": []}}
        reply(req, 200, json.dumps(body).encode())

    url, seen = http_server(handle)
    argv = ["once", "--prometheus.url", url, "--prometheus.retries", "0"]
    db = ["--history.db", str(tmp_path / "h.sqlite")]
    assert main([*argv, *db]) == ExitCode.RUNTIME
    assert "HTTP 401" in capsys.readouterr().err
    seen.clear()
    assert main([*argv, *db, "--prometheus.header", "X-Scope-OrgID=team-a"]) == ExitCode.OK
    assert seen and {r.headers["X-Scope-OrgID"] for r in seen} == {"team-a"}
    assert "team-a" not in capsys.readouterr().err


def test_following_prometheus_clock_can_be_turned_off() -> None:
    """A proxy in front of Prometheus that dates its answers from a wrong clock would
    move every cycle to that clock: ``--no-query.prometheus-clock`` keeps this host's
    (no offset is ever beyond an infinite bound); on by default, at 30 s."""
    from gpu_eta.forecaster.prom_clock import OFFSET_BOUND_SECONDS

    on = config_from_args(build_parser().parse_args(["once"])).cycle
    off = config_from_args(build_parser().parse_args(["once", "--no-query.prometheus-clock"]))
    assert on.clock_offset_bound_seconds == OFFSET_BOUND_SECONDS == 30
    assert off.cycle.clock_offset_bound_seconds == math.inf


def test_once_keeps_a_silent_runs_stall_verdict_from_the_run_before(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The CronJob variant runs ``once`` every 5 minutes, each a new process: a run the
    previous run found stalled kept its verdict only within one process, so a run whose
    stall-check query failed pushed ``gpu_eta_job_stalled`` 0 and reset
    GpuEtaTrainingStalled's 10-minute ``for:``. The verdicts are carried in the history
    file as the counters are; a damaged saved value is one WARNING and keeps none.
    The client is the canned one of the cycle tests (``_open`` builds the real one)."""
    from gpu_eta.forecaster import main as forecaster_main
    from gpu_eta.forecaster.history import HistoryStore
    from gpu_eta.forecaster.once_counters import STALLED_KEY
    from tests.forecaster.test_cycle import NOW, StallCheckFailing, job, make_cycle, merge, s

    old = NOW - 3600
    client = StallCheckFailing(
        merge(
            job("stuck", 10, [(1, old - 60), (2, old)], old - 120),
            job("healthy", 10, [(1, NOW - 60), (2, NOW - 10)], NOW - 120),
            {"util_recent": [s(0.0, namespace="ml", pod="pod-stuck", container="c")]},
        )
    )
    client.close = lambda: None  # type: ignore[attr-defined]
    db = str(tmp_path / "h.sqlite")

    def opened(config):  # a new process's client, store and cycle each run
        store = HistoryStore.open(db)
        return client, store, make_cycle(client, store, stall_after_seconds=900)

    monkeypatch.setattr(forecaster_main, "_open", opened)

    def stalled_pushed() -> list[str]:
        assert main(["once", "--history.db", db]) == ExitCode.OK
        out = capsys.readouterr().out
        return sorted(
            line.split('run_id="')[1].split('"')[0] + " " + line.rsplit(" ", 1)[1]
            for line in out.splitlines()
            if line.startswith("gpu_eta_job_stalled{")
        )

    client.failing = False
    assert stalled_pushed() == ["healthy 0.0", "stuck 1.0"]  # the control
    client.failing = True
    assert stalled_pushed() == ["healthy 0.0", "stuck 1.0"]
    assert stalled_pushed() == ["healthy 0.0", "stuck 1.0"]  # and on, run after run
    store = HistoryStore.open(db)
    try:
        store.set_meta(STALLED_KEY, "{damaged")
    finally:
        store.close()
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.once_counters"):
        assert stalled_pushed() == ["healthy 0.0", "stuck 0.0"]  # unknown GPU use: not idle
    said = [r for r in caplog.records if "once stall verdicts" in r.getMessage()]
    assert [r.levelname for r in said] == ["WARNING"], said
