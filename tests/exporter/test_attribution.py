"""attribute(): allocations + process samples + cgroups + pods → per (device, container) rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.exporter.attribution import (
    DeviceId,
    DeviceIdError,
    attribute,
    finished_pods,
    kept_allocations,
    parse_device_id,
    unresolved_allocations,
)
from gpu_eta.exporter.collectors.cgroup import CgroupResolver
from gpu_eta.exporter.readings import (
    Allocation,
    ContainerRef,
    DeviceFailure,
    DeviceReading,
    GpuPoll,
    PodGpuRow,
    PodMeta,
    ProcessSample,
)
from tests.support.kubeapi import make_pod
from tests.support.node_sources import real_node_sources

U0 = "GPU-aaaaaaaa-0000-4000-8000-000000000000"
U1 = "GPU-bbbbbbbb-1111-4000-8000-000000000001"
U2 = "GPU-cccccccc-2222-4000-8000-000000000002"
MIG1 = "MIG-11111111-aaaa-5000-8000-000000000001"
MIG2 = "MIG-22222222-bbbb-5000-8000-000000000002"
GIB = 1 << 30
UID_IDLE = "abcdef01-2345-4678-9abc-def012345678"


def cid(n: int) -> str:
    return f"{n:064x}"


def pod(
    name: str, n: int, ns: str = "ml", start: float = 1000.0, container: str = "main"
) -> PodMeta:
    return PodMeta(
        namespace=ns,
        name=name,
        uid=f"00000000-0000-4000-8000-{n:012d}",
        start_timestamp=start + n,
        container_ids={container: cid(n)},
    )


def ref(n: int) -> ContainerRef:
    return ContainerRef(container_id=cid(n), pod_uid=f"00000000-0000-4000-8000-{n:012d}")


def dev(index: int, uuid: str, util: float = 0.9, mem: int = 10 * GIB, **kw) -> DeviceReading:
    return DeviceReading(index, uuid, "NVIDIA A100-SXM4-80GB", util, mem, 80 * GIB, **kw)


def test_time_sliced_gpu_gives_each_pod_its_own_share() -> None:
    gpu = GpuPoll(
        devices=(dev(0, U0, util=0.9, mem=30 * GIB),),
        processes=(
            ProcessSample(101, U0, None, 10 * GIB, 0.5),
            ProcessSample(102, U0, None, 12 * GIB, 0.3),
            ProcessSample(103, U0, None, 8 * GIB, 0.1),
            ProcessSample(104, U0, None, 1 * GIB, 0.05),  # second process of pod c
        ),
    )
    allocs = [
        Allocation("ml", p, "main", "nvidia.com/gpu", f"{U0}::{i}") for i, p in enumerate("abc")
    ]
    pods = [pod("a", 1), pod("b", 2), pod("c", 3)]
    rows = attribute(gpu, allocs, pods, {101: ref(1), 102: ref(2), 103: ref(3), 104: ref(3)})
    assert [(r.pod, r.utilization_ratio, r.memory_used_bytes, r.allocated) for r in rows] == [
        ("a", 0.5, 10 * GIB, True),
        ("b", 0.3, 12 * GIB, True),
        ("c", pytest.approx(0.15), 9 * GIB, True),
    ]
    assert {r.uuid for r in rows} == {U0} and {r.index for r in rows} == {0}
    # not a copy of the device value
    assert all(r.utilization_ratio != 0.9 for r in rows)


def test_idle_holder_still_shows_its_owner() -> None:
    gpu = GpuPoll(devices=(dev(3, U1, util=0.0, mem=0),))
    rows = attribute(
        gpu,
        [Allocation("hub", "jupyter-ann", "notebook", "nvidia.com/gpu", "3")],
        [pod("jupyter-ann", 7, ns="hub", container="notebook")],
        {},
    )
    assert rows == (PodGpuRow(3, U1, None, "hub", "jupyter-ann", "notebook", True, 0.0, 0, 1007.0),)


def test_mig_instances_resolve_by_mig_uuid_and_legacy_form() -> None:
    gpu = GpuPoll(
        devices=(
            # instance 1 idle (no process, no work), instance 2 runs pod b
            dev(0, U0, util=0.0, gpu_instance_id=1, mig_uuids=(MIG1,), mig_profile="1g.10gb"),
            dev(0, U0, util=0.2, gpu_instance_id=2, mig_uuids=(MIG2,), mig_profile="1g.10gb"),
            dev(1, U1),
        ),
        processes=(ProcessSample(201, U0, 2, 3 * GIB, 0.2),),
    )
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/mig-1g.10gb", MIG1),
        Allocation("ml", "b", "main", "nvidia.com/mig-1g.10gb", f"MIG-{U0}/2/0"),
    ]
    rows = attribute(gpu, allocs, [pod("a", 1), pod("b", 2)], {201: ref(2)})
    assert [
        (r.pod, r.gpu_instance_id, r.uuid, r.utilization_ratio, r.memory_used_bytes) for r in rows
    ] == [
        ("a", 1, U0, 0.0, 0),
        ("b", 2, U0, 0.2, 3 * GIB),
    ]


def test_process_without_allocation_appears_unallocated_and_unknown_processes_drop() -> None:
    gpu = GpuPoll(
        devices=(dev(0, U0), dev(1, U1)),
        processes=(
            ProcessSample(301, U1, None, 2 * GIB, 0.7),  # pod d, no device plugin
            ProcessSample(302, U1, None, 5 * GIB, 0.2),  # host process: no container
            ProcessSample(303, U1, None, 5 * GIB, 0.2),  # container of no known pod
        ),
    )
    stranger = ContainerRef(container_id=cid(99), pod_uid="ffffffff-0000-4000-8000-000000000000")
    rows = attribute(gpu, [], [pod("d", 4)], {301: ref(4), 303: stranger})
    assert rows == (PodGpuRow(1, U1, None, "ml", "d", "main", False, 0.7, 2 * GIB, 1004.0),)


def test_utilisation_is_clamped_and_missing_samples_stay_unknown() -> None:
    gpu = GpuPoll(
        devices=(dev(0, U0), dev(1, U1)),
        processes=(
            ProcessSample(1, U0, None, None, 0.8),
            ProcessSample(2, U0, None, None, 0.7),
            ProcessSample(3, U1, None, 4, None),
            ProcessSample(4, U1, None, None, float("nan")),
        ),
    )
    # both GPUs shared (d and c run nothing): a sample missing is not the device's
    # figure (a sole holder's would be: test_a_sole_holders_unknown_process_samples_…)
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/gpu.shared", f"{U0}::0"),
        Allocation("ml", "d", "main", "nvidia.com/gpu.shared", f"{U0}::1"),
        Allocation("ml", "c", "main", "nvidia.com/gpu.shared", f"{U1}::0"),
    ]
    pods = [pod("a", 1), pod("b", 2), pod("c", 3), pod("d", 4)]
    rows = attribute(gpu, allocs, pods, {1: ref(1), 2: ref(1), 3: ref(2), 4: ref(2)})
    assert [(r.pod, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("a", 1.0, None),
        ("d", 0.0, 0),
        ("b", None, None),
        ("c", 0.0, 0),
    ]


def test_a_container_with_one_process_unmeasured_has_no_partial_sum() -> None:
    """An MPS client without a sample of its own (NVML may credit its work to the MPS
    server: ``GpuSource._processes``) beside a process sampled at 0.1: the container's
    use is at least 0.1 but unknown, not 0.1 (which would read a busy sharer idle). A
    sole holder still gets the device's reading for what is unknown."""
    gpu = GpuPoll(
        devices=(dev(0, U0, util=0.9, mem=6 * GIB), dev(1, U1, util=0.8, mem=6 * GIB)),
        processes=(
            ProcessSample(1, U0, None, 1 * GIB, 0.1),
            ProcessSample(2, U0, None, None, None),
            ProcessSample(3, U1, None, 1 * GIB, 0.1),
            ProcessSample(4, U1, None, 2 * GIB, None),
        ),
    )
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/gpu.shared", f"{U0}::0"),
        Allocation("ml", "b", "main", "nvidia.com/gpu.shared", f"{U0}::1"),
        Allocation("ml", "c", "main", "nvidia.com/gpu", U1),
    ]
    pods = [pod("a", 1), pod("b", 2), pod("c", 3)]
    rows = attribute(gpu, allocs, pods, {1: ref(1), 2: ref(1), 3: ref(3), 4: ref(3)})
    assert [(r.pod, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("a", None, None),
        ("b", 0.0, 0),  # every process on the device is a's: b runs nothing
        ("c", 0.8, 3 * GIB),
    ]


def test_container_found_by_pod_uid_when_status_lags() -> None:
    gpu = GpuPoll(devices=(dev(0, U0),), processes=(ProcessSample(5, U0, None, GIB, 0.5),))
    lagging = PodMeta("ml", "new", "00000000-0000-4000-8000-000000000009", start_timestamp=5.0)
    allocs = [Allocation("ml", "new", "trainer", "nvidia.com/gpu", "0")]
    rows = attribute(gpu, allocs, [lagging], {5: ContainerRef(cid(42), lagging.uid, "containerd")})
    assert rows == (PodGpuRow(0, U0, None, "ml", "new", "trainer", True, 0.5, GIB, 5.0),)


def test_unresolvable_allocations_are_left_out_and_reported() -> None:
    gpu = GpuPoll(devices=(dev(0, U0),), failures=(DeviceFailure(2, U2, "gpu_lost"),))
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/gpu", U1),  # not on this node
        Allocation("ml", "b", "main", "nvidia.com/gpu", "not a device"),
        Allocation("ml", "c", "main", "nvidia.com/gpu", U2),  # failing device: still owned
        Allocation("ml", "e", "main", "nvidia.com/gpu", "7"),
    ]
    rows = attribute(gpu, allocs, [], {})
    assert [(r.pod, r.index, r.uuid, r.allocated) for r in rows] == [("c", 2, U2, True)]
    reasons = {a.pod: why for a, why in unresolved_allocations(gpu, allocs)}
    assert set(reasons) == {"a", "b", "e"}
    assert "unrecognised" in reasons["b"] and "no device" in reasons["a"]


