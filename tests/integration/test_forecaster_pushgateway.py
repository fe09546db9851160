"""The CronJob variant end to end: ``once`` → a real Pushgateway → a real Prometheus.

What Prometheus stores from the gateway must be the metric contract (docs/metrics.md:
"a name that is not here is a bug"), and the counters pushed by successive ``once``
runs must behave as counters, so the dashboards' ``rate()`` panels read them.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from gpu_eta.forecaster.main import push_metrics
from gpu_eta.forecaster.publish import ServiceState
from gpu_eta.launch.processes import spawn, start_http, stop_process
from gpu_eta.launch.prometheus import ScrapeJob, find_binary, free_port
from tests.forecaster.test_publish import NOW, forecast_set
from tests.forecaster.test_spawner_profiles import (
    A100,
    T4,
    assert_a100_later_and_t4_unknown,
    forecaster_exposition,
)
from tests.support.net import dead_port

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
JOB = "gpu-eta-forecaster"


@pytest.fixture
def pushgateway(tmp_path) -> Iterator[str]:
    """A real Pushgateway in memory only (Debian's default persistence file would carry
    other runs' groups into this one); its base URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_http(
        [
            find_binary("prometheus-pushgateway"),
            f"--web.listen-address=127.0.0.1:{port}",
            "--persistence.file=",
        ],
        url + "/-/ready",
        tmp_path / "pushgateway.log",
        name="pushgateway",
    )
    try:
        yield url
    finally:
        stop_process(proc)


def contract_names() -> set[str]:
    text = (REPO / "docs" / "metrics.md").read_text()
    return set(re.findall(r"^\| `(gpu_eta_[a-z_]+)`", text, flags=re.M))


def test_what_prometheus_stores_from_the_pushgateway_is_the_contract(
    pushgateway, prometheus_factory
) -> None:
    """Pushed as summaries, the quantile families came back from the gateway with a
    zero ``_sum`` and ``_count`` for every job, GPU and pending pod; pushed untyped,
    the gateway passes the quantile samples through and adds nothing."""
    state = ServiceState()
    state.success(forecast_set(), 0.5, NOW)
    push_metrics(pushgateway, JOB, state, True, 10.0)  # what once does after a good cycle

    exposed = requests.get(pushgateway + "/metrics", timeout=10).text
    name = "gpu_eta_job_predicted_completion_timestamp_seconds"
    assert f"# TYPE {name} untyped" in exposed
    assert (
        f'{name}{{container="c",instance="",job="{JOB}",namespace="ml",pod="p",quantile="0.5"'
        in exposed
    )
    assert f"{name}_sum" not in exposed and f"{name}_count" not in exposed

    prom = prometheus_factory([ScrapeJob("pushgateway", [pushgateway.removeprefix("http://")])])
    prom.wait_for(f'gpu_eta_job_stalled{{job="{JOB}"}}', timeout=60)
    stored = {
        r["metric"]["__name__"] for r in prom.query(f'{{__name__=~"gpu_eta_.+", job="{JOB}"}}')
    }
    documented = contract_names()
    assert sorted(n for n in stored if n not in documented) == []
    # every family the set fills is there, the quantile ones included
    assert {name, "gpu_eta_gpu_predicted_free_timestamp_seconds"} <= stored
    got = prom.query(f'{name}{{job="{JOB}",quantile="0.9"}}')
    assert [float(r["value"][1]) for r in got] == [NOW + 400]


def dashboard_expr(title: str) -> str:
    """The query of the Forecaster quality dashboard's panel ``title``."""
    board = json.loads((REPO / "grafana" / "forecaster-quality.json").read_text())
    panels = [p for p in board["panels"] if p.get("title") == title]
    assert len(panels) == 1, title
    return panels[0]["targets"][0]["expr"]


