"""``top``'s view refreshed in place on a terminal (rich's Live): ``top``'s refreshing
view and the demo's live view under its banner are this one ``LiveTop``.

Why one module: the demo drew top with a copy of its own, which had neither the held
signals nor the quiet end on a closed terminal, so closing the window under
``./demo.sh`` ended in a traceback (or the demo ran on with no terminal) and a SIGTERM
mid-draw left the cursor hidden. What a live display needs on a terminal is here:

- ``Signals``: SIGTERM and SIGHUP as ``Terminated``, SIGINT as ``KeyboardInterrupt``,
  held while rich draws and remembered until the caller's next ``check``; ``wait``
  between refreshes ends as a signal comes, even one that lands just before it;
- ``gone_quietly``: a terminal that went away fails the last writes (EIO, or EPIPE),
  which ends a display that was asked to end quietly;
- ``LiveTop``: the Live itself, each start, redraw and stop under both, drawing the
  view in the layout its caller chose (``compact.LiveView``: ``top``'s ``--layout``,
  the demo's compact one).

rich (the ``top`` extra) is imported where the display starts, as in ``main``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Iterator
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Protocol

from gpu_eta.top.compact import FOOTER, Layout, LiveView
from gpu_eta.top.view import View

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: unwound like Ctrl-C (exit 0). A
    ``BaseException``, as ``KeyboardInterrupt`` is, so no ``except Exception`` on the
    way (a query's error handling, the demo's "part did not start") takes it for a
    failure of its own."""


class Signals:
    """SIGTERM and SIGHUP as ``Terminated``, SIGINT as ``KeyboardInterrupt``: raised at
    once, except while a live display draws (``drawing``), and in any case remembered
    (``pending``) and raised again at the next ``check``.

    Why held while drawing: rich's Live hides the cursor, then draws; raised in the
    middle of its start, stop or a redraw, the exception left its state half set (the
    cursor hidden, or its cleanup failing with a traceback of its own). Why
    remembered: an exception a signal handler raises inside a finaliser (a rich
    generator closed as it is freed, an import lock released) is printed and dropped by
    Python, and the display went on refreshing with the cursor hidden, or with no
    terminal at all."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: BaseException | None = None
        # the read end of the signals' wakeup socket while ``caught`` (main thread)
        self._wakeup: socket.socket | None = None

    @property
    def ending(self) -> bool:
        """A termination or hang-up is pending: the terminal may be gone."""
        return isinstance(self.pending, Terminated)

    def handle(self, signum: int, frame: object) -> None:
        # each signal raises (outside a draw), a second one too: the first one's
        # exception may have been dropped inside a finaliser, and a second Ctrl-C or
        # hang-up is what ends a view stuck there (measured: with only the first
        # raising, a hung-up view outlived its terminal in 2 of 16 runs)
        error = KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
        self.pending = self.pending or error
        if not self.depth:
            raise error

    def check(self) -> None:
        """Raise the signal that came (and was held, or its exception dropped)."""
        if self.pending is not None:
            raise self.pending

    def wait(self, seconds: float) -> None:
        """Wait ``seconds`` between refreshes, ended by a signal: raise it.

        Why not ``time.sleep``: a signal whose C-level handler ran after the last
        ``check`` and before the sleep began (its Python handler not yet run) did not
        interrupt the sleep, and was raised only when it ended: a Ctrl-C or hang-up
        sent just as a view was drawn left ``top`` running for up to ``--interval``.
        The C handler also writes a byte to the wakeup socket (``caught`` sets it), so
        the wait sees that signal too; its Python handler runs as the wait returns."""
        self.check()
        if self._wakeup is None:  # not the main thread: no wakeup socket
            time.sleep(seconds)
        elif select.select([self._wakeup], [], [], seconds)[0]:
            with contextlib.suppress(OSError):  # drained: the next wait waits again
                while self._wakeup.recv(512):
                    pass
        self.check()

    @contextlib.contextmanager
    def drawing(self) -> Iterator[None]:
        """Hold the signals for the block, then raise the one that came."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        self.check()

    @contextlib.contextmanager
    def caught(self) -> Iterator[Signals]:
        """``handle`` SIGTERM, SIGHUP and SIGINT for the block; the handlers before it
        afterwards. Off the main thread (embedded) the default actions stay.

        Why SIGTERM and SIGHUP: rich's live view hides the terminal's cursor until it
        stops; killed by the signal's default action (``timeout 60 gpu-eta-top``, a
        ``kill``, the window closed), it never did, and the user's shell was left
        without a cursor."""
        previous: dict[int, Any] = {}
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        previous_fd: int | None = None
        try:
            previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
            self._wakeup = reader
            # no SIGHUP on Windows
            for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None), signal.SIGINT):
                # an ignored signal stays ignored: nohup's SIGHUP, the SIGINT a
                # non-interactive shell ignores for a background job (`./demo.sh &`)
                if sig is not None and signal.getsignal(sig) != signal.SIG_IGN:
                    previous[sig] = signal.signal(sig, self.handle)
        except ValueError:  # not the main thread
            pass
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if previous_fd is not None:
                signal.set_wakeup_fd(previous_fd)
            self._wakeup = None
            reader.close()
            writer.close()


