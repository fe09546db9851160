"""gpu_eta.demo.workdirs: a killed demo's temporary directory is removed by the next
demo, and nothing else is (real processes and the real /proc; the whole demo killed
with SIGKILL is tests/demo/test_main.py's)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_eta.demo import workdirs


def _demo_dir(parent: Path, owner: workdirs.Owner | None, name: str = "abcd_123") -> Path:
    """A directory as a demo makes it (``make_workdir``), its owner record ``owner``."""
    path = parent / (workdirs.PREFIX + name)
    (path / "prometheus").mkdir(parents=True)
    if owner is not None:
        (path / workdirs.OWNER_FILE).write_text(workdirs.owner_text(owner))
    return path


def _me() -> workdirs.Owner:
    me = workdirs.this_process()
    assert me is not None and me.pid == os.getpid() and me.boot_id
    return me


def _dead() -> workdirs.Owner:
    """A process that ran and was reaped: its pid, start time and boot."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        stat = workdirs.parse_stat(Path(f"/proc/{proc.pid}/stat").read_text())
        assert stat is not None
    finally:
        proc.kill()
        proc.wait()
    return workdirs.Owner(proc.pid, stat[1], workdirs.boot_id())


def test_a_dead_demos_dir_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = _demo_dir(tmp_path, _dead(), "dead0000")
    live = _demo_dir(tmp_path, _me(), "live0000")
    assert workdirs.remove_stale(tmp_path) == [dead]
    assert not dead.exists() and (live / "prometheus").is_dir()


def test_a_reused_pid_or_another_boot_is_not_the_demo(tmp_path: Path) -> None:
    """The kernel gives a dead demo's pid to new processes; after a reboot a pid says
    nothing at all. The start time and the boot id tell them apart."""
    me = _me()
    reused = _demo_dir(
        tmp_path, dataclasses.replace(me, start_ticks=me.start_ticks - 1), "reused00"
    )
    rebooted = _demo_dir(tmp_path, dataclasses.replace(me, boot_id="another-boot"), "reboot00")
    assert workdirs.remove_stale(tmp_path) == [rebooted, reused]
    assert not reused.exists() and not rebooted.exists()


def test_a_zombie_demo_is_gone(tmp_path: Path) -> None:
    """A demo killed but not yet reaped by its parent will never use its directory."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    try:
        stat = Path(f"/proc/{proc.pid}/stat")
        ticks = workdirs.parse_stat(stat.read_text())[1]  # type: ignore[index]
        owner = workdirs.Owner(proc.pid, ticks, workdirs.boot_id())
        path = _demo_dir(tmp_path, owner)
        assert workdirs.remove_stale(tmp_path) == [] and path.is_dir()  # running
        deadline = time.monotonic() + 30
        while workdirs.parse_stat(stat.read_text())[0] != "Z":  # type: ignore[index]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert workdirs.remove_stale(tmp_path) == [path]
    finally:
        proc.wait()


def test_a_dir_a_process_still_names_is_kept(tmp_path: Path) -> None:
    """The demo is gone but a child of it is not yet (Prometheus ending on its
    SIGTERM, its ``--storage.tsdb.path`` in the directory): removed once it is gone."""
    path = _demo_dir(tmp_path, _dead())
    script = "import sys, time; time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", script, f"--data={path}/prometheus"])
    try:
        deadline = time.monotonic() + 30  # until it has exec'd: a fork has pytest's cmdline
        while b"--data=" not in Path(f"/proc/{child.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert workdirs.remove_stale(tmp_path) == [] and path.is_dir()
    finally:
        child.kill()
        child.wait()
    assert workdirs.remove_stale(tmp_path) == [path]


def test_what_the_demo_did_not_make_is_never_removed(tmp_path: Path) -> None:
    """Without its owner record, or not a directory of this user's, or not the demo's
    name, or a symbolic link: left alone, whatever its owner record says."""
    dead = _dead()
    kept = [
        _demo_dir(tmp_path, None, "norecord"),
        _demo_dir(tmp_path / "elsewhere", dead, "target00"),
        _demo_dir(tmp_path, dead, "too_long_name"),
        _demo_dir(tmp_path, dead, "SHOUTING"),
    ]
    (tmp_path / (workdirs.PREFIX + "cutshort") / "prometheus").mkdir(parents=True)
    (tmp_path / (workdirs.PREFIX + "cutshort") / workdirs.OWNER_FILE).write_text('{"pid": 1')
    kept.append(tmp_path / (workdirs.PREFIX + "cutshort"))
    link = tmp_path / (workdirs.PREFIX + "symlink0")
    link.symlink_to(kept[1])
    kept.append(link)
    a_file = tmp_path / (workdirs.PREFIX + "afile000")
    a_file.write_text(workdirs.owner_text(dead))
    kept.append(a_file)
    if os.getuid() == 0:  # root can give one away: another user's
        theirs = _demo_dir(tmp_path, dead, "theirs00")
        os.chown(theirs, 12345, 12345)
        kept.append(theirs)
    assert workdirs.remove_stale(tmp_path) == []
    assert all(os.path.lexists(p) for p in kept)
    assert (kept[1] / "prometheus").is_dir()


def test_nothing_is_removed_where_proc_cannot_tell(tmp_path: Path) -> None:
    """Without /proc every process would read as gone: every demo's directory, a
    running one's too, would go."""
    path = _demo_dir(tmp_path, _dead())
    assert workdirs.remove_stale(tmp_path, proc=tmp_path / "no-proc") == [] and path.is_dir()


