"""Run a training script as ``python -c`` would, forked from a process that already
imported its framework: the framework-callback tests' trainings (tests/support/callbacks.py).

Why: each of those tests trains in a fresh Python process, and importing Keras,
Lightning or Transformers there costs 4-6 s of CPU, where the training itself takes a
fraction of one. Eighty such processes were a fifth of the whole suite's CPU time on
the 2-core CI machine. A zygote imports the framework once (per test worker and
framework); each script then runs in a child it forks, as its own process: its own
pid, environment, working directory, stdin from /dev/null, stdout and stderr to files,
``__main__`` a fresh module, and the interpreter's own shutdown at its end (non-daemon
threads joined, ``atexit`` hooks run, an uncaught exception printed and exit status 1,
an uncaught KeyboardInterrupt ending it by SIGINT), so the reporting package under test
is imported fresh in each child and sees what a training started by ``python`` does.

What a child does not see: the framework's import itself (its import-time warnings went
to the zygote's stderr). Its environment is the zygote's in every variable read at
import time: a zygote forks only for scripts whose environment matches the one it
started with in all but the variables read while training (``RUNTIME_VARIABLES``). Nothing computes in the zygote before it forks: a thread pool
started there would not exist in the child (fork copies only the calling thread).
What it imported is frozen out of the garbage collector (``gc.freeze``, as prefork
servers do): a child's collections, its last at exit among them, do not walk it. A
Keras script's exit took 6.3 s after its last line on a loaded machine, 1.5 s so.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# The frameworks a script may be forked for, each named by a script importing it, and
# what the zygote imports for it: Transformers loads its modules on first use (``import
# transformers`` alone took none of the 3.6 s a script's ``from transformers import
# Trainer`` then did), so the zygote takes what the tests' scripts use.
FRAMEWORKS = {
    "keras": "import keras",
    "lightning": "import lightning",
    "transformers": "from transformers import Trainer, TrainerCallback, TrainingArguments",
}
# Variables a child may have of its own: read by the reporting package or the
# frameworks' distributed setup while training, never while importing the framework
# (PYTEST_CURRENT_TEST: pytest names the test running in each).
RUNTIME_VARIABLES = re.compile(
    r"GPU_ETA_\w+|RANK|LOCAL_RANK|WORLD_SIZE|NODE_RANK|GROUP_RANK|PYTEST_CURRENT_TEST"
)

_ZYGOTE = r"""
import json, os, sys
for statement in sys.argv[1:]:
    exec(statement)
replies = os.fdopen(os.dup(1), "w", buffering=1)
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 1)  # nothing the zygote prints is mistaken for a reply
import gc
gc.freeze()  # as prefork servers do: no collection in a child walks what was imported
replies.write("ready\n")
for line in sys.stdin.buffer:
    request = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        replies.close()
        os.dup2(devnull, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-c"]
        import types
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        code = compile(request["code"], "<string>", "exec")
        del request, line
        # uncaught, an exception ends the child as it would `python -c`: printed, exit 1
        exec(code, main.__dict__)
        raise SystemExit(0)
    replies.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class Zygote:
    """A process that ran the import statements ``preload`` and forks a child per
    script it runs. One script at a time (a lock): a test worker runs one test at a
    time anyway."""

    def __init__(self, preload: tuple[str, ...], env: dict[str, str]):
        self.env = dict(env)
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            text=True,
        )
        assert self._proc.stdout is not None
        ready = self._proc.stdout.readline()
        if ready != "ready\n":
            raise RuntimeError(f"a zygote running {preload} did not start: {ready!r}")

    def run(self, code: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """``code`` run as ``python -c code`` with ``env`` would be, in a child forked
        from the zygote; killed after ``timeout`` seconds (``subprocess.TimeoutExpired``)."""
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        with self._lock, tempfile.TemporaryDirectory(prefix="gpu-eta-zygote-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {"env": env, "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
            proc.stdin.write(json.dumps({**request, "code": code}) + "\n")
            proc.stdin.flush()
            pid = json.loads(proc.stdout.readline())["pid"]
            killed = threading.Event()
            timer = threading.Timer(timeout, _kill, (pid, killed))
            timer.start()
            try:
                returncode = json.loads(proc.stdout.readline())["returncode"]
            finally:
                timer.cancel()
            result = subprocess.CompletedProcess(
                [sys.executable, "-c", code],
                returncode,
                out.read_text(errors="replace"),
                err.read_text(errors="replace"),
            )
        if killed.is_set():
            raise subprocess.TimeoutExpired(result.args, timeout, result.stdout, result.stderr)
        return result

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _kill(pid: int, killed: threading.Event) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        return
    killed.set()


_zygotes: dict[tuple[str, ...], Zygote] = {}  # by the statements each preloaded


def frameworks_of(code: str) -> tuple[str, ...]:
    """The frameworks ``code`` imports on a line of its own (``import numpy as np,
    keras``; ``from transformers import Trainer``), in ``FRAMEWORKS`` order."""
    imports = re.findall(r"^\s*(?:import|from)\s+([^\n#]*)", code, re.M)
    return tuple(
        name for name in FRAMEWORKS if any(re.search(rf"\b{name}\b", line) for line in imports)
    )


def run_python(code: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run([python, "-c", code], env=env, ...)``'s result (text output
    captured), from a zygote's child when ``code`` imports a framework, else from a plain
    subprocess. A zygote forks only for the environment it was started with but for
    ``RUNTIME_VARIABLES``: one started with another is replaced (a test worker's own
    environment changes when a test imports a framework in it: Lightning sets
    ``PYTORCH_NVML_BASED_CUDA_CHECK``)."""
    frameworks = frameworks_of(code)
    if not frameworks:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout
        )
    return _forked(code, tuple(FRAMEWORKS[name] for name in frameworks), env, timeout)


def run_module(
    module: str, args: list[str], preload: tuple[str, ...], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, "-m", module, *args], env=env, ...)``'s result (text
    output captured), from the child of a zygote that ran ``preload`` (the third-party
    libraries ``module`` imports, never ``module``'s own package: the child imports that
    fresh, as ``python -m`` does). Why: a forecaster CLI test started ``python -m
    gpu_eta.forecaster``, and each paid ~1.5 s of CPU importing numpy, scipy and
    scikit-learn for a run of a fraction of that."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{module!r}, *{list(args)!r}]\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    )
    return _forked(code, preload, env, timeout)


def _forked(
    code: str, preload: tuple[str, ...], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """``code`` run by a child of the zygote that ran ``preload`` with ``env`` (but for
    ``RUNTIME_VARIABLES``); one started with another environment is replaced."""
    base = {k: v for k, v in env.items() if not RUNTIME_VARIABLES.fullmatch(k)}
    zygote = _zygotes.get(preload)
    if zygote is None or zygote.env != base:
        if zygote is not None:
            zygote.close()
        zygote = _zygotes[preload] = Zygote(preload, base)
    return zygote.run(code, env, timeout)


@atexit.register
def _close_all() -> None:
    for zygote in _zygotes.values():
        zygote.close()
