"""Progress of unmodified jobs, read from the container logs the kubelet writes.

Follows ``<root>/<namespace>_<pod>_<uid>/<container>/<N>.log`` for the pods the
pod source knows, and for ``gone_grace_seconds`` after one leaves its list (its last
lines: ``_still_read``); nothing else under the root is opened, and no symlink is
followed but one kind: nothing else outside the root is read. Lines are in CRI format::

    2024-01-01T00:00:00.123456789Z stdout F Epoch 3/15

The one symlink followed is cri-dockerd's (Kubernetes on Docker Engine): ``<N>.log``
linking to Docker's json-file log, exactly ``<docker_root>/<id>/<id>-json.log`` (a
64-hex container id, ``docker_root`` configured, default ``/var/lib/docker/containers``,
empty: none). Its lines (``{"log":"Epoch 3/15\n","stream":"stdout","time":"..."}``)
are read as the CRI record they stand for (``parse_docker_json``: a ``log`` without
its final newline is a ``P`` record); one that is no such record is skipped and
counted ``malformed``. The file is opened below the root by ``dir_fd`` and without
following any link, so the link's text names the only file it can reach (and the one
Docker last rotated it to, ``<id>-json.log.1``, read as a rotated file).

``P`` (partial) lines are continued by the next line of the same stream; tqdm and
Keras redraw with ``\\r`` inside one line, so each ``\\r`` segment is a screen state
and only the last complete one of each chunk is parsed (``gpu_eta.exporter.logformats``);
for an ``Epoch k/N`` bar, the chunk's first screen and its blank screens (a bar cleared)
tell whether the bar restarted before it (``shows_epoch_bars``, ``cleared_screens``).

Files are tracked by inode: a rotated file (kubelet renames ``0.log`` to
``0.log.<date>`` and starts a new ``0.log``) is read to its end, then dropped;
a file that shrank was truncated and is read again from the start. The new file is
read only once the rotated one has been read to its end (or cannot be read), and a
line whose ``P`` records end the rotated file is continued by the new file's first
records of its stream, within the same bounds as inside one file. A rotated file
this process has not followed (after an exporter restart, for a pod seen late) is
read from its start like any new file: it holds what was written between the last
read and the rotation, and what was applied before is not applied again (below).
A restarted container's files (``1.log``, ...: the restart count) are read after the
earlier container's, and a file only once every file before it has been read to its
end (in this poll or an earlier one; a file that cannot be read holds up nothing), so a
log read from behind is applied in the order it was written, however many polls it takes.
Gzipped rotations (``0.log.<date>.gz``) are never opened: see docs/progress.md.

Work is bounded: at most ``max_bytes_per_poll`` in all per poll, read
``max_bytes_per_file`` of a file at a time (twice at most: its share, then what the
others left), and none past ``max_seconds_per_poll`` (checked every 512 lines, so
also inside one file's chunk); the rest waits for the next poll. Physical lines over
``max_line_bytes`` and screen segments over ``max_segment_bytes`` are skipped and counted as ``oversize``;
bytes are decoded leniently, so binary output is just "ignored". A ``GPU_ETA_PROGRESS``
marker line the wire format refuses is counted ``invalid``, and so is a line whose
handling raised anything: one bad line is skipped, never the rest of its chunk.

Lines whose CRI timestamp is older than the progress already stored for the
container are not applied again, so re-reading a file after an exporter restart
does not mistake old epochs for a new run; they are still read for what they tell
about the lines after them (the Keras epoch an ``Epoch k/N`` header starts), so those
are read as by an exporter that never stopped. A line stamped more than
``FUTURE_SKEW_SECONDS`` after the exporter's clock (the runtime stamps lines with the
same node clock, so only a clock stepped back or a file not written by it does
that), or whose timestamp cannot be read, is dated at the line of its container
read before it (skipped when there is none) and counted ``future`` or ``undated``;
see ``_line_time``.

A container directory whose name is no container name (a DNS-1123 label, the rule
the store and its state-file loader apply) is skipped and counted
(``skipped_directories``), never read: its rows would be refused by the store.

A line that would start a run beyond its container's cap on new runs (the store's,
``exporter.progress_runs``, the same as for HTTP reports) is skipped and counted
``too_many_runs``, with one WARNING per container. A marker line of a named run that a
later start under its ``run_id`` replaced (``progress.superseded``) is skipped and
counted ``superseded``.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from stat import S_ISREG
from typing import Any

from gpu_eta.exporter.collectors.registry import BuildContext, Collector, register
from gpu_eta.exporter.config import DEFAULT_DOCKER_CONTAINERS
from gpu_eta.exporter.logformats import (
    _ANSI,
    MARKER,
    LogState,
    at_exit,
    cleared_screens,
    fold,
    last_segment,
    parse_line,
    parse_setup,
    released,
    shows_epoch_bars,
    visible,
)
from gpu_eta.exporter.progress import (
    GONE_GRACE_SECONDS,
    Report,
    ReportError,
    SupersededReport,
    TooManyRuns,
    beyond_run_names,
    check_report,
)
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta, Progress, pod_finished
from gpu_eta.exporter.snapshot import LOG_LINE_RESULTS

log = logging.getLogger(__name__)

_MARKER_BYTES = MARKER.encode()
_BAR_BYTES = "━".encode()
# a tqdm bar without a total has no other sign the fast path looks for: its rate,
# "45.0it/s]", "?it/s, loss=0.2]" or "1.20s/it]" (``logformats._TQDM_RATE``) in a
# line that ends with the bar's "]". Searched for only in such a line: searched in
# every line with a "/", it cost the collector a sixth of its throughput
# (``bench/log_parse.py``)
_RATE_BYTES = re.compile(rb"/s(?:\]|, )|\ds/")
# what ``logformats.visible`` removes, over bytes: parse_line reads a line with its
# colours removed, so a bar that ends in a reset ("...45.0it/s]\x1b[0m") is a bar
_ANSI_BYTES = re.compile(_ANSI.pattern.encode())
# tqdm draws a bar at position n > 0 as "\n" * n, "\r<bar>", then this n times
_CURSOR_UP = "\x1b[A"
_LOG_NAME = re.compile(r"(\d{1,9})\.log(\.\d{8}-\d{6})?\Z")
# How far past the exporter's clock a line's CRI timestamp may be and still count as
# its time (the runtime writes it with the same clock, before the exporter reads it)
FUTURE_SKEW_SECONDS = 2.0
# Directories named in WARNING lines, at most (then DEBUG): a bound on what is kept
_MAX_WARNED_DIRECTORIES = 256
# Containers named in too_many_runs WARNING lines, at most (then DEBUG), for the same reason
_MAX_WARNED_CONTAINERS = 256
# Lines handled between looks at the poll's deadline inside one chunk, less one (a mask)
_LINES_PER_LOOK = 511
_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)\Z")


# cri-dockerd's link: Docker's json-file log of a container (a 64-hex id)
_DOCKER_ID = re.compile(r"[0-9a-f]{64}\Z")
_DOCKER_STREAMS = frozenset({"stdout", "stderr"})
_DOCKER_TIME_CHARS = 64  # "2026-11-21T06:00:00.123456789+00:00" and room to spare
# a json-file record as Docker's encoder writes it (compact; with spaces as other
# encoders do), from the end of its "log" value, for ``docker_plain``
_DOCKER_REST = re.compile(
    rb'", ?"stream": ?"(stdout|stderr)", ?"time": ?"([ !#-\[\]-~]{0,%d})"\}' % _DOCKER_TIME_CHARS
)
_CONTROL_BYTES = bytes(range(0x20))


def docker_link_id(target: str, root: str) -> str | None:
    """The container id a cri-dockerd link names, or None for any other target.

    cri-dockerd links ``<N>.log`` to Docker's ``<root>/<id>/<id>-json.log``: the
    target must be exactly that (absolute, no ``..``, no other name), so a link
    made by anything else leads nowhere the exporter reads.
    """
    prefix = root.rstrip("/") + "/"
    if not root or not target.startswith(prefix):
        return None
    cid, sep, name = target[len(prefix) :].partition("/")
    if not sep or _DOCKER_ID.match(cid) is None or name != f"{cid}-json.log":
        return None
    return cid


def parse_docker_json(raw: bytes) -> list[bytes] | None:
    """One json-file line → the CRI record it stands for (timestamp, stream, ``P`` or
    ``F``, message), or None when it is no such record (counted ``malformed``).

    Docker writes ``{"log": "<output>\\n", "stream": "stdout", "time": "<RFC 3339>"}``
    per line of output; a line over 16 KiB is split into records whose ``log`` has
    no final newline but the last: those are ``P`` records. Anything else (not JSON,
    nested beyond the parser's depth, a missing or mistyped field, another stream)
    gives None. The caller bounds the line's length first.
    """
    if not raw.startswith(b"{"):
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    message, stream, stamp = record.get("log"), record.get("stream"), record.get("time")
    if not (isinstance(message, str) and isinstance(stamp, str) and stream in _DOCKER_STREAMS):
        return None
    if len(stamp) > _DOCKER_TIME_CHARS:
        return None
    tag = b"F" if message.endswith("\n") else b"P"
    if tag == b"F":
        message = message[:-1]
    return [
        stamp.encode("ascii", "replace"),
        stream.encode(),
        tag,
        message.encode("utf-8", "replace"),
    ]


def _shown_rate_at_bar_end(message: bytes) -> bool:
    """Whether a line with an escape, a backspace or a NUL may be a tqdm bar without a
    total as parse_line sees it: its visible text ends with the bar's "]" and holds
    a rate.

    Why: parse_line reads a line after ``visible`` has removed its ANSI escapes and
    control bytes (``visible`` changes only a line with one of those three), so a
    coloured bar (a logger or terminal wrapper that ends it with a reset,
    ``\x1b[0m``, or colours its rate) is read; judged on its raw bytes the fast path
    dropped it. Only such lines come here: the others' bytes are what parse_line
    sees, and the fast path tests them as they are.
    """
    shown = _ANSI_BYTES.sub(b"", message).rstrip()
    return shown.endswith(b"]") and _RATE_BYTES.search(shown) is not None


def docker_plain(raw: bytes) -> list[bytes] | None:
    """A json-file line whose ``log`` is a whole line that needs no decoding for the
    fast path's byte tests → its CRI record (timestamp, stream, ``F``, the ``log``
    value as written, without its final ``\\n``); None for any other line.

    Why: json.loads of every line halved the collector's throughput on cri-dockerd
    nodes, and most lines are ignored by the fast path. Its tests look for signs
    ("/", "|", "Epoch", "[=", a rate before "]", the marker, ...) none of which holds
    a quote or a backslash, and for escapes, backspaces and NULs, so they give the
    same answer on the value as written as on the decoded one, provided its only
    escapes are ``\\"`` and ``\\\\`` (each stands for a character in no sign; any
    other escape, ``\\u001b``, ``\\u003e``, ``\\t``, could hide one). Only a line that
    is certainly such a record is answered (ASCII, no raw control byte, no unescaped
    quote, the fields in Docker's order): what json.loads would refuse (``malformed``)
    or read otherwise gets None and is decoded. The caller decodes any line the fast
    path does not ignore.
    """
    if raw.startswith(b'{"log":"'):
        start = 8
    elif raw.startswith(b'{"log": "'):
        start = 9
    else:
        return None
    end = raw.find(b'\\n"', start)  # the first \n before an unescaped quote
    if end < 0:
        return None
    rest = _DOCKER_REST.fullmatch(raw, end + 2)
    if rest is None:
        return None
    body = raw[start:end]
    if not body.isascii() or len(body.translate(None, _CONTROL_BYTES)) != len(body):
        return None
    if 0x5C in body:  # escapes: only \" and \\, read left to right as JSON does
        if 0x22 in body.replace(b"\\\\", b"").replace(b'\\"', b"").replace(b"\\", b'"'):
            return None
    elif 0x22 in body:
        return None
    return [rest[2], rest[1], b"F", body]


def parse_cri_timestamp(text: str) -> float | None:
    """RFC 3339 with nanoseconds (as CRI runtimes write it) → unix seconds, or None."""
    m = _TS.match(text)
    if m is None:
        return None
    try:
        seconds = calendar.timegm(
            (int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]), 0, 0, 0)
        )
    except (ValueError, OverflowError):
        return None
    fraction = float(m[7]) if m[7] else 0.0
    zone = m[8]
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds + fraction


@dataclass
class _Follower:
    """Read position in one log file, kept across polls and renames."""

    path: Path
    inode: tuple[int, int]
    offset: int = 0
    pending: bytes = b""  # an incomplete physical line at the end of the file
    discarding: bool = False  # inside an oversize physical line: skip to its newline
    carry: dict[str, str] = field(default_factory=dict)  # stream -> unfinished \r segment
    # streams inside an unfinished segment dropped as over the bound: what follows up to
    # its next \r (or the end of its line) is the rest of it, not a screen of its own
    dropping: set[str] = field(default_factory=set)
    # streams whose line had a bar at position 0 cleared after the last screen read from
    # it (``logformats.cleared_screens``): the next screen of that line is a new bar's
    cleared: set[str] = field(default_factory=set)
    head: bytes = b""  # first bytes: if they change, the file was truncated and rewritten
    unreadable: bool = False  # the last read failed (OSError): nothing waits for this file
    # a cri-dockerd link's Docker file (container id, file name): json-file lines
    docker: tuple[str, str] | None = None
    # the poll (``LogProgressCollector._polls``) that first did not find it, while not
    # found since: it is forgotten by the next poll that does not find it
    missing_since: int | None = None
    mtime_ns: int = -1  # its mtime at the scan of the poll that last read it
    number: int = 0  # the container's restart count its file name gives (``<N>.log``)

    def hand_over(self, successor: _Follower) -> None:
        """Pass the records this file leaves unfinished (``carry``, ``dropping``) to the
        file the runtime went on writing after rotating it.

        Why: the runtime writes a long line as ``P`` records and may be told to reopen
        its log between two of them, so a line's head ends the rotated file and its
        rest starts the new one. The carry is already within ``max_segment_bytes``,
        so the joined line is held to the same bounds as one inside a file.
        """
        successor.carry.update(self.carry)
        successor.dropping.update(self.dropping)
        successor.cleared.update(self.cleared)
        self.carry.clear()
        self.dropping.clear()
        self.cleared.clear()


def _read_out(follower: _Follower, size: int) -> bool:
    """Whether nothing of a file waits to be read before the files after it: read to
    its size at the poll's scan (the earlier container's ``N.log`` and a rotated file
    no longer grow), or its last read failed (unreadable, deleted under the reader:
    nothing would ever come of waiting for it)."""
    return follower.offset >= size or follower.unreadable


def _first_level(named: set[str], name: str, bound: int) -> int:
    """WARNING the first time ``name`` is said (remembered in ``named``, at most
    ``bound`` names: past it, and for a name said before, DEBUG)."""
    if name in named or len(named) >= bound:
        return logging.DEBUG
    named.add(name)
    return logging.WARNING


class LogProgressCollector:
    """Feeds progress found in container logs into the ``ProgressStore`` (source ``log``)."""

    def __init__(
        self,
        root: Path,
        store: ProgressStore,
        pods: Callable[[], Sequence[PodMeta]],
        *,
        max_bytes_per_poll: int = 16 << 20,
        max_bytes_per_file: int = 4 << 20,
        max_line_bytes: int = 64 << 10,
        max_segment_bytes: int = 8 << 10,
        max_seconds_per_poll: float = 2.0,
        docker_root: str = DEFAULT_DOCKER_CONTAINERS,
        gone_grace_seconds: float = GONE_GRACE_SECONDS,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
    ):
        self.root = Path(root)
        # "" or a relative path: no link is followed (cri-dockerd's hold absolute paths)
        self.docker_root = docker_root if os.path.isabs(docker_root) else ""
        self.store = store
        self._pods = pods
        self.max_bytes_per_poll = max_bytes_per_poll
        self.max_bytes_per_file = max_bytes_per_file
        self.max_line_bytes = max_line_bytes
        self.max_segment_bytes = max_segment_bytes
        self.max_seconds_per_poll = max_seconds_per_poll
        self.gone_grace_seconds = gone_grace_seconds
        self._clock = clock
        self._timer = timer
        self._turn = 0  # which container reads first in a poll (both passes)
        self._polls = 0  # polls begun (``_Follower.missing_since``)
        self._deadline = math.inf  # the poll's: reading stops past it (``_feed``)
        self._followers: dict[tuple[str, str, str], dict[tuple[int, int], _Follower]] = {}
        self._states: dict[tuple[str, str, str], LogState] = {}
        self._counts = dict.fromkeys(LOG_LINE_RESULTS, 0)
        self._skipped_fields = 0  # free-form fields left out of stored reports
        self._warned = False  # a line raised once already (``_skipped``)
        # the time of the last line of each container dated by its own timestamp (this
        # process): what a line stamped in the future or unreadably is dated at
        self._last_time: dict[tuple[str, str, str], float] = {}
        self._bad_directories: set[str] = set()  # skipped in the last poll
        self._warned_directories: set[str] = set()
        self._warned_runs: set[str] = set()  # containers named in a too_many_runs WARNING
        self._warned_docker = False  # a cri-dockerd link's file could not be opened
        self._listed: dict[str, PodMeta] = {}  # the last poll's pods, by directory name
        # pods listed before and not now, by directory name: (pod, ``timer`` when first
        # found gone); their directories are still read for ``gone_grace_seconds``
        self._gone: dict[str, tuple[PodMeta, float]] = {}
        self._uids: dict[tuple[str, str], str] = {}  # (namespace, pod) → uid last read

    @property
    def skipped_directories(self) -> int:
        """Container directories skipped in the last poll: their name is no container
        name (see the module's docstring)."""
        return len(self._bad_directories)

    def counts(self) -> Mapping[str, int]:
        """Log lines by result since start (``gpu_eta_exporter_log_lines_total``)."""
        return dict(self._counts)

    def skipped_fields(self) -> int:
        """Free-form fields left out of the reports of lines stored since start, as
        ``ProgressListener.skipped_fields`` counts a POST's (the two add up to
        ``gpu_eta_exporter_progress_fields_skipped_total``): a marker line's bad or
        beyond-16 ones (``progress.parse_report``), the numbers a line shows beyond the
        16 read (``logformats.LogMatch.metrics_beyond``), and a run's new names once it
        holds 16 (``progress.beyond_run_names``)."""
        return self._skipped_fields

    def poll(self) -> None:
        """Read what is new in the known pods' log files (bounded) and apply it."""
        self._polls += 1
        try:
            pods = self._pods()
        except Exception as err:
            from gpu_eta.exporter.collectors import CollectorError

            raise CollectorError(f"logs: pod list unavailable: {err}") from err
        wanted = {f"{p.namespace}_{p.name}_{p.uid}": p for p in pods}
        read = {**self._still_read(wanted), **wanted}
        self._forget_predecessors(read.values())
        seen: set[tuple[str, str, str]] = set()
        exited: set[tuple[str, str, str]] = set()  # of pods that finished or went
        bad: set[str] = set()
        todo: list[tuple[tuple[str, str, str], Path]] = []
        for dirname, pod in sorted(read.items()):
            pod_dir = self.root / dirname
            try:
                if pod_dir.is_symlink():  # kubelet makes directories: a link may lead anywhere
                    continue
                containers = sorted(
                    e.name for e in os.scandir(pod_dir) if e.is_dir(follow_symlinks=False)
                )
            except (FileNotFoundError, NotADirectoryError):
                self._gone.pop(dirname, None)  # the kubelet removed a gone pod's logs
                continue
            except OSError as err:
                log.debug("logs: cannot list %s: %s", pod_dir, err)
                continue
            for container in containers:
                if not _container_name(container):
                    bad.add(self._bad_directory(pod_dir / container))
                    continue
                key = (pod.namespace, pod.name, container)
                seen.add(key)
                if dirname not in wanted or pod_finished(pod):
                    exited.add(key)
                todo.append((key, pod_dir / container))
        self._read_fairly(todo)
        for key in exited:
            self._release_at_exit(key)
        self._release_unseen(seen | exited, {(p.namespace, p.name) for p in wanted.values()})
        self._bad_directories = bad
        for key in [k for k in self._followers if k not in seen]:
            self._drop(key)

    def _release_at_exit(self, key: tuple[str, str, str]) -> None:
        """Apply the held end of a container's last epoch (``logformats.at_exit``) once
        its pod finished or went, after what was left of its log was read."""
        ns, pod, container = key
        state = self._states.get(key) or _resumed_state(self.store.get(ns, pod, container, "log"))
        if state.held is None:
            return
        self._states[key], held = at_exit(state)
        if held is not None:
            report, when = held
            self._apply_held(key, report, when)

    def _release_unseen(
        self, read: set[tuple[str, str, str]], listed: set[tuple[str, str]]
    ) -> None:
        """Apply the held end kept with a log row (``ProgressStore.note_held_end``) whose
        pod is neither listed nor read in this poll, from the row alone (its epoch and
        line time).

        Why: a container is read as exited only while its pod is listed finished or
        remembered gone (``_still_read``), with its directory still there. A pod
        deleted while the exporter was down (the memory of it gone), or whose log
        directory the kubelet removed before the poll that found it gone, was never
        read so: its finished run stayed at N-1 of N for good, learnt as cut short.
        The row itself lingers for the store's gone-pod grace, so the end is shown."""
        for key in self.store.held_ends():
            if key not in read and key[:2] not in listed:
                self._release_at_exit(key)

    def _apply_held(self, key: tuple[str, str, str], report: Report, when: float | None) -> None:
        """Merge a held end of a last epoch at the time of the line it came with; one
        applied before (a re-read after a restart) not again."""
        ns, pod, container = key
        previous = self.store.get(ns, pod, container, "log")
        if when is None or (previous is not None and when < previous.last_report_timestamp):
            return
        _progress, failed = self._merge(key, report, when, derived=True)
        if failed is not None:
            self._counts[failed] = self._counts.get(failed, 0) + 1

    def _merge(
        self, key: tuple[str, str, str], report: Report, now: float, derived: bool
    ) -> tuple[Progress | None, str | None]:
        """Merge a report read from ``key``'s log: (the run's progress, None), or (None,
        what it counts as) when the store refuses it. A report the wire format refuses (a negative epoch, a step
        beyond 1e15) or inconsistent with the run so far is invalid; one that would
        start a run over the container's cap too_many_runs, one of a run a later start
        replaced superseded."""
        ns, pod, container = key
        try:
            # a line read by a format (a bar, a Keras line) names no run: its runs are
            # the exporter's reading, capped more loosely (``derived``)
            progress = self.store.merge(ns, pod, container, "log", report, now, derived=derived)
        except TooManyRuns as err:
            self._too_many_runs(key, err)
            return None, "too_many_runs"
        except SupersededReport:
            return None, "superseded"
        except ReportError:
            return None, "invalid"
        return progress, None

    def _drop(self, key: tuple[str, str, str]) -> None:
        """Forget a container's follower, parser state and last line time; its runs may
        be warned of again (a pod re-created under its name)."""
        self._followers.pop(key, None)
        self._states.pop(key, None)
        self._last_time.pop(key, None)
        self._warned_runs.discard("/".join(key))

    def _forget_predecessors(self, pods: Iterable[PodMeta]) -> None:
        """Drop what is held for a pod's name (followers, parser state, last line
        time) when the pod behind it is another (its uid changed), and remember each
        read pod's uid.

        Why: the state is kept by (namespace, pod, container), and a pod recreated
        under its name (a StatefulSet's, ``kubectl delete`` and ``apply``) was read in
        its predecessor's: its bare bar was read as a step of the predecessor's epoch,
        a Keras bar without a header as the predecessor's next epoch. So is the count
        from 0 and held end kept with the log rows, cleared for the new pod (after a
        restart, in the rows last reported before it started).
        """
        uids: dict[tuple[str, str], str] = {}
        for pod in pods:
            pair = (pod.namespace, pod.name)
            uids[pair] = pod.uid
            known = self._uids.get(pair)
            if known is not None and known != pod.uid:
                held = {*self._followers, *self._states, *self._last_time}
                for key in [k for k in held if k[:2] == pair]:
                    self._drop(key)
                self.store.forget_log_counts(*pair)  # kept with the rows, by name
            elif known is None and pod.start_timestamp is not None:
                # a pod this process has not read (after a restart: none): rows last
                # reported before it started are a predecessor's (the store's rule)
                self.store.forget_log_counts(*pair, before=pod.start_timestamp)
        self._uids = uids

    def _still_read(self, listed: Mapping[str, PodMeta]) -> dict[str, PodMeta]:
        """The gone pods whose directories are still read, by directory name: those
        listed at an earlier poll and not now, for ``gone_grace_seconds`` from the
        first poll that did not list them (``_gone`` remembers them; ``listed``
        becomes the pods the next poll compares with).

        Why: a pod is often deleted seconds after its container exits (a Job with
        ``ttlSecondsAfterFinished: 0``, Argo's ``podGC``) while the kubelet keeps its
        log files a while longer. Read only while listed, the lines written since the
        last poll (the last epoch's bar, the end marker) were never read, and the run
        showed unfinished and was learnt as cancelled. The store serves a gone pod's
        progress for the same grace, so what is read meanwhile is shown; past it
        nothing read would be. A pod recreated under the name (another uid) ends its
        predecessor's reading at once, as the store drops its progress then: the
        predecessor's late lines would be shown as the new pod's.
        """
        now = self._timer()
        for dirname, pod in self._listed.items():
            if dirname not in listed:
                self._gone.setdefault(dirname, (pod, now))
        self._listed = dict(listed)
        names = {(p.namespace, p.name) for p in listed.values()}
        for dirname, (pod, since) in list(self._gone.items()):
            if (
                dirname in listed
                or (pod.namespace, pod.name) in names
                or now - since >= self.gone_grace_seconds
            ):
                del self._gone[dirname]
        return {dirname: pod for dirname, (pod, _since) in self._gone.items()}

    def _read_fairly(self, todo: Sequence[tuple[tuple[str, str, str], Path]]) -> None:
        """Read the containers' new bytes within ``max_bytes_per_poll`` and
        ``max_seconds_per_poll`` (reading stops past it, within 512 lines): first an
        equal share each, then what is left to those the first pass left something
        unread, both in an order that starts one container later every poll (so a poll
        that runs out of time cuts off others next time).

        Why: one budget spent in a fixed order let a pod that writes megabytes a
        second (four chatty containers) take all of it before a training pod sorted
        after it was read at all, poll after poll, and parsing 16 MiB of progress
        bars took longer than the collector's timeout.
        """
        if not todo:
            return
        self._deadline = deadline = self._timer() + self.max_seconds_per_poll
        left = self.max_bytes_per_poll
        share = max(left // len(todo), 1)
        start = self._turn % len(todo)
        self._turn += 1
        turn = [*todo[start:], *todo[:start]]  # the poll's order: who runs out of time varies
        more: list[tuple[tuple[str, str, str], Path]] = []  # left unread in the first pass
        for key, directory in turn:
            if left <= 0 or self._timer() > deadline:
                return
            give = min(share, left)
            rest, unread = self._poll_container(key, directory, give)
            left -= give - rest
            if unread:
                more.append((key, directory))
        for key, directory in more:  # not the others: scanning them again found nothing
            if left <= 0 or self._timer() > deadline:
                return
            left = self._poll_container(key, directory, left)[0]

    def _bad_directory(self, path: Path) -> str:
        """Say once (a WARNING) that a directory is skipped; its name, for the count.

        Why skip rather than read it: its progress would be filed under a
        ``container`` label no pod can have, and the store refuses such a row (its
        state-file loader would skip it as damaged at every start otherwise).
        """
        name = str(path)
        if name not in self._warned_directories:
            level = _first_level(self._warned_directories, name, _MAX_WARNED_DIRECTORIES)
            log.log(
                level,
                "logs: %r is no container name (a DNS-1123 label): not read",
                name[-300:],
            )
        return name

    # -- files -----------------------------------------------------------------------

    def _docker_open(self, cid: str, name: str) -> int:
        """Open ``<docker_root>/<cid>/<name>`` without following any link on the way
        (``dir_fd``, ``O_NOFOLLOW``), nor waiting on a FIFO: only the file the link's
        text names (or its rotated sibling) is reached, whatever the directories hold."""
        if not self.docker_root:
            raise FileNotFoundError("no docker containers root")
        top = os.open(self.docker_root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            folder = os.open(cid, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        finally:
            os.close(top)
        try:
            return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        finally:
            os.close(folder)

    def _docker_stat(self, cid: str, name: str) -> os.stat_result:
        """The status of a Docker file of ``cid``, as ``_docker_open`` reaches it."""
        fd = self._docker_open(cid, name)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def _docker_files(self, link: str) -> list[tuple[str, str, bool, os.stat_result]]:
        """A cri-dockerd link's files, each (id, name, rotated, status): Docker's
        json-file log and, when there, the file Docker last rotated it to
        (``<id>-json.log.1``: what it held past the last read is read too, as after a
        kubelet rotation), each when there. Nothing for a link that is no cri-dockerd
        link; raises when its file cannot be opened for another reason than not being
        there (``docker_root`` not mounted, a permission: said once)."""
        if not self.docker_root:
            return []
        cid = docker_link_id(os.readlink(link), self.docker_root)
        if cid is None:
            return []
        current = f"{cid}-json.log"
        files = []
        try:
            files.append((cid, current, False, self._docker_stat(cid, current)))
        except FileNotFoundError as err:
            # Docker's rotation renames the file to ``.1`` before it creates the new
            # one: a poll in between finds only ``.1``, which is the file followed
            # (found by its inode, its read position kept); or Docker removed the
            # container (a gone pod's link). Only a root that is not there (not
            # mounted) is worth a WARNING
            if not os.path.isdir(self.docker_root):
                self._docker_unreachable(link, err)
                raise
        except OSError as err:
            self._docker_unreachable(link, err)
            raise
        with contextlib.suppress(OSError):  # not rotated (yet), or removed or compressed
            files.append((cid, f"{current}.1", True, self._docker_stat(cid, f"{current}.1")))
        return files

    def _docker_unreachable(self, link: str, err: OSError) -> None:
        """Say once (a WARNING, then DEBUG) that a cri-dockerd link's file cannot be
        opened. Why: without the mount of ``docker_root`` (the manifests do not make
        it) the node gives no log progress, and nothing else would say why."""
        level = logging.DEBUG if self._warned_docker else logging.WARNING
        self._warned_docker = True
        log.log(
            level,
            "logs: %s links to a Docker json-file log that cannot be opened under %r "
            "(%s: is the host's directory mounted there? docs/progress.md): not read",
            link[-300:],
            self.docker_root,
            err.strerror or type(err).__name__,
        )

    def _poll_container(
        self, key: tuple[str, str, str], directory: Path, budget: int
    ) -> tuple[int, bool]:
        """Read a container's files in order within ``budget`` bytes: (the budget
        left, whether something was left unread for want of budget or time, or waits
        on a file read to its share: worth a second look in the poll)."""
        # inode → (path, size at the scan, rotated, number, Docker's id and name, its
        # mtime_ns at the scan). The path is a str: building a Path per file and poll
        # cost a third of a poll
        found: dict[tuple[int, int], tuple[str, int, bool, int, tuple[str, str] | None, int]] = {}
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return budget, False
        for entry in entries:
            m = _LOG_NAME.match(entry.name)
            if m is None:
                continue
            try:
                if entry.is_symlink():
                    for cid, name, rotated, st in [] if m[2] else self._docker_files(entry.path):
                        if S_ISREG(st.st_mode):
                            path = os.path.join(self.docker_root, cid, name)
                            inode = (st.st_dev, st.st_ino)
                            found[inode] = (
                                path,
                                st.st_size,
                                rotated,
                                int(m[1]),
                                (cid, name),
                                st.st_mtime_ns,
                            )
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not S_ISREG(st.st_mode):
                continue
            found[(st.st_dev, st.st_ino)] = (
                entry.path,
                st.st_size,
                m[2] is not None,
                int(m[1]),
                None,
                st.st_mtime_ns,
            )
        followers = self._followers.setdefault(key, {})
        for inode in [i for i in followers if i not in found]:
            # deleted (or gzipped) after rotation, once two polls in a row did not find
            # it. Why not at once: a file may be missing for an instant (Docker renames
            # it to ``.1``, then creates the new one) and, forgotten, was read again
            # from its start when found again
            missing = followers[inode].missing_since
            if missing is None:
                followers[inode].missing_since = self._polls
            elif missing < self._polls:
                del followers[inode]
        for inode, (path, _size, _rotated, _n, docker, _mtime) in found.items():
            if inode not in followers:
                # a file this process has not seen, rotated ones too: after a restart
                # (or a pod seen late) the rotated file holds what was written
                # between the last read and the rotation. Read from its start: lines
                # older than the stored progress are not applied again (``_line``)
                followers[inode] = _Follower(
                    path=Path(path), inode=inode, docker=docker, number=found[inode][3]
                )
            else:
                if str(followers[inode].path) != path:  # renamed (rotated)
                    followers[inode].path = Path(path)
                followers[inode].docker = docker  # Docker renamed it: <id>-json.log.1
                followers[inode].missing_since = None
        # in the order they were written: by number (the container's restart count,
        # so an earlier container's files first), each number's rotated files
        # (``<N>.log.<date>`` sorts by date) before its current one. Why not every
        # rotated file first: a log read from behind (after a restart, a pod seen late)
        # then applied the restarted container's rotated lines before the earlier
        # container's, whose lines, older than those, were skipped
        order = sorted(
            (f for f in followers.values() if f.inode in found),
            key=lambda f: (found[f.inode][3], not found[f.inode][2], f.path.name),
        )
        done: dict[int, _Follower] = {}  # per number: its last rotated file read to its end
        for follower in order:
            if budget <= 0 or self._timer() > self._deadline:
                break
            _path, size, rotated, number, _docker, mtime_ns = found[follower.inode]
            before = done.pop(number, None)
            if before is not None and follower.offset == 0:
                before.hand_over(follower)
            if size != follower.offset or mtime_ns != follower.mtime_ns:
                # a file whose size is its read position, unchanged since it was read,
                # has nothing new: not opened. Why: every file followed was opened each
                # poll (10,000 idle files cost 0.45-0.9 s a poll, now 0.06-0.12 s with
                # the second pass only for containers left unread). One rewritten to
                # that very size (copytruncate) changed its mtime: read, and its first
                # bytes tell it (``_read``)
                budget -= self._read(key, follower, size, budget)
                follower.mtime_ns = mtime_ns
            if not _read_out(follower, size):
                # every later file waits for this one's end (this poll's or a later
                # one's). Why: read first, a later file's lines (newer) are applied
                # before this one's rest, which is then skipped as older than the
                # stored progress, and folding it resets the state the later lines
                # were read in (the Keras epoch); a line split at a rotation would
                # also be read before its head
                break
            if rotated:
                done[number] = follower
        else:
            return budget, False
        return budget, True

    def _read(self, key: tuple[str, str, str], follower: _Follower, size: int, budget: int) -> int:
        try:
            # no symlink followed, no FIFO waited on (the scan saw a regular file; the
            # path may have changed since), and only the file this follower tracks
            if follower.docker is None:
                fd = os.open(follower.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            else:
                fd = self._docker_open(*follower.docker)
            with open(fd, "rb") as fh:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != follower.inode or not S_ISREG(st.st_mode):
                    # renamed since the scan (a rotation: the path now names the new
                    # file): reading it here took it for this file truncated, read it
                    # under this file's state, then re-read both. The next poll's scan
                    # finds each file under its name
                    return 0
                if follower.head and (
                    size < follower.offset or fh.read(len(follower.head)) != follower.head
                ):
                    # truncated (copytruncate, or a reused file): start again from the top
                    follower.offset = 0
                    follower.pending = b""
                    follower.discarding = False
                    follower.carry.clear()
                    follower.dropping.clear()
                    follower.head = b""
                want = min(size - follower.offset, self.max_bytes_per_file, budget)
                if want <= 0:
                    return 0
                fh.seek(follower.offset)
                data = fh.read(want)
                start = follower.offset
        except OSError as err:
            log.debug("logs: cannot read %s: %s", follower.path, err)
            follower.unreadable = True
            return 0
        follower.unreadable = False
        if follower.offset == 0:
            follower.head = data[:64]
        follower.offset += len(data)
        self._feed(key, follower, data)
        return follower.offset - start

    def _feed(self, key: tuple[str, str, str], follower: _Follower, data: bytes) -> None:
        lines = data.split(b"\n")
        tail = lines.pop()  # bytes after the last newline: an unfinished line
        first = b""
        if lines:
            first = lines[0]
            if follower.discarding:
                lines[0] = b""
                follower.discarding = False
            elif follower.pending:
                lines[0] = follower.pending + first
            follower.pending = b""
        elif follower.discarding:
            return
        else:
            tail = follower.pending + tail
        counts = self._counts
        max_line = self.max_line_bytes
        line = self._line
        docker = follower.docker is not None
        ignored = 0
        for i, raw in enumerate(lines):
            if not i & _LINES_PER_LOOK and i and self._timer() > self._deadline:
                # out of time inside the chunk: the rest (from line i, which begins
                # after a newline) is read again next poll. Why: a file's chunk is up to
                # max_bytes_per_file, and 4 MiB of short progress lines (100,000 marker
                # or "Epoch" lines) took 1.5 s, past the poll's budget and, added to
                # it, close to the collector's 4 s timeout
                rest = len(data) - (len(first) + 1 + sum(len(r) + 1 for r in lines[1:i]))
                follower.offset -= rest
                follower.pending = b""
                break
            if not raw:
                continue
            if len(raw) > max_line:
                counts["oversize"] += 1
                continue
            if docker:
                # a plain record (most lines) is tested as written; decoded only when
                # the fast path does not ignore it
                record = docker_plain(raw)
                if record is None:
                    record = parse_docker_json(raw)
                    if record is None:
                        counts["malformed"] += 1
                        continue
                    plain = False
                else:
                    plain = True
                parts = record
            else:
                parts = raw.split(b" ", 3)
                if len(parts) != 4:
                    ignored += 1
                    continue
            message = parts[3]
            # fast path: a complete line that no format could match: parse_line needs
            # the marker, "{'", a "/" with a bar ("|", "━", "[=") or "Epoch" or a
            # rate ("it/s]"), or Keras verbose=2's "<elapsed>s - <metric>";
            # parse_setup needs " = ". Same answer as the slow path, 3x cheaper.
            if (
                parts[2] == b"F"
                and not follower.carry
                and not follower.dropping
                and (
                    b"/" not in message
                    or not (
                        b"|" in message
                        or b"Epoch" in message
                        or _BAR_BYTES in message
                        or b"[=" in message
                        or b"[>" in message
                        or b"[." in message
                        or (
                            message.rstrip().endswith(b"]")
                            and _RATE_BYTES.search(message) is not None
                        )
                        or (
                            # ints: a byte's memchr, several times cheaper than b"\x1b"
                            (0x1B in message or 0x08 in message or 0x00 in message)
                            and _shown_rate_at_bar_end(message)
                        )
                    )
                )
                and b"{'" not in message
                and b" = " not in message
                and b"s - " not in message
                and _MARKER_BYTES not in message
            ):
                ignored += 1
                continue
            if docker and plain:  # decoded now: docker_plain answers only for records
                parts = parse_docker_json(raw) or parts
            try:
                line(key, follower, parts)
            except Exception as err:  # one bad record never costs the others
                # the file offset is already past this chunk: raising would lose every
                # later line of it (up to max_bytes_per_file) and fail the poll
                counts["invalid"] += 1
                self._skipped(key, err)
        else:  # all lines handled: the tail is kept (or, over the bound, skipped)
            if len(tail) > self.max_line_bytes:
                counts["oversize"] += 1
                follower.discarding = True
                follower.pending = b""
            else:
                follower.pending = tail
        counts["ignored"] += ignored

    def _skipped(self, key: tuple[str, str, str], err: Exception) -> None:
        """Say once (a WARNING, one line, no traceback) that a line raised, then DEBUG.

        A line that raises is a parser defect, not the container's fault: worth one
        line for whoever reads the exporter's log, not one per line of a hostile
        container. The count is ``gpu_eta_exporter_log_lines_total{result="invalid"}``.
        """
        first = str(err).splitlines()[0][:120] if str(err) else ""
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        log.log(
            level,
            "logs: %s/%s/%s: a line could not be read (%s: %r); skipped, counted invalid",
            *key,
            type(err).__name__,
            first,
        )

    def _too_many_runs(self, key: tuple[str, str, str], err: TooManyRuns) -> None:
        """Say once per container (a WARNING, then DEBUG) that its lines start runs
        faster than the cap allows.

        Why say it at all: a sender over HTTP reads the reason in its answer, but no
        one reads what a log line is refused for, and the count
        (``gpu_eta_exporter_log_lines_total{result="too_many_runs"}``) names no
        container.
        """
        name = "/".join(key)
        level = _first_level(self._warned_runs, name, _MAX_WARNED_CONTAINERS)
        log.log(level, "logs: %s: a line skipped, counted too_many_runs: %s", name, err)

    # -- lines -----------------------------------------------------------------------

    def _line_time(self, key: tuple[str, str, str], stamp: str) -> tuple[float | None, str]:
        """A line's time (None: skip the line) and what it counts as once handled:
        ``matched``, or ``future`` / ``undated`` when its timestamp cannot be its time.

        The time is its CRI timestamp (written by the runtime, not the container).
        A timestamp over ``FUTURE_SKEW_SECONDS`` past the clock cannot be the line's:
        taken as it is, it would make every later line look already applied (older
        than the stored progress) until the clock caught up, and its row would beat
        newer HTTP reports. Nor is the clock the time of such a line, or of one whose
        timestamp cannot be read (a file not written by a CRI runtime, a damaged
        line): a log read from behind (at start, after a burst) holds lines stamped
        before the clock, and one dated now among them distorts the run's rate and
        its row outranks newer HTTP reports. So such a line is dated at the last line
        of its container dated by its own timestamp before it, the latest time it can
        be known not to precede, and the lines after it apply as usual. With none yet
        in this process it is skipped: it cannot be dated, and it may be a line
        applied before a restart (applied again, an old epoch could start a new run);
        the lines after it carry the news. Either kind is counted under its own
        result, so an admin sees lines the runtime did not date usably. Only lines
        that match a format (or carry the marker) are dated at all: another line's
        timestamp is never read.
        """
        when = parse_cri_timestamp(stamp)
        if when is None:
            return self._last_time.get(key), "undated"
        if when <= self._clock() + FUTURE_SKEW_SECONDS:
            self._last_time[key] = when
            return when, "matched"
        return self._last_time.get(key), "future"

    def _line(self, key: tuple[str, str, str], follower: _Follower, parts: list[bytes]) -> None:
        counts = self._counts
        stamp = parts[0].decode("ascii", "replace")
        stream = parts[1].decode("ascii", "replace")
        tag = parts[2]
        message = parts[3].decode("utf-8", "replace")
        unmatched = "ignored"  # what this line counts as if nothing in it matches
        if stream in follower.dropping:
            # the rest of a segment already dropped as over the bound: its tail read as
            # a screen of its own could pass for one (a bar's last characters)
            cut = message.find("\r")
            if cut < 0:
                if tag != b"P":
                    follower.dropping.discard(stream)  # the segment ends with this line
                counts["oversize"] += 1
                return
            follower.dropping.discard(stream)
            message = message[cut + 1 :]
            unmatched = "oversize"
        if follower.carry:
            carry = follower.carry.pop(stream, "")
            if carry:
                message = carry + message
        if tag != b"F":
            if tag != b"P":
                counts["ignored"] += 1
                return
            head, sep, rest = message.rpartition("\r")
            # a line is counted once: an unfinished segment over the bound is dropped,
            # and the line counts "oversize" unless its screen (before the last \r)
            # is matched or refused
            if len(rest) > self.max_segment_bytes:
                unmatched = "oversize"
                rest = ""
                follower.dropping.add(stream)
            follower.carry[stream] = rest
            if not sep:
                counts[unmatched] += 1
                return
            message = head
        segment = last_segment(message) if "\r" in message else message
        cleared = _cleared_before(follower, stream, tag, message, segment)
        if len(segment) > self.max_segment_bytes:
            counts["oversize"] += 1
            return
        if segment.endswith(_CURSOR_UP):
            # a bar tqdm drew below the main one (a nested bar: HF Trainer's evaluation
            # bar, an inner loop's), then moved back up. Read as the run's bar, each
            # such bar made two runs (its restart, then the main bar's return)
            counts[unmatched] += 1
            return
        text = visible(segment)
        now: float | None = None
        done = "matched"  # or what an undatable line counts as, whatever became of it
        if MARKER in text:  # its run_start is held to the line's time, as HTTP's to arrival
            now, done = self._line_time(key, stamp)
            if now is None:
                counts[done] = counts.get(done, 0) + 1
                return
        match = parse_line(text, now=now)
        if match is None and " = " in text:
            match = parse_setup(text)
        if match is None:
            # a marker line is a report by intent: one the wire format refuses (bad
            # JSON, a negative epoch, a run_start in the future) is invalid, not noise
            counts["invalid" if MARKER in text else unmatched] += 1
            return
        if now is None:
            now, done = self._line_time(key, stamp)
        if now is None:
            counts[done] = counts.get(done, 0) + 1
            return
        if (
            match.kind == "tqdm"
            and match.bar_is_epoch
            and (cleared or shows_epoch_bars(message, match, self.max_segment_bytes))
        ):
            match = replace(match, per_epoch_shown=True)
        ns, pod, container = key
        previous = self.store.get(ns, pod, container, "log")
        before = self._states.get(key) or _resumed_state(previous)
        if before.instance != follower.number:  # the file tells the container instance
            before = replace(before, instance=follower.number)
        state, report = fold(before, previous, match)
        holds = state.held is not None and state.held_timestamp is None
        if holds:  # a last epoch's end held back from this line
            state = replace(state, held_timestamp=now)
            if _held_end_applied(previous, state, now):
                self._states[key] = replace(state, held=None, held_timestamp=None)
                counts[done] = counts.get(done, 0) + 1
                return
        self._states[key], held = released(before, state, report, now)
        if held is not None:  # no ``Epoch M/M`` bar came: the held end first
            self._apply_held(key, *held)
            previous = self.store.get(ns, pod, container, "log")
        if previous is not None and now < previous.last_report_timestamp:
            # applied before (a re-read after a restart): not again, but folded all the
            # same, so that the state it leaves (the Keras epoch of its header) is the
            # one the next lines are read in, as by an exporter that never stopped
            counts[done] = counts.get(done, 0) + 1
            return
        if report is not None:
            progress, failed = self._merge(key, report, now, derived=MARKER not in text)
            if progress is None:
                assert failed is not None
                counts[failed] += 1
                return
            self._skipped_fields += (
                len(report.skipped) + match.metrics_beyond + len(beyond_run_names(progress, report))
            )
            if progress.epochs_from_zero != state.from_zero:
                self.store.note_epochs_from_zero(ns, pod, container, state.from_zero)
            if holds:
                self._note_held_end(key, progress, state)
        counts[done] = counts.get(done, 0) + 1

    def _note_held_end(
        self, key: tuple[str, str, str], progress: Progress, state: LogState
    ) -> None:
        """Keep the end this line held back with the row its report went to
        (``ProgressStore.note_held_end``), when it is still ahead of the row's epoch
        within its plan: the exit applies it even when a restart cannot read the line
        again (rotated away)."""
        held = state.held
        assert held is not None and held.epoch is not None and state.held_timestamp is not None
        if progress.epoch is None or held.epoch <= progress.epoch:
            return
        if progress.epochs is None or held.epoch > progress.epochs:
            return
        self.store.note_held_end(*key, held.epoch, state.held_timestamp)


def _cleared_before(
    follower: _Follower, stream: str, tag: bytes, message: str, segment: str
) -> bool:
    """Whether the screen read from ``message`` (``segment``; none when blank) comes
    after a bar at position 0 was cleared on its line: in this record, or after the
    screen read before it from an earlier record of the line (``_Follower.cleared``,
    kept until the next screen with text, forgotten at the line's end: the clear of
    ``tqdm.write`` is followed by its message and a newline)."""
    if "\r" in message or follower.cleared:
        before, after = cleared_screens(message)
    else:  # a line's only screen, no clear pending (most lines): nothing to look for
        before = after = False
    if segment.strip():
        before = before or stream in follower.cleared
        follower.cleared.discard(stream)
    if after and tag == b"P":
        follower.cleared.add(stream)
    elif tag != b"P":
        follower.cleared.discard(stream)
    return before


def _held_end_applied(previous: Progress | None, state: LogState, now: float) -> bool:
    """Whether the end ``state`` holds back from a line of time ``now`` was applied to
    ``previous`` already: the line read again after a restart, its end applied at the
    pod's exit at its time. Pure.

    Why: the line, at the row's last report time, was merged again, its epoch N-1 of N
    below the N applied: a new run, done in 0 s at the next exit, one more each
    restart."""
    held = state.held
    return (
        held is not None
        and previous is not None
        and previous.held_end_epoch is None
        and now <= previous.last_report_timestamp
        and previous.epoch is not None
        and held.epoch is not None
        and previous.epoch >= held.epoch
        and previous.epochs == held.epochs
    )


def _resumed_state(previous: Progress | None) -> LogState:
    """The reader's state for a container it has not read yet in this process: empty,
    but for whether its log counts epochs from 0, kept with its log row
    (``ProgressStore.note_epochs_from_zero``): after a restart the ``Epoch 0/N`` line
    that told it may be rotated away, and the rest read counting from 1 made a new run
    that never reached its plan."""
    if previous is None:
        return LogState()
    from_zero = None if previous.epochs_from_zero is None else int(previous.epochs_from_zero)
    if previous.held_end_epoch is None:
        return LogState(from_zero=from_zero)
    # and the end of its last epoch held back (``ProgressStore.note_held_end``), which
    # the next report or the pod's exit applies
    held = Report(epoch=int(previous.held_end_epoch), epochs=previous.epochs)
    return LogState(
        from_zero=from_zero,
        held=held,
        held_timestamp=previous.held_end_timestamp,
        epoch_bars=True,
    )


def _container_name(name: str) -> bool:
    """Whether ``name`` may be a ``container`` in the store: the one rule of the wire
    format (``check_report``), which the store and its loader apply to every row
    (``check_progress``, a DNS-1123 label)."""
    try:
        check_report(Report(container=name))
    except ReportError:
        return False
    return True


def build(ctx: BuildContext) -> Any:
    """Follows ``--path.pod-logs`` for the pods of this node (the same on a simulated
    node: the demo writes real log files)."""
    return LogProgressCollector(
        Path(ctx.cfg.pod_logs),
        ctx.store,
        ctx.pods_now,
        docker_root=ctx.cfg.docker_containers,
        gone_grace_seconds=ctx.cfg.progress_gone_grace_seconds,
    )


register(
    Collector(
        "logs",
        "training progress parsed from container logs under --path.pod-logs",
        kind="logs",
        build=build,
        order=70,
        needs_progress_store=True,
    )
)
