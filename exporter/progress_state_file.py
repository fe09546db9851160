"""The progress store's files read back from disk, and what happens when they are bad.

``read_stored`` reads a state file or journal (bounded, retried, non-blocking) and
moves one that cannot be read aside; ``set_aside`` keeps a damaged file under a name
no earlier copy has; ``clear_path`` frees a path the store could not use at start;
``parse_state`` and ``progress_from_row`` / ``progress_to_row`` turn the state
file's JSON into ``Progress`` rows and back. Separate from
``progress_store`` because none of it touches the store's map or lock: it is file
handling and parsing, fuzzed (``bench/fuzz_campaign.py``) and tested on its own,
while the store decides what a bad file means for persisting (``not_persisting``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import BinaryIO

from gpu_eta.common.versioned_json import load_versioned
from gpu_eta.exporter.progress import ReportError, check_progress, start_within
from gpu_eta.exporter.readings import Progress

log = logging.getLogger(__name__)

STATE_VERSION = 1
# The most of a state file that is read. Why 12 MiB: the store writes at most 4,096
# rows (``DEFAULT_MAX_ENTRIES``), ~1.5 MB as they usually are and 9.8 MiB if every
# name, run id and all 16 metric names were as long as the rules allow, so a file past
# this is not ours; and loading costs several times the bytes (JSON objects): at the
# old 64 MiB a load peaked at 436 MB RSS, over the chart's 384Mi limit, OOM-killed on
# every restart before the file could be set aside. Measured on the 2-core build
# machine, peak RSS of a process at 20 MB after its imports: 4,096 rows as long as
# the rules allow (9.8 MiB) load in 0.2 s at 47 MB; the worst file within both bounds
# (a 12 MiB string holding one 4-byte character, so decoded as UCS-4) at 128 MB.
MAX_STATE_BYTES = 12 << 20
# JSON values a state file may hold (counted cheaply as its ``,``, ``{`` and ``[``
# bytes, before parsing): a row is at most 2 objects and 31 members, so 4,096 rows
# stay under half of this. Why count: the byte cap alone does not bound memory, since
# 12 MiB of ``{},{},...`` is 4 million dicts (350 MB); no name or number the rules
# allow contains these bytes, so a file over the count is damaged or not ours.
MAX_STATE_VALUES = 72 * 4096
# A state file or journal that cannot be read is read again this often (a transient
# EIO or NFS hiccup passes) before it is moved aside.
READ_ATTEMPTS = 3
READ_RETRY_SECONDS = 0.2
SOURCES = ("http", "log")


class StateError(ValueError):
    """The state file as a whole is unusable (not JSON, another version...)."""


@dataclass(frozen=True)
class StateFile:
    """What ``parse_state`` read: the good rows, how many were damaged, the journal mark."""

    rows: tuple[Progress, ...]
    damaged: int
    journal_seq: int


@dataclass(frozen=True)
class Stored:
    """What ``read_stored`` found at a path.

    ``data``: the bytes (at most the limit + 1, see ``read_stored``), or None when nothing is
    stored there or it could not be read. ``not_persisting``: why nothing may be
    written any more (the unreadable file could not be kept aside), else None.
    ``in_place``: that file is no regular file and was left where it is.
    ``start``: where the usable bytes of ``data`` begin (not 0 only for the newest
    part of a file larger than the limit, read with ``newest``: after the line the
    window cut). ``size``: the file's size when it was read.
    """

    data: bytes | None
    not_persisting: str | None = None
    in_place: bool = False
    start: int = 0
    size: int = 0

    @property
    def skipped(self) -> int:
        """Bytes of the file not in ``data[start:]`` (0: the whole file was read)."""
        if self.data is None:
            return 0
        return max(0, self.size - (len(self.data) - self.start))


def read_stored(path: Path, what: str, *, limit: int | None = None, newest: bool = False) -> Stored:
    """The bytes of ``path``; a file that cannot be read is kept aside (see below).

    At most ``limit`` (default ``MAX_STATE_BYTES``) bytes are held: from the start of
    the file, plus one byte so the caller can tell the file is larger; with
    ``newest``, from its end (a journal: its newest lines matter most), beginning
    after the first newline of that window so no cut line is parsed (``start``).

    Why not "log and start empty" on a read error: the store's next save (at once
    after a journal replay, else within its save interval) replaces the state file
    and empties the journal, so one EIO or a permission slip would destroy progress
    already answered 200. A failed read is tried again (a transient error passes); a
    file that still cannot be read is moved aside to ``<name>.unreadable-<time>``,
    where it stays for a human (nothing lost), and the store starts without it: the
    exporter keeps serving GPU metrics and new progress. What is not a regular file
    (a directory, a FIFO) is not moved, and neither is a file the move fails for:
    then the result's ``not_persisting`` says why nothing may be written. The file is
    opened non-blocking, so a FIFO put there cannot hang the start.
    """
    error: OSError | None = None
    for attempt in range(READ_ATTEMPTS):
        if attempt:
            time.sleep(READ_RETRY_SECONDS)
        try:
            with open(path, "rb", opener=_open_nonblocking) as fh:
                info = os.fstat(fh.fileno())
                if not stat.S_ISREG(info.st_mode):
                    error = OSError("not a regular file")
                    break
                return _read_bounded(fh, info.st_size, limit, newest)
        except (FileNotFoundError, NotADirectoryError):
            return Stored(None)  # nothing can be stored there
        except IsADirectoryError:
            error = OSError("a directory")
            break
        except OSError as err:
            error = err
    reason = f"{what}: cannot read {path}: {error}"
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = True  # cannot tell: moving it aside keeps it whatever it is
    if not regular:
        return Stored(None, not_persisting=reason, in_place=True)
    aside = set_aside(path, move=True, why="unreadable")
    if aside is None:
        return Stored(None, not_persisting=f"{reason}, and it cannot be kept aside")
    log.error("%s; moved to %s (kept for a human), starting without it", reason, aside)
    return Stored(None)


def _read_bounded(fh: BinaryIO, size: int, limit: int | None, newest: bool) -> Stored:
    """``read_stored``'s read: at most ``limit`` (+1) bytes, from the start or the end."""
    limit = MAX_STATE_BYTES if limit is None else limit
    if not newest or size <= limit:
        # no more than the file holds: ``read(n)`` allocates n bytes up front
        data = fh.read(min(size, limit) + 1)
        return Stored(data, size=max(size, len(data)))
    # one byte before the window too: if it is a newline, the window starts a line
    fh.seek(size - limit - 1)
    data = fh.read(limit + 1)
    cut = data.find(b"\n")
    return Stored(data, start=len(data) if cut < 0 else cut + 1, size=size)