def test_replicas_of_one_gpu_held_by_one_container_give_one_row() -> None:
    gpu = GpuPoll(devices=(dev(0, U0),))
    allocs = [Allocation("ml", "a", "main", "nvidia.com/gpu", f"{U0}::{i}") for i in range(4)]
    assert len(attribute(gpu, allocs, [pod("a", 1)], {})) == 1


def test_each_id_form_resolves_to_its_device() -> None:
    d0, d1 = dev(0, U0), dev(1, U1, gpu_instance_id=3, mig_uuids=(MIG1,))
    gpu = GpuPoll(devices=(d0, d1))
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/gpu", U0 + "::2"),
        Allocation("ml", "b", "main", "nvidia.com/gpu", "0"),
        Allocation("ml", "c", "main", "nvidia.com/mig-1g.10gb", MIG1.upper()),  # any case
    ]
    rows = attribute(gpu, allocs, [], {})
    assert [(r.pod, r.index, r.gpu_instance_id) for r in rows] == [
        ("a", 0, None),
        ("b", 0, None),
        ("c", 1, 3),
    ]
    assert unresolved_allocations(gpu, allocs) == ()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (U0, DeviceId("gpu", uuid=U0)),
        (f"{U0}::5", DeviceId("gpu", uuid=U0, replica=5)),
        ("3", DeviceId("index", index=3)),
        ("3::1", DeviceId("index", index=3, replica=1)),
        (MIG1, DeviceId("mig", mig_uuid=MIG1)),
        (f"{MIG1}::0", DeviceId("mig", mig_uuid=MIG1, replica=0)),
        (f"MIG-{U0}/7/0", DeviceId("mig", uuid=U0, gpu_instance_id=7)),
        ("1:0", DeviceId("mig", index=1, mig_index=0)),
        ("12:6::3", DeviceId("mig", index=12, mig_index=6, replica=3)),
    ],
)
def test_parse_device_id_forms(text: str, want: DeviceId) -> None:
    assert parse_device_id(text) == want