def test_an_error_of_every_cronjob_run_shows_on_the_job_errors_panel(
    pushgateway, prometheus_factory, tmp_path
) -> None:
    """Three ``once`` runs whose cycle fails (Prometheus to query is away): each is a
    new process, yet the pushed ``job_errors_total{reason="cycle_failed"}`` goes 1, 2, 3
    (carried in the history file), so the dashboard's ``rate()`` panel shows it. Each
    run counting from 0 pushed 1 every time: the panel read 0."""
    prom = prometheus_factory([ScrapeJob("pushgateway", [pushgateway.removeprefix("http://")])])
    history = tmp_path / "h.sqlite"
    series = f'gpu_eta_forecaster_job_errors_total{{job="{JOB}",reason="cycle_failed"}}'
    for run in (1, 2, 3):
        proc = subprocess.run(
            [
                sys.executable, "-m", "gpu_eta.forecaster", "once",
                "--prometheus.url", f"http://127.0.0.1:{dead_port()}",
                "--prometheus.retries", "0",
                "--pushgateway.url", pushgateway,
                "--history.db", str(history),
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        pushed = requests.get(pushgateway + "/metrics", timeout=10).text
        assert f'reason="cycle_failed"}} {run}' in pushed
        # Prometheus has scraped this run's value before the next run pushes
        prom.wait_for(f"{series} == {run}", timeout=30)
    expr = dashboard_expr("Job errors by reason").replace("$__rate_interval", "1m")
    shown = {r["metric"].get("reason", ""): float(r["value"][1]) for r in prom.query(expr)}
    assert shown.get("cycle_failed", 0.0) > 0, shown
    increase = prom.query(f"increase({series}[1m])")
    assert increase and float(increase[0]["value"][1]) > 0
    errors = prom.query(f'gpu_eta_forecaster_queries_total{{job="{JOB}",result="error"}}')
    assert [float(r["value"][1]) for r in errors] == [3.0]


@pytest.mark.parametrize("honor_labels", [True, False])
def test_the_spawn_page_reads_each_pushed_forecaster_apart(
    pushgateway, prometheus_factory, honor_labels: bool
) -> None:
    """Two forecasters (CronJobs) push to one Pushgateway under their own ``job``; one's
    last run failed (``gpu_eta_forecaster_stale 1``). Scraped without ``honor_labels``
    (a site's own Pushgateway scrape), every pushed series has the gateway's ``job`` and
    ``instance`` and its pushed job as ``exported_job``: the hook's stale test, by
    ``(job, instance)`` alone, took the failed forecaster's flag for the healthy one's
    too, and the spawn page showed "no estimate". A third stopped running 3 h ago, its
    last push not marked stale: its last good cycle is too old, and its "free now" and
    T4 start are left out with the same labels, scraped either way."""
    now = time.time()
    for job, starts, stale, success in (
        ("fc-healthy", [(A100, 1, now + 7200)], False, now - 30),
        ("fc-failed", [(T4, 1, now - 60)], True, now - 1200),
        ("fc-stopped", [(A100, 1, now - 300), (T4, 1, now + 600)], False, now - 3 * 3600),
    ):
        text = forecaster_exposition(starts, stale, success).replace(" summary\n", " untyped\n")
        resp = requests.put(f"{pushgateway}/metrics/job/{job}", data=text, timeout=10)
        assert resp.status_code == 200, resp.text
    prom = prometheus_factory(
        [ScrapeJob("pushgateway", [pushgateway.removeprefix("http://")], honor_labels=honor_labels)]
    )
    prom.wait_for("gpu_eta_forecaster_stale", min_results=3)
    assert_a100_later_and_t4_unknown(prom.url, now)


# bcrypt of "s3cret" at cost 4 (Python's crypt with METHOD_BLOWFISH, rounds=16): the
# Pushgateway's --web.config.file takes bcrypt hashes only
PUSHER_HASH = "$2b$04$IOCK7XJdC66Th.V3ESgc4.zy9Zbdx47Q7P8F/DzBGAb1z1ArnUN4W"


def test_once_pushes_to_a_pushgateway_that_asks_for_basic_auth(tmp_path) -> None:
    """A Pushgateway with its own basic auth (``--web.config.file``) refused every push
    (401; the URL's ``user:password@`` is refused at start): ``once`` sends the user
    and the password file's text, and a wrong password is one line naming the 401."""
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  pusher: '{PUSHER_HASH}'\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn(
        [
            find_binary("prometheus-pushgateway"),
            f"--web.listen-address=127.0.0.1:{port}",
            "--persistence.file=",
            f"--web.config.file={web}",
        ],
        tmp_path / "pushgateway.log",
    )
    password = tmp_path / "password"

    def once() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable, "-m", "gpu_eta.forecaster", "once",
                "--prometheus.url", f"http://127.0.0.1:{dead_port()}",
                "--prometheus.retries", "0",
                "--pushgateway.url", url,
                "--pushgateway.basic-auth-user", "pusher",
                "--pushgateway.basic-auth-password-file", str(password),
                "--history.db", str(tmp_path / "h.sqlite"),
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    try:
        deadline = time.monotonic() + 30
        while True:  # /-/ready asks for the credentials too: wait_http cannot send them
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(url + "/-/ready", timeout=5, auth=("pusher", "s3cret")).ok:
                    break
            assert time.monotonic() < deadline and proc.poll() is None, "no pushgateway"
            time.sleep(0.1)
        assert requests.get(url + "/metrics", timeout=5).status_code == 401
        password.write_text("wrong\n")
        refused = once()
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "401" in refused.stderr and "wrong" not in refused.stderr, refused.stderr
        password.write_text("s3cret\n")
        pushed = once()  # the cycle fails (no Prometheus): the self-monitoring is pushed
        assert pushed.returncode == 1 and "push to" not in pushed.stderr, pushed.stderr
        text = requests.get(url + "/metrics", timeout=5, auth=("pusher", "s3cret")).text
        assert (
            f'gpu_eta_forecaster_job_errors_total{{instance="",job="{JOB}",reason="cycle_failed"}}'
            in text
        )
    finally:
        stop_process(proc)
