"""Start and stop a real Prometheus (the Debian package) on loopback.

Used by the demo and by the integration tests, so both exercise the same code: a
temporary data directory, ports picked by the caller (or free ones), started and
made ready (``/-/ready``) by ``gpu_eta.launch.processes`` like every other child, optional backfill with ``promtool tsdb
create-blocks-from openmetrics`` before start (blocks added to a running server
appear only after a reload), and a stop that leaves no process behind.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import requests
import yaml

from gpu_eta.launch.processes import start_http, stop_process


class PrometheusNotInstalled(RuntimeError):
    """The prometheus/promtool binaries are missing (apt package ``prometheus``)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# where a binary is looked for after PATH: Debian installs there, and a PATH without it
# (a service's, sudo's secure_path) should still find the packages
FALLBACK_DIRS: tuple[str, ...] = ("/usr/bin",)
# the Debian package of each binary gpu-eta runs, for the error that says what to install
DEBIAN_PACKAGES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-pushgateway": "prometheus-pushgateway",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "victoria-metrics": "victoria-metrics",
    "vmalert": "victoria-metrics",
}


def find_binary(*names: str) -> str:
    """Path of a Prometheus-family binary under the first of ``names`` found (on PATH,
    then in ``FALLBACK_DIRS``), or an error naming the Debian package to install.

    Several names for one program: Debian renames some (``prometheus-alertmanager``
    is upstream's ``alertmanager``), and either install should work.
    """
    search = os.pathsep.join([os.environ.get("PATH", ""), *FALLBACK_DIRS])
    for name in names:
        path = shutil.which(name, path=search)
        if path is not None:
            return path
    packages = sorted({DEBIAN_PACKAGES.get(name, name) for name in names})
    raise PrometheusNotInstalled(
        f"{' or '.join(names)} not found on PATH: install it "
        f"(Debian: apt-get install {' '.join(packages)})"
    )


@dataclass
class ScrapeJob:
    """One static scrape job: a name, targets as host:port, optional relabel labels."""

    name: str
    targets: Sequence[str]
    labels: dict[str, str] = field(default_factory=dict)
    honor_labels: bool = True
    metrics_path: str = "/metrics"


def render_config(
    jobs: Sequence[ScrapeJob],
    scrape_interval: str = "1s",
    rule_files: Sequence[str] = (),
    alertmanagers: Sequence[str] = (),
) -> str:
    """Prometheus YAML for static jobs; ``honor_labels`` as our ServiceMonitor sets it.

    ``alertmanagers`` (host:port) receive the alerts of the rules in ``rule_files``.
    """
    cfg: dict = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                "job_name": job.name,
                "honor_labels": job.honor_labels,
                "metrics_path": job.metrics_path,
                "static_configs": [{"targets": list(job.targets), "labels": dict(job.labels)}],
            }
            for job in jobs
        ],
    }
    if rule_files:
        cfg["rule_files"] = list(rule_files)
    if alertmanagers:
        cfg["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]
        }
    return yaml.safe_dump(cfg, sort_keys=False)


class OwnedServer:
    """``stop()`` for a started server: its ``process`` and the ``_own_dir`` it may own.

    Shared by the Prometheus, VictoriaMetrics and Alertmanager launchers.
    """

    process: subprocess.Popen
    _own_dir: tempfile.TemporaryDirectory | None

    def stop(self) -> None:
        """Stop its process group (SIGTERM, SIGKILL after 10 s); removes a data dir it
        created. Idempotent."""
        stop_process(self.process)
        if self._own_dir is not None:
            self._own_dir.cleanup()
            self._own_dir = None


@contextmanager
def removed_on_failure(own_dir: tempfile.TemporaryDirectory | None) -> Iterator[None]:
    """Remove a server's own directory when starting it fails, then re-raise."""
    try:
        yield
    except BaseException:
        if own_dir is not None:
            own_dir.cleanup()
        raise


# Prometheus' UI pages, tried in order, the first also the guess when nothing answers:
# 2.x with the React UI serves /graph and /alerts; 3.x serves /query and /alerts (its
# /graph only redirects to /query, and it has no classic UI); a 2.x build without the
# React UI (Debian's 2.42) serves only the classic UI under /classic/ (/alerts is 404
# there, /graph only a redirect)
UI_PAGES: dict[str, tuple[str, ...]] = {
    "graph": ("/graph", "/query", "/classic/graph"),
    "alerts": ("/alerts", "/classic/alerts"),
}


def ui_url(base_url: str, page: str, timeout_seconds: float = 5.0) -> str:
    """URL of one of Prometheus' UI pages (a ``UI_PAGES`` key) that the server at
    ``base_url`` answers with 200 itself, so a printed link opens; the first path when
    none does (the server did not answer: no better guess)."""
    paths = UI_PAGES[page]
    for path in paths:
        try:
            resp = requests.get(base_url + path, allow_redirects=False, timeout=timeout_seconds)
        except requests.RequestException:
            break
        if resp.status_code == 200:
            return base_url + path
    return base_url + paths[0]


