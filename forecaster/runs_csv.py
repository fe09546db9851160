"""Recorded runs as CSV, one row per progress point, ⇄ ``Run`` records.

Why a CSV: ``evaluate`` must score gpu-eta on anyone's recorded runs, and anyone can
produce and read this file without gpu-eta. The format (docs/evaluate.md):

``run_id,epoch,epochs_planned,timestamp_seconds`` are required; epoch 0 is the start
of training; rows of one run may be anywhere in the file and unevenly spaced.
``evaluate`` reads with ``plan_optional``: ``epochs_planned`` may then be absent, and a
run whose plan is absent or empty on every row is a run without a plan
(``RunsFile.planless``), read as having ended where it ended (``_assemble``).
``epoch`` is progress in any unit (epochs, steps, samples: up to ``MAX_PROGRESS``);
a plan is one the live path takes (``progress_bound.plausible_plan``: 1 to
``MAX_PROGRESS``), else its run is skipped as damaged.
Any other column is a feature. The identity columns (``TEXT_COLUMNS``: ``namespace``,
``job_name``, ``node_type``, ``gpu_model``, ``framework``, ``image``, ...) are always
text, the first non-empty value of the run; ``namespace``, ``pod`` and ``container``
also fill the ``Run`` fields of those names and, with ``run_id``, are the service's
``RunKey`` (``KEY_COLUMNS``); with ``job_name`` and ``node_type`` (``JOB_KEY_COLUMNS``)
they are the run's key in a file (``_Key``, ``_qualified``), except that keys
differing only by ``node_type`` are one run moved unless each starts (``_join_moves``),
and an empty cell of any of them splits no run (``_place_blank_keys``).
A ``CONSTANT_COLUMNS`` value is the run's last; two of its values each starting at
overlapping times are two runs the file does not tell apart (``_collision``): skipped,
named. Any other column (``batch_size``,
``gpus``, ``gpu_utilization_ratio``, ...) is a number when it parses as one (averaged
over the run's rows: utilisation is a mean), else text. A run whose last epoch
reaches ``epochs_planned`` (within ``PLAN_SLACK``) is completed; one that stops
earlier is recorded as not completed (cancelled or crashed), never as a short run.

Input is untrusted: sizes are bounded (``MAX_LINE_CHARS`` a line, read in pieces
past it; ``MAX_ROWS``, ``MAX_RUNS``, and what the runs hold, estimated as they are
read: ``MAX_HELD_BYTES``) and each line is parsed alone (``_lines``, ``_row``:
no field spans lines). Damage to the file as a whole (no header, a required column
missing, gzip damaged before the first row) is one ``RunsCsvError`` naming the line.
A row that is a header again (files joined with ``cat``, ``header_names``) gives the
columns of the rows after it; one lacking a required column has them read past, counted
(``RunsFile.unread``).
A progress value on several rows counts from its first time (``first_reached``),
except after the run reached its plan: then it is another run under the same key
(``reused_after``), skipped as damage.
Damage to one run (a bad number, times going back, a row with the wrong field count)
skips that run and is recorded in ``RunsFile.skipped``: one bad run is never a reason
to refuse the others. Damage to one feature value (longer than ``MAX_FIELD_CHARS``
outside the required and ``KEY_COLUMNS``) leaves that value out and is counted in
``RunsFile.dropped``: a free-text column must not cost the run its progress.
``parse_runs``/``read_runs`` are the strict forms: they raise
for the first damaged run (the seed of the history store uses them).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import itertools
import math
import re
import sys
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TextIO

from gpu_eta.common.progress_bound import (
    MAX_PROGRESS,
    MIN_PLANNED,
    NEGLIGIBLE_PROGRESS_SHARE,
    plausible_plan,
)
from gpu_eta.common.text import first_of, utf8_encodable
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.feature_timeline import FeatureTimeline, State, timeline
from gpu_eta.forecaster.promparse import printable
from gpu_eta.forecaster.runs import (
    STATED_PLAN,
    Feature,
    Run,
    RunError,
    RunKey,
    qualified_id,
    run_key,
    validate_run,
)

REQUIRED_COLUMNS = ("run_id", "epoch", "epochs_planned", "timestamp_seconds")
PLAN_COLUMN = "epochs_planned"  # the one required column ``plan_optional`` reads without
# Identity columns: text even when they look like numbers (a namespace "2024" is not 2024.0).
TEXT_COLUMNS = frozenset(
    {
        "namespace",
        "pod",
        "container",
        "job_name",
        "node_type",
        "gpu_model",
        "framework",
        "image",
        "progress_unit",
    }
)
# The live service's ``RunKey``: one run_id in two namespaces (pods, containers) is two runs.
KEY_COLUMNS = ("namespace", "pod", "container")
# Columns that name another job: one run_id under two of them is two runs, as files
# counting runs per benchmark and system (MLPerf's "1" to "5" of each) hold. Part of the
# key a file is read by; runs that the service's key would still confuse are named
# ``job_name/node_type/run_id`` (``_qualified``).
JOB_KEY_COLUMNS = ("job_name", "node_type")
# A run's configuration: one value at a time, which may change part-way (a batch-size
# ramp-up, an elastic GPU count, a new image or GPU model on resume); the run's value is
# its last one, as the live service reads the latest (``runs_from_series``), so a ramp
# is its steady configuration, not a mean no run had. Rows of one key whose values each
# hold a start (epoch 0) at overlapping times are two runs interleaving under one key
# (two concurrent runs given one run_id): skipped, named (``_collision``); merged, one
# run's times would be taken for the other's. A measured column
# (``gpu_utilization_ratio``) may change at any time: it is a mean.
CONSTANT_COLUMNS = frozenset(
    {"gpu_model", "framework", "image", "progress_unit", "batch_size", "gpus"}
)
MAX_FIELD_CHARS = 256
MAX_COLUMNS = 64  # columns read; a wider file's others are ignored (``keep_columns``)
MAX_FILE_COLUMNS = 1024  # a wider header is no runs CSV
# numeric features gpu-eta reads, kept before other columns of a wide file; with
# ``epochs_planned_stated`` (``runs.STATED_PLAN``) a run that stopped early round-trips:
# completed at its ``epochs_planned``, replayed to the plan it stated
KNOWN_COLUMNS = frozenset(
    {"batch_size", "gpus", "gpu_utilization_ratio", "memory_utilization_ratio", STATED_PLAN}
)
# every field quoted with each character a doubled quote, and a separator
FIELD_BOUND = 2 * MAX_FIELD_CHARS + 3
MAX_LINE_CHARS = MAX_COLUMNS * FIELD_BOUND  # a line of a file of up to MAX_COLUMNS columns
MAX_HEADER_CHARS = MAX_FILE_COLUMNS * FIELD_BOUND
MAX_ROWS = 5_000_000
MAX_RUNS = 500_000
# What the runs read may hold, estimated as they are read (``_Acc.held``): RUN_BYTES a
# run, ROW_BYTES a progress point, FEATURE_BYTES a numeric feature, TEXT_BYTES plus its
# length a text one, CHANGE_BYTES a row whose features differ from its run's row before
# and ``_state_bytes`` each distinct set of a row's features. Why an estimate and a
# bound: MAX_RUNS and MAX_ROWS alone let 500,000 runs of 60 text columns hold ~9 GiB.
# Measured (CPython 3.11, peak RSS of the read less the 17 MiB of its imports; each at
# or under the estimate): 50,000 runs × 11 rows, no feature 132 MiB (2.7 KiB a run);
# 50,000 × 2 rows × 60 numbers 410 MiB (8.2 KiB); 50,000 × 2 rows × 60 texts of ~200
# characters 884 MiB (17.7 KiB); 450,000 runs × 11 rows × 4 features 1.48 GiB. Python's
# own allocations (tracemalloc) of 2,000 runs × 11 rows whose 4 features change on every
# row: 10.4 KiB a run (18.3 KiB estimated). The runs handed on are part of it: the replay
# adds its own.
MAX_HELD_BYTES = 2 << 30
RUN_BYTES = 1000
CHANGE_BYTES = 250  # a row changing its run's features (``_Acc.changes``), its first too
ROW_BYTES = 250
FEATURE_BYTES = 130
TEXT_BYTES = 70
# Unix seconds up to the year 5138: a run on a millisecond clock (1.7e12 today) is read
# in milliseconds, never as a run a thousand times longer than it was.
MAX_TIMESTAMP = 1e11
# A run whose every time is past MAX_TIMESTAMP is on a millisecond clock (up to here)
MAX_TIMESTAMP_MS = MAX_TIMESTAMP * 1000
MAX_NAMED = 5  # runs named in RunsFile.warning()
# 2000-01-01T00:00:00Z: a run said to start before it is on another clock than Unix time
# (time since its own start, as tqdm and TensorBoard's relative time give), noted
EARLIEST_START = 946_684_800.0
MAX_KEPT_ROWS = 1000  # damaged rows without a run kept to name; the others only counted
# Progress within this share of the plan either way is the plan (a total written with
# another rounding than the last row: 10.0000001 of 10, or steps / steps per epoch
# landing at 3.9999999999999996 of 4); further past it the run is damaged.
PLAN_SLACK = 1e-6
GZIP_MAGIC = b"\x1f\x8b"


class RunsCsvError(ForecasterError, ValueError):
    """The runs CSV is malformed; ``line`` is the 1-based line number (0: whole file)."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        self.reason = message
        super().__init__(f"line {line}: {message}" if line else message)


