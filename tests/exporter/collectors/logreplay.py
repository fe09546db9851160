"""Replaying a container's log through the log collector, as the log tests share it.

What a container runtime writes for a program's output (``cri``: containerd's records,
split into ``P`` pieces), where the kubelet keeps it (``logdir``), a collector over it
(``collector``), and the three ways the tests read it back: poll until nothing more is
read (``read_out``), append one record per poll and keep each change of the progress
shown (``follow``), and a restart of the exporter at some record (``shown_from``). Rows
are (run_id, epoch, epochs, step, steps).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from gpu_eta.exporter.collectors.logs import LogProgressCollector
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta, Progress

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
POD = PodMeta("ml", "train-1", "0c7c6a2e-uid", ip="127.0.0.2")
T0 = dt.datetime(2026, 11, 21, 6, 0, 0, tzinfo=dt.timezone.utc)

Row = tuple[str, int | None, int | None, int | None, int | None]


def pieces(
    output: bytes, start: dt.datetime = T0, chunk: int = 16384
) -> Iterator[tuple[str, bytes, bool]]:
    """What a runtime makes of raw program output: per line of it, pieces of at most
    ``chunk`` bytes, each with its time (10 ms apart, nanoseconds) and whether it ends
    its line: the one split containerd and Docker's json-file driver both make."""
    lines = output.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    t = start
    for line in lines:
        parts = [line[i : i + chunk] for i in range(0, len(line), chunk)] or [b""]
        for j, piece in enumerate(parts):
            yield t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z", piece, j == len(parts) - 1
            t += dt.timedelta(milliseconds=10)


def cri(
    output: bytes, stream: str = "stdout", start: dt.datetime = T0, chunk: int = 16384
) -> bytes:
    """Wrap raw program output as containerd does: one record per newline, P chunks."""
    return b"".join(
        f"{stamp} {stream} {'F' if last else 'P'} ".encode() + piece + b"\n"
        for stamp, piece, last in pieces(output, start, chunk)
    )


# tqdm.write's clear of a bar at position 0 (``\\r``, spaces over its last screen, ``\\r``):
# what it writes to stderr before the message, the bar redrawn after it. Not followed by
# a cursor-up, which ends the clear of a bar below it (HF's evaluation bar in training)
_WRITE_CLEAR = re.compile(rb"\r +\r(?!\x1b\[A)")


def program_writes(name: str) -> list[tuple[str, bytes]]:
    """A fixture's two streams (``<name>.stderr``, ``<name>.stdout``) as the program
    wrote them, in order: (stream, bytes). The fixtures hold each stream apart; the
    stdout lines are tqdm.write's (HF Trainer's log dicts), each written between the
    clear of the bar above and its redraw, so the k-th is put after the k-th clear.
    Fails unless there are as many clears as lines (a fixture not of that shape)."""
    err = (FIXTURES / f"{name}.stderr").read_bytes()
    lines = (FIXTURES / f"{name}.stdout").read_bytes().splitlines(keepends=True)
    clears = list(_WRITE_CLEAR.finditer(err))
    assert len(clears) == len(lines), (name, len(clears), len(lines))
    out: list[tuple[str, bytes]] = []
    at = 0
    for clear, line in zip(clears, lines, strict=True):
        out += [("stderr", err[at : clear.end()]), ("stdout", line)]
        at = clear.end()
    return [*out, ("stderr", err[at:])]


def runtime_records(writes: list[tuple[str, bytes]], runtime: str, chunk: int = 16384) -> bytes:
    """The one log file a runtime writes for a program's two streams (both go to the
    container's log): ``containerd`` holds each stream's bytes until a newline or
    ``chunk`` bytes (a ``P`` record), ``crio`` writes a record per write, a tqdm screen
    (a piece from one ``\\r`` to the next) being one write."""
    out: list[bytes] = []
    t = T0
    pending: dict[str, bytes] = {}

    def record(stream: str, piece: bytes, last: bool) -> None:
        nonlocal t
        stamp = t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
        out.append(f"{stamp} {stream} {'F' if last else 'P'} ".encode() + piece + b"\n")
        t += dt.timedelta(milliseconds=10)

    for stream, data in writes:
        if runtime == "crio":
            lines = data.split(b"\n")
            for i, line in enumerate(lines):
                ends = i < len(lines) - 1
                pieces = [p for p in re.split(rb"(?=\r)", line) if p]
                for j, piece in enumerate(pieces):
                    record(stream, piece, ends and j == len(pieces) - 1)
                if ends and not pieces:
                    record(stream, b"", True)
            continue
        buf = pending.get(stream, b"") + data
        while True:
            line, newline, rest = buf.partition(b"\n")
            if not newline:
                break
            for i in range(0, max(len(line), 1), chunk):
                record(stream, line[i : i + chunk], i + chunk >= len(line))
            buf = rest
        while len(buf) >= chunk:
            record(stream, buf[:chunk], False)
            buf = buf[chunk:]
        pending[stream] = buf
    return b"".join(out)


