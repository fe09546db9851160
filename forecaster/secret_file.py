"""A secret read from a file that may be replaced while the process runs.

Why: a Kubernetes projected ServiceAccount token (the credential of OpenShift's
thanos-querier and of any kube-rbac-proxy in front of Prometheus) expires after its
``expirationSeconds`` and the kubelet writes a new one into the same path, swapping the
volume's ``..data`` symlink. A token read once at start is refused with HTTP 401 from
the first expiry on, until a restart. Prometheus itself reads its ``credentials_file``
at every request; this does the same cheaply: one ``stat`` of the path (following
links) per request, a read only when the file's identity, size or modification time
changed. A file that became unreadable or empty keeps the last good secret in use,
with one warning per such change of state (not one per request).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from gpu_eta.forecaster.request_headers import sendable

log = logging.getLogger(__name__)

UNSENDABLE = "holds a line break, a control or a non-ASCII character (not sendable as a header)"


class UnsendableSecret(ValueError):
    """The file's text cannot be sent in a header (``request_headers.sendable``)."""


# what identifies one version of the file: (device, inode, size, mtime in ns)
_Stamp = tuple[int, int, int, int]


def _stamp(path: str) -> _Stamp:
    st = os.stat(path)  # follows symlinks: the kubelet's ..data swap shows as a new inode
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read(path: str) -> str:
    """The file's text without surrounding whitespace (a trailing newline is usual)."""
    return Path(path).read_text(encoding="utf-8").strip()


class SecretFile:
    """The current secret of ``path``: ``value()`` re-reads the file when it changed.

    ``SecretFile(path, flag)`` reads it once and raises ``OSError`` (missing,
    unreadable), ``UnicodeDecodeError`` (not UTF-8) or ``UnsendableSecret`` (a line
    break inside, a non-ASCII character): a start-up error for the caller to report. ``flag`` names the file in the one warning a later failure logs; the
    secret itself is never logged nor in ``repr``.
    """

    def __init__(self, path: str, flag: str) -> None:
        self.path = path
        self.flag = flag
        self._lock = threading.Lock()
        stamp = _stamp(path)
        self._value = _read(path)
        if not sendable(self._value):
            raise UnsendableSecret(UNSENDABLE)
        self._stamp: _Stamp | None = stamp
        self._failing = False  # a warning was logged and no good read since

    def __repr__(self) -> str:
        return f"SecretFile({self.path!r})"

    def value(self) -> str:
        """The secret now in the file, or the last good one when it cannot be read or
        is empty (the request then goes out with it: the server may still take it, and
        a caller cannot do better)."""
        with self._lock:
            try:
                stamp = _stamp(self.path)
            except OSError as err:
                self._fail(err.strerror or str(err))
                return self._value
            if stamp == self._stamp:
                return self._value
            try:
                text = _read(self.path)
            except OSError as err:
                self._fail(err.strerror or str(err))
                return self._value
            except UnicodeDecodeError:
                self._fail("not UTF-8 text")
                return self._value
            if not sendable(text):
                self._fail(UNSENDABLE)
                return self._value
            if not text:
                # not remembered as read: a file rewritten in place may be empty for a
                # moment, and its next version must be read whatever its stamp
                self._fail("empty")
                return self._value
            self._value, self._stamp = text, stamp
            if self._failing:
                self._failing = False
                log.info("%s %s: readable again, its new value is used", self.flag, self.path)
            return self._value

    def _fail(self, reason: str) -> None:
        """One warning when the file goes bad, none while it stays bad."""
        self._stamp = None  # read again as soon as it is back, whatever its stamp
        if self._failing:
            return
        self._failing = True
        log.warning("%s %s: %s; the value read before is still sent", self.flag, self.path, reason)


def reveal(secret: str | SecretFile) -> str:
    """The text of a secret given as text or as a file."""
    return secret if isinstance(secret, str) else secret.value()
