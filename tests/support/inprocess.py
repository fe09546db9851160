"""The exporter's ``main`` run in this process on a simulated node, for tests that
scrape a live exporter without a subprocess (faster, and failures show in-process).

One copy for every such test: ``simulated_args`` builds the flags, ``main_in_thread``
runs ``main`` until the ``with`` block ends (stopped through its ``stop`` event, as
SIGTERM would), ``scrape_until`` polls ``/metrics``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from gpu_eta.exporter.main import main
from gpu_eta.launch.prometheus import free_port


def local_args(port: int) -> list[str]:
    """/metrics on loopback ``port``, progress on a free loopback port, 200 ms cycles."""
    return [
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--progress.listen-address",
        f"127.0.0.1:{free_port()}",
        "--collection.interval",
        "200ms",
    ]


def simulated_args(scenario: Path | str, port: int, *extra: str) -> list[str]:
    """Flags for a simulated node serving /metrics on ``port`` (progress on a free one)."""
    return ["--simulate", str(scenario), *local_args(port), "--no-collector.logs", *extra]


@contextmanager
def main_in_thread(args: list[str]) -> Iterator[list[int]]:
    """``main(args)`` in a thread for the ``with`` block; then stopped and joined. The
    list gets main's exit code."""
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(main(args, stop=stop)))
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join(timeout=30)


def scrape_until(port: int, needle: str = "", timeout: float = 30) -> str:
    """Poll /metrics until it answers with ``needle`` in it; the last text seen ("" if
    it never answered), so the caller's asserts say what was there."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            if needle in text:
                break
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    return text
