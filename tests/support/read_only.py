"""A directory its files cannot be written in, and a function run by a user bound by that.

For tests of what a service does with a read-only volume: root writes anywhere
whatever the modes say, so when the tests run as root the function runs in a
forked child that first drops to ``nobody``; otherwise it runs in a forked child as
the current user, whom the modes already stop.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NOBODY = 65534


@contextmanager
def read_only_directory(prepare: Callable[[Path], None]) -> Iterator[Path]:
    """A new directory filled by ``prepare(directory)``, then made read-only (the
    directory 0555, its files 0444) for the ``with`` block; removed afterwards.

    Made outside pytest's ``tmp_path``, which is private to the user running the
    tests: ``nobody`` must be able to reach it.
    """
    top = Path(tempfile.mkdtemp(prefix="gpu-eta-ro-"))
    os.chmod(top, 0o755)
    directory = top / "ro"
    directory.mkdir()
    try:
        prepare(directory)
        for path in directory.iterdir():
            os.chmod(path, 0o444)
        os.chmod(directory, 0o555)
        yield directory
    finally:
        os.chmod(directory, 0o755)
        shutil.rmtree(top)


def _child(fn: Callable[..., Any], args: tuple, queue: Any) -> None:
    try:
        if os.getuid() == 0:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        queue.put(("ok", fn(*args)))
    except BaseException as err:  # reported to the test, not lost in the child
        queue.put(("error", f"{type(err).__name__}: {err}"))


def run_unprivileged(fn: Callable[..., Any], *args: Any, timeout: float = 120.0) -> Any:
    """``fn(*args)`` in a forked child that cannot write where the modes say so;
    its (picklable) result, or ``RuntimeError`` with what the child raised."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(fn, args, queue))
    child.start()
    try:
        status, value = queue.get(timeout=timeout)
    finally:
        child.join(30)
    if status != "ok":
        raise RuntimeError(f"in the unprivileged child: {value}")
    return value
