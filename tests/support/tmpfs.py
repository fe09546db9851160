"""A Python script run in a private mount namespace with a fresh tmpfs of a given size.

For tests of what the forecaster does when its volume fills: a real file system that
says ENOSPC, not a simulated limit. Mounting needs root and ``unshare(1)``; the test
is skipped where either is missing or the mount is refused (a container without
``CAP_SYS_ADMIN``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def run_on_tmpfs(
    tmp_path: Path, script: str, args: list[str], size: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run ``script`` (Python source) with ``sys.argv[1]`` the mount point of a new
    ``size`` tmpfs (``1m``, ``4m``) and ``args`` after it; its completed process.
    Skips the test where no tmpfs can be mounted."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("mounting a tmpfs needs root and unshare(1)")
    path = tmp_path / "child.py"
    path.write_text(script)
    mount = tmp_path / "vol"
    mount.mkdir()
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            f'mount -t tmpfs -o size={size} tmpfs "$1" || exit 77; shift; exec "$@"',
            "sh",
            str(mount),
            sys.executable,
            str(path),
            str(mount),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode == 77 or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()[:200]}")
    return proc
