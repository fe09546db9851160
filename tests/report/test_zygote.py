"""tests/support/zygote.py: a script forked from a zygote ends as ``python -c`` would
end it, which the framework-callback tests rely on (exit hooks, threads, exit status).
The zygote here preloads ``json`` only: what it imported does not change how a child
runs, and a framework would cost seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support.zygote import Zygote, frameworks_of, run_module


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(("import json",), dict(os.environ))
    yield z
    z.close()


def plain(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )


ENDINGS = {
    "finished": "print('done')",
    "sys.exit": "import sys; print('x'); sys.exit(3)",
    "uncaught": "raise ValueError('boom')",
    # its own handler: a Python started with SIGINT ignored (a pytest-xdist worker's
    # children) keeps it ignored
    "ctrl-c": (
        "import os, signal, time; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "os.kill(os.getpid(), signal.SIGINT); time.sleep(5)"
    ),
    "exit hook after a thread": (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('hook'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread'))).start()"
    ),
    "own module": "import sys; print(__name__, sys.argv, 'json' in globals())",
}


@pytest.mark.parametrize("name", list(ENDINGS))
def test_a_child_ends_as_python_c_does(zygote, name: str) -> None:
    """Exit status, stdout and the last line of stderr equal a plain ``python -c``'s:
    an uncaught exception exits 1, an uncaught KeyboardInterrupt by SIGINT, non-daemon
    threads are joined before the exit hooks run, ``__main__`` is fresh."""
    code = ENDINGS[name]
    forked, alone = zygote.run(code, dict(os.environ), timeout=30), plain(code)
    assert (forked.returncode, forked.stdout) == (alone.returncode, alone.stdout)
    assert forked.stderr.strip().splitlines()[-1:] == alone.stderr.strip().splitlines()[-1:]
    if name == "ctrl-c":
        assert forked.returncode == -signal.SIGINT


def test_a_child_gets_its_own_environment_and_directory(zygote, tmp_path) -> None:
    env = dict(os.environ, GPU_ETA_URL="http://x/progress")
    code = "import os; print(os.environ['GPU_ETA_URL'], os.getcwd(), os.getpid())"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        out = zygote.run(code, env, timeout=30).stdout.split()
    finally:
        os.chdir(cwd)
    assert out[:2] == ["http://x/progress", str(tmp_path)] and int(out[2]) != os.getpid()


def test_a_child_past_its_timeout_is_killed(zygote) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run("import time; time.sleep(30)", dict(os.environ), timeout=0.5)
    assert zygote.run("print(1)", dict(os.environ), timeout=30).stdout == "1\n"


def test_the_frameworks_a_script_imports() -> None:
    assert frameworks_of("import numpy as np, keras\nx = 1") == ("keras",)
    assert frameworks_of("import torch, lightning as L") == ("lightning",)
    assert frameworks_of("from transformers import Trainer") == ("transformers",)
    assert frameworks_of("import json  # keras later\nprint('keras')") == ()


MODULE_RUNS = {
    "usage error": ["serve", "--bogus"],
    "runtime error": [
        "once",
        "--prometheus.url",
        "http://127.0.0.1:9",
        "--history.db",
        "/dev/null/x",
    ],
    "help": ["--help"],
}


@pytest.mark.parametrize("name", list(MODULE_RUNS))
def test_a_module_forked_ends_as_python_m_does(name: str) -> None:
    """``run_module`` (the forecaster's CLI tests: ``python -m gpu_eta.forecaster``, its
    numpy, scipy and scikit-learn imported once in a zygote): exit status, stdout and
    stderr's last line equal a plain ``python -m``'s, with the module's own argv."""
    args = MODULE_RUNS[name]
    env = dict(os.environ)
    forked = run_module("gpu_eta.forecaster", args, ("import json",), env, timeout=60)
    alone = subprocess.run(
        [sys.executable, "-m", "gpu_eta.forecaster", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (forked.returncode, forked.stdout) == (alone.returncode, alone.stdout)
    assert forked.stderr.strip().splitlines()[-1:] == alone.stderr.strip().splitlines()[-1:]
    assert forked.returncode == {"usage error": 2, "runtime error": 1, "help": 0}[name]