@pytest.mark.parametrize(
    "text",
    [
        *("", "GPU-", "gpu0", "-1", "3::", "::1", "MIG-", "x" * 400, "GPU-a b", "3\n", "\u0663"),
        *("1:", ":1", "1:2:3", "1:-1", "a:1", "1:0\n", "nvidia0/gi1", "nvidia0"),
    ],
)
def test_parse_device_id_rejects(text: str) -> None:
    with pytest.raises(DeviceIdError):
        parse_device_id(text)


@given(st.text(max_size=300))
@settings(max_examples=500, deadline=None)
def test_parse_device_id_raises_only_device_id_error(text: str) -> None:
    try:
        got = parse_device_id(text)
    except DeviceIdError as err:
        assert str(err)
    else:
        assert got.kind in {"gpu", "index", "mig"}
        assert text.isascii() and "\n" not in text


@given(
    st.sampled_from(["GPU", "MIG", "index"]),
    st.uuids().map(str),
    st.integers(0, 9999),
    st.none() | st.integers(0, 999_999),
)
@settings(max_examples=300, deadline=None)
def test_generated_device_ids_round_trip(
    kind: str, uuid: str, index: int, replica: int | None
) -> None:
    body = str(index) if kind == "index" else f"{kind}-{uuid}"
    text = body if replica is None else f"{body}::{replica}"
    got = parse_device_id(text)
    assert got.replica == replica
    if kind == "GPU":
        assert got == DeviceId("gpu", uuid=body, replica=replica)
    elif kind == "MIG":
        assert got == DeviceId("mig", mig_uuid=body, replica=replica)
    else:
        assert got == DeviceId("index", index=index, replica=replica)


