"""Run a function in a forked child process and get back what it returned.

Why a child: tests that set process limits (``RLIMIT_FSIZE``: a disk "full" at a
chosen size) or otherwise change the process must not leave them on the test runner;
they die with the child.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


def in_child(fn: Callable[..., Any], *args: Any, timeout: float = 120.0) -> Any:
    """``fn(*args)`` in a forked child; what it returned (it must pickle). An exception
    in the child fails the calling test with its type and message."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child() -> None:
        try:
            queue.put(("ok", fn(*args)))
        except BaseException as err:  # reported to the test, not lost in the child
            queue.put(("raised", f"{type(err).__name__}: {err}"))

    proc = ctx.Process(target=child)
    proc.start()
    try:
        status, value = queue.get(timeout=timeout)
    finally:
        proc.join(30)
    assert status == "ok", value
    return value
