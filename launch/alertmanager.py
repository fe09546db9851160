"""Start and stop a real Alertmanager (Debian's ``prometheus-alertmanager`` or upstream's
``alertmanager``) on loopback.

gpu-eta's alert rules are only useful if their alerts reach people; the demo and
the integration tests send them through a real Alertmanager so what an on-call
engineer would receive (labels, the ``runbook`` annotation, resolution) is what is
tested. Gossip is off (``--cluster.listen-address=``: one instance, no peers) and
the single receiver has no integrations: alerts are kept and shown (API, ``amtool``)
but sent nowhere. ``alerts()`` reads ``/api/v2/alerts``; ``amtool()`` runs the real
``amtool`` against it.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from gpu_eta.launch.processes import start_http
from gpu_eta.launch.prometheus import (
    OwnedServer,
    find_binary,
    free_port,
    removed_on_failure,
    server_dir,
)

# Debian's name, then upstream's (its release archive): either install runs
BINARIES = ("prometheus-alertmanager", "alertmanager")


def render_config(group_wait: str = "1s", group_interval: str = "5s") -> str:
    """One route to one receiver without integrations; grouped per alert and pod."""
    cfg = {
        "route": {
            "receiver": "gpu-eta-demo",
            "group_by": ["alertname", "namespace", "pod"],
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": "4h",
        },
        "receivers": [{"name": "gpu-eta-demo"}],
    }
    return yaml.safe_dump(cfg, sort_keys=False)


@dataclass
class AlertmanagerServer(OwnedServer):
    """A running Alertmanager; ``url`` is its HTTP base."""

    url: str
    port: int
    process: subprocess.Popen
    log_path: Path
    _own_dir: tempfile.TemporaryDirectory | None = None

    def alerts(self, active_only: bool = True) -> list[dict]:
        """Alerts it holds (``/api/v2/alerts``), each with labels, annotations, status."""
        params = {"active": "true", "silenced": "false", "inhibited": "false"}
        if not active_only:
            params = {}
        resp = requests.get(f"{self.url}/api/v2/alerts", params=params, timeout=5)
        resp.raise_for_status()
        return list(resp.json())

    def amtool(self, *args: str) -> str:
        """Output of ``amtool --alertmanager.url=URL *args``; RuntimeError on failure."""
        proc = subprocess.run(
            [find_binary("amtool"), f"--alertmanager.url={self.url}", *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"amtool {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
        return proc.stdout


def start_alertmanager(
    *,
    port: int | None = None,
    data_dir: Path | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout: float = 30.0,
    preexec_fn: Callable[[], None] | None = None,
) -> AlertmanagerServer:
    """Start Alertmanager on 127.0.0.1; return once ``/-/ready`` answers."""
    binary = find_binary(*BINARIES)
    base, own_dir = server_dir(data_dir, "gpu-eta-am-")
    config_path = base / "alertmanager.yml"
    log_path = base / "alertmanager.log"
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with removed_on_failure(own_dir):
        config_path.write_text(render_config())
        process = start_http(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.path={base / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                *extra_args,
            ],
            f"{url}/-/ready",
            log_path,
            name="alertmanager",
            timeout_seconds=ready_timeout,
            preexec_fn=preexec_fn,
        )
    return AlertmanagerServer(url, port, process, log_path, own_dir)