@contextlib.contextmanager
def gone_quietly(signals: Signals) -> Iterator[None]:
    """Writes in the block that fail because the terminal went away end quietly when a
    termination or hang-up is pending: stdout and stderr then point at /dev/null, so
    nothing written later (a goodbye line, the flush at exit) fails again.

    Why: a hung-up terminal (its window closed: SIGHUP) fails writes with EIO, a closed
    pipe with EPIPE; ending as asked is not an error. Any other failure still raises."""
    try:
        yield
    except OSError as err:
        if not (signals.ending and err.errno in (errno.EIO, errno.EPIPE)):
            raise
        to_devnull(sys.stdout, sys.stderr)


def to_devnull(*streams: Any) -> None:
    """Point each stream's file descriptor at /dev/null: its reader is gone, and what
    is still buffered (flushed at interpreter exit) must not fail again."""
    for stream in streams:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # no file descriptor (tests, embedding)
            pass


class Views(Protocol):
    """What ``LiveTop`` draws from: ``main.RefreshingView`` (the fresh view, or the last
    good one marked stale)."""

    def view(self) -> View: ...


class LiveTop:
    """``top``'s view drawn in place, fitted to the terminal's height: ``start`` draws
    the first thing (a view, or the caller's placeholder), each ``refresh`` a fresh
    view, ``stop`` (also on leaving the ``with``) ends the display; all three with
    ``signals`` held, and ``stop`` quiet on a terminal that went away
    (``gone_quietly``). The caller decides when to refresh: ``top`` every
    ``--interval``, the demo in its own wait loop; it calls ``signals.check()`` between
    refreshes, where a signal that came while drawing is raised.

    ``tz`` None: each clock time in its own local offset (right across a DST change).
    ``console``: rich's own, or the tests'. ``layout`` and ``footer``: how each view is
    laid out (``compact.LiveView``: ``auto``, ``full`` or ``compact``, ``footer`` the
    compact one's last line)."""

    def __init__(
        self,
        views: Views,
        signals: Signals,
        tz: tzinfo | None = None,
        console: Console | None = None,
        layout: Layout = "auto",
        footer: str = FOOTER,
    ) -> None:
        self.views = views
        self.signals = signals
        self.tz = tz
        self.console = console
        self.layout: Layout = layout
        self.footer = footer
        self._live: Any = None

    def _fresh(self) -> RenderableType:
        # fitted to the terminal when drawn: Live crops what is taller, with no word of it
        return LiveView(self.views.view(), self.layout, self.footer, self.tz)

    def start(self, first: RenderableType | None = None) -> None:
        """Draw ``first``, or without it a fresh view. Inside the ``with``, so a signal
        raised as the start ends still stops the display."""
        from rich.live import Live

        self._live = Live(
            self._fresh() if first is None else first,
            auto_refresh=False,
            screen=False,
            console=self.console,
        )
        with self.signals.drawing():
            self._live.start(refresh=True)

    def refresh(self) -> None:
        """Draw a fresh view in place (a query first: seconds, with signals not held)."""
        if self._live is None:
            return
        renderable = self._fresh()
        with self.signals.drawing():
            self._live.update(renderable, refresh=True)

    def stop(self) -> None:
        """End the display, the cursor shown again (idempotent)."""
        if self._live is None:
            return
        with gone_quietly(self.signals), self.signals.drawing():
            # forgotten only once held: a signal before that leaves it to stop again
            live, self._live = self._live, None
            live.stop()

    def __enter__(self) -> LiveTop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