# --- the whole chain with real parts: gRPC pod-resources, list/watch API, /proc files ---


def test_chain_time_sliced_gpu_and_idle_holder_from_real_sources() -> None:
    proc = Path(__file__).resolve().parents[1] / "fixtures" / "proc"
    expected = json.loads((proc / "expected.json").read_text())
    runtimes = {"containerd": "containerd://", "cri-o": "cri-o://", "docker": "docker://"}
    pods = [
        make_pod(
            name,
            "ml",
            uid=expected[pid]["expect"]["pod_uid"],
            node="gpu-node",
            containers={
                "main": runtimes[expected[pid]["expect"]["runtime"]]
                + expected[pid]["expect"]["container_id"]
            },
        )
        for name, pid in zip("abc", ("1001", "1002", "1003"), strict=True)
    ]
    pods.append(make_pod("idle", "hub", uid=UID_IDLE, node="gpu-node", containers={"notebook": ""}))
    allocations = {
        ("ml", "a"): {"main": [("nvidia.com/gpu.shared", [f"{U0}::0"])]},
        ("ml", "b"): {"main": [("nvidia.com/gpu.shared", [f"{U0}::1"])]},
        ("ml", "c"): {"main": [("nvidia.com/gpu.shared", [f"{U0}::2"])]},
        ("hub", "idle"): {"notebook": [("nvidia.com/gpu", ["1"])]},
    }
    gpu = GpuPoll(
        devices=(dev(0, U0, util=0.75, mem=30 * GIB), dev(1, U1, util=0.0, mem=0)),
        processes=(
            ProcessSample(1001, U0, None, 10 * GIB, 0.4),
            ProcessSample(1002, U0, None, 12 * GIB, 0.25),
            ProcessSample(1003, U0, None, 8 * GIB, 0.1),
            ProcessSample(1009, U0, None, 1 * GIB, 0.05),  # host process: dropped
        ),
    )
    with real_node_sources(allocations, pods, "gpu-node") as node:
        containers = CgroupResolver(str(proc)).resolve(p.pid for p in gpu.processes)
        rows = attribute(gpu, node.allocations.poll(), node.pods.poll(), containers)
    assert [
        (
            r.index,
            r.namespace,
            r.pod,
            r.container,
            r.allocated,
            r.utilization_ratio,
            r.memory_used_bytes,
        )
        for r in rows
    ] == [
        (0, "ml", "a", "main", True, 0.4, 10 * GIB),
        (0, "ml", "b", "main", True, 0.25, 12 * GIB),
        (0, "ml", "c", "main", True, 0.1, 8 * GIB),
        (1, "hub", "idle", "notebook", True, 0.0, 0),
    ]
    assert rows[0].allocated_since_timestamp == 1795237200.0  # 2026-11-21T05:00:00Z


def test_mig_index_form_resolves_by_nvml_slot() -> None:
    """``<gpu index>:<mig index>`` (device plugin, ``--device-id-strategy=index``): the
    MIG index is the NVML slot the device answers in (go-nvlib's ``VisitMigDevices``
    passes it on, empty slots skipped but counted), not its position among the GPU's
    MIG devices nor its GPU instance id."""
    whole = dev(0, U0)
    first = dev(1, U1, gpu_instance_id=5, mig_uuids=(MIG1,), mig_slots=(0,))
    second = dev(1, U1, gpu_instance_id=1, mig_uuids=(MIG2,), mig_slots=(4,))  # slots 1-3 empty
    gpu = GpuPoll(devices=(whole, first, second))
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/mig-3g.40gb", "1:0"),
        Allocation("ml", "b", "main", "nvidia.com/mig-1g.10gb", "1:4::2"),
        Allocation("ml", "c", "main", "nvidia.com/mig-1g.10gb", "1:1"),  # an empty slot
        Allocation("ml", "d", "main", "nvidia.com/mig-1g.10gb", "0:0"),  # GPU 0: no MIG
        Allocation("ml", "e", "main", "nvidia.com/gpu", "1"),  # GPU 1 is split: no whole
    ]
    rows = attribute(gpu, allocs, [], {})
    assert [(r.pod, r.index, r.uuid, r.gpu_instance_id) for r in rows] == [
        ("b", 1, U1, 1),
        ("a", 1, U1, 5),
    ]
    assert {a.pod for a, _ in unresolved_allocations(gpu, allocs)} == {"c", "d", "e"}