def logdir(root: Path) -> Path:
    """The kubelet's folder of ``POD``'s container ``trainer`` below ``root``."""
    return root / f"{POD.namespace}_{POD.name}_{POD.uid}" / "trainer"


def collector(root: Path, store: ProgressStore | None = None, **kw) -> LogProgressCollector:
    return LogProgressCollector(root, store or ProgressStore(), lambda: [POD], **kw)


def col_offsets(col: LogProgressCollector) -> int:
    return sum(f.offset for files in col._followers.values() for f in files.values())


def read_out(col: LogProgressCollector) -> None:
    """Poll until a poll reads nothing more (each poll reads a bounded amount)."""
    for _ in range(200):
        before = col_offsets(col)
        col.poll()
        if col_offsets(col) == before:
            return


def row(p: Progress) -> Row:
    return (p.run_id, p.epoch, p.epochs, p.step, p.steps)


def run_ids(rows: Iterable[Row]) -> list[str]:
    """The run ids of ``rows``, in the order first shown."""
    return list(dict.fromkeys(r[0] for r in rows))


def follow(root: Path, data: bytes, exits: bool = False, merges: bool = False) -> list[Row]:
    """The container's progress after each poll, one record of ``data`` (runtime
    records, one a line) appended to its log before each: each change once. With
    ``exits``, the pod then succeeds (phase ``Succeeded``) and is polled once more;
    with ``merges``, the progress after each merge (two in one poll: both shown)."""
    pods = [POD]
    store = ProgressStore()
    col = LogProgressCollector(root, store, lambda: pods)
    rows: list[Row] = []
    path = logdir(root) / "0.log"

    def note() -> None:
        for p in store.snapshot():
            if not rows or rows[-1] != row(p):
                rows.append(row(p))

    if merges:
        merge = store.merge

        def merge_and_note(*args, **kw) -> Progress:
            merged = merge(*args, **kw)
            note()
            return merged

        store.merge = merge_and_note  # type: ignore[method-assign]

    for record in (r for r in data.split(b"\n") if r):
        with open(path, "ab") as fh:
            fh.write(record + b"\n")
        col.poll()
        note()
    if exits:
        pods[0] = replace(POD, phase="Succeeded")
        col.poll()
        note()
    return rows


def shown_from(path: Path, records: list[bytes], stop: int, restart: bool) -> list[Row]:
    """The rows shown from ``stop`` on, each change once, by an exporter that read
    ``records[:stop]`` and, with ``restart``, was restarted there (its state file kept).

    Fails when a line is counted ``invalid`` (by either exporter): the fixtures are real
    output, read whole with no invalid line, so one counted so is the reader failing
    (a raise caught per line), whose rows may still look right."""
    d = path / f"{POD.namespace}_{POD.name}_{POD.uid}" / "trainer"
    d.mkdir(parents=True)
    (d / "0.log").write_bytes(b"".join(records[:stop]))
    store = ProgressStore(path / "state.json")
    col = collector(path, store)
    read_out(col)
    invalid = col.counts()["invalid"] if restart else 0  # a restart starts a new count
    if restart:
        store.save()
        store = ProgressStore(path / "state.json")
        col = collector(path, store)
    rows = [row(p) for p in store.snapshot()]
    merge = store.merge

    def merge_and_note(*args, **kw) -> Progress:
        merged = merge(*args, **kw)
        (p,) = store.snapshot()
        if rows[-1:] != [row(p)]:
            rows.append(row(p))
        return merged

    store.merge = merge_and_note  # type: ignore[method-assign]
    with open(d / "0.log", "ab") as fh:
        fh.write(b"".join(records[stop:]))
    read_out(col)
    invalid += col.counts()["invalid"]
    assert invalid == 0, f"{invalid} lines counted invalid (stopped at record {stop})"
    return rows


def restarts_that_differ(path: Path, records: list[bytes], stops: Sequence[int]) -> list[int]:
    """The records of ``stops`` after which an exporter restarted there (``shown_from``)
    shows other progress than one that never stopped: none, when the state the reader
    keeps between lines is rebuilt by reading the log again."""
    return [
        stop
        for stop in stops
        if shown_from(path / f"r{stop}", records, stop, True)
        != shown_from(path / f"n{stop}", records, stop, False)
    ]
