"""Start and stop a real VictoriaMetrics (Debian ``victoria-metrics``) on loopback.

The forecaster, ``top``, the dashboards and the demo promise to work against any
server speaking the Prometheus query API; VictoriaMetrics is the peer they are
tested against. One place starts it so the demo, the integration tests and the
scale benchmark run it the same way: a data directory, ``-promscrape.config`` with
the same scrape jobs Prometheus would get (``gpu_eta.launch.prometheus.render_config``: the
same ``honor_labels`` as our ServiceMonitors), ``-search.latencyOffset=0s`` (by
default VictoriaMetrics hides the last 30 s of samples from queries, which would
make a fresh scrape invisible) and ``/health`` as the readiness check.

``import_openmetrics`` loads the OpenMetrics files a Prometheus is backfilled from
(``promtool tsdb create-blocks-from openmetrics``) through VictoriaMetrics' own
``/api/v1/import/prometheus``, so a backfilled history exists in both servers from
one file. Not ``vmctl prometheus`` over the promtool blocks: Debian's vmctl (1.79)
sends fewer samples than it reads in about one import in three.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import requests
import yaml

from gpu_eta.launch.processes import start_http
from gpu_eta.launch.prometheus import (
    PrometheusServer,
    ScrapeJob,
    find_binary,
    free_port,
    removed_on_failure,
    render_config,
    server_dir,
)


class VictoriaServer(PrometheusServer):
    """A running single-node VictoriaMetrics: the same face as ``PrometheusServer``
    (``url``, ``query``, ``wait_for``, ``reload``, ``stop``), so the demo and the tests
    use either without knowing which."""


def scrape_config(jobs: Sequence[ScrapeJob], scrape_interval: str) -> str:
    """Prometheus' scrape config for ``jobs`` without what vmagent's strict parser rejects.

    VictoriaMetrics reads the same ``scrape_configs`` but refuses keys it does not
    know, such as the rule-evaluation ``evaluation_interval`` under ``global``.
    """
    cfg = yaml.safe_load(render_config(jobs, scrape_interval))
    cfg["global"].pop("evaluation_interval", None)
    return yaml.safe_dump(cfg, sort_keys=False)


# VictoriaMetrics keeps at most this many labels of a series and drops the rest (30 by
# default): a GPU node's kube_node_labels with node-feature-discovery's labels
# allow-listed carries scores of them, and the pool or GPU product label the queue reads
# was dropped (docs/victoriametrics.md)
MAX_LABELS_PER_TIMESERIES = 256


def start_victoriametrics(
    jobs: Sequence[ScrapeJob],
    *,
    port: int | None = None,
    data_dir: Path | None = None,
    scrape_interval: str = "1s",
    extra_args: Sequence[str] = (),
    ready_timeout: float = 30.0,
    preexec_fn: Callable[[], None] | None = None,
) -> VictoriaServer:
    """Start VictoriaMetrics on 127.0.0.1 scraping ``jobs``; return once ``/health`` is OK.

    Retention is 100 years so backfilled history of any age stays (the default,
    one month, would drop an older benchmark history silently); a series keeps up to
    ``MAX_LABELS_PER_TIMESERIES`` labels (the default, 30, dropped a node's pool label
    beside node-feature-discovery's).
    """
    binary = find_binary("victoria-metrics")
    base, own_dir = server_dir(data_dir, "gpu-eta-vm-")
    storage = base / "data"
    config_path = base / "scrape.yml"
    log_path = base / "victoria-metrics.log"
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with removed_on_failure(own_dir):
        config_path.write_text(scrape_config(jobs, scrape_interval))
        process = start_http(
            [
                binary,
                f"-httpListenAddr=127.0.0.1:{port}",
                f"-storageDataPath={storage}",
                f"-promscrape.config={config_path}",
                "-retentionPeriod=100y",
                "-search.latencyOffset=0s",
                f"-maxLabelsPerTimeseries={MAX_LABELS_PER_TIMESERIES}",
                *extra_args,
            ],
            f"{url}/health",
            log_path,
            name="victoria-metrics",
            timeout_seconds=ready_timeout,
            preexec_fn=preexec_fn,
        )
    return VictoriaServer(
        url=url,
        port=port,
        data_dir=storage,
        config_path=config_path,
        process=process,
        log_path=log_path,
        _own_dir=own_dir,
    )


def prometheus_lines(lines: Iterable[str]) -> Iterator[str]:
    """OpenMetrics sample lines as the Prometheus text format VictoriaMetrics imports:
    the timestamp in integer milliseconds instead of decimal seconds; comments, ``# EOF``
    and blank lines dropped. A sample line without a timestamp is an error (a backfill
    file needs one on every sample)."""
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(" ", 2)
        try:
            millis = round(float(parts[2]) * 1000)
        except (IndexError, ValueError):
            raise ValueError(
                f"line {number}: a sample without a timestamp: {line[:200]!r}"
            ) from None
        yield f"{parts[0]} {parts[1]} {millis}\n"


def import_openmetrics(
    files: Sequence[Path], vm_url: str, batch_lines: int = 100_000, timeout: float = 600.0
) -> int:
    """Load OpenMetrics backfill files into VictoriaMetrics; returns the samples sent.

    Streams each file in batches of ``batch_lines`` through ``/api/v1/import/prometheus``
    (synchronous: rows are stored when it answers), then flushes so every row is
    searchable when this returns.
    """
    sent = 0
    with requests.Session() as session:

        def post(batch: list[str]) -> None:
            resp = session.post(
                f"{vm_url}/api/v1/import/prometheus", data="".join(batch).encode(), timeout=timeout
            )
            if resp.status_code >= 300:
                raise RuntimeError(f"VictoriaMetrics refused the import: {resp.text[:500]}")

        for path in files:
            batch: list[str] = []
            with Path(path).open(encoding="utf-8") as fh:
                for line in prometheus_lines(fh):
                    batch.append(line)
                    if len(batch) >= batch_lines:
                        post(batch)
                        sent += len(batch)
                        batch = []
            if batch:
                post(batch)
                sent += len(batch)
        session.get(f"{vm_url}/internal/force_flush", timeout=60).raise_for_status()
    return sent


def start_vmalert(
    rule_files: Sequence[str],
    vm_url: str,
    alertmanager_url: str,
    log_path: Path,
    *,
    evaluation_interval: str = "2s",
    ready_timeout: float = 30.0,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[subprocess.Popen, str]:
    """``vmalert``: VictoriaMetrics' rule evaluator, with gpu-eta's rules, against ``vm_url``.

    VictoriaMetrics evaluates no rules itself. vmalert reads the same rules file
    Prometheus loads, queries VictoriaMetrics, sends alerts to the Alertmanager and
    writes recording rules and the ``ALERTS`` series back into VictoriaMetrics
    (``-remoteWrite.url``; what ``top``'s alert line reads), restoring alert state
    after a restart from it (``-remoteRead.url``). Returns the process and its URL.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_http(
        [
            find_binary("vmalert"),
            *(f"-rule={path}" for path in rule_files),
            f"-datasource.url={vm_url}",
            f"-notifier.url={alertmanager_url}",
            f"-remoteWrite.url={vm_url}",
            f"-remoteRead.url={vm_url}",
            f"-evaluationInterval={evaluation_interval}",
            f"-httpListenAddr=127.0.0.1:{port}",
        ],
        f"{url}/health",
        log_path,
        name="vmalert",
        timeout_seconds=ready_timeout,
        preexec_fn=preexec_fn,
    )
    return process, url