# -- process data missing: unknown is not idle (REVIEW2 item 1) ------------------------


def _holders_of_two_gpus(util0: float = 0.8) -> tuple[GpuPoll, list[Allocation], list[PodMeta]]:
    """GPU 0 held by pod a alone; GPU 1 time-sliced between b and c."""
    gpu = GpuPoll(devices=(dev(0, U0, util=util0, mem=9 * GIB), dev(1, U1, util=0.6, mem=7 * GIB)))
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/gpu", U0),
        Allocation("ml", "b", "main", "nvidia.com/gpu.shared", f"{U1}::0"),
        Allocation("ml", "c", "main", "nvidia.com/gpu.shared", f"{U1}::1"),
    ]
    return gpu, allocs, [pod("a", 1), pod("b", 2), pod("c", 3)]


def _use(rows: tuple[PodGpuRow, ...]) -> list[tuple[str, float | None, int | None]]:
    return [(r.pod, r.utilization_ratio, r.memory_used_bytes) for r in rows]


def test_no_process_data_sole_holder_gets_the_device_and_sharers_get_nothing() -> None:
    gpu, allocs, pods = _holders_of_two_gpus()
    rows = attribute(gpu, allocs, pods, None)
    assert _use(rows) == [("a", 0.8, 9 * GIB), ("b", None, None), ("c", None, None)]
    assert all(r.allocated for r in rows)  # who holds what is still known


def test_complete_process_data_without_a_process_is_a_genuine_zero() -> None:
    gpu, allocs, pods = _holders_of_two_gpus(util0=0.0)
    rows = attribute(gpu, allocs, pods, {})
    # GPU 0 is idle and lists no process: a holds it and runs nothing. GPU 1 reports
    # work but NVML lists no process on it (hidden by the pid namespace): unknown.
    assert _use(rows) == [("a", 0.0, 0), ("b", None, None), ("c", None, None)]


def test_no_process_data_a_shared_device_at_zero_makes_every_sharer_idle() -> None:
    # GPU 1 at exactly 0 %: whatever the split, b's and c's shares are 0 (the idle
    # alert and dashboards need a series); its memory is in use, split unknown.
    gpu, allocs, pods = _holders_of_two_gpus()
    gpu = GpuPoll(devices=(gpu.devices[0], dev(1, U1, util=0.0, mem=7 * GIB)))
    rows = attribute(gpu, allocs, pods, None)
    assert _use(rows) == [("a", 0.8, 9 * GIB), ("b", 0.0, None), ("c", 0.0, None)]
    # nothing in use at all: memory is 0 too
    gpu = GpuPoll(devices=(gpu.devices[0], dev(1, U1, util=0.0, mem=0)))
    assert _use(attribute(gpu, allocs, pods, None))[1:] == [("b", 0.0, 0), ("c", 0.0, 0)]


@pytest.mark.parametrize("util", [None, 0.0])
def test_no_process_data_shared_mig_instance_stays_unknown(util: float | None) -> None:
    """NVML measures no MIG instance's utilisation: a 0 there (a driver's stand-in for
    "not supported") says nothing of its sharers."""
    mig = dev(1, U1, util=util, mem=0, gpu_instance_id=7, mig_uuids=(MIG1,))
    allocs = [
        Allocation("ml", "b", "main", "nvidia.com/mig-1g.10gb", MIG1),
        Allocation("ml", "c", "main", "nvidia.com/mig-1g.10gb", MIG1),
    ]
    rows = attribute(GpuPoll(devices=(mig,)), allocs, [pod("b", 2), pod("c", 3)], None)
    assert _use(rows) == [("b", None, None), ("c", None, None)]


