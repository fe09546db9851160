"""gpu_eta.launch.processes with real child processes: ready, died early, never ready, log tails."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import requests

from gpu_eta.launch.processes import (
    LaunchError,
    log_tail,
    spawn,
    start_http,
    stop_processes,
    wait_http,
)
from gpu_eta.launch.prometheus import free_port, stop_process
from tests.support.net import dead_port


def _gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (reaped, or a zombie waiting for init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def test_a_real_http_server_is_ready_and_answers(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "ok.txt").write_text("hello")
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    proc = start_http(
        cmd,
        f"http://127.0.0.1:{port}/ok.txt",
        tmp_path / "server.log",
        name="http.server",
        cwd=tmp_path / "www",
        timeout_seconds=60,
    )
    try:
        assert proc.poll() is None
        assert os.getpgid(proc.pid) == proc.pid  # its own group: stop_process stops it whole
        assert requests.get(f"http://127.0.0.1:{port}/ok.txt", timeout=5).text == "hello"
    finally:
        stop_process(proc)
    assert proc.poll() is not None


def test_a_process_that_dies_says_why_at_once(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "print('starting up', flush=True)\n"
        "sys.stderr.write('error: --web.listen-address: bad port\\n')\n"
        "sys.exit(2)\n"
    )
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as info:
        start_http(
            [sys.executable, "-c", script],
            f"http://127.0.0.1:{dead_port()}/metrics",
            tmp_path / "x.log",
            name="exporter",
            timeout_seconds=60,
        )
    assert time.monotonic() - t0 < 30  # not the whole timeout
    text = str(info.value)
    assert text.startswith("exporter exited with code 2 before answering http://127.0.0.1:")
    lines = text.splitlines()
    assert lines[-2:] == ["  starting up", "  error: --web.listen-address: bad port"]


def test_a_process_that_never_answers_2xx_is_stopped(tmp_path: Path) -> None:
    """A server answering 404 on the ready path is not ready; on timeout it is stopped."""
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    log = tmp_path / "server.log"
    with pytest.raises(LaunchError) as info:
        start_http(
            cmd, f"http://127.0.0.1:{port}/healthz", log, name="slow", cwd=tmp_path,
            timeout_seconds=3,
        )  # fmt: skip
    text = str(info.value)
    assert f"slow did not answer http://127.0.0.1:{port}/healthz within 3s (last: HTTP 404)" in text
    assert '"GET /healthz HTTP/1.1" 404' in text  # the server's own log line
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/", timeout=5)  # nothing left listening


def test_wait_http_leaves_the_process_to_the_caller(tmp_path: Path) -> None:
    log = tmp_path / "sleeper.log"
    proc = spawn([sys.executable, "-c", "import time; time.sleep(60)"], log)
    try:
        with pytest.raises(LaunchError, match=r"within 0\.5s \(last: ConnectionError\)"):
            wait_http(
                proc,
                f"http://127.0.0.1:{free_port()}/",
                name="sleeper",
                log_path=log,
                timeout_seconds=0.5,
            )
        assert proc.poll() is None
    finally:
        stop_process(proc)
    assert _gone(proc.pid)


def test_a_missing_program_is_a_launch_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="cannot start /no/such/binary"):
        spawn(["/no/such/binary"], tmp_path / "x.log")


def test_log_tail_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i} " + "x" * 1000 + "\n" for i in range(5000)))
    tail = log_tail(log, lines=3)
    assert [line.split()[1] for line in tail.splitlines()] == ["4997", "4998", "4999"]
    assert all(len(line) <= 300 for line in tail.splitlines())
    assert log_tail(tmp_path / "missing.log").startswith("(no log: ")
    (tmp_path / "empty.log").write_text("\n\n")
    assert log_tail(tmp_path / "empty.log") == "(empty log)"


def test_another_process_answering_on_the_port_is_not_the_child_ready(tmp_path: Path) -> None:
    """The port picked free was taken before the child bound it (a parallel test
    worker's server): that server's 2xx is not the child's readiness. The child fails
    to bind and exits, and start_http says so with its log, instead of returning a
    process whose URL serves someone else's data."""
    import http.server
    import threading

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    port = other.server_address[1]
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        assert requests.get(f"http://127.0.0.1:{port}/", timeout=5).ok  # it answers 2xx
        cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        with pytest.raises(LaunchError, match="exited with code 1 before answering") as err:
            start_http(
                cmd,
                f"http://127.0.0.1:{port}/",
                tmp_path / "server.log",
                name="http.server",
                cwd=tmp_path,
                timeout_seconds=30,
            )
        assert "Address already in use" in str(err.value)
    finally:
        other.shutdown()
        other.server_close()


def test_listens_tells_the_process_holding_the_port(tmp_path: Path) -> None:
    from gpu_eta.launch.processes import listens

    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    proc = start_http(
        cmd, f"http://127.0.0.1:{port}/", tmp_path / "s.log", name="http.server", cwd=tmp_path
    )
    try:
        assert listens(proc.pid, port) is True
        assert listens(os.getpid(), port) is False
        assert listens(proc.pid, free_port()) is False
        assert listens(proc.pid, None) is None
    finally:
        stop_process(proc)


def test_several_processes_stop_together_not_one_after_another(tmp_path: Path) -> None:
    """``stop_processes``: each part of the demo takes up to a second to exit after its
    SIGTERM (a service sees the signal at its next poll), and stopping them one by one
    added those seconds up. All are signalled first, then waited for: three children
    that each exit 1 s after SIGTERM stop in about 1 s, each group killed whole.

    Twenty-four children (shells: cheap to start): one after another is 24 s, far past
    the 4.5 s bound however loaded the machine; together about 1 s."""
    script = 'trap "sleep 1; exit 0" TERM; echo ready; while :; do sleep 0.1; done'
    n = 24
    procs = [spawn(["sh", "-c", script], tmp_path / f"child-{i}.log") for i in range(n)]
    for i in range(n):
        wait_until_logged(tmp_path / f"child-{i}.log", "ready")
    started = time.monotonic()
    stop_processes([*procs, None])
    took = time.monotonic() - started
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]
    assert took < 4.5, took  # one after another: >= 24 s


def wait_until_logged(log: Path, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} not in {log}"
        time.sleep(0.05)
