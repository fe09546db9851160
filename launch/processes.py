"""Start a child process and wait until its HTTP endpoint answers: one way for all.

The demo (``gpu_eta.demo.stack``), the integration tests and the benchmarks all start real
processes (exporters, the forecaster, node_exporter, a bare listener) and must not
go on before those answer. Doing it in one place means every one of them gets the
same guarantees:

- the child runs in its own session (process group), so ``stop_process`` (here:
  SIGTERM to the group, SIGKILL after a grace period) can stop it and anything it
  started, and a terminal's Ctrl-C reaches only the parent, which then stops its
  children in order;
- its stdout and stderr go to a log file, so when it dies or hangs the error says
  *why*: ``LaunchError`` carries the log's last lines (read with a size cap: a child
  that printed megabytes cannot make the message huge);
- readiness is a 2xx answer on a URL, polled with a deadline; a process that exits
  first fails at once instead of after the whole timeout. On Linux the answer must
  come from the child (``listens``): ports are picked free (``launch.prometheus.
  free_port``) and bound by the child a moment later, so a port another process took
  meanwhile (a parallel test worker's server) would otherwise pass for the child's,
  which then fails to bind while the caller talks to someone else's server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import requests

TAIL_LINES = 12
_TAIL_BYTES = 16 * 1024  # read at most this much of the log's end
_LINE_CHARS = 300


class LaunchError(RuntimeError):
    """A child exited or did not answer in time; the message ends with its log's last lines."""


def spawn(
    cmd: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen:
    """Start ``cmd`` in its own session with stdout and stderr appended to ``log_path``.

    stdin is closed (no child may wait on the terminal). ``LaunchError`` when the
    program cannot be started at all (not found, not executable).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        try:
            return subprocess.Popen(
                list(cmd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                preexec_fn=preexec_fn,
            )
        except OSError as err:
            raise LaunchError(f"cannot start {cmd[0]}: {err.strerror or err}") from None


def log_tail(log_path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, each cut to a sane length; a note when none."""
    try:
        with log_path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - _TAIL_BYTES))
            data = log.read()
    except OSError as err:
        return f"(no log: {err.strerror or err})"
    text = data.decode("utf-8", "replace").splitlines()
    if size > _TAIL_BYTES and text:
        text = text[1:]  # the first line read is probably cut
    kept = [line[:_LINE_CHARS] for line in text if line.strip()][-lines:]
    return "\n".join(kept) if kept else "(empty log)"


def wait_http(
    process: subprocess.Popen,
    url: str,
    *,
    name: str,
    log_path: Path,
    timeout_seconds: float = 60.0,
    interval_seconds: float = 0.1,
) -> None:
    """Poll ``url`` until it answers 2xx; ``LaunchError`` if ``process`` exits first or
    time runs out. The process is left as it is: stopping it is the caller's choice."""
    deadline = time.monotonic() + timeout_seconds
    last = "no answer"
    while True:
        code = process.poll()
        if code is not None:
            raise LaunchError(
                f"{name} exited with code {code} before answering {url}; "
                f"last lines of {log_path}:\n{_indent(log_tail(log_path))}"
            )
        try:
            status = requests.get(url, timeout=2).status_code
            if 200 <= status < 300 and listens(process.pid, urlsplit(url).port) is not False:
                return
            last = f"HTTP {status}" if status >= 300 else "answered by another process"
        except requests.RequestException as err:
            last = type(err).__name__
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"{name} did not answer {url} within {timeout_seconds:g}s (last: {last}); "
                f"last lines of {log_path}:\n{_indent(log_tail(log_path))}"
            )
        time.sleep(interval_seconds)


def listens(pid: int, port: int | None) -> bool | None:
    """Whether ``pid``, or a process of its session, holds a listening TCP socket on
    ``port``; None when that cannot be told (no ``/proc``, no port in the URL).

    Linux: the LISTEN sockets on the port are read from ``/proc/net/tcp`` and
    ``tcp6`` (their inodes), then looked for among the process' open files."""
    if port is None or not Path("/proc/net/tcp").exists():
        return None
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            next(fh, None)  # the header
            for line in fh:
                fields = line.split()
                # local address "0100007F:1F90", state 0A = LISTEN, inode the 10th field
                if (
                    len(fields) > 9
                    and fields[3] == "0A"
                    and int(fields[1].rsplit(":", 1)[1], 16) == port
                ):
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return False
    return _holds(pid, inodes) or any(_holds(p, inodes) for p in _session(pid))


def _holds(pid: int, sockets: set[str]) -> bool:
    """Whether ``pid`` has one of ``sockets`` (``socket:[inode]``) open."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{name}") in sockets:
                return True
    return False


def _session(pid: int) -> list[int]:
    """The other processes of ``pid``'s session (``spawn`` starts each child in its
    own): a child that serves from a process it started."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pid:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[3]) == pid:  # field 6: session id
                out.append(int(entry))
    return out


def start_http(
    cmd: Sequence[str],
    url: str,
    log_path: Path,
    *,
    name: str,
    timeout_seconds: float = 60.0,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen:
    """``spawn`` then ``wait_http``; on failure the process group is stopped before the
    ``LaunchError`` propagates, so nothing is left running."""
    process = spawn(cmd, log_path, env=env, cwd=cwd, preexec_fn=preexec_fn)
    try:
        wait_http(process, url, name=name, log_path=log_path, timeout_seconds=timeout_seconds)
    except BaseException:
        stop_process(process)
        raise
    return process


def stop_process(proc: subprocess.Popen | None, grace_seconds: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace_seconds``; reap the child."""
    stop_processes([proc], grace_seconds)


def stop_processes(procs: Sequence[subprocess.Popen | None], grace_seconds: float = 10.0) -> None:
    """``stop_process`` for each of ``procs`` at once: every group gets its SIGTERM
    first, then each is waited for until one deadline ``grace_seconds`` away and
    SIGKILLed past it. Why: a service sees SIGTERM at its next poll (up to a second)
    and then finishes its work, so stopping the demo's parts one after another added
    those waits up (three exporters and a forecaster: ~4 s)."""
    running = [p for p in procs if p is not None]
    for proc in running:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        # children of the group that outlived their leader
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