def test_busy_device_with_no_listed_process_is_the_sole_holders_use() -> None:
    gpu, allocs, pods = _holders_of_two_gpus(util0=0.8)
    rows = attribute(gpu, allocs, pods, {})  # resolver ran, NVML listed nothing
    assert _use(rows)[0] == ("a", 0.8, 9 * GIB)


def test_a_pid_no_cgroup_names_makes_the_idle_sharers_unknown() -> None:
    gpu, allocs, pods = _holders_of_two_gpus()
    gpu = GpuPoll(
        devices=gpu.devices,
        processes=(
            ProcessSample(21, U1, None, 3 * GIB, 0.4),  # pod b
            ProcessSample(22, U1, None, 2 * GIB, 0.25),  # not resolved: maybe c's
            ProcessSample(11, U0, None, 9 * GIB, 0.8),  # pod a
        ),
    )
    rows = attribute(gpu, allocs, pods, {21: ref(2), 11: ref(1)})
    assert _use(rows) == [("a", 0.8, 9 * GIB), ("b", 0.4, 3 * GIB), ("c", None, None)]
    # the same with every pid resolved: c genuinely runs nothing on GPU 1
    rows = attribute(gpu, allocs, pods, {21: ref(2), 22: ref(2), 11: ref(1)})
    assert _use(rows) == [("a", 0.8, 9 * GIB), ("b", 0.65, 5 * GIB), ("c", 0.0, 0)]


@pytest.mark.parametrize(
    "sample",
    [
        ProcessSample(11, U0, None, 9 * GIB, None),  # NOT_SUPPORTED, or a garbage sample
        ProcessSample(11, U0, None, None, 0.5),  # memory not available
    ],
)
def test_a_sole_holders_unknown_process_samples_are_the_devices(sample: ProcessSample) -> None:
    """The only holder of a whole GPU, every process on it placed in its container:
    what its samples leave unknown is the device's reading (its use IS the device's),
    as when its process is not found at all; a sharer's stays unknown."""
    gpu, allocs, pods = _holders_of_two_gpus()
    shared = ProcessSample(21, U1, None, None, None)  # pod b's, on the time-sliced GPU
    gpu = GpuPoll(devices=gpu.devices, processes=(sample, shared))
    rows = attribute(gpu, allocs, pods, {11: ref(1), 21: ref(2)})
    sole_util = 0.8 if sample.utilization_ratio is None else sample.utilization_ratio
    sole_mem = 9 * GIB
    # b shares GPU 1 with c (who runs nothing there: every process is placed)
    assert _use(rows) == [("a", sole_util, sole_mem), ("b", None, None), ("c", 0.0, 0)]
    # no process data at all: the same figures for a (and none for b, c)
    assert _use(attribute(gpu, allocs, pods, None))[0] == ("a", 0.8, 9 * GIB)


def test_a_sole_holder_beside_an_unplaced_process_keeps_its_unknowns() -> None:
    """A process on the device no cgroup names may be anyone's: the device's reading is
    not the holder's alone."""
    gpu, allocs, pods = _holders_of_two_gpus()
    procs = (ProcessSample(11, U0, None, None, None), ProcessSample(12, U0, None, GIB, 0.1))
    rows = attribute(GpuPoll(devices=gpu.devices, processes=procs), allocs, pods, {11: ref(1)})
    assert _use(rows)[0] == ("a", None, None)


def test_a_sole_mig_holders_unknown_utilisation_stays_unknown() -> None:
    """NVML measures no MIG instance's utilisation (a 0 there is a driver's stand-in):
    only the instance's memory stands in for the holder's unknown memory."""
    mig = dev(1, U1, util=0.0, mem=3 * GIB, gpu_instance_id=7, mig_uuids=(MIG1,))
    allocs = [Allocation("ml", "b", "main", "nvidia.com/mig-1g.10gb", MIG1)]
    gpu = GpuPoll(devices=(mig,), processes=(ProcessSample(21, U1, 7, None, None),))
    rows = attribute(gpu, allocs, [pod("b", 2)], {21: ref(2)})
    assert _use(rows) == [("b", None, 3 * GIB)]


def test_failing_device_gives_its_holder_no_use_at_all() -> None:
    gpu = GpuPoll(devices=(), failures=(DeviceFailure(0, U0, "gpu_lost"),))
    rows = attribute(gpu, [Allocation("ml", "a", "main", "nvidia.com/gpu", U0)], [pod("a", 1)], {})
    assert _use(rows) == [("a", None, None)]
    assert rows[0].allocated


