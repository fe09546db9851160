"""tests/support/serial_ast.py: nothing parses inside a parse under way (another thread, a
gc callback in the same one), and a forked child can parse."""

from __future__ import annotations

import ast
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support import serial_ast

SOURCE = "x = [" + ",".join(f"f({i}, (a, b))" for i in range(300)) + "]\n"


@contextlib.contextmanager
def collections_calling(callback: Callable[[str, dict[str, int]], None]) -> Iterator[None]:
    """``callback`` run at each collection, collections every 50 allocations, both
    undone at the end."""
    threshold = gc.get_threshold()
    gc.set_threshold(50)
    gc.callbacks.append(callback)
    try:
        yield
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)


@pytest.fixture
def gc_hands_over_to_a_parsing_thread() -> Iterator[threading.Event]:
    """At each collection in the main thread, let another thread parse once (waiting a
    moment for it): as Hypothesis' gc callback lets threads switch, on purpose."""
    turn, done, stop = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def other() -> None:
        while not stop.is_set():
            if turn.wait(0.05):
                turn.clear()
                try:
                    ast.parse("y = g(1)")
                except SystemError as error:  # not expected in this thread
                    errors.append(error)
                done.set()

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.current_thread() is threading.main_thread():
            done.clear()
            turn.set()
            done.wait(0.002)

    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    try:
        with collections_calling(callback):
            yield stop
    finally:
        stop.set()
        thread.join(5)
    assert not errors


def deep_parse(depth: int) -> None:
    """Parse from deeper in the stack than the other thread: the recursion depth each
    parse starts from differs, so an interleaving shows as a mismatch."""
    if depth:
        return deep_parse(depth - 1)
    for _ in range(3):
        ast.parse(SOURCE)
    return None


def test_a_parse_in_another_thread_does_not_break_the_one_under_way(
    gc_hands_over_to_a_parsing_thread: threading.Event,
) -> None:
    """Not vacuous: with ``ast.parse`` unguarded (``serial_ast._UNGUARDED``), CPython
    3.11 raises SystemError here at the first collection during a conversion."""
    assert ast.parse is serial_ast._parse  # conftest installed it
    deep_parse(40)


def test_unguarded_parses_do_interleave(
    gc_hands_over_to_a_parsing_thread: threading.Event,
) -> None:
    """The hand-over does reach a conversion: the unguarded parse fails on 3.11 (where
    the state is interpreter-wide), so the test above is not passing by luck."""
    if sys.version_info >= (3, 12):
        pytest.skip("3.12+ may keep the depth per parse")
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        for _ in range(20):
            serial_ast._UNGUARDED(SOURCE)


@pytest.fixture
def gc_parses_in_the_parsing_thread() -> Iterator[list[int]]:
    """At each collection in the main thread, a parse there: as a finalizer that formats
    a traceback would. Yields the count of those parses."""
    parsed: list[int] = [0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.current_thread() is threading.main_thread():
            ast.parse("y = g(1)")
            parsed[0] += 1

    with collections_calling(callback):
        yield parsed


def test_a_parse_nested_by_the_collector_does_not_break_the_one_under_way(
    gc_parses_in_the_parsing_thread: list[int],
) -> None:
    """The collector is off during a parse, so nothing it runs parses inside one (a
    lock alone would let this thread in again)."""
    deep_parse(40)
    for _ in range(3):
        gc.collect()
    assert gc_parses_in_the_parsing_thread[0] >= 3  # it parses, outside the parses
    assert gc.isenabled()  # and the collector is back on


def test_unguarded_a_parse_nested_by_the_collector_breaks_it(
    gc_parses_in_the_parsing_thread: list[int],
) -> None:
    """Not vacuous: on 3.11 an unguarded parse fails when the collector parses inside it."""
    if sys.version_info >= (3, 12):
        pytest.skip("3.12+ may keep the depth per parse")
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        for _ in range(3):
            serial_ast._UNGUARDED(SOURCE)


def test_a_child_forked_while_another_thread_parses_can_parse() -> None:
    """A child forked while a thread held the lock gets a lock of its own: the one it
    inherits is held by a thread that does not exist there, and its first parse (a
    traceback printed, a module imported) would wait for ever."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with serial_ast._lock:
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: parse, and leave without running anything of pytest's
        try:
            ast.parse("x = 1")
        except BaseException:
            os._exit(1)
        os._exit(0)
    release.set()
    holder.join()
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's parse waited for a lock held in its parent")
    assert os.waitstatus_to_exitcode(done[1]) == 0
