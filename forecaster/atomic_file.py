"""Write a file whole or not at all: through a temporary file renamed over it.

Why a module of its own: ``evaluate`` writes its predictions and ``evaluate_plot`` its
PNG this way, and the plot is imported only when asked for (matplotlib is optional),
so neither may import the other for it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)  # read once, at import: the mode a new file would have had


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)``, then rename ``tmp`` over ``path``: a reader never sees half a
    file and a failure leaves what ``path`` held.

    The temporary file is a new, uniquely named one beside the target (never a
    user's ``OUT.tmp``, never another run's), removed on any failure, Ctrl-C too (a
    full disk must not be left fuller by our leftovers); a symlink is written through
    to its file, as ``open(path, "w")`` would, not replaced by a file; the result has
    the mode a file created by ``open`` would have.
    """
    target = Path(os.path.realpath(path))
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
