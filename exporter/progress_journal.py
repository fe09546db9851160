"""Group-commit journal: an accepted progress report is on disk before it is answered.

Why: a ``200`` from ``POST /progress`` promises the report survives the exporter
being killed (OOM, node drain, SIGKILL after the grace period). The state file alone
is written every ``save_interval`` (30 s), so a kill lost up to that much
acknowledged progress. Each merge now appends the container's new progress row to
this journal; the answer waits for the ``fsync`` of the batch holding it.

Group commit keeps that cheap: one writer thread takes every row queued while the
previous ``fsync`` ran, writes them in one ``write`` and syncs once, then calls the
waiting callbacks. Rows of one key queued together are coalesced (each row is the
container's full state, the newest wins). The state file stays the compact form:
``ProgressStore.save`` writes it and truncates the journal; every line carries a
sequence number and the state file the last number it includes, so a crash between
the two never replays an older row over a newer one.

Line format (one per row): ``<crc32 hex, 8> <JSON {"seq": N, "row": {...}}>\\n``.
A removal (the pod is gone, or the entry was evicted) is a line of its own,
``{"seq": N, "gone": [namespace, pod, container, source]}``: without it, a restart
would replay the removed container's last row from the journal (or find it in a
state file written before the removal) and its progress would come back. A
damaged line (bit flips) fails its checksum and is skipped and counted by
``read_journal``, never trusted. A torn tail after a crash (a last line without its
newline) is dropped at load and cut from the file before the next append.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

Ack = Callable[[bool], None]  # called with True once durable, False if the write failed
MAX_LINE_BYTES = 64 * 1024
# The most of a journal a start reads back, and so the most the writer lets it hold:
# a line past it would be answered 200 and then not replayed after a kill. Why
# 32 MiB: a save empties the journal every 30 s or once it passes 8 MB (``max_bytes``),
# so a healthy one stays far below; it grows this far only while the state file
# cannot be written (~18 min of 50 pods reporting every second), and then reports are
# answered 503 (``Journal.full``) rather than promised what a restart would not keep.
# A replay holds the bytes and the store's rows, not a parsed copy of every line.
# Measured on the 2-core build machine, peak RSS of a process at 20 MB after its
# imports: 32 MiB of 16-metric rows of 5,000 pods replay in 3.2 s at 66 MB; 32 MiB of
# rows as long as the rules allow in 1.1 s at 71 MB; a 63 MiB journal (its newest
# 32 MiB replayed) 3.3 s, 66 MB. Before: 63 MiB took 8.1 s and 711 MB.
MAX_JOURNAL_BYTES = 32 << 20
KEY_PARTS = 4  # namespace, pod, container, source
_TAIL_CHUNK = 64 * 1024  # read backwards this much at a time looking for a newline


@dataclass(frozen=True)
class Removal:
    """A journal entry saying the entry under ``key`` was removed (pod gone, evicted)."""

    key: tuple[str, ...]


def encode_line(seq: int, row: dict) -> bytes:
    """One journal line for ``row`` (a JSON-able state row) with sequence ``seq``."""
    return _frame({"seq": seq, "row": row})


def encode_removal(seq: int, key: tuple[str, ...]) -> bytes:
    """One journal line saying the entry under ``key`` is gone, with sequence ``seq``."""
    return _frame({"seq": seq, "gone": list(key)})


def _frame(entry: dict) -> bytes:
    data = json.dumps(entry, separators=(",", ":")).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(data), data)


def read_journal(data: bytes) -> tuple[list[tuple[int, dict | Removal]], int, bool]:
    """Parse journal bytes → (``[(seq, row or Removal), ...]`` in file order, damaged
    lines, torn tail).

    Pure; never raises. A last line without its newline is a write cut short by a
    crash (``torn`` is True): it was never acknowledged, so it is dropped quietly.
    Any other line that fails its checksum or is neither ``{"seq": int, "row": {...}}``
    nor ``{"seq": int, "gone": [4 strings]}`` counts as damaged. Rows are returned as
    parsed: the caller validates them. For a whole journal use ``iter_journal``: this
    list holds every line parsed at once.
    """
    rows: list[tuple[int, dict | Removal]] = []
    damaged = 0
    for parsed in iter_journal(data):
        if parsed is None:
            damaged += 1
        else:
            rows.append(parsed)
    return rows, damaged, is_torn(data)


def iter_journal(data: bytes, start: int = 0) -> Iterator[tuple[int, dict | Removal] | None]:
    """Each complete line of ``data[start:]`` parsed, in file order: ``(seq, row or
    Removal)``, or None for a damaged line (see ``read_journal``); a torn last line
    (no newline: ``is_torn``) is not yielded.

    A generator, so a replay holds one parsed line at a time: a list of every line of
    a 63 MiB journal (its split bytes and dicts) peaked at 711 MB, over the
    exporter's memory limit.
    """
    end = len(data)
    while start < end:
        newline = data.find(b"\n", start)
        if newline < 0:
            return  # torn tail
        if newline - start > MAX_LINE_BYTES:
            yield None  # damaged; not even copied out
        elif newline > start:
            yield _parse_line(data[start:newline])
        start = newline + 1


def is_torn(data: bytes) -> bool:
    """Whether ``data`` ends in a line without its newline (a write cut short)."""
    return bool(data) and not data.endswith(b"\n")


def _parse_line(line: bytes) -> tuple[int, dict | Removal] | None:
    if len(line) > MAX_LINE_BYTES or len(line) < 10 or line[8:9] != b" ":
        return None
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return None
    payload = line[9:]
    if zlib.crc32(payload) != crc:
        return None
    try:
        data = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    seq, row, gone = data.get("seq"), data.get("row"), data.get("gone")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq < 2**62:
        return None
    if isinstance(row, dict) and gone is None:
        return seq, row
    if (
        row is None
        and isinstance(gone, list)
        and len(gone) == KEY_PARTS
        and all(isinstance(part, str) for part in gone)
    ):
        return seq, Removal(tuple(gone))
    return None


class Journal:
    """The append side: ``append`` queues, a writer thread writes and syncs in batches.

    ``io_lock`` is held around every write and by ``truncate``, so the store can
    write its state file and empty the journal with no batch in between.

    Past ``max_bytes`` the store should compact it (``oversized``); a batch that would
    take it past ``full_bytes`` (``MAX_JOURNAL_BYTES``, what a restart reads back) is
    not written and its reports are acknowledged False (503): once ``full``, every
    batch is, until a save empties the journal (``truncate``). One ERROR line when it
    fills, one INFO line when it is emptied.
    """

    def __init__(
        self, path: Path, *, max_bytes: int = 8 << 20, full_bytes: int | None = None
    ) -> None:
        self.path = Path(path)
        self.io_lock = threading.Lock()
        self.max_bytes = max_bytes
        # looked up now, not at import: the reader (the store's replay) does the same,
        # so the two cannot disagree
        self.full_bytes = MAX_JOURNAL_BYTES if full_bytes is None else full_bytes
        self._full = False
        self._cond = threading.Condition()
        self._pending: dict[Hashable, bytes] = {}
        self._waiters: list[Ack] = []
        self._stopping = False
        self._idle = False  # the writer waits for rows (else it will look again by itself)
        self._fd: int | None = None
        self._size = 0
        self._failing = False
        self.batches = 0
        self.rows_written = 0
        self._thread = threading.Thread(target=self._run, name="gpu-eta-journal", daemon=True)
        self._thread.start()

    @property
    def oversized(self) -> bool:
        """The journal grew past ``max_bytes``: the store should compact it soon."""
        return self._size > self.max_bytes

    @property
    def full(self) -> bool:
        """Batches are refused (acknowledged False) until a save empties the journal."""
        return self._full

    @property
    def failing(self) -> bool:
        """The last batch could not be written (or the journal is ``full``)."""
        return self._failing or self._full

    @property
    def size(self) -> int:
        """Bytes in the journal file as far as this writer knows (0 before it opened)."""
        return self._size

    def append(self, key: Hashable, line: bytes, ack: Ack | None = None) -> None:
        """Queue ``line`` (replacing a queued line of the same key); ``ack`` once synced."""
        with self._cond:
            if self._stopping:
                if ack is not None:
                    ack(False)
                return
            self._pending.pop(key, None)  # keep file order = merge order
            self._pending[key] = line
            if ack is not None:
                self._waiters.append(ack)
            if self._idle:  # a busy writer takes what is pending when its fsync ends
                self._cond.notify()

    def truncate(self) -> None:
        """Empty the journal (the caller holds ``io_lock`` and has saved the state)."""
        fd = self._open()
        os.ftruncate(fd, 0)
        os.fsync(fd)
        self._size = 0
        if self._failing:  # the file took a truncate and its sync: it is writable again
            self._failing = False
            log.info("progress journal: %s writable again", self.path)
        if self._full:
            self._full = False
            log.info(
                "progress journal: %s emptied by a save of the state file; reports are "
                "answered normally again",
                self.path,
            )

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, stop the writer, close the file; idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)
        with self.io_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    size = _cut_torn_tail(fd, size, self.path)
            except OSError:
                os.close(fd)
                raise
            self._fd, self._size = fd, size
        return self._fd

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._waiters and not self._stopping:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                if self._stopping and not self._pending and not self._waiters:
                    return
                batch, self._pending = self._pending, {}
                waiters, self._waiters = self._waiters, []
            ok = self._write(b"".join(batch.values())) if batch else True
            self.batches += 1
            self.rows_written += len(batch) if ok else 0
            for ack in waiters:
                try:
                    ack(ok)
                except Exception as err:  # a waiter's bug must not stop the journal
                    log.error("progress journal: acknowledgement failed: %s", err)

    def _write(self, data: bytes) -> bool:
        try:
            with self.io_lock:
                fd = self._open()
                if self._full or self._size + len(data) > self.full_bytes:
                    self._refuse_full(len(data))
                    return False
                try:
                    view = memoryview(data)
                    while view:
                        written = os.write(fd, view)
                        view = view[written:]
                    os.fsync(fd)
                except OSError:
                    # a partial write would glue its torn line to the next batch's
                    # first line: cut the file back to where this batch began
                    try:
                        os.ftruncate(fd, self._size)
                    except OSError:
                        os.close(fd)
                        self._fd = None  # reopened (and its tail checked) next time
                    raise
                self._size += len(data)
        except OSError as err:
            if not self._failing:
                log.error(
                    "progress journal: cannot write %s: %s; reports are answered 503 until "
                    "it works again",
                    self.path,
                    err,
                )
            self._failing = True
            return False
        if self._failing:
            log.info("progress journal: %s writable again", self.path)
        self._failing = False
        return True

    def _refuse_full(self, wanted: int) -> None:
        """A batch that does not fit under ``full_bytes``: say so once (caller holds
        ``io_lock``). Why refuse rather than write on: a start reads back only
        ``MAX_JOURNAL_BYTES``, so a 200 for a line past it would be a promise a kill
        breaks, and the disk fills; the state file cannot have been written for a
        while (a save empties the journal), which the store has logged."""
        if self._full:
            return
        self._full = True
        log.error(
            "progress journal: %s is full (%d bytes; %d more would pass %d, the most a "
            "restart reads back): the state file has not been saved since it was last "
            "emptied; reports are answered 503 (applied in memory, not on disk) until a "
            "save succeeds",
            self.path,
            self._size,
            wanted,
            self.full_bytes,
        )


def _cut_torn_tail(fd: int, size: int, path: Path) -> int:
    """Cut the file back to just after its last newline; the new size.

    The bytes after the last newline are a write a crash (or a failed batch) cut
    short: never acknowledged, and ``read_journal`` drops them quietly as a torn
    tail. Why cut them rather than end them with a newline: completed, they would be
    a whole line failing its checksum, so the next start would call the journal
    damaged and set a copy aside for what was only an unacknowledged write.
    """
    end, keep = size, 0
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    os.ftruncate(fd, keep)
    os.fsync(fd)
    log.info(
        "progress journal: %s: cut %d byte(s) of an unacknowledged torn last line",
        path,
        size - keep,
    )
    return keep
