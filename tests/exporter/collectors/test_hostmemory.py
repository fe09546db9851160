"""CgroupHostMemory against cgroup trees for both versions and both drivers."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from gpu_eta.exporter.collectors import CollectorError, hostmemory
from gpu_eta.exporter.collectors.hostmemory import (
    CgroupHostMemory,
    parse_memory_stat,
    working_set_bytes,
)
from gpu_eta.exporter.collectors.kube import pod_meta_from_object
from gpu_eta.exporter.readings import HostMemory, PodMeta
from tests.support.kubeapi import make_pod

CGROUP = Path(__file__).resolve().parents[2] / "fixtures" / "cgroup"
META = json.loads((CGROUP / "expected.json").read_text())
# containers 10, 11 and 12 live in pods 0, 1 and 2 (see the fixture generator's layout)
POD_OF = {10: 0, 11: 1, 12: 2}
EMPTY_PROC = CGROUP / "no-such-proc"


def pod_for(n: int, phase: str = "Running") -> PodMeta:
    p = POD_OF.get(n, n)
    return PodMeta(
        namespace="ml",
        name=f"pod-{n}",
        uid=META["uid"][str(p)],
        phase=phase,
        container_ids={"main": META["cid"][str(n)]},
    )


def cases(tree: str) -> list[tuple[int, list]]:
    return [
        (int(key.split(":")[1]), want)
        for key, want in sorted(META["expected"].items())
        if key.split(":")[0] == tree
    ]


@pytest.mark.parametrize("tree", ["v2-systemd", "v2-cgroupfs", "v1-cgroupfs", "v1-systemd"])
def test_working_set_and_limit_for_every_layout(tree: str) -> None:
    want = cases(tree)
    assert want
    source = CgroupHostMemory(str(CGROUP / tree), str(EMPTY_PROC))
    got = source.poll([pod_for(n) for n, _ in want])
    assert got == tuple(HostMemory("ml", f"pod-{n}", "main", ws, limit) for n, (ws, limit) in want)


def test_nested_kubelet_slice_is_found_through_proc() -> None:
    ((n, (ws, limit)),) = cases("v2-nested")
    tree = str(CGROUP / "v2-nested")
    assert CgroupHostMemory(tree, str(EMPTY_PROC)).poll([pod_for(n)]) == ()
    source = CgroupHostMemory(tree, str(CGROUP / "proc-nested"))
    assert source.poll([pod_for(n)]) == (HostMemory("ml", f"pod-{n}", "main", ws, limit),)


def test_a_hybrid_nodes_v1_memory_line_is_followed_not_its_unified_line() -> None:
    """A nested kubelet on a hybrid node (cgroup v1 controllers, and the unified
    hierarchy's ``0::`` line last): the v1 memory hierarchy is read, so the path is the
    memory line's. The unified line can name another cgroup (here a sub-cgroup
    systemd made in the unified hierarchy only), which the memory hierarchy lacks."""
    ((n, (ws, limit)),) = cases("v1-nested")
    source = CgroupHostMemory(str(CGROUP / "v1-nested"), str(CGROUP / "proc-hybrid"))
    assert source.poll([pod_for(n)]) == (HostMemory("ml", f"pod-{n}", "main", ws, limit),)


def test_proc_paths_relative_to_a_cgroup_namespace_are_not_followed(tmp_path: Path) -> None:
    """``0::/../x`` (seen from a private cgroup namespace) is relative to the reader's
    own cgroup, not to the cgroup root: joining it to the root would leave the tree."""
    ((n, _),) = cases("v2-nested")
    root = tmp_path / "root"
    root.mkdir()
    (root / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    shutil.copytree(CGROUP / "v2-nested" / "kubelet.slice", tmp_path / "kubelet.slice")
    scope = next((tmp_path / "kubelet.slice").rglob("*.scope"))
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cgroup").write_text(f"0::/../{scope.relative_to(tmp_path)}\n")
    assert CgroupHostMemory(str(root), str(proc)).poll([pod_for(n)]) == ()
    # the same file without the namespace prefix, against the tree that has it: found
    (proc / "77" / "cgroup").write_text(f"0::/{scope.relative_to(tmp_path)}\n")
    assert len(CgroupHostMemory(str(tmp_path), str(proc)).poll([pod_for(n)])) == 1


def test_malformed_and_missing_containers_are_skipped_with_a_debug_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu_eta.exporter.collectors.hostmemory")
    source = CgroupHostMemory(str(CGROUP / "v2-systemd"), str(EMPTY_PROC))
    unknown = PodMeta(
        "ml", "ghost", "00000000-0000-4000-8000-000000000000", container_ids={"main": "f" * 64}
    )
    got = source.poll([pod_for(4), unknown, pod_for(1)])
    assert [h.pod for h in got] == ["pod-1"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("pod-4" in m and "integer" in m for m in messages)
    assert any("ghost" in m and "no cgroup found" in m for m in messages)
    assert all(r.levelno == logging.DEBUG for r in caplog.records)


def test_finished_pods_and_hostile_ids_are_not_read() -> None:
    source = CgroupHostMemory(str(CGROUP / "v2-systemd"), str(EMPTY_PROC))
    evil = PodMeta("ml", "evil", META["uid"]["1"], container_ids={"main": "../../../etc"})
    assert source.poll([pod_for(1, phase="Succeeded"), evil]) == ()


def test_a_removed_cgroup_leaves_the_cache(tmp_path: Path) -> None:
    tree = tmp_path / "cg"
    shutil.copytree(CGROUP / "v2-systemd", tree)
    source = CgroupHostMemory(str(tree), str(EMPTY_PROC))
    assert len(source.poll([pod_for(1)])) == 1
    scope = next(tree.rglob(f"cri-containerd-{META['cid']['1']}.scope"))
    shutil.rmtree(scope)
    assert source.poll([pod_for(1)]) == ()


def node_without_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_pids: int
) -> tuple[Path, list[str]]:
    """A cgroup v2 root with no container's directory, and ``<tmp_path>/proc`` with
    ``n_pids`` processes none of which is a container's; every file hostmemory reads
    is recorded in the list returned."""
    cgroupfs = tmp_path / "cg"
    cgroupfs.mkdir()
    (cgroupfs / "cgroup.controllers").write_text("")
    for pid in range(1, n_pids + 1):
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "cgroup").write_text("0::/system.slice/foo.service\n")
    reads: list[str] = []
    read_small = hostmemory._read_small

    def counting(path: str, limit: int = hostmemory.MAX_STAT_FILE_BYTES) -> str:
        reads.append(path)
        return read_small(path, limit)

    monkeypatch.setattr(hostmemory, "_read_small", counting)
    return cgroupfs, reads


def test_a_crash_looping_container_does_not_scan_proc_every_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container in CrashLoopBackOff has no cgroup: its pod, as the pod watch makes
    it, must not send host memory through every /proc/<pid>/cgroup each cycle."""
    dead = "containerd://" + "a" * 64
    pod = make_pod("train", uid="u-train", containers={"main": dead})
    pod["status"]["containerStatuses"][0].update(
        restartCount=4,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 1, "containerID": dead}},
    )
    meta = pod_meta_from_object(pod)
    n_pids = 200
    cgroupfs, reads = node_without_the_container(tmp_path, monkeypatch, n_pids)
    source = CgroupHostMemory(str(cgroupfs), str(tmp_path / "proc"))
    for _ in range(3):
        assert source.poll([meta]) == ()
    assert len([r for r in reads if r.endswith("/cgroup")]) <= n_pids  # one scan at most


