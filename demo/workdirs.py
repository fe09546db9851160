"""The demo's own temporary directories: made with an owner record, and those of a
demo that was killed removed by the next one; and a previous demo's files in a
``--workdir`` (``previous_demo_files``, ``clear_previous_demo``).

Why: the demo removes its temporary directory (scenario files, pod logs, history,
Prometheus' TSDB: tens of MB) when it stops, but a demo killed with SIGKILL (the OOM
killer, ``kill -9``, a CI job's hard timeout) cannot, and each such run left one in
the temporary directory for good. The next demo removes them, and only them: a
directory is removed only when all of these hold (``stale``):

- its name is the demo's (``PREFIX`` and ``tempfile``'s random part), it is a
  directory, not a symbolic link, and it belongs to this user;
- it holds the owner record (``OWNER_FILE``) a demo writes into the directory it
  made: its process id, that process's start time and the boot it ran in, so a pid
  the kernel has since given to another process does not read as the demo alive;
- that process is gone (or a zombie: it will never use the directory again);
- no process names the directory on its command line (a demo's child that outlived
  it: Prometheus still shutting down on its SIGTERM).

A directory without a readable owner record (another program's, one being made this
moment, a ``--workdir``) is never touched. Linux only: where ``/proc`` cannot tell
whether a process lives, nothing is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gpu_eta.common.atomic_file import write_atomically

PREFIX = "gpu-eta-demo-"
OWNER_FILE = "gpu-eta-demo.owner"
# tempfile.mkdtemp's names: the prefix, then 8 of "abcdefghijklmnopqrstuvwxyz0123456789_"
_NAME = re.compile(re.escape(PREFIX) + r"[a-z0-9_]{8}")
_PROC = Path("/proc")


@dataclass(frozen=True)
class Owner:
    """The demo process that made a directory: its pid, its start time (clock ticks
    after boot, ``/proc/<pid>/stat``'s 22nd field) and the boot's id."""

    pid: int
    start_ticks: int
    boot_id: str


def owner_text(owner: Owner) -> str:
    """The owner record's text (JSON). Pure."""
    return json.dumps(
        {"pid": owner.pid, "start_ticks": owner.start_ticks, "boot_id": owner.boot_id}
    )


def parse_owner(text: str) -> Owner | None:
    """The owner record ``owner_text`` wrote, or None for anything else (a record cut
    short, another program's file): such a directory is not known to be the demo's.
    Pure."""
    try:
        data = json.loads(text)
        pid, ticks, boot = data["pid"], data["start_ticks"], data["boot_id"]
    except (ValueError, TypeError, KeyError):
        return None
    if not (type(pid) is int and type(ticks) is int and isinstance(boot, str)) or pid <= 0:
        return None
    return Owner(pid, ticks, boot)


def parse_stat(text: str) -> tuple[str, int] | None:
    """``/proc/<pid>/stat``'s state letter and start time (clock ticks after boot), or
    None when the text is not one. The command name (2nd field, in parentheses) may hold
    spaces and parentheses itself, so the fields are counted after its last ``)``. Pure."""
    _, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[0], int(fields[19])


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def boot_id(proc: Path = _PROC) -> str:
    """This boot's id ("" where the kernel does not say)."""
    return (_read(proc / "sys" / "kernel" / "random" / "boot_id") or "").strip()


def this_process(proc: Path = _PROC) -> Owner | None:
    """This process as an owner record, or None where ``/proc`` does not say (then no
    record is written and nothing is ever removed)."""
    stat_ = parse_stat(_read(proc / "self" / "stat") or "")
    if stat_ is None:
        return None
    return Owner(os.getpid(), stat_[1], boot_id(proc))


def owner_alive(owner: Owner, proc: Path = _PROC) -> bool:
    """Whether the process of ``owner`` still runs: same boot, its pid there with the
    same start time, and not a zombie."""
    if owner.boot_id != boot_id(proc):
        return False
    stat_ = parse_stat(_read(proc / str(owner.pid) / "stat") or "")
    if stat_ is None:
        return False
    state, ticks = stat_
    return ticks == owner.start_ticks and state not in ("Z", "X")


def names_path(
    argv: Iterable[bytes],
    cwd: bytes | None,
    targets: Iterable[bytes],
    exists: Callable[[bytes], bool] = os.path.lexists,
) -> bool:
    """Whether a command line ``argv`` (its arguments, ``--flag=value`` split at its
    first ``=``), read from ``cwd`` (None: unknown), names one of ``targets``
    (absolute, normalised) or something under it. An absolute argument is a path; a
    relative one only where it ``exists`` from ``cwd`` (``-3``, ``gpu_eta.demo``: an
    option, a module, not a file that happens to be under the directory).

    Why arguments and path boundaries, not a substring of the whole line: ``.`` is in
    nearly every command line, a relative ``out-data`` in any process's that names its
    own ``out-data`` elsewhere, and ``/a/wd`` in ``/a/wd1``'s."""
    wanted = tuple(targets)
    for arg in argv:
        for value in (arg, arg.partition(b"=")[2]):
            if not value or (not value.startswith(b"/") and cwd is None):
                continue
            full = os.path.normpath(os.path.join(cwd or b"/", value))
            if not any(full == t or full.startswith(t.rstrip(b"/") + b"/") for t in wanted):
                continue
            if value.startswith(b"/") or exists(full):
                return True
    return False


def process_naming(
    path: Path, proc: Path = _PROC, skip: Callable[[int], bool] = lambda _pid: False
) -> int | None:
    """A running process (one whose command line can be read, ``skip`` false for its
    pid) that names ``path`` or something under it as an argument (``names_path``), or
    None: every child of the demo does (its ``--storage.tsdb.path``, its ``--simulate``
    file, its log). ``path`` is taken from this process's directory and compared as
    written and with its symbolic links resolved."""
    targets = {os.fsencode(os.path.abspath(path)), os.fsencode(os.path.realpath(path))}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        try:
            cwd: bytes | None = os.fsencode(os.readlink(entry / "cwd"))
        except OSError:
            cwd = None
        if names_path(argv[1:], cwd, targets) and not skip(int(entry.name)):
            return int(entry.name)
    return None


def named_by_a_process(path: Path, proc: Path = _PROC) -> bool:
    """Whether any running process names ``path`` (``process_naming``)."""
    return process_naming(path, proc) is not None


def stale(path: Path, proc: Path = _PROC) -> bool:
    """Whether ``path`` is a killed demo's directory, safe to remove (module docstring)."""
    if not _NAME.fullmatch(path.name):
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    owner = parse_owner(_read(path / OWNER_FILE) or "")
    if owner is None or owner_alive(owner, proc):
        return False
    return not named_by_a_process(path, proc)


def make_workdir(parent: Path | None = None, proc: Path = _PROC) -> Path:
    """A new temporary directory for the demo, with this process's owner record in it
    (written whole: a file renamed into place, so a record is never read half written).
    Removing it is the caller's (``shutil.rmtree``), or keeping it (``disown``)."""
    made = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    me = this_process(proc)
    if me is not None:
        record = made / (OWNER_FILE + ".tmp")
        record.write_text(owner_text(me), encoding="utf-8")
        record.replace(made / OWNER_FILE)
    return made


def disown(path: Path) -> None:
    """Keep a demo's temporary directory for good: without its owner record the next
    demo never removes it (``stale``). Why: a demo that failed keeps its logs for the
    user to read, which its error named."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path / OWNER_FILE)


def remove_stale(parent: Path | None = None, proc: Path = _PROC) -> list[Path]:
    """Remove the killed demos' directories in ``parent`` (the temporary directory by
    default); the ones removed. Nothing where ``/proc`` cannot say who lives."""
    if this_process(proc) is None:
        return []
    parent = Path(tempfile.gettempdir()) if parent is None else parent
    try:
        entries: Iterable[Path] = sorted(parent.glob(PREFIX + "*"))
    except OSError:
        return []
    removed = []
    for path in entries:
        if stale(path, proc):
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.lexists(path):
                removed.append(path)
    return removed


# the names a demo writes into its directory (demo/stack.py): its directories, the
# nodes' scenario files (gpu-node-<i>.yaml, and their temporary files while being
# replaced) and the forecaster's history (with SQLite's journal files)
_DEMO_ENTRY = re.compile(
    r"alertmanager|history|logs|pod-logs|progress-state|prometheus|rules|victoria-metrics"
    r"|\.?gpu-node-[0-9]+\.yaml(?:\..*\.tmp)?|history\.sqlite(?:-\w+)?"
)
# the entries a demo records (``record_entries``) before it makes them; the names
# beside them that come with one (a scenario file's temporary copy, SQLite's journal)
_RECORDED = re.compile(
    r"alertmanager|history|logs|pod-logs|progress-state|prometheus|rules|victoria-metrics"
    r"|gpu-node-[0-9]+\.yaml|history\.sqlite"
)
_COMES_WITH = re.compile(r"\.(gpu-node-[0-9]+\.yaml)\..*\.tmp|(history\.sqlite)-\w+")
# the record of what a demo made in a --workdir: one entry's name a line
MANIFEST_FILE = "gpu-eta-demo.files"
_MANIFEST_MAX_BYTES = 64 * 1024  # a demo's record is a few hundred bytes


def recorded_entries(workdir: Path) -> set[str]:
    """The entries the record in ``workdir`` names (``MANIFEST_FILE``), those alone
    that are a demo's own names (no path, no other file: the record is a file anyone
    could edit); an empty set without a readable record."""
    try:
        with open(workdir / MANIFEST_FILE, "rb") as f:
            text = f.read(_MANIFEST_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return set()
    return {name for name in text.splitlines() if _RECORDED.fullmatch(name)}


def record_entries(workdir: Path, names: Iterable[str]) -> None:
    """Add ``names`` to ``workdir``'s record of what a demo made there, before making
    them (a demo killed in between leaves a name whose entry is missing, never an entry
    the record does not name). Written whole: a file renamed into place.

    Why a record: a name alone said nothing of who made an entry, and
    ``--clear-workdir`` removed a checkout's tracked ``rules/`` and a user's ``logs/``."""
    wanted = set(names)
    if bad := sorted(n for n in wanted if not _RECORDED.fullmatch(n)):
        raise ValueError(f"not a demo entry: {bad}")
    text = "".join(f"{n}\n" for n in sorted(recorded_entries(workdir) | wanted))
    write_atomically(workdir / MANIFEST_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _ours(name: str, recorded: set[str]) -> bool:
    if name in recorded:
        return True
    along = _COMES_WITH.fullmatch(name)
    return along is not None and (along[1] or along[2]) in recorded


def _demo_named(workdir: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(workdir) if _DEMO_ENTRY.fullmatch(n))
    except OSError:
        return []


def previous_demo_files(workdir: Path) -> list[Path]:
    """What a previous demo left in ``workdir``: the entries its record names (and
    what comes with them), sorted; [] for none or an unreadable directory.

    Why: a later demo with the same seed makes the same pods (names, UIDs), so it
    would append to their logs (a log-reporting run then gets another run id live than
    in the backfill) and reuse the old TSDB and ``history.sqlite``.
    """
    recorded = recorded_entries(workdir)
    return [workdir / n for n in _demo_named(workdir) if _ours(n, recorded)]


def foreign_files(workdir: Path) -> list[Path]:
    """Entries of ``workdir`` with a demo's names that no demo recorded making (a
    checkout's ``rules/``, a user's ``logs/``), sorted: the demo would write into them,
    and ``--clear-workdir`` never removes them."""
    recorded = recorded_entries(workdir)
    return [workdir / n for n in _demo_named(workdir) if not _ours(n, recorded)]


def clear_previous_demo(workdir: Path) -> None:
    """Remove ``previous_demo_files(workdir)`` and the record; nothing else in
    ``workdir``. Raises ``OSError`` for what cannot be removed (the record then stays,
    naming what is left)."""
    for path in previous_demo_files(workdir):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(workdir / MANIFEST_FILE)


@dataclass
class Claim:
    """A ``--workdir`` held by this demo (``claim_workdir``): the owner record's open
    descriptor, locked, or None where the filesystem has no locks (nothing guarded)."""

    workdir: Path
    fd: int | None

    def release(self) -> None:
        """Remove the record and let go of the lock (removed first, while still held,
        so a demo waiting for it never locks a record about to go)."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.workdir / OWNER_FILE)
        os.close(self.fd)
        self.fd = None


