"""SIGTERM ends the exporter process even while a collector hangs.

A real subprocess runs the real ``main()`` on the built-in simulated node, with one
collector replaced by one that hangs for two minutes: hostmemory, as a stuck NFS
read or a gRPC call without a deadline would, or the NVML source inside an NVML
call, as on a GPU fallen off the bus (its ``close()`` is one of the closers). The kubelet sends SIGTERM and, 30 s
later, SIGKILL: the process must be gone well before that, with exit code 0 (the
progress state saved on the way out), not held until the hung call returns.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 120
EXIT_WITHIN_SECONDS = 15.0  # generous: the loop's join is bounded by ~3 s here

# Run as `python script.py MARKER [exporter flags...]`.
SCRIPT = f"""
import sys, time
from dataclasses import replace
from pathlib import Path

from gpu_eta.exporter.collectors import registry
from gpu_eta.exporter.main import main

marker = Path(sys.argv[1])


class Hang:
    def poll(self, pods):
        marker.write_text("hanging")
        time.sleep({HANG_SECONDS})
        return ()


registry.load()
real = registry.registered()["hostmemory"]
registry.unregister("hostmemory")
registry.register(replace(real, build=lambda ctx: Hang()))
sys.exit(main(sys.argv[2:]))
"""


# The gpu collector as NvmlGpuSource over the NVML fake, whose utilisation call hangs
# from the third poll on (a GPU fallen off the bus): the poll holds the source's lock
# inside that call while the closers run.
NVML_SCRIPT = f"""
import sys, time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, {str(ROOT)!r})
from gpu_eta.exporter.collectors import registry
from gpu_eta.exporter.collectors.gpu import NvmlGpuSource
from gpu_eta.exporter.main import main
from tests.exporter.collectors.test_gpu import _gpu, fake_nvml

marker = Path(sys.argv[1])
nv = fake_nvml([_gpu(0, util=10)])
calls = [0]
utilisation = nv.nvmlDeviceGetUtilizationRates


def hang(handle):
    calls[0] += 1
    if calls[0] >= 3:
        marker.write_text("hanging")
        time.sleep({HANG_SECONDS})
    return utilisation(handle)


nv.nvmlDeviceGetUtilizationRates = hang


def build(ctx):
    source = NvmlGpuSource(nv)
    source.open()
    ctx.closers.append(source.close)
    return source


registry.load()
real = registry.registered()["gpu"]
registry.unregister("gpu")
registry.register(replace(real, build=build))
sys.exit(main(sys.argv[2:]))
"""


def test_sigterm_exits_promptly_while_a_collector_hangs(tmp_path: Path) -> None:
    _sigterm_while_hanging(tmp_path, SCRIPT)


def test_sigterm_exits_promptly_while_an_nvml_call_hangs(tmp_path: Path) -> None:
    """The NVML source's close() must not wait for the lock a hung poll holds."""
    _sigterm_while_hanging(tmp_path, NVML_SCRIPT)


def _sigterm_while_hanging(tmp_path: Path, source: str) -> None:
    script = tmp_path / "hang.py"
    script.write_text(source)
    marker = tmp_path / "hanging"
    logs = tmp_path / "logs"
    logs.mkdir()
    state = tmp_path / "progress.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            str(marker),
            "--simulate",
            "--web.listen-address=127.0.0.1:0",
            "--progress.listen-address=127.0.0.1:0",
            f"--progress.state-file={state}",
            f"--path.pod-logs={logs}",
            "--collection.interval=1s",
            "--collection.timeout=500ms",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120  # start-up on a busy machine
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the hanging collector never ran"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            _, stderr = proc.communicate(timeout=EXIT_WITHIN_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running {EXIT_WITHIN_SECONDS:g}s after SIGTERM: the hung "
                "collector's thread holds the interpreter's exit"
            ) from None
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-2000:]
    assert "shutting down" in stderr
    assert took < EXIT_WITHIN_SECONDS