def test_a_container_no_scan_finds_is_looked_for_with_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running container of a sandboxed runtime (Kata, gVisor) has no process in the
    node's /proc: /proc is scanned for it at its first poll and then ever more rarely
    (15 s, doubling to at most every 300 s), not every cycle; a container found
    meanwhile by its path is read at once, and the scan then finds nothing left to
    look for."""
    n_pids = 50
    cgroupfs, reads = node_without_the_container(tmp_path, monkeypatch, n_pids)

    def scans() -> int:
        return len([r for r in reads if r.endswith("/cgroup")]) // n_pids

    now = [1000.0]
    source = CgroupHostMemory(str(cgroupfs), str(tmp_path / "proc"), clock=lambda: now[0])
    pod = PodMeta("ml", "kata", "u-kata", phase="Running", container_ids={"main": "b" * 64})
    seen = []
    for _ in range(1400):  # 1,400 polls, 1 s apart
        assert source.poll([pod]) == ()
        seen.append(scans())
        now[0] += 1.0
    # scans at t = 0, 15, 45, 105, 225, 465, then every 300 s (the cap; 480 s uncapped)
    rescans = [t for t in range(1, 1400) if seen[t] > seen[t - 1]]
    assert rescans == [15, 45, 105, 225, 465, 765, 1065, 1365]
    assert seen[0] == 1
    # a new container is scanned for at its first poll, whatever the other's backoff
    other = PodMeta("ml", "kata2", "u-kata2", phase="Running", container_ids={"main": "c" * 64})
    before = scans()
    source.poll([pod, other])
    assert scans() == before + 1
    # a container that leaves and comes back is looked for afresh
    source.poll([])
    before = scans()
    source.poll([pod])
    assert scans() == before + 1


def test_no_cgroup_root_is_a_collector_error(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="no cgroup v2 root or v1 memory hierarchy"):
        CgroupHostMemory(str(tmp_path), str(EMPTY_PROC)).poll([])


def test_parse_memory_stat_and_working_set() -> None:
    stat = parse_memory_stat("inactive_file 10\nbad line here\nactive_file x\nanon 5\n")
    assert stat == {"inactive_file": 10, "anon": 5}
    assert working_set_bytes(100, 30) == 70
    assert working_set_bytes(100, 300) == 0
    assert working_set_bytes(100, None) == 100


@pytest.mark.skipif(not Path("/sys/fs/cgroup").is_dir(), reason="no cgroupfs")
def test_this_machine_never_raises_for_unknown_pods() -> None:
    try:
        got = CgroupHostMemory().poll([pod_for(1)])
    except CollectorError:
        return  # a container without a memory hierarchy: reported, not crashed
    assert got == ()