# -- finished pods the kubelet still lists ---------------------------------------------


def _finished_and_new_holder() -> tuple[GpuPoll, list[Allocation], list[PodMeta]]:
    """A Succeeded Job pod still in pod-resources List (kubernetes#119423) next to the
    running pod its GPU went to."""
    gpu = GpuPoll(devices=(dev(0, U0, util=0.9, mem=30 * GIB),))
    allocs = [
        Allocation("ml", "old-job", "main", "nvidia.com/gpu", U0),
        Allocation("ml", "new-train", "main", "nvidia.com/gpu", U0),
    ]
    old = PodMeta("ml", "old-job", "00000000-0000-4000-8000-000000000009", phase="Succeeded")
    return gpu, allocs, [old, pod("new-train", 1)]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_listed_by_the_kubelet_hold_no_device(phase: str) -> None:
    gpu, allocs, pods = _finished_and_new_holder()
    pods[0] = PodMeta("ml", "old-job", pods[0].uid, phase=phase)
    # no process data (the default manifests): the running pod is the sole holder
    assert _use(attribute(gpu, allocs, pods, None)) == [("new-train", 0.9, 30 * GIB)]
    assert unresolved_allocations(GpuPoll(devices=()), allocs, finished_pods(pods)) == (
        (allocs[1], f"device id {U0!r} matches no device on this node"),
    )


def test_finished_pods_a_full_cache_let_go_hold_no_device() -> None:
    """``finished_pods``' ``outside`` names finished pods a capped pod cache does not
    hold: their allocations are dropped as those of finished pods it holds; a pod the
    list holds (by uid) or a live pod of the same name is judged by the list."""
    gpu, allocs, pods = _finished_and_new_holder()
    old, new = pods
    outside = [(old.namespace, old.name, old.uid)]

    def rows(listed: list[PodMeta]) -> tuple:
        return attribute(gpu, allocs, listed, None, finished_pods(listed, outside))

    assert _use(rows([new])) == [("new-train", 0.9, 30 * GIB)]
    finished = finished_pods([new], outside)
    assert unresolved_allocations(GpuPoll(devices=()), allocs, finished) == (
        (allocs[1], f"device id {U0!r} matches no device on this node"),
    )
    reused = PodMeta("ml", "old-job", "00000000-0000-4000-8000-000000000010")
    assert [r.pod for r in rows([new, reused])] == [
        "new-train",
        "old-job",
    ]
    running = PodMeta("ml", "old-job", old.uid)  # the list holds it, running
    assert [r.pod for r in rows([new, running])] == [
        "new-train",
        "old-job",
    ]


def test_allocations_of_pods_not_known_finished_still_count() -> None:
    gpu, allocs, pods = _finished_and_new_holder()
    # the pod list is unknown: nobody is known to be finished
    assert _use(attribute(gpu, allocs, [], None)) == [
        ("new-train", None, None),
        ("old-job", None, None),
    ]
    # a live pod with the finished pod's name (the old object lingers): may be its
    reused = PodMeta("ml", "old-job", "00000000-0000-4000-8000-000000000010")
    rows = attribute(gpu, allocs, [*pods, reused], None)
    assert [r.pod for r in rows] == ["new-train", "old-job"]


# --- allocations kept from an earlier kubelet read (pod-resources failing) -------------

READ_AT = 5000.0  # the last good pod-resources read
GRACE = 30.0


def _kept_holders() -> tuple[list[Allocation], list[PodMeta]]:
    """Three pods the last good read named: ``live`` (started before it, still listed),
    ``gone`` (no longer listed) and ``again`` (listed, but started after the read: a
    pod re-created under the name, whose devices the read cannot know)."""
    allocs = [
        Allocation("ml", "live", "main", "nvidia.com/gpu", U0),
        Allocation("ml", "gone", "main", "nvidia.com/gpu", U1),
        Allocation("ml", "again", "main", "nvidia.com/gpu", U2),
    ]
    pods = [pod("live", 1, start=READ_AT - 100), pod("again", 3, start=READ_AT + 10)]
    return allocs, pods