@dataclass(frozen=True, slots=True)
class SkippedRun:
    """A run left out because of damage: its id ("" for a row without one), the first
    damaged line and why."""

    run_id: str
    line: int
    reason: str

    def describe(self) -> str:
        who = f"run {self.run_id!r}" if self.run_id else "a row without a run_id"
        return f"{who} (line {self.line}: {self.reason})"


@dataclass(frozen=True, slots=True)
class RunsFile:
    """What a runs CSV held: the good runs, sorted by start time, and what was skipped."""

    runs: list[Run]
    skipped: list[SkippedRun] = field(default_factory=list)
    more_rows: int = 0  # damaged rows without a run beyond ``MAX_KEPT_ROWS``, counted only
    # (column, why) -> feature values left out of their run (the run itself is kept)
    dropped: dict[tuple[str, str], int] = field(default_factory=dict)
    # lines about the file as a whole (columns ignored, a clock read as milliseconds)
    notes: tuple[str, ...] = ()
    # headers mid-file that cannot place rows: (line, why, rows after it read past)
    unread: tuple[tuple[int, str, int], ...] = ()
    # runs read without a plan (``plan_optional``): their plan is what they reached
    planless: frozenset[RunKey] = frozenset()
    # the runs whose features changed over their rows: as they stood at each moment
    # (``feature_timeline``); any other run's held from its first row on
    timelines: Mapping[RunKey, FeatureTimeline] = field(default_factory=dict)

    def warning(self) -> str | None:
        """One line naming the skipped runs (at most ``MAX_NAMED``) and counting the
        feature values left out, or None."""
        parts = [p for p in (self._skipped_part(), self._unread_part(), self._dropped_part()) if p]
        return "; also ".join(parts) if parts else None

    def _unread_part(self) -> str | None:
        if not self.unread:
            return None
        total = sum(n for _line, _why, n in self.unread)
        each = "; ".join(
            f"{n:,} row(s) under the header of line {line} ({why})"
            for line, why, n in self.unread[:MAX_NAMED]
        )
        more = len(self.unread) - MAX_NAMED
        tail = f"; and {more:,} more header(s)" if more > 0 else ""
        return f"{total:,} row(s) not read, their header unusable: {each}{tail}"

    def _dropped_part(self) -> str | None:
        if not self.dropped:
            return None
        total = sum(self.dropped.values())
        each = ", ".join(f"{n:,} in {col!r} ({why})" for (col, why), n in self.dropped.items())
        return f"{total:,} feature value(s) not taken as written, their runs kept: {each}"

    def _skipped_part(self) -> str | None:
        if not self.skipped and not self.more_rows:
            return None
        bad_runs = sum(1 for s in self.skipped if s.run_id)
        bad_rows = len(self.skipped) - bad_runs + self.more_rows
        what = []
        if bad_runs:
            total = bad_runs + len(self.runs)
            what.append(f"{bad_runs:,} malformed run(s) of {total:,}")
        if bad_rows:
            what.append(f"{bad_rows:,} row(s) without a run_id")
        named = "; ".join(s.describe() for s in self.skipped[:MAX_NAMED])
        more = len(self.skipped) + self.more_rows - MAX_NAMED
        tail = f"; and {more:,} more" if more > 0 else ""
        return f"skipped {' and '.join(what)}: {named}{tail}"


class _BadRow(Exception):
    """One row is damaged; the message says how."""


def _early_note(starts: list[float]) -> str | None:
    """A note when runs' starts (``starts``, Unix seconds) look like another clock, else None.

    Two signatures: runs before 2000-01-01 (``EARLIEST_START``) beside runs after it (two
    clocks in one file: the early ones are replayed as the oldest history of every other
    run), and two or more runs before it starting at the very same second (times since
    each run's own start, as tqdm or TensorBoard's relative time give: every run at
    once, each forecast then knowing only the shorter runs). Why a note and not a skip:
    the runs are whole, and a synthetic file counting from 0 with runs one after another
    is neither and says nothing.
    """
    early = [t for t in starts if t < EARLIEST_START]
    if not early:
        return None
    mixed = len(early) < len(starts)
    same = len(early) - len(set(early))
    if not mixed and not same:
        return None
    why = (
        "beside runs after it"
        if mixed
        else f"{same + 1 if len(set(early)) == 1 else 'several'} of them at the same second"
    )
    return (
        f"{len(early):,} of {len(starts):,} runs start before 2000-01-01, {why} "
        "(timestamp_seconds on another clock than Unix time, such as seconds since each "
        "run's start?): the replay orders runs by these times to decide what each "
        "forecast knows"
    )


def _not_seconds(ts: float) -> str:
    return f"timestamp_seconds {ts:.12g} is not Unix seconds (milliseconds?)"


def _timestamp(text: str, comma: bool) -> float:
    """Unix seconds of a ``timestamp_seconds`` cell: a number, or an ISO-8601 time
    with a UTC offset or ``Z`` (``2026-11-21T05:42:06.689+00:00``; RFC 3339's
    lowercase ``z``; the basic format ``20261121T054206Z``).

    Why an ISO time without an offset is refused: its zone is the writer's, unknown
    here; read as UTC it would shift a run by hours against runs written elsewhere."""
    try:
        return _number(text, "timestamp_seconds", comma)
    except _BadRow:
        if not text[:1].isdigit() or len(text) > 40:  # an ISO time starts with its year
            raise
    try:
        # fromisoformat takes both formats, but "Z" only in upper case
        moment = datetime.fromisoformat(text[:-1] + "Z" if text.endswith("z") else text)
    except ValueError:
        raise _BadRow(
            f"timestamp_seconds is not a number nor an ISO-8601 time: {text[:40]!r}"
        ) from None
    if moment.tzinfo is None:
        raise _BadRow(
            f"timestamp_seconds {text[:40]!r} has no UTC offset, so its time is ambiguous "
            "(write it with Z or +00:00, or as Unix seconds)"
        )
    return moment.timestamp()


def _decimal_comma(text: str) -> float:
    """``0,5`` as 0.5 (a spreadsheet's ``;`` file in a locale whose decimal mark is a
    comma); ValueError for anything else (``1,000`` of a thousands separator stays
    ambiguous only where a file mixes them: a ``;`` file has no thousands commas)."""
    if text.count(",") != 1 or "." in text:
        raise ValueError(text)
    return float(text.replace(",", "."))