@dataclass
class PrometheusServer(OwnedServer):
    """A running Prometheus; ``url`` is its HTTP base, ``stop()`` is idempotent."""

    url: str
    port: int
    data_dir: Path
    config_path: Path
    process: subprocess.Popen
    log_path: Path
    _own_dir: tempfile.TemporaryDirectory | None = None

    def reload(self) -> None:
        """Re-read the config file (POST /-/reload; enabled at start)."""
        requests.post(f"{self.url}/-/reload", timeout=5).raise_for_status()

    def query(self, expr: str, timeout: float = 30.0) -> list[dict]:
        """Instant query; returns the ``result`` list (vector) or raises.

        ``timeout`` is generous: a Prometheus on a loaded machine answered 5 s late
        more than once, and a late answer is still right; a hung one still ends."""
        resp = requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=timeout)
        resp.raise_for_status()
        body = resp.json()
        if body.get("status") != "success":
            raise RuntimeError(f"query failed: {body}")
        return list(body["data"]["result"])

    def wait_for(
        self,
        expr: str,
        timeout: float = 30.0,
        min_results: int = 1,
        between_polls: Callable[[float], None] | None = None,
    ) -> list[dict]:
        """Poll an instant query until it returns ``min_results`` series or time runs out.

        Each query may take what is left of ``timeout``: a loaded Prometheus (the
        demo's backfill, compaction, a busy CI machine) can answer one query many
        seconds late, and that late answer is still the answer; a read cut at a fixed
        few seconds ended whole waits early. ``between_polls(seconds_left)`` runs after
        each short answer (a VictoriaMetrics index flush, tests/support/tsdb_wait.py),
        its requests cut at the same time left."""
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                result = self.query(expr, timeout=left)
                if len(result) >= min_results:
                    return result
                if between_polls is not None:
                    between_polls(max(0.1, deadline - time.monotonic()))
            except requests.Timeout:
                break
            time.sleep(0.25)
        raise TimeoutError(
            f"{expr!r}: {len(result)} series after {timeout}s (wanted {min_results})"
        )


def server_dir(
    data_dir: Path | None, prefix: str
) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """Where a server keeps its files: ``data_dir`` (created if missing), or a new
    temporary directory the server owns (returned too, so ``stop`` removes it)."""
    if data_dir is None:
        own_dir = tempfile.TemporaryDirectory(prefix=prefix)
        return Path(own_dir.name), own_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    return data_dir, None


def promtool(
    *args: str,
    stdin: str | None = None,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``promtool *args`` (text in and out) and return the finished process.

    Whatever the exit code: callers decide what a failure means (a check that must
    pass, one that must fail, or ``backfill``'s error). One place finds the binary.
    ``env``: the child's whole environment (None: this process's).
    """
    return subprocess.run(
        [find_binary("promtool"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def backfill(openmetrics_file: Path, data_dir: Path) -> None:
    """Write TSDB blocks from an OpenMetrics file (must end with ``# EOF``).

    promtool stages the blocks' head in a temporary directory of ``$TMPDIR`` and
    leaves it there when it is stopped (a Ctrl-C during the demo's backfill reaches
    promtool too): it gets a scratch directory beside ``data_dir`` as its ``TMPDIR``
    instead, removed whatever happens, so nothing is left outside the server's
    directory.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".promtool-", dir=data_dir.parent)
    try:
        proc = promtool(
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(openmetrics_file),
            str(data_dir),
            env={**os.environ, "TMPDIR": scratch},
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {proc.stderr.strip()[-2000:]}")


def tsdb_dir(data_dir: Path) -> Path:
    """Where ``start_prometheus(data_dir=...)`` keeps its TSDB: a caller may backfill it
    first (the demo does, to pick its port only when Prometheus is about to bind it)."""
    return data_dir / "data"


def start_prometheus(
    jobs: Sequence[ScrapeJob],
    *,
    port: int | None = None,
    data_dir: Path | None = None,
    scrape_interval: str = "1s",
    rule_files: Sequence[str] = (),
    alertmanagers: Sequence[str] = (),
    retention: str = "90d",
    extra_args: Sequence[str] = (),
    ready_timeout: float = 30.0,
    backfill_files: Sequence[Path] = (),
    preexec_fn: Callable[[], None] | None = None,
) -> PrometheusServer:
    """Start Prometheus on 127.0.0.1 and wait until ``/-/ready`` answers 200.

    ``backfill_files`` (OpenMetrics text ending in ``# EOF``) are turned into blocks
    before the server starts, so their history is queryable at once.
    ``preexec_fn`` runs in the child before exec (the demo passes one that makes
    Prometheus die with it, even when the demo is killed with SIGKILL).
    """
    binary = find_binary("prometheus")
    base, own_dir = server_dir(data_dir, "gpu-eta-prom-")
    tsdb = tsdb_dir(base)
    config_path = base / "prometheus.yml"
    log_path = base / "prometheus.log"
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with removed_on_failure(own_dir):
        tsdb.mkdir(exist_ok=True)
        for path in backfill_files:
            backfill(Path(path), tsdb)
        config_path.write_text(render_config(jobs, scrape_interval, rule_files, alertmanagers))
        process = start_http(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={tsdb}",
                f"--storage.tsdb.retention.time={retention}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--storage.remote.flush-deadline=1s",
                *extra_args,
            ],
            f"{url}/-/ready",
            log_path,
            name="prometheus",
            timeout_seconds=ready_timeout,
            preexec_fn=preexec_fn,
        )
    return PrometheusServer(
        url=url,
        port=port,
        data_dir=tsdb,
        config_path=config_path,
        process=process,
        log_path=log_path,
        _own_dir=own_dir,
    )
