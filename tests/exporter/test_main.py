"""CLI: --help, the no-GPU line, usage errors, config precedence, a full in-process run."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from gpu_eta.exporter.config import COLLECTORS, ConfigError
from gpu_eta.exporter.main import ExitCode, main, parse_config
from gpu_eta.launch.prometheus import free_port
from tests.support.inprocess import main_in_thread, scrape_until, simulated_args

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "fixtures" / "scenarios" / "small.yaml"
NO_GPU_LINE = (
    "gpu-eta exporter: NVML library not found (no NVIDIA driver on this node); "
    "use --simulate for a simulated node"
)


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_eta.exporter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_help_explains_everything() -> None:
    proc = _run("--help")
    assert proc.returncode == 0
    for flag in (
        "--simulate",
        "--web.listen-address",
        "--config.file",
        "--collection.interval",
        "--node-name",
        "--pod-labels",
        "--kubelet.socket",
        "--kubelet.gpu-resource",
        "--path.procfs",
        "--path.cgroupfs",
        "--path.pod-logs",
        "--path.docker-containers",
        "--progress.listen-address",
        "--progress.state-file",
        "--progress.allow-host-network",
        "--kube.kubeconfig",
        "--kube.api-url",
        "--kube.max-pods",
        "--log.level",
        "--debug",
    ):
        assert flag in proc.stdout, flag
    for name in COLLECTORS:
        assert f"--collector.{name}" in proc.stdout and f"--no-collector.{name}" in proc.stdout
    assert "default: None" not in proc.stdout  # real defaults are spelled out instead
    assert "(default :9842)" in proc.stdout


def test_no_gpu_and_no_simulate_is_one_line_and_exit_1() -> None:
    proc = _run("--web.listen-address", f"127.0.0.1:{free_port()}")
    assert proc.returncode == 1
    assert proc.stderr.strip() == NO_GPU_LINE
    assert "Traceback" not in proc.stderr


def test_bad_flag_value_is_a_usage_error() -> None:
    proc = _run("--collection.interval", "5parsecs")
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.strip().startswith(
        "gpu-eta exporter: --collection.interval: expected a duration"
    )
    assert len(proc.stderr.strip().splitlines()) == 1


def test_invalid_scenario_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [{index: 0, colour: red}]\n")
    proc = _run("--simulate", str(bad), "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"gpu-eta exporter: {bad}: gpus[0]: unknown key(s) colour"
    ]


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = _run(
            "--simulate",
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--progress.listen-address",
            f"127.0.0.1:{free_port()}",
            "--no-collector.logs",
        )
    assert proc.returncode == 1
    assert f"cannot listen on --web.listen-address 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_file_then_flags_then_env(tmp_path: Path) -> None:
    cfg_file = tmp_path / "exporter.yaml"
    cfg_file.write_text(
        "web.listen-address: 127.0.0.1:1111\n"
        "collection.interval: 10s\n"
        "collector.logs: false\n"
        "pod-labels: [team]\n"
    )
    cfg = parse_config(
        ["--config.file", str(cfg_file), "--collection.interval", "2s", "--no-collector.kube"],
        env={"NODE_NAME": "gpu-node-3"},
    )
    assert cfg.web_listen_address.port == 1111  # from the file
    assert cfg.collection_interval_seconds == 2  # the flag wins
    assert not cfg.enabled("logs") and not cfg.enabled("kube") and cfg.enabled("gpu")
    assert cfg.pod_labels == ("team",)
    assert cfg.node_name == "gpu-node-3"  # downward API
    assert parse_config(["--node-name", "a"], env={"NODE_NAME": "b"}).node_name == "a"
    assert parse_config(["--simulate"], env={}).simulate == ""
    with pytest.raises(ConfigError, match=r"^env NODE_NAME: node-name: not a valid"):
        parse_config([], env={"NODE_NAME": "Not_Valid"})
    assert parse_config(["--simulate", "x.yaml"], env={}).simulate == "x.yaml"


def test_bad_config_file_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg_file = tmp_path / "exporter.yaml"
    cfg_file.write_text("collector.nvlink: true\n")
    assert main(["--config.file", str(cfg_file)]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"gpu-eta exporter: --config.file {cfg_file}: collector.nvlink: unknown collector (known: cgroup, gpu, hostmemory, kube, logs, podresources, progress)"
    )
    assert main(["--config.file", str(tmp_path / "missing.yaml")]) == ExitCode.USAGE
    assert "cannot read" in capsys.readouterr().err


def test_in_process_run_serves_and_stops() -> None:
    port = free_port()
    with main_in_thread(simulated_args(SCENARIO, port)) as result:
        text = scrape_until(port)
        assert 'gpu_eta_gpu_info{UUID="GPU-00000000-0000-0000-0000-000000000000"' in text
        assert 'node="test-node"' in text  # the scenario's node name
        assert "process_resident_memory_bytes" in text
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).text == "ok\n"
    assert result == [0]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_real_sources_are_wired_and_a_missing_kubelet_is_success_zero(tmp_path: Path) -> None:
    """Without --simulate (and with gpu/kube off: no driver, no API server here) the
    real pod-resources, cgroup, host-memory, progress and log sources start; the
    kubelet socket is missing, which shows as success 0 while /metrics keeps working."""
    port = free_port()
    (tmp_path / "cgroup").mkdir()
    (tmp_path / "cgroup" / "cgroup.controllers").write_text("memory\n")
    args = [
        "--no-collector.gpu",
        "--no-collector.kube",
        "--node-name",
        "gpu-node-1",
        "--kubelet.socket",
        str(tmp_path / "kubelet.sock"),
        "--path.procfs",
        str(tmp_path),
        "--path.cgroupfs",
        str(tmp_path / "cgroup"),
        "--path.pod-logs",
        str(tmp_path / "logs"),
        "--progress.state-file",
        str(tmp_path / "progress.json"),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--progress.listen-address",
        f"127.0.0.1:{free_port()}",
        "--collection.interval",
        "200ms",
        "--collection.timeout",
        "2s",
    ]
    with main_in_thread(args) as result:
        text = scrape_until(port, "collector_success")

        def ok(name: str, value: str) -> str:
            labels = f'collector="{name}",node="gpu-node-1"'
            return f"gpu_eta_exporter_collector_success{{{labels}}} {value}"

        assert ok("podresources", "0.0") in text
        for name in ("cgroup", "hostmemory", "progress", "logs"):
            assert ok(name, "1.0") in text, name
        assert 'collector="gpu"' not in text and 'collector="kube"' not in text
    assert result == [0]


def test_kube_collector_needs_a_node_name(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    code = main(
        [
            "--no-collector.gpu",
            "--no-collector.progress",
            "--no-collector.logs",
            "--web.listen-address",
            f"127.0.0.1:{free_port()}",
        ]
    )
    assert code == ExitCode.ERROR
    assert "set --node-name or env NODE_NAME" in capsys.readouterr().err


# -- client-only install (REVIEW2 item 7c): no `exporter` extra ----------------------

_BLOCK_AND_RUN = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # what a venv without the package looks like to import
how, sys.argv = sys.argv[2], ["gpu-eta-exporter", *sys.argv[3:]]
if how == "script":  # the console script's own code: from gpu_eta.exporter.main import main
    from gpu_eta.exporter.main import main
    sys.exit(main())
runpy.run_module("gpu_eta.exporter", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("how", ["script", "module"])
@pytest.mark.parametrize(
    ("blocked", "named"),
    [("yaml", "yaml"), ("prometheus_client", "prometheus_client"), ("grpc,yaml", "yaml")],
)
def test_without_the_exporter_extra_one_line_and_exit_2(how: str, blocked: str, named: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCK_AND_RUN, blocked, how, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (
        f"gpu-eta exporter: missing dependency '{named}': pip install 'gpu-eta[exporter]'\n"
    )


def test_a_missing_module_that_is_no_extra_keeps_its_traceback() -> None:
    from gpu_eta.exporter.main import missing_dependency

    assert missing_dependency(ModuleNotFoundError("x", name="exporter.nope")) is None
    assert missing_dependency(ModuleNotFoundError("x", name="google.protobuf")) == (
        "gpu-eta exporter: missing dependency 'google.protobuf': pip install 'gpu-eta[exporter]'"
    )


_SIGTERM_ON_ANOTHER_THREAD = """
import signal, sys, threading, time
from gpu_eta.exporter import main

class Cfg:
    def enabled(self, name):
        return False

class Runtime:
    cfg, version, node = Cfg(), "test", "n1"
    def start(self):
        print("started", flush=True)
    def metrics_address(self):
        return "127.0.0.1:0"
    def stop(self):
        print("stopped", flush=True)

# a thread that may take SIGTERM, then the main thread blocks it: the kernel must hand
# the signal to that thread, as it may to any collector thread of the real exporter
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
sys.exit(main._run(Runtime(), None))
"""


def test_a_sigterm_taken_by_another_thread_still_stops_the_exporter(tmp_path: Path) -> None:
    """Python runs signal handlers in the main thread, woken only by a signal delivered
    to it: an untimed wait there slept through a SIGTERM given to a collector's thread
    until the kubelet's SIGKILL, and the progress state was never saved."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGTERM_ON_ANOTHER_THREAD],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == "stopped\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