def test_make_workdir_writes_this_process_as_its_owner(tmp_path: Path) -> None:
    path = workdirs.make_workdir(tmp_path)
    try:
        assert path.parent == tmp_path and path.name.startswith(workdirs.PREFIX)
        owner = workdirs.parse_owner((path / workdirs.OWNER_FILE).read_text())
        assert owner == _me() and workdirs.owner_alive(owner)
        assert [p.name for p in path.iterdir()] == [workdirs.OWNER_FILE]
        assert workdirs.remove_stale(tmp_path) == [] and path.is_dir()
    finally:
        shutil.rmtree(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123 (python3) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 99", ("S", 4242)),
        ("7 (a) b) (c d) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 77 9", ("Z", 77)),
        ("123 (python3) S 1 2", None),
        ("no parenthesis at all", None),
        ("", None),
    ],
)
def test_parse_stat(text: str, expected: tuple[str, int] | None) -> None:
    """The command name may hold spaces and parentheses: fields count after its last ``)``."""
    assert workdirs.parse_stat(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"pid": "1", "start_ticks": 2, "boot_id": "b"}', '{"pid": 0, "start_ticks": 2, "boot_id": "b"}',
     '{"pid": true, "start_ticks": 2, "boot_id": "b"}', '{"pid": 1, "boot_id": "b"}'],
)  # fmt: skip
def test_parse_owner_refuses_anything_else(text: str) -> None:
    assert workdirs.parse_owner(text) is None
    owner = workdirs.Owner(12, 34, "b")
    assert workdirs.parse_owner(workdirs.owner_text(owner)) == owner


def _previous_demo(workdir: Path) -> list[str]:
    """A --workdir as a finished demo leaves it, plus the user's own file; the demo's
    entries' names (recorded as the stack records them before making them)."""
    names = ["gpu-node-0.yaml", "history", "history.sqlite", "logs", "pod-logs", "prometheus"]
    workdirs.record_entries(workdir, names)
    for sub in ("pod-logs/ml-bob_train-x_uid/trainer", "prometheus/data", "history", "logs"):
        (workdir / sub).mkdir(parents=True)
    (workdir / "pod-logs/ml-bob_train-x_uid/trainer/0.log").write_text("Epoch 1/3\n")
    (workdir / "history.sqlite").write_bytes(b"SQLite format 3\0")
    (workdir / "gpu-node-0.yaml").write_text("pods: []\n")
    (workdir / "history.sqlite-wal").write_bytes(b"")  # SQLite's, beside a recorded one
    (workdir / "notes.txt").write_text("mine")
    return [*names[:3], "history.sqlite-wal", *names[3:]]