class WorkdirBusy(Exception):
    """Another demo, or a killed demo's child still shutting down, uses the workdir."""


def _ancestors(proc: Path) -> set[int]:
    """This process and its parents (their command lines name the workdir too)."""
    seen, pid = set(), os.getpid()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        fields = (_read(proc / str(pid) / "stat") or "").rpartition(")")[2].split()
        if len(fields) < 2 or not fields[1].isdigit():
            break
        pid = int(fields[1])
    return seen


def _user_of(workdir: Path, proc: Path) -> int | None:
    """A process outside this demo's own (its parents, its process group: ``tee`` in
    the same pipeline) whose command line names ``workdir``: a killed demo's child."""
    mine, group = _ancestors(proc), os.getpgrp()
    return process_naming(workdir, proc, lambda pid: pid in mine or os.getpgid(pid) == group)


def _open_record(record: Path) -> tuple[int, bool]:
    """The owner record opened for writing, and whether this call created it (a
    refused claim removes only a record it made, never another demo's)."""
    flags = os.O_RDWR | os.O_CLOEXEC
    try:
        return os.open(record, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        pass
    try:
        return os.open(record, flags), False
    except FileNotFoundError:  # removed meanwhile by the demo that held it
        return os.open(record, flags | os.O_CREAT, 0o644), True


def claim_workdir(workdir: Path, proc: Path = _PROC) -> Claim:
    """Hold ``workdir`` for this demo: its owner record, created if missing, locked
    (``flock``) for as long as the demo runs. Raises ``WorkdirBusy`` naming the demo
    that holds it, or a killed demo's child still using it; ``OSError`` when the
    record cannot be made.

    Why: two demos in one ``--workdir`` mix their pods' logs and history, and the
    second one's ``--clear-workdir`` removed the running one's TSDB and history under
    it. Why a lock: the kernel lets go of it when its demo dies however it dies, so a
    killed demo's record needs no judging and two demos starting together cannot both
    hold it. A record another demo removed between our open and our lock is opened
    again. Where the filesystem has no locks, or ``/proc`` does not say who lives,
    the claim guards nothing (``Claim.fd`` None).
    """
    record = workdir / OWNER_FILE
    me = this_process(proc)
    for _ in range(5):
        fd, created = _open_record(record)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = parse_owner(os.read(fd, 4096).decode("utf-8", "replace"))
            os.close(fd)
            raise WorkdirBusy(
                "is in use by a running demo"
                + (f" (pid {holder.pid})" if holder is not None else "")
            ) from None
        except OSError:  # no locks on this filesystem (some FUSE and SMB mounts)
            os.close(fd)
            return Claim(workdir, None)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(record))
        except OSError:
            same = False
        if not same:  # removed or replaced by the demo that held it: open it again
            os.close(fd)
            continue
        if me is not None and (user := _user_of(workdir, proc)) is not None:
            if created:  # removed while still locked, as Claim.release does
                with contextlib.suppress(OSError):
                    os.unlink(record)
            os.close(fd)
            raise WorkdirBusy(
                f"is still used by pid {user} (a stopped demo's process shutting down?)"
            )
        os.ftruncate(fd, 0)
        os.write(fd, owner_text(me).encode() if me is not None else b"")
        return Claim(workdir, fd)
    raise WorkdirBusy("is being claimed and released by other demos")
