"""common/atomic_file.py: a file is written whole or not at all, its leftovers removed,
a symlink written through, the mode as asked; ``durable`` syncs the data and the
directory (seen through the syscalls it makes on a real file system)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpu_eta.common import atomic_file
from gpu_eta.common.atomic_file import write_atomically


def test_the_new_content_replaces_the_old_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    write_atomically(target, lambda tmp: tmp.write_text("new\n"))
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_leftover(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("kept")

    def half(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(27, "File too large")

    with pytest.raises(OSError):
        write_atomically(target, half, durable=True)
    assert target.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_symlink_is_written_through_and_the_mode_is_as_asked(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomically(link, lambda tmp: tmp.write_text('{"a": 1}'), mode=0o600)
    assert link.is_symlink() and real.read_text() == '{"a": 1}'
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    fresh = tmp_path / "fresh.txt"
    write_atomically(fresh, lambda tmp: tmp.write_text("x"))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask  # as open() would make it


def test_durable_syncs_the_data_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append(f"fsync {kind}")
        real_fsync(fd)

    def replace(src: object, dst: object) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(atomic_file.os, "fsync", fsync)
    monkeypatch.setattr(atomic_file.os, "replace", replace)
    write_atomically(tmp_path / "s.json", lambda tmp: tmp.write_text("{}"), durable=True)
    assert events == ["fsync file", "rename", "fsync dir"]
    events.clear()
    write_atomically(tmp_path / "p.csv", lambda tmp: tmp.write_text("a\n"))
    assert events == ["rename"]  # an output file: no syncs


def test_without_following_symlinks_a_link_is_replaced_even_a_dangling_one(tmp_path: Path) -> None:
    """The exporter's state file: a link at its path (dangling, or into a directory
    gone) is replaced by the file, not written through, so no save fails for it."""
    link = tmp_path / "state.json"
    link.symlink_to(tmp_path / "gone" / "elsewhere.json")
    write_atomically(link, lambda tmp: tmp.write_text("{}"), mode=0o600, follow_symlinks=False)
    assert not link.is_symlink() and link.read_text() == "{}"
    assert stat.S_IMODE(link.stat().st_mode) == 0o600