def _number(text: str, column: str, comma: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        try:
            if not comma:
                raise
            value = _decimal_comma(text)
        except ValueError:
            raise _BadRow(f"{column} is not a number: {text[:40]!r}") from None
    if not math.isfinite(value):
        raise _BadRow(f"{column} must be finite, got {text[:40]!r}")
    return value


def _feature(name: str, text: str, comma: bool = False) -> Feature:
    if name in TEXT_COLUMNS:
        return text
    try:
        return float(text)
    except ValueError:
        pass
    if comma:
        try:
            return _decimal_comma(text)
        except ValueError:
            pass
    return text


@dataclass(slots=True)
class _Span:
    """Where one value of a ``CONSTANT_COLUMNS`` column is in a run's rows: its first and
    last times (and lines), and whether one of its rows is a start (epoch 0)."""

    first: float
    last: float
    first_line: int
    last_line: int
    start: bool

    def add(self, other: _Span) -> None:
        """Widen to cover ``other`` too."""
        if (other.first, other.first_line) < (self.first, self.first_line):
            self.first, self.first_line = other.first, other.first_line
        if (other.last, other.last_line) > (self.last, self.last_line):
            self.last, self.last_line = other.last, other.last_line
        self.start = self.start or other.start


@dataclass(slots=True)
class _Acc:
    """One run being read: its plan (None while no row has given one), first line,
    points and features."""

    planned: float | None
    first_line: int
    rows: list[tuple[float, float, int]] = field(default_factory=list)
    sums: dict[str, tuple[float, int]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    big: tuple[int, float] | None = None  # the first line past MAX_TIMESTAMP, its value
    held: int = RUN_BYTES  # the bytes this run holds, estimated (``MAX_HELD_BYTES``)
    # CONSTANT_COLUMNS: name -> value -> its rows' span (``_Span``), for the run's last
    # value and for two runs interleaving under its key (``_collision``)
    constant: dict[str, dict[Feature, _Span]] = field(default_factory=dict)
    plan_line: int = 0  # the line that gave ``planned``
    # (line, features) of each row whose features differ from the run's row before it,
    # in file order: each row's features, for ``timelines`` (``_row_states``)
    changes: list[tuple[int, State]] = field(default_factory=list)
    bare: list[tuple[float, int]] = field(default_factory=list)  # rows without progress


def _same_plan(known: float | None, planned: float | None) -> bool:
    """Whether a row's plan agrees with the run's: either is missing (an empty field),
    or they are within ``PLAN_SLACK`` of each other.

    Why a slack: one total written with two roundings (rows of two exports of
    different precision, a total computed per row) is one plan; a run skipped over
    its ninth digit is a run lost."""
    if known is None or planned is None:
        return True
    return abs(planned - known) <= known * PLAN_SLACK


def separator(header_line: str) -> str:
    """The field separator a header line shows: ``,``; or ``;`` (a spreadsheet in a
    locale whose decimal mark is a comma) or a tab (a TSV export) when the line has
    one and no comma."""
    if "," in header_line:
        return ","
    if ";" in header_line:
        return ";"
    return "\t" if "\t" in header_line else ","


def _header_names(fields: Sequence[str]) -> list[str]:
    """Header fields as the names they mean: a BOM (Excel's "CSV UTF-8") before the
    first is no part of it, and " Run_ID " is run_id (a header typed or saved by a
    spreadsheet differs in case and spaces, never in meaning: all the names this
    reads are lower case)."""
    return [
        h.removeprefix("\ufeff").strip().lower() if i == 0 else h.strip().lower()
        for i, h in enumerate(fields)
    ]


def header_names(row: Sequence[str]) -> list[str] | None:
    """A data row's names when it is a header again, as ``_read_header`` reads one,
    else None: it names two or more of ``REQUIRED_COLUMNS`` (in any order, case or
    spacing, after a BOM).

    Why: runs files joined with ``cat`` repeat a header where each file began, and two
    exports (of two versions, or tools) may order or choose their columns apart; the
    rows after a header read as it says, never under the first header's positions.
    Why two names: a data row holds numbers in three of them, so it names at most one
    (a run_id that is the word "epoch")."""
    names = _header_names(row)
    return names if sum(c in names for c in REQUIRED_COLUMNS) >= 2 else None


_MORE_HEADERS = "; with the rows of the unusable headers after it"


def _holds_a_time(row: Sequence[str], cols: _Columns | None, comma: bool) -> bool:
    """Whether the row holds a time (a number, or an ISO time) where the current header
    reads ``timestamp_seconds``: a data row then, even when its text names columns (a
    run called "epoch" of a job called "run_id"); a header holds a name there. Parsed,
    not judged by its first character: a joined file's header may name a column
    ``1st_loss`` or ``-loss`` at that place."""
    if cols is None or cols.i_ts >= len(row):
        return False
    cell = row[cols.i_ts].strip()
    try:
        _number(cell, "timestamp_seconds", comma)
    except _BadRow:
        try:
            datetime.fromisoformat(cell)  # with or without an offset: a time, not a name
        except ValueError:
            return False
    return True


# first bytes of what is often saved as "CSV" but is not UTF-8 text: (magic, what, do)
_NOT_TEXT = (
    (b"\xff\xfe", 'UTF-16 (a spreadsheet\'s "Unicode text")', "save or convert it as UTF-8"),
    (b"\xfe\xff", "UTF-16", "save or convert it as UTF-8"),
    *(
        (b"BZh" + bytes([n]), "bzip2-compressed", "decompress it (bunzip2), or gzip it")
        for n in b"123456789"
    ),
    (b"PK\x03\x04", "a zip archive", "decompress it (unzip), or gzip it"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it (zstd -d), or gzip it"),
    (b"\xfd7zXZ\x00", "xz-compressed", "decompress it (unxz), or gzip it"),
)


def not_utf8_text(head: bytes) -> str:
    """The error for a file whose first line is not UTF-8, from its first bytes
    ``head``: what it looks like and what to do.

    Why: UTF-16 (Excel's "Unicode text"), bzip2, zip, zstd and xz all read as "not
    UTF-8 text", which says neither what the file is nor that only UTF-8, plain or
    gzip-compressed, is read."""
    for magic, what, do in _NOT_TEXT:
        if head.startswith(magic):
            return f"not UTF-8 text: {what}; {do} (UTF-8 is read, plain or gzip-compressed)"
    return (
        "not UTF-8 text (another encoding, such as UTF-16 without a byte-order mark or "
        "Latin-1?): save or convert it as UTF-8 (plain or gzip-compressed)"
    )


def _read_header(fh: TextIO, plan_optional: bool = False) -> tuple[list[str], str]:
    first = fh.readline(MAX_HEADER_CHARS + 1)
    expected = "expected a header with " + (
        ",".join(c for c in REQUIRED_COLUMNS if c != PLAN_COLUMN) + f" ({PLAN_COLUMN} optional)"
        if plan_optional
        else ",".join(REQUIRED_COLUMNS)
    )
    if not first:
        raise RunsCsvError(1, f"empty file: {expected}")
    head = first[:8].encode("utf-8", "surrogateescape")
    if any(head.startswith(m) for m, _w, _d in _NOT_TEXT):  # before its length: binary
        raise RunsCsvError(1, not_utf8_text(head))
    if len(first) > MAX_HEADER_CHARS and not first.endswith(("\n", "\r")):
        raise RunsCsvError(1, f"header longer than {MAX_HEADER_CHARS:,} characters: {expected}")
    if not first.strip():
        raise RunsCsvError(1, f"blank first line: {expected}")
    if not utf8_encodable(first):
        raise RunsCsvError(1, not_utf8_text(head))
    first = first.removeprefix("\ufeff")  # a BOM (Excel's "CSV UTF-8") is not part of a name
    try:
        sep = separator(first)
        header = next(csv.reader([first], strict=True, delimiter=sep))
    except (csv.Error, StopIteration) as err:
        raise RunsCsvError(1, f"unreadable CSV header: {err}") from None
    return _header_names(header), sep


class _UntilDamage:
    """``fh.readline`` that ends (``""``) where the compressed data is damaged, the
    damage kept in ``damage`` and whether it is a cut (``cut``) or corruption.

    Why a cut is read up to: a gzip file cut short (a copy interrupted, a disk filled)
    still holds every line before the cut; the runs they finish are as good as in a
    whole file. Why corruption is not (``_CORRUPT``): gzip's checksum is checked
    only at the end of the data, so a CRC failure says some byte is wrong but not
    which; a changed digit reads as a valid row (epoch 1 as 0, a time an hour off), and
    a deflate stream that fails mid-way has already given bytes nothing vouches for.
    Scoring such a file would score rows nobody wrote."""

    def __init__(self, fh: TextIO) -> None:
        self._fh = fh
        self.damage: str | None = None
        self.cut = False

    def readline(self, size: int = -1) -> str:
        if self.damage is not None:
            return ""
        try:
            return self._fh.readline(size)
        except (EOFError, zlib.error, gzip.BadGzipFile) as err:
            self.damage = str(err) or "truncated"
            # EOFError: the data ends early; BadGzipFile other than a checksum: bytes
            # after a whole member that are no gzip (appended junk), the member read
            self.cut = isinstance(err, EOFError) or (
                isinstance(err, gzip.BadGzipFile) and not _CORRUPT.match(str(err))
            )
            return ""


# gzip's messages for data that does not match its trailer (``gzip._GzipReader``)
_CORRUPT = re.compile(r"CRC check failed|Incorrect length of data produced")


def _lines(fh: TextIO | _UntilDamage, number: int, limit: int) -> Iterator[tuple[int, str, bool]]:
    """The physical lines after line ``number``: ``(line number, text, whole)``, a line
    longer than ``limit`` (``MAX_LINE_CHARS`` for a file of up to ``MAX_COLUMNS``
    columns) cut there (``whole`` False) and the rest of it read past in pieces of
    that size.

    Why lines: a runs CSV has no field spanning lines (``_records`` allows a quoted one
    a field's length), and a reader that lets a quoted field run on reads the rest of
    the file into one field after a stray quote; and no line, however long, is held
    whole (a compressed file of a few KiB can hold a line of gigabytes). Why no bound
    on a line's length: read past, it costs time, not memory, as the rows of a long
    file do; a line of 70 Mi zeros is one damaged row, not a reason to refuse the rows
    after it.
    """
    cut_at_cr = False
    while text := fh.readline(limit + 1):
        if text == "\n" and cut_at_cr:  # the rest of a "\r\n" a piece ended inside
            cut_at_cr = False
            continue
        number += 1
        cut_at_cr = len(text) == limit + 1 and text.endswith("\r")
        if len(text) <= limit or text.endswith(("\n", "\r")):
            yield number, text, True
            continue
        while (more := fh.readline(limit + 1)) and not more.endswith(("\n", "\r")):
            pass  # read past, a piece at a time: however long, never held
        cut_at_cr = len(more) == limit + 1 and more.endswith("\r")
        yield number, text[:limit], False


_OPEN_QUOTE = "unexpected end of data"  # csv's error for a quote still open at the end


def _parse(text: str, sep: str = ",") -> tuple[list[str], str | None]:
    """A record's fields and None, or ``[]`` and why it is unreadable. Only a quote
    left open is damage: other oddities (a space after a closing quote, as aligned
    files have) read as a lenient reader reads them."""
    try:
        return next(csv.reader([text], strict=True, delimiter=sep), []), None
    except csv.Error as err:
        if _OPEN_QUOTE in str(err):
            return [], "a quote left open"
    try:
        return next(csv.reader([text], delimiter=sep), []), None
    except csv.Error as err:  # pragma: no cover - the lenient reader takes any one line
        return [], f"unreadable CSV ({err})"


def _records(
    fh: TextIO | _UntilDamage, limit: int, sep: str = ","
) -> Iterator[tuple[int, str, list[str], str | None]]:
    """``(line, text, fields, damage)`` per record: a line, or a line whose quote is
    left open and the next lines that close it within a field's length (a text with a
    line break, as a spreadsheet or pandas writes it); a quote that does not close so
    soon damages its own line only, and the lines read ahead are records of their own."""
    lines = _lines(fh, 1, limit)
    ahead: list[tuple[int, str, bool]] = []
    while True:
        item = ahead.pop(0) if ahead else next(lines, None)
        if item is None:
            return
        number, text, whole = item
        if not whole:
            yield number, text, [], f"line longer than {limit:,} characters"
            continue
        fields, damage = _parse(text, sep)
        joined, used = text, 0
        while damage is not None and len(joined) - len(text) <= MAX_FIELD_CHARS + 2:
            if used == len(ahead):
                nxt = next(lines, None)
                if nxt is None:
                    break
                ahead.append(nxt)
            if not ahead[used][2]:
                break
            joined += ahead[used][1]
            used += 1
            closed, again = _parse(joined, sep)
            if again is None:
                fields, damage = closed, None
                del ahead[:used]
        yield number, text if damage is not None else joined, fields, damage


def _field_of(text: str, i: int, sep: str = ",") -> str:
    """Field ``i`` of a damaged line where the fields up to it read whole, else ""."""
    pieces = text.split(sep, i + 1)
    if len(pieces) <= i + 1:
        return ""
    try:
        head = next(csv.reader([sep.join(pieces[: i + 1])], strict=True, delimiter=sep), [])
    except csv.Error:
        return ""
    return head[i].strip() if len(head) == i + 1 else ""


def _only_blank_past(row: Sequence[str], width: int) -> bool:
    """Whether ``row`` is longer than the header's ``width`` by empty fields only.

    Why: a writer that ends every row with a separator (``r0,0,4,1000,``) adds an
    empty field no header names; it holds nothing to misread."""
    return len(row) > width and not any(cell.strip() for cell in row[width:])


def _mended(text: str) -> str:
    """``text`` with each byte that was not UTF-8 (read as a lone surrogate) as U+FFFD.

    Why only features: a job name saved by a Windows tool (cp1252 "café") still names
    its job, while a run_id or a number with such a byte cannot be trusted at all."""
    if utf8_encodable(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate no byte made (a str given directly)
        return text.encode("utf-8", "replace").decode("utf-8")


_Key = tuple[str, str, str, str, str, str]
"""A run's key in a file: the service's ``RunKey`` (namespace, pod, container, run_id)
then the ``JOB_KEY_COLUMNS`` (job_name, node_type)."""


def _key(run_id: str, cells: Sequence[str], ascii_only: bool = False) -> _Key:
    """The ``_Key`` from the ``KEY_COLUMNS`` and ``JOB_KEY_COLUMNS`` cells, stripped
    and mended (``_mended``) as their feature values are (``ascii_only``: the line is
    ASCII, nothing to mend)."""
    ns, pod, container, job, node = (c.strip() if ascii_only else _mended(c.strip()) for c in cells)
    # an over-long job cell is left out of its features (``RunsFile.dropped``): no job
    job, node = (c if len(c) <= MAX_FIELD_CHARS else "" for c in (job, node))
    return (ns, pod, container, run_id, job, node)


def _qualified(runs: list[tuple[_Key, Run]]) -> list[tuple[_Key, Run]]:
    """``runs`` with each run that shares its service key (``run_key``) with another
    renamed ``job_name/node_type/run_id`` (empty parts left out, ``#2`` … added if the
    name is taken).

    Why: the service, the history and ``evaluate`` tell runs apart by ``RunKey``; two
    runs that differ only by job or node type would be one run there."""
    count = Counter(run_key(run) for _key, run in runs)
    if all(n == 1 for n in count.values()):
        return runs
    used = {run.run_id for _key, run in runs}
    out = []
    for key, run in runs:
        if count[run_key(run)] > 1:
            base = qualified_id(key[4], key[5], run.run_id)
            name, n = base, 1
            while name in used:
                n += 1
                name = f"{base}#{n}"
            used.add(name)
            run = dataclasses.replace(run, run_id=name)
        out.append((key, run))
    return out


_PARTS = (0, 1, 2, 4, 5)
"""The cells of a ``_Key`` a row may leave empty: all but its run_id (index 3)."""


def _compatible(blank: _Key, full: _Key) -> bool:
    """Whether ``full`` is ``blank`` with some of its empty cells (``_PARTS``) given."""
    return blank[3] == full[3] and all(blank[i] in ("", full[i]) for i in _PARTS)


def _without(blank: _Key, present: Sequence[int]) -> tuple[str, list[int]]:
    """The columns ``blank`` leaves empty of those some row gives (``present``), as a
    message names them, and the cells that tell its candidate runs apart (the job's
    two together: ``x/-``)."""
    keys = [i for i in present if i < 3 and not blank[i]]
    job = any(i > 3 and not blank[i] for i in present)
    names = [KEY_COLUMNS[i] for i in keys] + (["job_name or node_type"] if job else [])
    return ", ".join(names), keys + ([4, 5] if job else [])


def _merge(into: _Acc, acc: _Acc) -> str | None:
    """Add ``acc``'s rows and features to ``into``; why they are not one run, or None."""
    if not _same_plan(into.planned, acc.planned):
        return (
            f"epochs_planned {acc.planned:.12g} (line {acc.plan_line}) differs from "
            f"{into.planned:.12g} (line {into.plan_line})"
        )
    for name, spans in acc.constant.items():
        have = into.constant.setdefault(name, {})
        for value, span in spans.items():
            if value in have:
                have[value].add(span)
            else:
                have[value] = span
    if into.planned is None and acc.planned is not None:
        into.planned, into.plan_line = acc.planned, acc.plan_line
    into.first_line = min(into.first_line, acc.first_line)
    into.changes = _changes(sorted([*_row_states(into), *_row_states(acc)]))
    into.rows.extend(acc.rows)
    into.bare.extend(acc.bare)
    for name, (total, count) in acc.sums.items():
        have = into.sums.get(name, (0.0, 0))
        into.sums[name] = (have[0] + total, have[1] + count)
    for name, text in acc.texts.items():
        into.texts.setdefault(name, text)
    if acc.big is not None and (into.big is None or acc.big[0] < into.big[0]):
        into.big = acc.big
    return None


def _place_blank_keys(runs: dict[_Key, _Acc], bad: dict[_Key, SkippedRun]) -> None:
    """Put the rows of a key with an empty ``KEY_COLUMNS`` or ``JOB_KEY_COLUMNS`` cell
    (a file that gives the namespace, pod or job on some rows only) into the one run of
    its ``run_id`` that gives it; when several runs could be theirs they are skipped as
    damage. In place.

    Why: an empty cell says nothing, so it splits no run; but which of two jobs' (or
    namespaces') "1" a row without one is, the file does not say. A damaged key joins
    its run's damage (the run is skipped), as a damaged row of a whole key does."""
    keys = (*runs, *bad)
    present = [i for i in _PARTS if any(k[i] for k in keys)]  # a column some row gives

    def n_blank(k: _Key) -> int:
        return sum(not k[i] for i in present)

    blanks = sorted((k for k in keys if n_blank(k)), key=n_blank)
    if not blanks:
        return  # nothing to place: every row gives every column the file fills
    # candidate homes indexed by each cell they give (and all under (run_id, -1, ""));
    # a blank key looks among the fewest of those sharing a cell it gives. Why: a file
    # of many jobs counting runs from "1" without a node_type column has every key
    # blank in node_type; looking among all keys of the run_id (or of its namespace)
    # was quadratic (4,000 runs of one run_id: 27.8 s)
    by_part: dict[tuple[str, int, str], list[_Key]] = {}
    for k in keys:
        if n_blank(k) == len(present):
            continue  # a home gives some part
        by_part.setdefault((k[3], -1, ""), []).append(k)
        for i in present:
            if k[i]:
                by_part.setdefault((k[3], i, k[i]), []).append(k)
    for k in blanks:
        if k not in runs and k not in bad:
            continue  # placed already
        given = [by_part.get((k[3], i, k[i]), []) for i in present if k[i]]
        candidates = min(given, key=len) if given else by_part.get((k[3], -1, ""), [])
        homes = [
            f
            for f in candidates
            if _compatible(k, f) and not _compatible(f, k) and (f in runs or f in bad)
        ]
        if not homes:
            continue  # the run's only key: its job is unknown, not ambiguous
        if len(homes) > 1:
            if k in runs:
                columns, shown = _without(k, present)
                named = first_of(["/".join(f[i] or "-" for i in shown) for f in homes], MAX_NAMED)
                bad[k] = SkippedRun(
                    k[3],
                    runs.pop(k).first_line,
                    f"run {k[3]!r}: rows without {columns}, whose run cannot "
                    f"be told among the runs of that run_id ({named})",
                )
            continue
        (home,) = homes
        if k in bad or home in bad:
            skip = bad[k] if k in bad else bad[home]
            runs.pop(k, None)
            bad.pop(k, None)
            runs.pop(home, None)
            if home not in bad or skip.line < bad[home].line:
                bad[home] = skip
            continue
        why = _merge(runs[home], runs.pop(k))
        if why is not None:
            bad[home] = SkippedRun(k[3], runs.pop(home).first_line, f"run {k[3]!r}: {why}")


def _join_moves(runs: dict[_Key, _Acc], bad: dict[_Key, SkippedRun]) -> None:
    """Join the keys of a run that differ only by ``node_type`` into one run, unless
    two of them hold a start (epoch 0): those are runs of their own. In place; the run
    keeps the key (and node type) of its start.

    Why: a run resumed on another node type (a preempted job rescheduled onto H100s)
    is one run, its rows on the second node type picking up where the first stopped;
    split, the first part read as not completed and the second as having no start.
    Files that count runs per benchmark and system (MLPerf's "1" of resnet on tpu and
    on 8xV100) give each such run its own start, and stay apart."""
    groups: dict[tuple[str, ...], list[_Key]] = {}
    for key in runs:
        if key[5]:
            groups.setdefault(key[:5], []).append(key)
    for keys in groups.values():
        if len(keys) < 2:
            continue
        starts = [k for k in keys if any(e == 0 for e, _t, _ln in runs[k].rows)]
        if len(starts) > 1:
            continue
        home = starts[0] if starts else min(keys, key=lambda k: runs[k].first_line)
        for k in sorted(keys, key=lambda k: runs[k].first_line):
            if k == home:
                continue
            if home in bad:  # the run is damaged: its other parts with it
                runs.pop(k)
                continue
            why = _merge(runs[home], runs.pop(k))
            if why is not None:
                bad[home] = SkippedRun(k[3], runs.pop(home).first_line, f"run {k[3]!r}: {why}")


def _collision(acc: _Acc) -> tuple[int, str] | None:
    """The line and why when ``acc`` holds two runs interleaving under one key: two
    values of a ``CONSTANT_COLUMNS`` column each with a start (epoch 0) and rows at
    overlapping times; else None.

    Why not any change of value: a run's configuration may change part-way (a batch
    size ramped up, GPUs added to an elastic run, a new image on resume), its rows
    then one run from one start; two runs given one run_id each start, and run side
    by side. Two starts one after the other are a run restarted from scratch, read
    as one run as any restart is (``first_reached``)."""
    for name, spans in acc.constant.items():
        starts = sorted(
            ((span, value) for value, span in spans.items() if span.start),
            key=lambda sv: (sv[0].first, sv[0].first_line),
        )
        for (a, va), (b, vb) in itertools.pairwise(starts):
            if b.first <= a.last:
                shown = [f"{v:g}" if isinstance(v, float) else repr(v) for v in (va, vb)]
                return b.first_line, (
                    f"rows of one run_id disagree on {name} and each start at overlapping "
                    f"times: {shown[0]} (line {a.first_line}) and {shown[1]}: two runs under "
                    "one run_id (give each its own run_id, or a job_name or node_type "
                    "column that tells them apart)"
                )
    return None


def keep_columns(names: Sequence[str]) -> list[str]:
    """The columns read of a header's ``names``: all of them up to ``MAX_COLUMNS``;
    past it the required, identity (``TEXT_COLUMNS``) and ``KNOWN_COLUMNS`` first,
    then the others in header order up to ``MAX_COLUMNS``.

    Why not refuse a wide file: an export with every metric as a column is still a
    runs file; its runs need only the few columns gpu-eta reads, and the bound on
    what is held per run stays ``MAX_COLUMNS`` values."""
    if len(names) <= MAX_COLUMNS:
        return list(names)
    known = REQUIRED_COLUMNS + tuple(sorted(TEXT_COLUMNS | KNOWN_COLUMNS))
    first = [n for n in names if n in known]
    rest = [n for n in names if n not in known]
    chosen = set(first + rest[: max(0, MAX_COLUMNS - len(first))])
    return [n for n in names if n in chosen]


def _names(names: Sequence[str], kept: Sequence[str]) -> str:
    """The ignored columns, at most ``MAX_NAMED`` named (``_shown``)."""
    return _shown([n for n in names if n not in set(kept)])


def _shown(names: Sequence[str]) -> str:
    """Column names for a message: at most ``MAX_NAMED``, each as a terminal shows a
    label (``promparse.printable``). Why: a header is the file's text, and a name
    holding escape sequences printed as it came retitled or cleared the terminal."""
    return first_of([printable(n) for n in names], MAX_NAMED)


JOB_COLUMNS = ("job_name", "image")  # what tells a run's job (``prior.job_key``)


def identity_note(names: Iterable[str]) -> str | None:
    """A note when the header ``names`` hold no column that tells a run's job
    (``JOB_COLUMNS``) but some that gpu-eta does not read by name, else None.

    Why: gpu-eta forecasts a run at its start from the earlier runs of its job and
    configuration (``analog.identity``, ``prior.job_key``), found by these names only;
    a file naming its job ``benchmark`` and its machine ``system`` is read, but every
    run is then forecast from all earlier runs alike (MLPerf so renamed: 0.7 % →
    89.9 % median error at the start), which nothing else would say. A file with no
    column beyond the required ones has nothing misnamed to point at."""
    names = list(dict.fromkeys(n for n in names if n))
    if any(n in JOB_COLUMNS for n in names):
        return None
    known = {*REQUIRED_COLUMNS, *TEXT_COLUMNS, *KNOWN_COLUMNS}
    other = [n for n in names if n not in known]
    if not other:
        return None
    return (
        "no job_name column (nor image): a run's start is forecast from the earlier runs "
        "of its job and configuration, found by the columns job_name or image, with "
        "namespace, node_type (or gpu_model and gpus) and batch_size; without one every "
        "earlier run counts alike. Columns read as plain features, not by name: "
        f"{_shown(other)} (rename the one naming the job to job_name, the "
        "machine to node_type)"
    )


class _BadHeader(Exception):
    """A header cannot place rows; the message says why."""


@dataclass(frozen=True, slots=True)
class _Columns:
    """Where a header puts each column read: the rows after it are read with these."""

    names: tuple[str, ...]
    width: int  # fields a row has (trailing unnamed columns may be left off)
    named_width: int  # up to the last named column
    i_run: int
    i_epoch: int
    i_plan: int | None  # None: no such column (``plan_optional``), every row without a plan
    i_ts: int
    i_keys: tuple[int | None, ...]  # KEY_COLUMNS, JOB_KEY_COLUMNS; None: absent, read as ""
    # a run's identity must be whole: an over-long feature is left out, not its run
    i_limited: tuple[int, ...]
    extra: tuple[tuple[str, int], ...]  # features: (name, index)
    ignored: str | None  # the note when more than MAX_COLUMNS are named

    def fits(self, row: Sequence[str]) -> bool:
        """Whether a row has this header's fields: its width, or short of it by unnamed
        columns only, or past it by empty fields only (``_only_blank_past``).

        Why short: a spreadsheet's save ends its header (and maybe its rows) with an
        empty column name (``,``); joined to the file it came from, or read alone, a
        row without that empty field holds every named one."""
        n = len(row)
        return self.named_width <= n <= self.width or _only_blank_past(row, self.width)


def _columns(header: Sequence[str], plan_optional: bool = False) -> _Columns:
    """The ``_Columns`` of a header's names; ``_BadHeader`` when it cannot place rows
    (``epochs_planned`` is not required with ``plan_optional``)."""
    if len(header) > MAX_FILE_COLUMNS:
        raise _BadHeader(f"too many columns ({len(header):,} > {MAX_FILE_COLUMNS:,})")
    required = [c for c in REQUIRED_COLUMNS if not (plan_optional and c == PLAN_COLUMN)]
    missing = [c for c in required if c not in header]
    if missing:
        hint = (
            f" (the header is one column, {header[0][:60]!r}: fields are separated by"
            " ',', ';' or a tab)"
            if len(header) == 1
            else ""
        )
        raise _BadHeader(f"missing required column(s): {', '.join(missing)}{hint}")
    named = [h for h in header if h]  # columns without a name (a spreadsheet's ",,") are read past
    twice = sorted({h for h in named if named.count(h) > 1})
    if twice:
        raise _BadHeader(f"duplicate column name(s) in header: {_shown(twice)}")
    index = {name: i for i, name in enumerate(header) if name}
    kept = keep_columns(named)
    n_ignored = len(named) - len(kept)
    ignored = (
        f"ignored {n_ignored:,} of {len(named):,} columns (at most {MAX_COLUMNS} are read): "
        f"{_names(named, kept)}"
        if n_ignored
        else None
    )
    return _Columns(
        names=tuple(header),
        width=len(header),
        named_width=max(index.values()) + 1,
        i_run=index["run_id"],
        i_epoch=index["epoch"],
        i_plan=index.get(PLAN_COLUMN),
        i_ts=index["timestamp_seconds"],
        i_keys=tuple(index.get(c) for c in (*KEY_COLUMNS, *JOB_KEY_COLUMNS)),
        i_limited=tuple(index[c] for c in (*REQUIRED_COLUMNS, *KEY_COLUMNS) if c in index),
        extra=tuple((name, index[name]) for name in kept if name not in REQUIRED_COLUMNS),
        ignored=ignored,
    )


def parse_runs_file(fh: TextIO, *, plan_optional: bool = False) -> RunsFile:
    """Read runs from an open CSV text stream, skipping (and recording) damaged runs.

    Raises ``RunsCsvError`` only for damage to the file as a whole: no header, a
    required column missing, too many rows, no data row at all.

    ``plan_optional`` (``evaluate``): ``epochs_planned`` may be absent, and a run
    without a plan on any row is read as one that ended where it ended (``_assemble``)
    and listed in ``RunsFile.planless``. Why a flag, off by default: the history seed
    and the strict forms store what they read as history, whose runs have plans.
    """
    header, sep = _read_header(fh, plan_optional)
    comma = sep == ";"  # a decimal comma: "0,5"
    try:
        first = _columns(header, plan_optional)
    except _BadHeader as err:
        raise RunsCsvError(1, str(err)) from None
    notes = [first.ignored] if first.ignored else []
    seen: dict[str, None] = dict.fromkeys(first.names)  # names of the usable headers
    cols: _Columns | None = first  # the columns of the last header read
    limit = max(len(header), MAX_COLUMNS) * FIELD_BOUND
    dropped: Counter[tuple[str, str]] = Counter()
    not_utf8 = "bytes not UTF-8: read as U+FFFD"
    too_long = f"longer than {MAX_FIELD_CHARS} characters: left out"
    # headers mid-file that cannot place rows: [line, why, rows after it read past]
    unread: list[list[Any]] = []
    ignored_headers = 0  # headers mid-file with more than MAX_COLUMNS columns

    runs: dict[_Key, _Acc] = {}
    bad: dict[_Key, SkippedRun] = {}
    held = 0  # bytes the runs in ``runs`` hold, estimated (``MAX_HELD_BYTES``)
    states: dict[State, State] = {}  # each row's features (``_Acc.changes``), once a file
    bad_rows: list[SkippedRun] = []
    more_rows = 0
    n_rows = 0
    line = 1
    reader = _UntilDamage(fh)
    key: _Key | None = None
    for line, text, row, damage in _records(reader, limit, sep):
        if damage is None and all(not cell.strip() for cell in row):
            continue  # a blank line, or separators only (a spreadsheet's empty rows)
        n_rows += 1  # a header mid-file too: the bound is on lines read
        if n_rows > MAX_ROWS:
            raise RunsCsvError(line, f"more than {MAX_ROWS:,} rows")
        names = (
            header_names(row) if damage is None and not _holds_a_time(row, cols, comma) else None
        )
        if names is not None:  # files joined with cat: the next one's header
            if cols is not None and names == list(cols.names):
                continue
            try:
                cols = _columns(names, plan_optional)
            except _BadHeader as err:
                cols = None
                if len(unread) < MAX_KEPT_ROWS:
                    unread.append([line, str(err), 0])
                elif not unread[-1][1].endswith(_MORE_HEADERS):
                    # counted under the last one kept: memory stays bounded
                    unread[-1][1] += _MORE_HEADERS
            else:
                seen.update(dict.fromkeys(cols.names))
                if cols.ignored:
                    ignored_headers += 1
                    if ignored_headers <= MAX_NAMED:  # each note is a warning line
                        notes.append(f"line {line}: {cols.ignored}")
            continue
        if cols is None:  # under a header that cannot place it
            unread[-1][2] += 1
            continue
        i_run, i_epoch, i_plan, i_ts, i_keys = (
            cols.i_run,
            cols.i_epoch,
            cols.i_plan,
            cols.i_ts,
            cols.i_keys,
        )
        ascii_only = text.isascii()  # no byte to check in any field (nearly every line)
        if damage is None:
            run_id = row[i_run].strip() if len(row) > i_run else ""
            key = _key(
                run_id,
                [row[i] if i is not None and i < len(row) else "" for i in i_keys],
                ascii_only,
            )
        else:
            run_id = _field_of(text, i_run, sep)  # "" where the fields up to it do not read whole
            # a damaged line's job is not read: its run is the one of its run_id that
            # names one (``_place_blank_keys``), else a run of its own
            cells = [_field_of(text, i, sep) if i is not None else "" for i in i_keys]
            key = _key(run_id, [*cells[: len(KEY_COLUMNS)], *("" for _ in JOB_KEY_COLUMNS)])
        unusable = None
        if not run_id:
            unusable = "run_id is empty"
        elif len(run_id) > MAX_FIELD_CHARS:
            unusable = f"run_id longer than {MAX_FIELD_CHARS} characters"
        elif not utf8_encodable(run_id):
            unusable = "run_id is not UTF-8 text"
        if unusable is not None:
            run_id = ""
        try:
            if damage is not None or unusable is not None:
                raise _BadRow(damage or unusable or "")
            if key in bad:
                continue  # already skipped: its first damaged line is reported
            if not cols.fits(row):
                raise _BadRow(f"expected {cols.width} fields, got {len(row)}")
            if any(len(row[i]) > MAX_FIELD_CHARS for i in cols.i_limited):
                raise _BadRow(f"a field is longer than {MAX_FIELD_CHARS} characters")
            required = (i_epoch, i_ts) if i_plan is None else (i_epoch, i_plan, i_ts)
            if not ascii_only and not all(utf8_encodable(row[i]) for i in required):
                raise _BadRow("not UTF-8 text")
            epoch_text = row[i_epoch].strip()
            # empty: a row with nothing to place (its plan and features still count)
            epoch = _number(epoch_text, "epoch", comma) if epoch_text else None
            plan_text = "" if i_plan is None else row[i_plan].strip()
            # empty: this row has no plan; the run's other rows give it (_same_plan)
            planned = _number(plan_text, "epochs_planned", comma) if plan_text else None
            ts = _timestamp(row[i_ts].strip(), comma)
            big = abs(ts) > MAX_TIMESTAMP
            if abs(ts) > MAX_TIMESTAMP_MS:
                raise _BadRow(_not_seconds(ts))
            # within PLAN_SLACK of the bound: a plan of 1e15 computed in floating point
            if epoch is not None and (epoch < 0 or epoch > MAX_PROGRESS * (1 + PLAN_SLACK)):
                raise _BadRow(f"epoch must be in 0..{MAX_PROGRESS:g}, got {epoch!r}")
            if planned is not None and not plausible_plan(planned):  # the live path's rule
                raise _BadRow(
                    f"epochs_planned must be in [{MIN_PLANNED:g}, {MAX_PROGRESS:g}], got {planned!r}"
                )
            acc = runs.get(key)
            if acc is None:
                if len(runs) + len(bad) >= MAX_RUNS:
                    raise RunsCsvError(line, f"more than {MAX_RUNS:,} runs")
                acc = runs[key] = _Acc(planned, line, plan_line=line)
                held += acc.held
            elif not _same_plan(acc.planned, planned):
                raise _BadRow(
                    f"run {run_id!r}: epochs_planned {planned:.12g} differs from "
                    f"{acc.planned:.12g} (line {acc.plan_line})"
                )
            if acc.planned is None and planned is not None:
                acc.planned, acc.plan_line = planned, line
            values: list[tuple[str, Feature]] = []
            for name, i in cols.extra:
                cell = row[i].strip()
                if not cell:
                    continue
                if len(cell) > MAX_FIELD_CHARS:
                    dropped[name, too_long] += 1
                    continue
                if not ascii_only and not utf8_encodable(cell):
                    dropped[name, not_utf8] += 1
                    cell = _mended(cell)
                values.append((name, _feature(name, cell, comma)))
        except _BadRow as err:
            if run_id:
                if key not in bad:
                    if key not in runs and len(runs) + len(bad) >= MAX_RUNS:
                        raise RunsCsvError(line, f"more than {MAX_RUNS:,} runs") from None
                    bad[key] = SkippedRun(run_id, line, str(err))
                gone = runs.pop(key, None)
                held -= gone.held if gone is not None else 0
            elif len(bad_rows) < MAX_KEPT_ROWS:
                bad_rows.append(SkippedRun("", line, str(err)))
            else:
                more_rows += 1
            continue
        before = acc.held
        if epoch is not None:
            acc.rows.append((epoch, ts, line))
            acc.held += ROW_BYTES
            if big and acc.big is None:
                acc.big = (line, ts)
        else:
            acc.bare.append((ts, line))
            acc.held += ROW_BYTES
        state = tuple(values)
        if not acc.changes or acc.changes[-1][1] != state:
            kept = states.setdefault(state, state)  # one copy a file: runs share them
            if kept is state:
                held += _state_bytes(state)
            acc.changes.append((line, kept))
            acc.held += CHANGE_BYTES
        for name, value in values:
            if name in CONSTANT_COLUMNS:
                spans = acc.constant.setdefault(name, {})
                span = _Span(ts, ts, line, line, epoch == 0)
                if value in spans:
                    spans[value].add(span)
                else:
                    spans[value] = span
                    acc.held += FEATURE_BYTES
            if isinstance(value, float):
                if math.isfinite(value):
                    if name not in acc.sums:
                        acc.held += FEATURE_BYTES
                    total, count = acc.sums.get(name, (0.0, 0))
                    acc.sums[name] = (total + value, count + 1)
            elif name not in acc.texts:
                acc.texts[name] = value
                acc.held += TEXT_BYTES + len(value)
        held += acc.held - before
        if held > MAX_HELD_BYTES:
            raise RunsCsvError(
                line,
                f"the runs read so far would hold more than {MAX_HELD_BYTES / (1 << 30):.3g} GiB "
                f"of memory ({len(runs):,} runs): split the file (evaluate each part), or "
                "leave out the columns gpu-eta does not read",
            )

    if reader.damage is not None:
        cut = f"the compressed data ends in this line or after it ({reader.damage})"
        if key is None:
            raise RunsCsvError(line + 1, f"damaged gzip data: {reader.damage}")
        if not reader.cut:
            raise RunsCsvError(
                0,
                f"damaged gzip data: {reader.damage}: the file is corrupt, so any row read "
                "from it may be wrong and none is scored (copy or compress it again)",
            )
        where = f"in line {line:,} or after it ({reader.damage}"
        notes.append(
            (
                f"the gzip data ends early, {where}: a copy cut short?)"
                if "ended before" in reader.damage or reader.damage == "truncated"
                else f"bytes after the gzip data are no gzip, {where}: junk appended?)"
            )
            + ": the runs read before are kept, the last one skipped"
        )
        if key in runs or key in bad:  # the last run read may have had more rows
            runs.pop(key, None)
            bad.setdefault(key, SkippedRun(key[3], line, cut))
        elif len(bad_rows) < MAX_KEPT_ROWS:
            bad_rows.append(SkippedRun("", line, cut))
    if not runs and not bad and not bad_rows and not more_rows and not unread:
        raise RunsCsvError(line, "no data rows")
    _join_moves(runs, bad)
    _place_blank_keys(runs, bad)
    for key, acc in list(runs.items()):
        found = _collision(acc)
        if found is not None:
            del runs[key]
            bad[key] = SkippedRun(key[3], found[0], f"run {key[3]!r}: {found[1]}")
    missing_job = identity_note(seen)
    if missing_job:
        notes.append(missing_job)
    # each run on its own clock: every time past MAX_TIMESTAMP is a millisecond clock
    # (in seconds it would end after the year 5138); a run mixing both is damaged
    n_clocks, n_ms, n_values = len(runs), 0, 0
    for key, acc in list(runs.items()):
        if acc.big is None:
            continue
        if all(abs(t) > MAX_TIMESTAMP for _e, t, _ln in acc.rows):
            acc.rows = [(e, t / 1000, ln) for e, t, ln in acc.rows]
            acc.bare = [(t / 1000, ln) for t, ln in acc.bare]
            n_ms, n_values = n_ms + 1, n_values + len(acc.rows)
        else:  # a millisecond time among seconds in one run
            del runs[key]
            bad[key] = SkippedRun(key[3], acc.big[0], _not_seconds(acc.big[1]))
    if n_ms:
        notes.append(
            f"timestamp_seconds read as milliseconds in {n_ms:,} of {n_clocks:,} runs (each "
            f"of their {n_values:,} values is above {MAX_TIMESTAMP:g}): divided by 1000"
        )
    assembled = []
    no_plan: set[_Key] = set()
    changed: dict[_Key, FeatureTimeline] = {}
    for key in list(runs):
        acc = runs.pop(key)  # each run's rows freed as its Run is made: never both whole
        if acc.planned is None:
            no_plan.add(key)
        try:
            run = _assemble(key, acc, plan_optional)
        except RunsCsvError as err:
            bad[key] = SkippedRun(key[3], err.line, err.reason)
            continue
        assembled.append((key, run))
        found = _timeline(acc, run)
        if found is not None:
            changed[key] = found
    assembled = _qualified(assembled)
    timelines = {run_key(run): changed[key] for key, run in assembled if key in changed}
    out = [run for _key, run in assembled]
    planless = frozenset(run_key(run) for key, run in assembled if key in no_plan)
    out.sort(key=lambda r: (r.start_timestamp, r.run_id, r.namespace, r.pod, r.container))
    note = _early_note([r.start_timestamp for r in out])
    if note:
        notes.append(note)
    skipped = sorted([*bad.values(), *bad_rows], key=lambda s: (s.line, s.run_id))
    if ignored_headers > MAX_NAMED:
        notes.append(
            f"{ignored_headers - MAX_NAMED:,} more header(s) mid-file with more than "
            f"{MAX_COLUMNS} columns: the same columns read of each"
        )
    unread_t = tuple((ln, why, n) for ln, why, n in unread)
    return RunsFile(
        out, skipped, more_rows, dict(dropped), tuple(notes), unread_t, planless, timelines
    )


def first_reached(rows: Iterable[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """``(progress, time, line)`` rows in progress order, each progress value at the
    first time it was seen.

    Why the first: a progress gauge sampled by every scrape (a file exported from
    Prometheus) repeats its value until the next epoch ends, and files exported over
    overlapping windows repeat whole rows; the epoch ended when the value first
    appeared. A run restarted from a checkpoint shows its old values again later;
    taking their first times leaves the lost time in the next new value.
    """
    out: list[tuple[float, float, int]] = []
    for row in sorted(rows, key=lambda r: (r[0], r[1])):
        if not out or row[0] != out[-1][0]:
            out.append(row)
    return out


Point = tuple[float, float, int]  # (progress, time, line)


def significant(rows: Sequence[Point], floor: float) -> list[Point]:
    """``rows`` (in progress order) without those less than ``floor`` past the row kept
    before them: the progress was reached at the earlier row's time.

    Why: a value a hair above the last (``1e-300`` after 0) is no step of training, and
    read as one it is 1e302 seconds per epoch, which overflowed the estimators
    (``progress_bound.NEGLIGIBLE_PROGRESS_SHARE`` of the plan, the live path's rule).
    The last row stays, in place of the row kept before it (not the start): it may be
    the plan, and a completed run must stay completed."""
    kept: list[Point] = []
    for row in rows:
        if not kept or row[0] - kept[-1][0] >= floor:
            kept.append(row)
    # ``>= 2``: the point kept after the start is replaced too when it is the only one
    # (a start, a hair short of the plan, the plan: the run must read completed)
    if len(kept) >= 2 and kept[-1] is not rows[-1]:
        kept[-1] = rows[-1]  # the last row is kept (it may be the plan): the one before goes
    return kept


def reused_after(rows: Sequence[Point], planned: float) -> tuple[Point, Point] | None:
    """The row where a second run starts, after the run first reached ``planned``, under
    the same key: the run's first progress value again, followed by a higher one (it
    starts over and climbs); with that first row at the plan. None when there is none.

    Why: a run that completed does not start over, so a new start and climb later is a
    second run under the same key (a job's "1" of today and of last week). Merged, a
    second run that repeats the first's values would vanish into its first times
    (``first_reached``) and one that does not would read as times going back; which
    rows are whose cannot be told, so the key is damage. Why a start and a climb, not
    any old value again: a completed run's export also shows a few lower values after
    its end that are still that run (a restart from an older checkpoint after the
    final save failed, a gauge reset to 0 by an exporter restart, two ranks' series
    under one key a moment apart); those keep the run, each value from its first time
    (``first_reached``), as a run that did not complete and shows old values is read."""
    done = min((r for r in rows if r[0] == planned), key=lambda r: (r[1], r[2]), default=None)
    if done is None:
        return None
    start = min(e for e, _t, _line in rows)
    if start >= planned:
        return None
    later = sorted((r for r in rows if r[1] > done[1]), key=lambda r: (r[1], r[2]))
    # one pass from the end, the highest value after each row carried: a run left at
    # its start value for many rows after its end is read once, not once per row
    found, higher = None, -math.inf
    for row in reversed(later):
        if row[0] == start and higher > start:
            found = row
        higher = max(higher, row[0])
    return None if found is None else (found, done)


def _assemble(key: _Key, acc: _Acc, plan_optional: bool = False) -> Run:
    """The ``Run`` of one run's rows, or ``RunsCsvError`` naming the first bad line.

    A run without a plan on any row (``plan_optional``) gets the progress it reached as
    its plan, so it is completed, when that is a plan (``plausible_plan``: at least one
    whole epoch or step, at most ``MAX_PROGRESS``; else the run is damage): a recorded run without a plan is taken as having
    ended where it ended, as the live service stores a plan-less run that ended
    (``exporter.progress.advance``). The plan is hindsight, for placing the moments a
    backtest scores; ``evaluate`` never forecasts such a run from it."""
    namespace, pod, container, run_id = key[:4]
    if acc.planned is None and not plan_optional:
        raise RunsCsvError(
            acc.first_line,
            f"run {run_id!r}: epochs_planned is empty on every row (a run is read with "
            "its planned total)",
        )
    if not acc.rows:
        raise RunsCsvError(acc.first_line, f"run {run_id!r}: epoch is empty on every row")
    reached, _t, reached_line = max(acc.rows)
    if acc.planned is None and not plausible_plan(reached):
        # the plan it gets is what it reached: held to every plan's rule, so a rounding
        # past the bound (read as the plan beside a stated one) or a run stopped in its
        # first epoch is no plan here either
        raise RunsCsvError(
            reached_line,
            f"run {run_id!r}: has no epochs_planned and reached {reached!r}, which is no "
            f"plan (a run without one is read as ended where it ended; a plan is "
            f"{MIN_PLANNED:g} to {MAX_PROGRESS:g})",
        )
    planned = reached if acc.planned is None else acc.planned
    slack = planned * PLAN_SLACK

    def at_plan(e: float) -> bool:
        """A hair past the plan, or the run's last point a hair short of it (an earlier
        one a hair short is a point of its own: merged, it would date the end there)."""
        near = planned - slack <= e <= planned + slack
        return near and (e >= planned or e == reached)

    points = [(planned if at_plan(e) else e, t, line) for e, t, line in acc.rows]
    reused = reused_after(points, planned)
    if reused is not None:
        (e, t, line), (_p, t_done, done_line) = reused
        raise RunsCsvError(
            line,
            f"run {run_id!r}: epoch {e:.12g} at {t:.3f} after the run reached epochs_planned "
            f"{planned:.12g} at {t_done:.3f} (line {done_line}): its run_id is reused by "
            "another run (give each run its own)",
        )
    rows = significant(first_reached(points), planned * NEGLIGIBLE_PROGRESS_SHARE)
    if rows[0][0] != 0:
        raise RunsCsvError(
            rows[0][2], f"run {run_id!r}: has no epoch 0 row (epoch 0 = start of training)"
        )
    if rows[-1][0] > planned:
        raise RunsCsvError(
            rows[-1][2],
            f"run {run_id!r}: epoch {rows[-1][0]:.12g} beyond epochs_planned {planned:.12g}",
        )
    for prev, cur in itertools.pairwise(rows):
        if cur[1] < prev[1]:
            raise RunsCsvError(
                cur[2],
                f"run {run_id!r}: epoch {cur[0]:.12g} at {cur[1]:.3f} is earlier than "
                f"epoch {prev[0]:.12g} at {prev[1]:.3f} (line {prev[2]})",
            )
    features: dict[str, Feature] = dict(acc.texts)
    for name, (total, count) in acc.sums.items():
        features.setdefault(name, total / count)
    for name, spans in acc.constant.items():  # the last value (``CONSTANT_COLUMNS``)
        features[name] = max(spans.items(), key=lambda vs: (vs[1].last, vs[1].last_line))[0]
    run = Run(
        run_id=run_id,
        epochs_planned=planned,
        epoch_times=tuple((e, t) for e, t, _ in rows),
        features=features,
        completed=rows[-1][0] >= planned,
        namespace=namespace,
        pod=pod,
        container=container,
    )
    try:
        return validate_run(run)
    except RunError as err:  # pragma: no cover - the checks above are stricter
        raise RunsCsvError(acc.first_line, str(err)) from None


def _state_bytes(state: State) -> int:
    """What one row's features (``State``, kept once a file) may hold, estimated
    (``MAX_HELD_BYTES``): a tuple, a ``(name, value)`` pair per value and the value."""
    return TEXT_BYTES + sum(
        TEXT_BYTES + (TEXT_BYTES + len(v) if isinstance(v, str) else FEATURE_BYTES)
        for _n, v in state
    )


def _row_states(acc: _Acc) -> list[tuple[int, State]]:
    """``(line, features)`` of each of ``acc``'s rows, in file order (``_Acc.changes``
    holds them where they change)."""
    lines = sorted([*(ln for _e, _t, ln in acc.rows), *(ln for _t, ln in acc.bare)])
    out = []
    k = -1
    for line in lines:
        while k + 1 < len(acc.changes) and acc.changes[k + 1][0] <= line:
            k += 1
        out.append((line, acc.changes[k][1] if k >= 0 else ()))
    return out


def _changes(states: Iterable[tuple[int, State]]) -> list[tuple[int, State]]:
    """``states`` (in file order) where each differs from the one before."""
    out: list[tuple[int, State]] = []
    for line, state in states:
        if not out or out[-1][1] != state:
            out.append((line, state))
    return out


def _timeline(acc: _Acc, run: Run) -> FeatureTimeline | None:
    """``run``'s features as they stood at each moment of ``acc``'s rows, or None where
    they were the whole run's from its start on (no row changed them).

    Why None: nearly every run gives its features on every row, alike; kept for each,
    a timeline would hold its features twice for nothing."""
    if len(acc.changes) <= 1:
        return None  # one set of features, on every row
    when = {ln: t for _e, t, ln in acc.rows} | {ln: t for t, ln in acc.bare}
    found = timeline(((when[ln], ln, st) for ln, st in _row_states(acc)), CONSTANT_COLUMNS)
    if found.times == (run.start_timestamp,):  # one set, from the run's start
        return None
    return found


def _strict(result: RunsFile) -> list[Run]:
    first = result.skipped[0] if result.skipped else None
    if result.unread and (first is None or result.unread[0][0] < first.line):
        line, why, n = result.unread[0]
        raise RunsCsvError(line, f"a header mid-file: {why} ({n:,} row(s) after it)")
    if first is not None:
        raise RunsCsvError(first.line, first.reason)
    return result.runs


def parse_runs(fh: TextIO) -> list[Run]:
    """Strict ``parse_runs_file``: the first damaged run is a ``RunsCsvError``."""
    return _strict(parse_runs_file(fh))


class _Prefixed(io.RawIOBase):
    """``raw`` with ``head`` (its first bytes, already read to tell gzip) put back."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        super().__init__()
        self._head = head
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._raw.readinto(buffer) or 0


STDIN = "-"  # the path that names standard input


def display_name(path: str | Path) -> str:
    """How messages name a runs file: ``stdin`` for ``STDIN``, else its path as a
    terminal shows it (``printable``: a name's escapes would retitle or clear the
    terminal, as a column name's would)."""
    return "stdin" if str(path) == STDIN else printable(str(path))


def read_runs_file(path: str | Path, *, plan_optional: bool = False) -> RunsFile:
    """Read a runs CSV, plain or gzip-compressed (told by its first bytes, not its name);
    ``-`` reads standard input (``zcat runs.csv.gz | … --runs -``), left open.

    A missing or unreadable file, or gzip data damaged before the first row, is a
    ``RunsCsvError`` (line 0 or the line reached); damage after it ends the read there
    (``_UntilDamage``), its message without the path (the caller names the file); bytes that are
    not UTF-8 damage only the rows holding them in a required column, and are U+FFFD
    in any other (``_mended``). The file is opened once and its first
    bytes read and put back, so a pipe (``--runs /dev/stdin``, ``<(zcat …)``) reads as a file.
    ``plan_optional``: as ``parse_runs_file``.
    """
    try:
        if str(path) == STDIN:
            stdin = getattr(sys.stdin, "buffer", None)
            if stdin is None:
                raise RunsCsvError(0, "standard input is not a byte stream")
            return _read_binary(stdin, plan_optional)
        with open(path, "rb", buffering=0) as raw:
            return _read_binary(raw, plan_optional)
    except OSError as err:  # gzip.BadGzipFile is an OSError
        if isinstance(err, gzip.BadGzipFile) or not err.strerror:
            raise RunsCsvError(0, f"damaged gzip data: {err}") from None
        raise RunsCsvError(0, f"cannot read: {err.strerror}") from None
    except (EOFError, zlib.error) as err:
        raise RunsCsvError(0, f"damaged gzip data: {err or 'truncated'}") from None


def _read_binary(raw: IO[bytes], plan_optional: bool = False) -> RunsFile:
    """``parse_runs_file`` of a byte stream, gunzipped when its first bytes say so."""
    head = raw.read(len(GZIP_MAGIC))
    while 0 < len(head) < len(GZIP_MAGIC) and (more := raw.read(1)):
        head += more  # a pipe may give one byte at a time
    whole = io.BufferedReader(_Prefixed(head, raw))
    compressed = head == GZIP_MAGIC
    binary: IO[bytes] = gzip.GzipFile(fileobj=whole, mode="rb") if compressed else whole
    text = io.TextIOWrapper(binary, encoding="utf-8", errors="surrogateescape", newline="")
    try:
        return parse_runs_file(text, plan_optional=plan_optional)
    finally:
        text.detach()  # leave the caller's stream open (standard input)


def read_runs(path: str | Path) -> list[Run]:
    """Strict ``read_runs_file``: the first damaged run is a ``RunsCsvError``."""
    return _strict(read_runs_file(path))


def exact(value: float | int) -> str:
    """A number as text that reads back equal (``:g`` would turn 1234567890 into 1.23457e+09)."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def format_runs(runs: Iterable[Run], feature_columns: Sequence[str] | None = None) -> str:
    """Runs as CSV text (the inverse of ``parse_runs``; features per row repeated)."""
    runs = list(runs)
    if feature_columns is None:
        names: dict[str, None] = {}
        for run in runs:
            for key in run.features:
                names.setdefault(key, None)
        feature_columns = list(names)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow((*REQUIRED_COLUMNS, *feature_columns))
    for run in runs:
        feats = [run.features.get(name, "") for name in feature_columns]
        feats = [exact(v) if isinstance(v, float) else v for v in feats]
        for epoch, ts in run.epoch_times:
            writer.writerow(
                (run.run_id, exact(epoch), exact(run.epochs_planned), f"{ts:.3f}", *feats)
            )
    return buf.getvalue()