def test_a_previous_demos_files_in_a_workdir_are_found_and_cleared_alone(tmp_path: Path) -> None:
    """A later demo with the same seed makes the same pods: it would append to their
    logs and reuse the TSDB and history, so the demo finds what a previous one left
    (its own names only) and removes that, and only that, when asked."""
    assert workdirs.previous_demo_files(tmp_path) == []
    names = _previous_demo(tmp_path)
    assert [p.name for p in workdirs.previous_demo_files(tmp_path)] == names
    assert workdirs.foreign_files(tmp_path) == []
    workdirs.clear_previous_demo(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert workdirs.previous_demo_files(tmp_path / "missing") == []


def test_a_directory_of_a_demo_name_no_demo_made_is_never_cleared(tmp_path: Path) -> None:
    """``--workdir <a checkout of this repo> --clear-workdir`` deleted the repo's tracked
    rules/, and a user's WORKDIR/logs/mine/important.txt went with the demo's logs/:
    a name alone is no proof. Only entries a demo recorded before making them are its
    own; others of its names are the user's, listed apart and never removed."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "gpu-eta.rules.yaml").write_text("groups: []\n")
    (tmp_path / "logs" / "mine").mkdir(parents=True)
    (tmp_path / "logs" / "mine" / "important.txt").write_text("mine")
    (tmp_path / "gpu-node-1.yaml").write_text("a user's own scenario\n")
    assert workdirs.previous_demo_files(tmp_path) == []
    assert [p.name for p in workdirs.foreign_files(tmp_path)] == [
        "gpu-node-1.yaml",
        "logs",
        "rules",
    ]
    workdirs.clear_previous_demo(tmp_path)
    assert (tmp_path / "rules" / "gpu-eta.rules.yaml").read_text() == "groups: []\n"
    assert (tmp_path / "logs" / "mine" / "important.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "listed",
    ["notes.txt", "../outside", "/etc", "rules/../..", "logs/mine", "", "gpu-eta-demo.owner"],
)
def test_a_record_naming_what_no_demo_makes_removes_nothing(tmp_path: Path, listed: str) -> None:
    """The record is a file anyone could edit: a name that is not one of the demo's
    own entries (another file, a path out of the directory) is ignored."""
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / workdirs.MANIFEST_FILE).write_text(listed + "\nlogs\n")
    (tmp_path / "logs").mkdir()
    assert [p.name for p in workdirs.previous_demo_files(tmp_path)] == ["logs"]
    workdirs.clear_previous_demo(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


HOLD = """
import sys, time
from pathlib import Path
from gpu_eta.demo import workdirs
claim = workdirs.claim_workdir(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def hold_workdir(workdir: Path) -> subprocess.Popen:
    """Another demo holding ``workdir`` (its claim), until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(workdir)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_workdir_is_held_by_one_demo_and_free_once_it_dies(tmp_path: Path) -> None:
    """Two demos in one --workdir: the second's --clear-workdir removed the first's
    TSDB, history and logs. The claim is a lock the kernel drops when its demo dies,
    however it dies (a SIGKILL here), so the next demo takes the directory at once."""
    other = hold_workdir(tmp_path)
    try:
        with pytest.raises(workdirs.WorkdirBusy, match=f"pid {other.pid}"):
            workdirs.claim_workdir(tmp_path)
        assert workdirs.parse_owner((tmp_path / workdirs.OWNER_FILE).read_text()).pid == other.pid
    finally:
        other.kill()
        other.wait()
    claim = workdirs.claim_workdir(tmp_path)
    assert workdirs.parse_owner((tmp_path / workdirs.OWNER_FILE).read_text()) == _me()
    assert workdirs.previous_demo_files(tmp_path) == []  # the record is no demo file
    claim.release()
    assert list(tmp_path.iterdir()) == []


def test_demos_starting_together_claim_the_workdir_once(tmp_path: Path) -> None:
    """Each read a killed demo's record, judged it stale and replaced it: both claimed
    (4 in 40 trials). A lock is held by one."""
    (tmp_path / workdirs.OWNER_FILE).write_text(workdirs.owner_text(_dead()))
    script = (
        "import sys\nfrom pathlib import Path\nfrom gpu_eta.demo import workdirs\n"
        "try:\n    c = workdirs.claim_workdir(Path(sys.argv[1]))\n"
        "except workdirs.WorkdirBusy:\n    print('busy', flush=True)\nelse:\n"
        "    print('claimed', flush=True)\n    sys.stdin.read()\n"
    )
    for _ in range(5):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(tmp_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        answers = sorted(p.stdout.readline().strip() for p in procs)
        for p in procs:
            p.communicate("")
        assert answers == ["busy", "busy", "claimed"]


def test_a_killed_demos_child_still_using_the_workdir_keeps_it(tmp_path: Path) -> None:
    """A demo killed with SIGKILL: its Prometheus takes seconds to stop in the
    directory, and --clear-workdir removed its TSDB under it."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--storage={tmp_path}/prometheus"],
        start_new_session=True,
    )
    deadline = time.monotonic() + 10  # until its command line reads as the program's
    while str(tmp_path).encode() not in Path(f"/proc/{child.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        with pytest.raises(workdirs.WorkdirBusy, match=f"pid {child.pid}"):
            workdirs.claim_workdir(tmp_path)
    finally:
        child.kill()
        child.wait()
    workdirs.claim_workdir(tmp_path).release()


def _unrelated(*argv: str, cwd: Path | None = None) -> subprocess.Popen:
    """A process outside this test's group whose command line is ``argv`` (after the
    interpreter's), once its command line reads so."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", *argv],
        start_new_session=True,
        cwd=cwd,
    )
    deadline = time.monotonic() + 10
    while b"time.sleep" not in Path(f"/proc/{child.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return child


@pytest.mark.parametrize(
    ("workdir", "their_argv"),
    [
        # "." was found in every command line holding a dot: "still used by pid 1"
        (".", ["--path=/var/lib/x.y"]),
        # run from inside it: an option and a module name are no paths under it
        (".", ["-3", "gpu_eta.demo"]),
        # a relative path is the demo's directory's, not any process's that names it
        ("out-data", ["out-data"]),
        # an absolute path's longer sibling is another directory
        ("wd", ["--storage.tsdb.path={parent}/wd1/prometheus"]),
    ],
)
def test_a_workdir_is_used_only_by_what_names_it_as_a_path(
    monkeypatch, tmp_path: Path, workdir: str, their_argv: list[str]
) -> None:
    """The workdir was matched as a substring of the unresolved path in every process's
    command line: `--workdir .` was refused as "still used by pid 1", `out-data` when an
    unrelated `python3 -c ... out-data` ran elsewhere, /a/wd for a process using /a/wd1;
    and each refusal left an empty owner record behind."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / workdir).mkdir(exist_ok=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(mine)
    argv = [a.format(parent=mine) for a in their_argv]
    other = _unrelated(*argv, cwd=mine if workdir == "." else elsewhere)
    try:
        workdirs.claim_workdir(Path(workdir)).release()
    finally:
        other.kill()
        other.wait()


def test_a_relative_workdir_a_killed_demos_child_uses_is_refused_and_left_clean(
    monkeypatch, tmp_path: Path
) -> None:
    """The same relative directory, named by a process running where the demo runs (a
    killed demo's Prometheus: its relative data path, or the absolute one): still
    refused, and the record this refusal made is not left behind."""
    (tmp_path / "out-data" / "prometheus").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    for argv in (["--storage.tsdb.path=out-data/prometheus"], [str(tmp_path / "out-data")]):
        child = _unrelated(*argv, cwd=tmp_path)
        try:
            with pytest.raises(workdirs.WorkdirBusy, match=f"pid {child.pid}"):
                workdirs.claim_workdir(Path("out-data"))
        finally:
            child.kill()
            child.wait()
        assert [p.name for p in (tmp_path / "out-data").iterdir()] == ["prometheus"]


def test_a_filesystem_without_locks_is_claimed_unguarded(monkeypatch, tmp_path: Path) -> None:
    def no_locks(fd: int, op: int) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(workdirs.fcntl, "flock", no_locks)
    claim = workdirs.claim_workdir(tmp_path)
    assert claim.fd is None
    claim.release()
