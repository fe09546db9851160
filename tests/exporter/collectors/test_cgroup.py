"""parse_cgroup and CgroupResolver against /proc fixtures for every runtime/driver/version."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.exporter.collectors.cgroup import MAX_CGROUP_FILE_BYTES, CgroupResolver, parse_cgroup
from gpu_eta.exporter.readings import ContainerRef

PROC = Path(__file__).resolve().parents[2] / "fixtures" / "proc"
EXPECTED = json.loads((PROC / "expected.json").read_text())


def _ref(expect: dict | None) -> ContainerRef | None:
    return None if expect is None else ContainerRef(**expect)


@pytest.mark.parametrize(
    "pid", sorted(EXPECTED), ids=[EXPECTED[p]["note"] for p in sorted(EXPECTED)]
)
def test_fixture(pid: str) -> None:
    text = (PROC / pid / "cgroup").read_text()
    assert parse_cgroup(text) == _ref(EXPECTED[pid]["expect"])


def test_resolver_reads_every_fixture_and_skips_the_rest() -> None:
    pids = [int(p) for p in EXPECTED] + [999_999, -3, 0]
    got = CgroupResolver(str(PROC)).resolve(pids)
    want = {int(p): _ref(c["expect"]) for p, c in EXPECTED.items() if c["expect"] is not None}
    assert got == want


def test_every_runtime_driver_version_combination_is_covered() -> None:
    notes = " | ".join(c["note"] for c in EXPECTED.values())
    for version in ("v1", "v2"):
        for driver in ("systemd", "cgroupfs"):
            for runtime in ("containerd", "cri-o", "docker"):
                assert f"{version} {driver} {runtime}" in notes
    for qos in ("guaranteed", "burstable", "besteffort"):
        assert qos in notes


def test_malformed_and_missing_files_are_skipped_with_a_debug_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "10").mkdir()
    (tmp_path / "10" / "cgroup").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / "cgroup").write_text("0::/" + "a" * (MAX_CGROUP_FILE_BYTES + 10))
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "cgroup").mkdir()  # a directory: reading it fails
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-2.scope\n")
    caplog.set_level(logging.DEBUG, logger="gpu_eta.exporter.collectors.cgroup")
    assert CgroupResolver(str(tmp_path)).resolve([10, 11, 12, 13, 14]) == {}
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert all(r.levelno == logging.DEBUG for r in caplog.records)
    assert "pid 10" in messages and "not UTF-8" in messages
    assert "pid 11" in messages and "larger than" in messages
    assert "pid 12" in messages and "cannot read" in messages
    assert "pid 13" in messages and "names no container" in messages
    assert "pid 14" in messages


@pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="no procfs")
def test_real_proc_never_raises() -> None:
    # this machine's own processes: whatever they are in, resolving must not fail
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()][:200]
    result = CgroupResolver("/proc").resolve(pids)
    assert set(result) <= set(pids)


# --- property tests -----------------------------------------------------------------

hexd = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
uuids = st.uuids().map(str)


@given(st.text(max_size=2000))
@settings(max_examples=300, deadline=None)
def test_parse_never_raises_on_any_text(text: str) -> None:
    ref = parse_cgroup(text)
    assert ref is None or len(ref.container_id) == 64


@st.composite
def cgroup_files(draw):
    cid = draw(hexd)
    uid = draw(uuids)
    qos = draw(st.sampled_from(["", "burstable", "besteffort"]))
    driver = draw(st.sampled_from(["systemd", "cgroupfs"]))
    version = draw(st.sampled_from(["v1", "v2"]))
    if driver == "systemd":
        runtime, prefix = draw(
            st.sampled_from(
                [("containerd", "cri-containerd"), ("cri-o", "crio"), ("docker", "docker")]
            )
        )
        u = uid.replace("-", "_")
        pod = f"kubepods-{qos}-pod{u}.slice" if qos else f"kubepods-pod{u}.slice"
        mid = f"/kubepods-{qos}.slice" if qos else ""
        path = f"/kubepods.slice{mid}/{pod}/{prefix}-{cid}.scope"
    else:
        runtime, leaf = draw(st.sampled_from([("", cid), ("cri-o", f"crio-{cid}")]))
        mid = f"/{qos}" if qos else ""
        path = f"/kubepods{mid}/pod{uid}/{leaf}"
    if version == "v2":
        text = f"0::{path}\n"
    else:
        text = f"12:pids:{path}\n11:memory:{path}\n2:rdma:/\n1:name=systemd:{path}\n0::/\n"
    return text, ContainerRef(container_id=cid, pod_uid=uid, runtime=runtime)


@given(cgroup_files())
@settings(max_examples=300, deadline=None)
def test_generated_valid_paths_round_trip(case) -> None:
    text, want = case
    assert parse_cgroup(text) == want


@given(cgroup_files(), st.integers(min_value=1, max_value=4), st.data())
@settings(max_examples=300, deadline=None)
def test_paths_relative_to_a_cgroup_namespace_parse_the_same(case, ups: int, data) -> None:
    """In a private cgroup namespace (v2, the exporter in a container with hostPID) the
    kernel shows other processes' cgroups relative to the reader's: ``/../../<rest>``.
    Any such view that still includes the pod component names the same container."""
    text, want = case

    def relative(line: str) -> str:
        head, sep, path = line.rpartition(":")
        parts = path.strip("/").split("/")
        pods = [i for i, part in enumerate(parts) if "pod" in part]
        if not pods:
            return line
        keep = parts[data.draw(st.integers(min_value=0, max_value=pods[0]), label="drop") :]
        return f"{head}{sep}/" + "/".join([".."] * ups + keep)

    namespaced = "\n".join(relative(line) for line in text.splitlines()) + "\n"
    assert parse_cgroup(namespaced) == want
