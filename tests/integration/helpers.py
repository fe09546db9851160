"""Shared by the integration tests: poll for a condition, run the exporter as a process.

One place starts ``python -m exporter`` on free ports and waits until it answers, so
every test that needs a live exporter starts it the same way an operator would (a
subprocess in its own process group, output to a log file) and stops it the same way
(SIGTERM, then SIGKILL to the group), whatever it then asserts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from demo.prometheus import free_port

ROOT = Path(__file__).resolve().parents[2]


def wait_until(check, timeout: float, interval: float = 0.5, what: str = "condition"):
    """Poll ``check()`` until it returns something truthy; raise naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"{what} not met after {timeout:g}s (last: {last!r})")


@dataclass
class Exporter:
    """A running ``python -m exporter``: its process, ports and log file."""

    process: subprocess.Popen
    port: int
    progress_port: int
    log_path: Path

    @property
    def target(self) -> str:
        """``host:port`` of /metrics, as a Prometheus scrape target."""
        return f"127.0.0.1:{self.port}"

    @property
    def progress_url(self) -> str:
        return f"http://127.0.0.1:{self.progress_port}/progress"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        """SIGTERM, then SIGKILL to the process group if it hangs; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        return self.process.returncode


def start_exporter(
    log_path: Path, *args: str, ready: str = "/healthz", timeout: float = 60.0
) -> Exporter:
    """Start ``python -m exporter *args`` on two free loopback ports; return once
    ``ready`` (a path on the web port) answers 2xx. Raises (with the log) if the
    process exits or does not get ready in ``timeout`` seconds, leaving nothing running."""
    port, progress_port = free_port(), free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                *args,
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--progress.listen-address",
                f"127.0.0.1:{progress_port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    exporter = Exporter(process, port, progress_port, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exporter exited {process.returncode}: {log_path.read_text()}")
        try:
            if requests.get(f"http://{exporter.target}{ready}", timeout=2).ok:
                return exporter
        except requests.RequestException:
            pass
        time.sleep(0.1)
    exporter.stop()
    raise TimeoutError(f"exporter did not answer {ready} in {timeout:g}s: {log_path.read_text()}")
