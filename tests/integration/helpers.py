"""Shared by the integration tests: poll for a condition, run the exporter as a process,
a real PyTorch training script.

One place starts ``python -m gpu_eta.exporter`` on free ports and waits until it answers, so
every test that needs a live exporter starts it the same way the demo does
(``gpu_eta.launch.processes``: its own process group, output to a log file, an error that ends
with the log's last lines) and stops it the same way (``gpu_eta.launch.prometheus.stop_process``:
SIGTERM, then SIGKILL to the group), whatever it then asserts.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpu_eta.launch.processes import start_http
from gpu_eta.launch.prometheus import free_port, stop_process

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
    """A running ``python -m gpu_eta.exporter``: its process, ports and log file."""

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
        stop_process(self.process, grace_seconds=20)
        return self.process.returncode


def start_exporter(
    log_path: Path, *args: str, ready: str = "/healthz", timeout: float = 60.0
) -> Exporter:
    """Start ``python -m gpu_eta.exporter *args`` on two free loopback ports; return once
    ``ready`` (a path on the web port) answers 2xx. ``gpu_eta.launch.processes.LaunchError`` (with
    the log's last lines) if it exits or is not ready in ``timeout`` seconds, leaving
    nothing running."""
    port, progress_port = free_port(), free_port()
    cmd = [
        sys.executable,
        "-m",
        "gpu_eta.exporter",
        *args,
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--progress.listen-address",
        f"127.0.0.1:{progress_port}",
    ]
    url = f"http://127.0.0.1:{port}{ready}"
    process = start_http(cmd, url, log_path, name="exporter", timeout_seconds=timeout, cwd=ROOT)
    return Exporter(process, port, progress_port, log_path)


_TRAINING = """
import os, time, torch
from torch import nn
from gpu_eta_report import start
torch.manual_seed(0)
x = torch.randn({samples}, 16); y = (x.sum(1, keepdim=True) > 0).float()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
EPOCHS, BATCH = {epochs}, 64
steps = {samples} // BATCH
r = start(epochs=EPOCHS, steps_per_epoch=steps, batch_size=BATCH)
for epoch in range(EPOCHS):
    for i in range(steps):
        loss = nn.functional.binary_cross_entropy_with_logits(model(x[i*BATCH:(i+1)*BATCH]), y[i*BATCH:(i+1)*BATCH])
        opt.zero_grad(); loss.backward(); opt.step()
        r.step(epoch * steps + i + 1)
    r.epoch_end(epoch + 1, loss=loss.item())
    if {hold_path!r} is None or os.path.exists({hold_path!r}):
        time.sleep({pause_seconds})
r.end()
print(r.stats)
"""


def training_script(
    *, samples: int, epochs: int, pause_seconds: float, hold_path: Path | None = None
) -> str:
    """Source for ``python -c``: a real PyTorch CPU training loop (an MLP, batches of 64)
    that reports through ``gpu_eta_report`` like a user's job, every step (thinned by the
    client) and every epoch, then prints the client's stats. It pauses ``pause_seconds``
    after each epoch so that a Prometheus scraping every second sees each one; with
    ``hold_path``, only while that file exists: a test that has read what it needed of
    the running run removes it, and the run's last epochs end at once instead of being
    waited out."""
    hold = None if hold_path is None else str(hold_path)
    return _TRAINING.format(
        samples=samples, epochs=epochs, pause_seconds=pause_seconds, hold_path=hold
    )