@pytest.mark.parametrize(
    ("listed_after_read", "kept", "unconfirmed"),
    [
        (GRACE, ["live"], set()),
        (GRACE + 600, ["live"], set()),
        # the pod list may not show a pod the kubelet had just admitted yet
        (GRACE - 1, ["live", "gone", "again"], {("ml", "gone"), ("ml", "again")}),
        (-60.0, ["live", "gone", "again"], {("ml", "gone"), ("ml", "again")}),
    ],
)
def test_kept_allocations_of_pods_the_pod_list_no_longer_has_are_dropped_after_a_grace(
    listed_after_read: float, kept: list[str], unconfirmed: set[tuple[str, str]]
) -> None:
    """While pod-resources fails its last good allocations are kept; a pod deleted
    since kept its row, and with no process was its GPU's idle holder (0 %:
    GpuEtaGpuAllocatedIdle, ETAs for a pod that no longer exists). A pod the list,
    complete ``GRACE`` seconds after the read, does not hold (or holds started
    after the read: another object of that name) is dropped; within the grace it is
    kept, its use unknown."""
    allocs, pods = _kept_holders()
    got, doubt = kept_allocations(
        allocs,
        pods,
        read_timestamp=READ_AT,
        listed_timestamp=READ_AT + listed_after_read,
        grace_seconds=GRACE,
    )
    assert [a.pod for a in got] == kept
    assert doubt == unconfirmed


def test_kept_allocations_without_a_current_pod_list_are_all_kept_unconfirmed() -> None:
    """No pod list to check against (none read, or a watch stale for minutes): every
    kept allocation stays, none of them confirmed."""
    allocs, pods = _kept_holders()
    got, doubt = kept_allocations(
        allocs, pods, read_timestamp=READ_AT, listed_timestamp=None, grace_seconds=GRACE
    )
    assert got == tuple(allocs)
    assert doubt == {("ml", "live"), ("ml", "gone"), ("ml", "again")}


def test_a_pod_without_a_start_time_is_not_confirmed() -> None:
    """The list names the pod, but not when the kubelet started it: it may be a pod
    re-created under the name that the kubelet has not started yet; kept, unconfirmed."""
    allocs = [Allocation("ml", "p", "main", "nvidia.com/gpu", U0)]
    pending = PodMeta("ml", "p", "u-p", start_timestamp=None)
    got, doubt = kept_allocations(
        allocs,
        [pending],
        read_timestamp=READ_AT,
        listed_timestamp=READ_AT + 600,
        grace_seconds=GRACE,
    )
    assert got == tuple(allocs) and doubt == {("ml", "p")}


def test_an_unconfirmed_holder_without_a_process_has_unknown_use_not_idle() -> None:
    """A kept allocation the pod list cannot confirm may belong to a pod gone since:
    without a process of its own its use is unknown (no series), never 0 (an idle
    holder) nor, as the only holder, the device's reading (someone allocated the GPU
    since the read may be using it). It still counts as a holder; its own processes
    still give its figures."""
    gpu = GpuPoll(
        devices=(dev(0, U0, util=0.0, mem=0), dev(1, U1, util=0.6, mem=8 * GIB)),
        processes=(ProcessSample(11, U1, None, 8 * GIB, 0.6),),
    )
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/gpu", U0),
        Allocation("ml", "b", "main", "nvidia.com/gpu", U1),
    ]
    pods = [pod("a", 1), pod("b", 2)]
    doubt = {("ml", "a"), ("ml", "b")}
    # complete process data: "a" is an idle holder, "b" has its process' figures
    assert _use(attribute(gpu, allocs, pods, {11: ref(2)})) == [
        ("a", 0.0, 0),
        ("b", 0.6, 8 * GIB),
    ]
    rows = attribute(gpu, allocs, pods, {11: ref(2)}, unconfirmed=doubt)
    assert [(r.pod, r.allocated, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("a", True, None, None),
        ("b", True, 0.6, 8 * GIB),
    ]
    # no process data: each is its GPU's only holder, given the device's reading
    assert _use(attribute(gpu, allocs, pods, None)) == [("a", 0.0, 0), ("b", 0.6, 8 * GIB)]
    assert _use(attribute(gpu, allocs, pods, None, unconfirmed=doubt)) == [
        ("a", None, None),
        ("b", None, None),
    ]
    # a holder beside an unconfirmed one is not the GPU's only holder
    shared = [*allocs, Allocation("ml", "c", "main", "nvidia.com/gpu.shared", f"{U1}::1")]
    rows = attribute(gpu, shared, [*pods, pod("c", 3)], None, unconfirmed={("ml", "b")})
    assert _use(rows) == [("a", 0.0, 0), ("b", None, None), ("c", None, None)]