def set_aside(
    path: Path, *, move: bool, why: str = "corrupt", level: int = logging.ERROR
) -> str | None:
    """Move (or copy) a file to ``<name>.<why>-<unix time>[-<n>]``; its new name, or
    None (logged at ``level``) when that failed.

    The name is one no file has yet: two set-asides in the same second (the state
    file and, after a quick restart, again) must not overwrite each other's copy.
    """
    stamp = int(time.time())
    aside = path.with_name(f"{path.name}.{why}-{stamp}")
    n = 1
    while os.path.lexists(aside):
        aside = path.with_name(f"{path.name}.{why}-{stamp}-{n}")
        n += 1
    created = False
    try:
        if move:
            os.rename(path, aside)
        else:
            with open(path, "rb") as src, open(aside, "xb") as dst:
                created = True
                shutil.copyfileobj(src, dst)
                dst.flush()
                os.fsync(dst.fileno())
    except OSError as err:
        if created:
            with contextlib.suppress(OSError):
                aside.unlink()  # a partial copy would pass for the whole file
        log.log(level, "progress state: cannot keep %s aside as %s: %s", path, aside.name, err)
        return None
    return aside.name


def clear_path(path: Path, why: str) -> tuple[bool, str]:
    """Make ``path`` free for the store to write, losing nothing: (done, what
    happened, or why not).

    For a path the store could not use at start (a file that could be neither read
    nor kept aside, or no regular file): when it is retried, what is there now was
    never loaded, so it may not be written over either. Nothing there any more (an
    admin removed it) is done; a regular file is moved aside as at the start
    (``<name>.<why>-<time>``, kept for a human, even if it has become readable:
    the store started without it and holds newer progress); anything else (still a
    directory, a FIFO) or a move that fails again is not done. Failures are logged
    at DEBUG only: the caller retries on a schedule and logs the change of state.
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return True, f"{path.name} is gone"
    except OSError as err:
        return False, f"cannot check {path}: {err}"
    if not stat.S_ISREG(mode):
        return False, f"{path} is not a regular file"
    aside = set_aside(path, move=True, why=why, level=logging.DEBUG)
    if aside is None:
        return False, f"{path} still cannot be kept aside"
    return True, f"{path.name} moved to {aside} (kept for a human)"


def _open_nonblocking(path: str, flags: int) -> int:
    """``open`` opener: O_NONBLOCK, so opening a FIFO put at the path does not wait
    for a writer (it is then refused as not a regular file)."""
    return os.open(path, flags | os.O_NONBLOCK)


# -- the state file's contents ---------------------------------------------------------


def parse_state(data: bytes) -> StateFile:
    """State-file bytes → the usable rows (pure; ``StateError`` if nothing is usable).

    A damaged row is skipped and counted, not a reason to drop the others. Over
    ``MAX_STATE_VALUES`` JSON values (counted before parsing, see there) the file is
    refused whole: parsing it could cost more memory than the exporter may use.
    """
    if len(data) <= MAX_STATE_BYTES:
        values = data.count(b",") + data.count(b"{") + data.count(b"[")
        if values > MAX_STATE_VALUES:
            raise StateError(f"over {MAX_STATE_VALUES} JSON values: not a state file")
    loaded = load_versioned(data, version=STATE_VERSION, max_size=MAX_STATE_BYTES, error=StateError)
    rows = loaded.get("progress")
    if not isinstance(rows, list):
        raise StateError("progress is not a list")
    seq = loaded.get("journal_seq", 0)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**62:
        raise StateError("journal_seq is not a count")
    good: list[Progress] = []
    damaged = 0
    for row in rows:
        try:
            good.append(progress_from_row(row))
        except ValueError:
            damaged += 1
    return StateFile(tuple(good), damaged, seq)


def progress_to_row(progress: Progress) -> dict:
    """``Progress`` → a state-file or journal row (JSON-ready)."""
    row = {name: getattr(progress, name) for name in (*_STR_FIELDS, *_NUM_FIELDS, *_OPT_FIELDS)}
    row["metrics"] = dict(progress.metrics)
    # absent in rows written before removals were kept, and ignored by such an
    # exporter: after a rollback the removed names only lose their places
    if progress.removed_metrics:
        row["removed_metrics"] = sorted(progress.removed_metrics)
    # absent unless set (an epoch held back, a run resumed in steps, a log counting
    # epochs from 0, a log's last epoch end held back; most rows: none): read as None,
    # and ignored by an exporter from before they were kept, which loses only that
    # epoch, the step the run resumed at, or the count or held end of a log whose
    # lines it cannot read again
    for name in _SPARSE_FIELDS:
        if getattr(progress, name) is not None:
            row[name] = getattr(progress, name)
    return row


_STR_FIELDS = ("namespace", "pod", "container", "run_id", "source")
_NUM_FIELDS = ("run_start_timestamp", "last_report_timestamp")
_OPT_FIELDS = (
    "epoch",
    "epochs",
    "step",
    "steps",
    "batch_size",
    "epoch_end_timestamp",
    "ended_timestamp",  # absent in rows written before it was kept: None
    # absent likewise: None, and such a run refuses no report as another's
    # (``progress.superseded``)
    "sender_start_timestamp",
)
_SPARSE_FIELDS = (
    "held_epoch",
    "held_epoch_timestamp",
    "start_step",
    "start_epoch",
    "epochs_from_zero",
    "held_end_epoch",
    "held_end_timestamp",
)


def progress_from_row(row: object) -> Progress:
    """A state-file or journal row back into ``Progress``; ``ValueError`` if damaged.

    Type-checked here, then held to the same bounds as a report (``check_progress``):
    the file may be damaged or edited by hand.
    """
    if not isinstance(row, dict):
        raise ValueError("row is not an object")
    for name in _STR_FIELDS:
        if not isinstance(row.get(name), str):
            raise ValueError(f"{name} is not a string")
    if row["source"] not in SOURCES:
        raise ValueError("bad source")
    for name in _NUM_FIELDS:
        if isinstance(row.get(name), bool) or not isinstance(row.get(name), int | float):
            raise ValueError(f"{name} is not a number")
    for name in (*_OPT_FIELDS, *_SPARSE_FIELDS):
        value = row.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{name} is not a number")
    metrics = row.get("metrics") or {}
    if not isinstance(metrics, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in metrics.items()
    ):
        raise ValueError("metrics is not an object of numbers")
    removed = row.get("removed_metrics") or []
    if not isinstance(removed, list) or not all(isinstance(k, str) for k in removed):
        raise ValueError("removed_metrics is not a list of names")
    try:
        base = Progress(
            **{name: row[name] for name in _STR_FIELDS},
            **{name: float(row[name]) for name in _NUM_FIELDS},
        )
    except OverflowError:
        raise ValueError("a number is too large") from None
    try:
        progress = replace(
            base,
            **{
                name: None if row.get(name) is None else float(row[name])
                for name in (*_OPT_FIELDS, *_SPARSE_FIELDS)
            },
            metrics=MappingProxyType({k: float(v) for k, v in metrics.items()}),
            removed_metrics=frozenset(removed),
        )
        # a start step above the row's step or steps (saved by an exporter that kept
        # it so), a start epoch above its epoch or epochs, is dropped, not the row:
        # ``start_within`` says why
        begun = start_within(progress.start_step, progress.step, progress.steps)
        begun_epoch = start_within(progress.start_epoch, progress.epoch, progress.epochs)
        return check_progress(replace(progress, start_step=begun, start_epoch=begun_epoch))
    except OverflowError:
        raise ValueError("a number is too large") from None
    except ReportError as err:
        raise ValueError(str(err)) from None
