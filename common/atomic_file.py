"""Write a file whole or not at all: through a temporary file renamed over it.

Why one module for the whole project: ``evaluate`` writes its predictions and its PNG
this way, and the exporter its progress state file; each needs a reader (or the next
start) never to see half a file and a failure to leave what was there. The exporter's
state also has to survive a power cut once written (``durable``); an output file a
user asked for does not need the two extra syncs.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

# the names ``tempfile.mkstemp`` gives ours: ``.<target>.`` + 8 of these + ``.tmp``
_TMP_CHARS = "[a-z0-9_]{8}"
_UMASK = os.umask(0)
os.umask(_UMASK)  # read once, at import: the mode a new file would have had


def write_atomically(
    path: Path,
    write: Callable[[Path], None],
    *,
    durable: bool = False,
    mode: int | None = None,
    follow_symlinks: bool = True,
) -> None:
    """``write(tmp)``, then rename ``tmp`` over ``path``: a reader never sees half a
    file and a failure leaves what ``path`` held.

    The temporary file is a new, uniquely named one beside the target (never a
    user's ``OUT.tmp``, never another run's), removed on any failure, Ctrl-C too (a
    full disk must not be left fuller by our leftovers); a symlink is written through
    to its file, as ``open(path, "w")`` would (``follow_symlinks`` False: replaced by
    the file, so that a link left dangling cannot make every write fail). The result
    has ``mode``, by default the mode a file created by ``open`` would have. ``durable``:
    the data is synced before the rename and the directory after it, so that once this
    returns the new content survives a crash of the machine (without it a crash soon
    after may leave an empty file under the new name on some file systems).
    """
    target = Path(os.path.realpath(path)) if follow_symlinks else Path(os.path.abspath(path))
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        os.close(fd)
        wanted = (0o666 & ~_UMASK) if mode is None else mode
        if wanted != 0o600:  # mkstemp's own mode: no chmod (some mounts refuse one)
            os.chmod(tmp, wanted)
        write(tmp)
        if durable:
            _fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(target.parent)


def remove_leftovers(path: Path) -> tuple[int, int]:
    """Remove the temporary files ``write_atomically(path, ..., follow_symlinks=False)``
    left beside ``path`` when its process was killed mid-write; (files, bytes) removed.

    Why: the clean-up on failure above cannot run on SIGKILL (the OOM killer, a node
    drain past its grace), and each leftover may be a whole copy of the file, on a
    disk kept for months. Only for a file that one process writes, called before it
    writes: a leftover of another live writer would be removed under it. Only our
    names (``.<name>.`` + ``mkstemp``'s 8 characters + ``.tmp``), never a user's
    ``.<name>.tmp``; a file that cannot be listed or removed is left as it is.
    """
    target = Path(os.path.abspath(path))
    ours = re.compile(rf"\.{re.escape(target.name)}\.{_TMP_CHARS}\.tmp\Z")
    try:
        names = [n for n in os.listdir(target.parent) if ours.match(n)]
    except OSError:
        return 0, 0
    files = size = 0
    for name in names:
        leftover = target.parent / name
        try:
            info = leftover.lstat()
            leftover.unlink()
        except OSError:
            continue
        files += 1
        size += info.st_size
    return files, size


def _fsync_file(path: Path) -> None:
    """Flush ``path``'s data to the device (a read-only descriptor suffices on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make a rename durable (the directory entry), where the platform allows."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
