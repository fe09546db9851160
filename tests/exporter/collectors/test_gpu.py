"""NVML backend against a fake ``pynvml`` module (no GPU on this machine).

The fake keeps pynvml's function names and signatures, returns pynvml's own ctypes
structs (``c_nvmlMemory_t``, ``c_nvmlUtilization_t``,
``c_nvmlProcessUtilizationSample_t``, friendly objects from
``c_nvmlProcessInfo_v2_t``) and raises pynvml's own error classes with the codes
the library uses, so the backend sees what it would see on a real node. Symbols a
driver's library lacks (``missing``) fail as pynvml fails them, its unversioned
wrappers included. ``process_record_bytes=32`` is an R525–R535-era driver whose
``_v3`` process lists write 32-byte records, read by pynvml as 24-byte ones. A MIG
device handle (a ``Dev`` in a GPU's ``migs``) answers NOT_SUPPORTED to the utilisation
calls, as real NVML does: its ``util`` and ``samples`` are never read. Tests
use the real ``pynvml`` too: without a driver, ``open()`` must say so in one line,
and its own process-list wrappers read what the fake's do.
"""

from __future__ import annotations

import ctypes
import struct
import threading
import types
from collections import Counter
from dataclasses import dataclass, field

import pynvml as real
import pytest

from gpu_eta.exporter.attribution import attribute, unresolved_allocations
from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors.gpu import (
    NO_NVML_MESSAGE,
    NvmlGpuSource,
    NvmlUnavailable,
)
from gpu_eta.exporter.exposition import SnapshotExposition
from gpu_eta.exporter.readings import Allocation, ContainerRef, PodMeta
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder

GIB = 2**30


@dataclass
class Dev:
    """A device (or MIG instance) inside the fake driver."""

    uuid: str
    name: bytes | str
    index: int = 0
    util: int = 0  # nvmlDeviceGetUtilizationRates().gpu; never answered for a MIG instance
    used: int = 0  # allocated: what nvmlMemory_v2_t.used reports
    # set aside by the driver and firmware: nvmlMemory_v2_t.reserved, and counted in
    # nvmlMemory_t.used (v1) — never 0 on a real GPU
    reserved: int = 300 * 2**20
    total: int = 16 * GIB
    mig_mode: int | None = None  # None: MIG not supported on this GPU
    # nvmlDeviceGetComputeMode: DEFAULT unless set (nvidia-smi -c); the device plugin's
    # MPS control daemon sets EXCLUSIVE_PROCESS on the GPUs it shares
    compute_mode: int = real.NVML_COMPUTEMODE_DEFAULT
    migs: dict[int, Dev] = field(default_factory=dict)  # slot -> instance
    mig_slot_errors: dict[int, int] = field(default_factory=dict)  # slot -> NVML error code
    gpu_instance_id: int = 0
    procs: list[tuple[int, int | None, int]] = field(default_factory=list)  # pid, mem, giid
    # MPS clients: NVML lists them apart (nvmlDeviceGetMPSComputeRunningProcesses),
    # the compute list holding the MPS server instead; graphics processes too
    mps_procs: list[tuple[int, int | None, int]] = field(default_factory=list)
    graphics_procs: list[tuple[int, int | None, int]] = field(default_factory=list)
    # what the driver answers nvmlDeviceGetProcessUtilization, entries as they come:
    # pid, timestamp µs, sm %[, mem %] (mem 0 unless given)
    samples: list[tuple[int, ...]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code


# NVML's process lists (unversioned pynvml name) -> the Dev field listing their processes
PROCESS_LISTS = {
    "nvmlDeviceGetComputeRunningProcesses": "procs",
    "nvmlDeviceGetMPSComputeRunningProcesses": "mps_procs",
    "nvmlDeviceGetGraphicsRunningProcesses": "graphics_procs",
}


# The C layouts of one process record: nvmlProcessInfo_v2_t (pid, usedGpuMemory,
# gpuInstanceId, computeInstanceId: 24 bytes) and the v3 record R525–R535 drivers
# write from ``_v3`` (the same and usedGpuCcProtectedMemory: 32 bytes)
RECORD_V2 = struct.Struct("<IxxxxQII")
RECORD_V3_WIDE = struct.Struct("<IxxxxQIIQ")
# what such a driver's library (535.54.03) lacks of the calls nvitop tells it by: it has
# nvmlDeviceGetConfComputeMemSizeInfo, and not nvmlDeviceGetRunningProcessDetailList
WIDE_V3_MISSING = ("nvmlDeviceGetRunningProcessDetailList",)


def records_as_pynvml_reads_them(raw: bytes, count: int) -> list:
    """What pynvml's process-list wrappers make of the bytes the driver wrote: an array
    of ``c_nvmlProcessInfo_v2_t`` (pynvml.py ~4162-4372; its v3 struct is the v2 one),
    ``count`` records read, NOT_AVAILABLE memory as None."""
    array = (real.c_nvmlProcessInfo_v2_t * (count * 2 + 5))()
    ctypes.memmove(array, raw, len(raw))
    out = []
    for record in array[:count]:
        obj = real.nvmlStructToFriendlyObject(record)
        if obj.usedGpuMemory == real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
            obj.usedGpuMemory = None  # what pynvml itself does
        out.append(obj)
    return out


def driver_records(procs: list[tuple[int, int | None, int]], layout: struct.Struct) -> bytes:
    """The bytes a driver writes for ``procs`` (pid, memory or None, GPU instance id)."""
    none = real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    fields = [(pid, none if mem is None else mem, giid, 0) for pid, mem, giid in procs]
    if layout is RECORD_V3_WIDE:
        return b"".join(layout.pack(*f, 0) for f in fields)
    return b"".join(layout.pack(*f) for f in fields)


def fake_nvml(
    devices: list[Dev],
    *,
    init_error: int | None = None,
    missing: tuple[str, ...] = (),
    mig_monitor: bool = True,
    process_record_bytes: int = RECORD_V2.size,
) -> types.ModuleType:
    """A module object shaped like pynvml over ``devices``.

    ``mig_monitor``: whether the caller may read a MIG-enabled GPU's aggregate
    process lists on the GPU's own handle. NVML gives them "only if the caller has
    appropriate privileges" (NVML API reference, nvmlDeviceGetComputeRunningProcesses_v3),
    the MIG monitor nvidia-capability, which uid 0 holds implicitly only with
    CAP_SYS_ADMIN (MIG user guide, "Device Nodes and Capabilities"): the DaemonSet,
    every capability dropped, has not.
    Without it the parent's lists answer NO_PERMISSION; with it they hold the
    parent's ``procs`` and every instance's. A MIG device handle lists its own.

    ``missing`` names C symbols this driver's libnvidia-ml lacks: calling them
    raises FUNCTION_NOT_FOUND, as pynvml's ``_nvmlGetFunctionPointer`` does
    (pynvml.py ~1136) — and its unversioned wrappers turn that into
    ``NVMLLibraryMismatchError`` (``throwOnVersionMismatch``, pynvml.py ~3131). The
    fake's ``_nvmlGetFunctionPointer`` finds every other symbol.

    ``process_record_bytes``: how long a record the driver's ``_v3`` process lists
    write. 32 is an R525–R535-era driver (535.54.03: pynvml PR #48, go-nvml #75),
    whose ``nvmlProcessInfo_v3_t`` has ``usedGpuCcProtectedMemory``: pynvml reads
    its records 24 bytes apart, every one after the first misaligned. ``_v2`` writes
    24-byte records on every driver.
    """
    mod = types.ModuleType("pynvml")
    for name in dir(real):
        if name.startswith(
            ("NVMLError", "NVML_", "NVMLLibraryMismatchError", "nvmlMemory_v", "c_nvmlProcessInfo")
        ):
            setattr(mod, name, getattr(real, name))
    mod.calls = []  # type: ignore[attr-defined]

    def _nvmlGetFunctionPointer(name: str) -> str:
        """pynvml's symbol lookup (pynvml.py ~1121): FUNCTION_NOT_FOUND for a symbol
        the library lacks."""
        if name in missing:
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        return name

    mod._nvmlGetFunctionPointer = _nvmlGetFunctionPointer  # type: ignore[attr-defined]

    def check(fn: str, dev: Dev | None = None) -> None:
        mod.calls.append(fn)
        if fn in missing:
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        if dev is not None and fn in dev.errors:
            raise real.NVMLError(dev.errors[fn])

    def nvmlInit() -> None:
        check("nvmlInit")
        if init_error is not None:
            raise real.NVMLError(init_error)

    def nvmlShutdown() -> None:
        check("nvmlShutdown")

    def nvmlDeviceGetCount() -> int:
        check("nvmlDeviceGetCount")
        return len(devices)

    def nvmlSystemGetDriverVersion() -> str:
        return "550.54.15"

    def nvmlDeviceGetHandleByIndex(index: int) -> Dev:
        dev = devices[index]
        check("nvmlDeviceGetHandleByIndex", dev)
        return dev

    def nvmlDeviceGetUUID(dev: Dev) -> str:
        check("nvmlDeviceGetUUID", dev)
        return dev.uuid

    def nvmlDeviceGetName(dev: Dev) -> bytes | str:
        check("nvmlDeviceGetName", dev)
        return dev.name

    def nvmlDeviceGetIndex(dev: Dev) -> int:
        check("nvmlDeviceGetIndex", dev)
        return dev.index

    def is_mig_device(dev: Dev) -> bool:
        """Whether ``dev`` is a MIG device handle: an instance in a GPU's ``migs``."""
        return any(dev is mig for parent in devices for mig in parent.migs.values())

    def nvmlDeviceGetUtilizationRates(dev: Dev) -> real.c_nvmlUtilization_t:
        check("nvmlDeviceGetUtilizationRates", dev)
        if dev.mig_mode == real.NVML_DEVICE_MIG_ENABLE or is_mig_device(dev):
            # NVML API doc, nvmlDeviceGetUtilizationRates: "On MIG-enabled GPUs,
            # querying device utilization rates is not currently supported." Neither
            # on the GPU's handle nor on a MIG device handle (nvitop#5,
            # dask/distributed#8693): an instance's ``util`` is never answered.
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return real.c_nvmlUtilization_t(gpu=dev.util, memory=0)

    def nvmlDeviceGetMemoryInfo(dev: Dev, version=None):
        """pynvml.py ~3993: no ``version`` reads ``nvmlMemory_t`` through the v1 symbol,
        whose ``used`` is "Sum of Reserved and Allocated device memory"; a version
        reads ``nvmlMemory_v2_t`` through ``nvmlDeviceGetMemoryInfo_v2``, ``used``
        allocated only and ``reserved`` apart (docs.nvidia.com/deploy/nvml-api,
        structnvmlMemory__t, structnvmlMemory__v2__t). ``Dev.errors`` under the
        unversioned name fails both (a lost GPU)."""
        free = dev.total - dev.reserved - dev.used
        if not version:
            check("nvmlDeviceGetMemoryInfo", dev)
            return real.c_nvmlMemory_t(total=dev.total, free=free, used=dev.reserved + dev.used)
        check("nvmlDeviceGetMemoryInfo_v2", dev)
        if "nvmlDeviceGetMemoryInfo" in dev.errors:
            raise real.NVMLError(dev.errors["nvmlDeviceGetMemoryInfo"])
        if version != real.nvmlMemory_v2:
            raise real.NVMLError(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return real.c_nvmlMemory_v2_t(
            version=version, total=dev.total, reserved=dev.reserved, free=free, used=dev.used
        )

    def nvmlDeviceGetMigMode(dev: Dev) -> list[int]:
        check("nvmlDeviceGetMigMode", dev)
        if dev.mig_mode is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return [dev.mig_mode, dev.mig_mode]

    def nvmlDeviceGetComputeMode(dev: Dev) -> int:
        """pynvml's: the mode as an int (``NVML_COMPUTEMODE_*``). On a MIG-enabled GPU
        "device must be MIG device handle" (NVML API reference): its own handle
        answers NOT_SUPPORTED, and an instance cannot be set to EXCLUSIVE_PROCESS
        ("not supported on a MIG-enabled device", go-nvml#61): it answers DEFAULT."""
        check("nvmlDeviceGetComputeMode", dev)
        if dev.mig_mode == real.NVML_DEVICE_MIG_ENABLE:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return int(dev.compute_mode)

    def nvmlDeviceGetMaxMigDeviceCount(dev: Dev) -> int:
        check("nvmlDeviceGetMaxMigDeviceCount", dev)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(dev: Dev, index: int) -> Dev:
        check("nvmlDeviceGetMigDeviceHandleByIndex", dev)
        if index in dev.mig_slot_errors:
            raise real.NVMLError(dev.mig_slot_errors[index])
        if index not in dev.migs:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return dev.migs[index]

    def nvmlDeviceGetGpuInstanceId(dev: Dev) -> int:
        check("nvmlDeviceGetGpuInstanceId", dev)
        return dev.gpu_instance_id

    def running_processes(dev: Dev, family: str, version: str) -> list:
        """pynvml's ``nvmlDevice{Get,GetMPS,GetGraphics}…RunningProcesses_v2``/``_v3``:
        each reads ``c_nvmlProcessInfo_v2_t`` records (pynvml.py ~1449 aliases the v3
        struct to it; the lists at ~4162-4372), from the bytes the driver wrote
        (``process_record_bytes`` apart from ``_v3``). ``Dev.errors[family]`` (the
        unversioned name) fails every version of that list."""
        check(family + version, dev)
        if family in dev.errors:
            raise real.NVMLError(dev.errors[family])
        procs = list(getattr(dev, PROCESS_LISTS[family]))
        if dev.mig_mode == real.NVML_DEVICE_MIG_ENABLE:  # the aggregate (see mig_monitor)
            if not mig_monitor:
                raise real.NVMLError(real.NVML_ERROR_NO_PERMISSION)
            for mig in dev.migs.values():
                procs.extend(getattr(mig, PROCESS_LISTS[family]))
        wide = version == "_v3" and process_record_bytes == RECORD_V3_WIDE.size
        raw = driver_records(procs, RECORD_V3_WIDE if wide else RECORD_V2)
        return records_as_pynvml_reads_them(raw, len(procs))

    def process_list(family: str, version: str):
        def call(dev: Dev) -> list:
            return running_processes(dev, family, version)

        call.__name__ = family + version
        return call

    def unversioned_process_list(family: str):
        """pynvml.py ~4227, ~4295, ~4299: each unversioned list is ``_v3`` under
        ``throwOnVersionMismatch``, so a library without the ``_v3`` symbol raises
        NVMLLibraryMismatchError, not an NVMLError."""

        def call(dev: Dev) -> list:
            return getattr(mod, family + "_v3")(dev)

        call.__name__ = family  # throwOnVersionMismatch names it in its message
        return real.throwOnVersionMismatch(call)

    def nvmlDeviceGetProcessUtilization(dev: Dev, timeStamp: int) -> list:
        check("nvmlDeviceGetProcessUtilization", dev)
        if is_mig_device(dev):  # not measured per instance either (as above)
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        mod.last_seen_args.append(timeStamp)
        fresh = [s for s in dev.samples if s[1] > timeStamp]
        if not fresh:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return [
            real.c_nvmlProcessUtilizationSample_t(
                pid=pid, timeStamp=ts, smUtil=sm, memUtil=mem[0] if mem else 0, encUtil=0, decUtil=0
            )
            for pid, ts, sm, *mem in fresh
        ]

    mod.last_seen_args = []  # type: ignore[attr-defined]
    for fn in list(locals().values()):
        if callable(fn) and getattr(fn, "__name__", "").startswith("nvml"):
            setattr(mod, fn.__name__, fn)
    for family in PROCESS_LISTS:
        setattr(mod, family, unversioned_process_list(family))
        for version in ("_v3", "_v2"):
            setattr(mod, family + version, process_list(family, version))
    return mod


def _gpu(i: int, **kw) -> Dev:
    kw.setdefault("name", b"Tesla T4")
    return Dev(uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", index=i, **kw)


def test_function_names_exist_in_real_pynvml() -> None:
    mod = fake_nvml([])
    for name in dir(mod):
        if name.startswith("nvml"):
            assert hasattr(real, name), f"pynvml has no {name}: the fake drifted"


def test_devices_processes_and_utilisation() -> None:
    gpu0 = _gpu(
        0,
        util=87,
        used=6 * GIB,
        procs=[(4242, 4 * GIB, 0), (4343, None, 0)],
        samples=[(4242, 100, 80), (4242, 200, 90), (4343, 150, 5)],
    )
    gpu1 = _gpu(1, util=0, used=0, name="NVIDIA L4")
    source = NvmlGpuSource(fake_nvml([gpu0, gpu1]))
    source.open()
    poll = source.poll()
    assert poll.failures == ()
    assert poll.driver_version == "550.54.15"
    d0, d1 = poll.devices
    assert (d0.index, d0.uuid, d0.model) == (0, gpu0.uuid, "Tesla T4")
    assert d0.utilization_ratio == pytest.approx(0.87)
    assert (d0.memory_used_bytes, d0.memory_total_bytes) == (6 * GIB, 16 * GIB)
    assert d0.gpu_instance_id is None
    assert d1.model == "NVIDIA L4"
    procs = {p.pid: p for p in poll.processes}
    assert procs[4242].utilization_ratio == pytest.approx(0.85)  # mean of its samples
    assert procs[4242].memory_used_bytes == 4 * GIB
    assert procs[4343].memory_used_bytes is None  # NVML_VALUE_NOT_AVAILABLE
    assert procs[4343].gpu_instance_id is None


def test_process_util_uses_last_seen_timestamp_and_not_found_means_idle() -> None:
    gpu0 = _gpu(0, procs=[(1, GIB, 0)], samples=[(1, 500, 40)])
    nv = fake_nvml([gpu0])
    source = NvmlGpuSource(nv)
    first = source.poll()
    second = source.poll()  # no newer sample: NVML says NOT_FOUND
    assert nv.last_seen_args == [0, 500]
    assert first.processes[0].utilization_ratio == pytest.approx(0.4)
    assert second.processes[0].utilization_ratio == 0.0


@pytest.mark.parametrize(
    ("function", "code", "reason"),
    [
        ("nvmlDeviceGetMemoryInfo", real.NVML_ERROR_GPU_IS_LOST, "gpu_lost"),
        ("nvmlDeviceGetName", real.NVML_ERROR_UNKNOWN, "unknown"),
        ("nvmlDeviceGetUtilizationRates", real.NVML_ERROR_RESET_REQUIRED, "reset_required"),
        ("nvmlDeviceGetName", real.NVML_ERROR_NOT_SUPPORTED, "not_supported"),
        ("nvmlDeviceGetMemoryInfo", real.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "version_mismatch"),
        ("nvmlDeviceGetMemoryInfo", real.NVML_ERROR_OPERATING_SYSTEM, "nvml_error"),
    ],
)
def test_one_failing_device_does_not_fail_the_poll(function: str, code: int, reason: str) -> None:
    bad = _gpu(1, errors={function: code}, procs=[(9, GIB, 0)])
    source = NvmlGpuSource(fake_nvml([_gpu(0, util=50), bad, _gpu(2, util=10)]))
    poll = source.poll()
    assert [d.index for d in poll.devices] == [0, 2]
    assert [(f.index, f.uuid, f.reason) for f in poll.failures] == [(1, bad.uuid, reason)]
    assert poll.failures[0].detail
    assert all(p.pid != 9 for p in poll.processes)


def test_handle_failure_keeps_the_uuid_read_before() -> None:
    """A GPU off the bus fails at nvmlDeviceGetHandleByIndex: its UUID is the one
    read before (the series and the holders' rows keep it), None only for a device
    never read."""
    never = _gpu(0, errors={"nvmlDeviceGetHandleByIndex": real.NVML_ERROR_GPU_IS_LOST})
    lost = _gpu(1)
    source = NvmlGpuSource(fake_nvml([never, lost]))
    assert [(f.index, f.uuid) for f in source.poll().failures] == [(0, None)]
    lost.errors["nvmlDeviceGetHandleByIndex"] = real.NVML_ERROR_GPU_IS_LOST
    poll = source.poll()
    # kept as last read, its use unknown
    assert [(d.uuid, d.utilization_ratio, d.memory_used_bytes) for d in poll.devices] == [
        (lost.uuid, None, None)
    ]
    assert poll.process_list_failures == (lost.uuid,)
    assert [(f.index, f.uuid, f.reason) for f in poll.failures] == [
        (0, None, "gpu_lost"),
        (1, lost.uuid, "gpu_lost"),
    ]
    allocs = [Allocation("ml", "train", "main", "nvidia.com/gpu", lost.uuid)]
    rows = attribute(poll, allocs, [PodMeta("ml", "train", "u1")], None)
    assert [(r.uuid, r.pod, r.allocated, r.utilization_ratio) for r in rows] == [
        (lost.uuid, "train", True, None)
    ]


def test_a_lost_mig_gpu_keeps_its_instances_unread() -> None:
    """A MIG GPU failing at its handle: its instances (the ``MIG-…`` and ``<i>:<j>``
    ids its holders were allocated) stay as last read, use unknown, so the holders
    keep their rows and are not unresolved; a whole GPU beside it reads on."""
    mig = _mig_3g(b"NVIDIA A100 MIG 3g.20gb")
    parent = _a100_mig(name=b"NVIDIA A100", migs={2: mig})
    source = NvmlGpuSource(fake_nvml([parent, _gpu(1, util=20)], mig_monitor=False))
    assert [d.gpu_instance_id for d in source.poll().devices] == [1, None]
    parent.errors["nvmlDeviceGetHandleByIndex"] = real.NVML_ERROR_GPU_IS_LOST
    poll = source.poll()
    assert [(f.index, f.uuid, f.reason) for f in poll.failures] == [(0, parent.uuid, "gpu_lost")]
    assert [
        (d.uuid, d.gpu_instance_id, d.mig_uuids, d.utilization_ratio, d.memory_used_bytes)
        for d in poll.devices
    ] == [(parent.uuid, 1, (mig.uuid,), None, None), (_gpu(1).uuid, None, (), 0.2, 0)]
    assert poll.devices[0].memory_total_bytes == 20 * GIB
    assert poll.process_list_failures == (parent.uuid,)
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/mig-3g.20gb", mig.uuid),
        Allocation("ml", "b", "main", "nvidia.com/mig-3g.20gb", "0:2"),
    ]
    pods = [PodMeta("ml", "a", "u-a"), PodMeta("ml", "b", "u-b")]
    rows = attribute(poll, allocs, pods, containers={})
    assert [(r.pod, r.gpu_instance_id, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("a", 1, None, None),
        ("b", 1, None, None),
    ]
    assert unresolved_allocations(poll, allocs) == ()


def test_a_device_whose_index_nvml_cannot_give_is_named_by_its_position() -> None:
    """``nvmlDeviceGetIndex`` failing (NVML API reference: UNKNOWN, among others) is no
    failing GPU: the handle came from ``nvmlDeviceGetHandleByIndex(position)``, whose
    index that position is, so the device is read on under it (label ``gpu``)."""
    second = _gpu(1, util=40, errors={"nvmlDeviceGetIndex": real.NVML_ERROR_UNKNOWN})
    second.index = 5  # the answer, were one given: unlike the position
    nv = fake_nvml([_gpu(0, util=10), second])
    poll = NvmlGpuSource(nv).poll()
    assert poll.failures == ()
    assert [(d.index, d.uuid, d.utilization_ratio) for d in poll.devices] == [
        (0, _gpu(0).uuid, pytest.approx(0.1)),
        (1, second.uuid, pytest.approx(0.4)),
    ]
    assert nv.calls.count("nvmlDeviceGetIndex") == 2


def test_process_list_failure_keeps_the_device() -> None:
    dev = _gpu(
        0, util=30, errors={"nvmlDeviceGetComputeRunningProcesses": real.NVML_ERROR_NO_PERMISSION}
    )
    poll = NvmlGpuSource(fake_nvml([dev])).poll()
    assert len(poll.devices) == 1 and poll.processes == () and poll.failures == ()
    # "no list" is told apart from "no process"
    assert poll.process_list_failures == (dev.uuid,)


def _a100_mig(**kw) -> Dev:
    """An A100 with MIG enabled (the parent GPU of the instances ``migs`` holds)."""
    kw.setdefault("name", b"NVIDIA A100-SXM4-40GB")
    return Dev(
        uuid="GPU-abcdef00-0000-0000-0000-000000000000",
        mig_mode=real.NVML_DEVICE_MIG_ENABLE,
        **kw,
    )


def _mig_3g(name: bytes) -> Dev:
    """A 3g.20gb MIG instance (GPU instance 1) of an A100 named ``name``: 5 GiB used, no
    utilisation (NVML measures none for an instance: the fake answers NOT_SUPPORTED)."""
    return Dev(
        uuid="MIG-11111111-0000-0000-0000-000000000000",
        name=name,
        gpu_instance_id=1,
        used=5 * GIB,
        total=20 * GIB,
    )


def test_process_list_failure_makes_the_holders_use_unknown_not_idle() -> None:
    """NO_PERMISSION on the process list: the holders are not idle. Under MIG the
    parent's aggregate is refused to an unprivileged caller and the instance's own
    list is refused too (NOT_SUPPORTED: per-instance lists are not supported in vGPU
    host mode, NVML API reference)."""
    no_list = {"nvmlDeviceGetComputeRunningProcesses": real.NVML_ERROR_NO_PERMISSION}
    mig = _mig_3g(b"NVIDIA A100 MIG 3g.20gb")
    mig.procs = [(77, 4 * GIB, 1)]
    mig.errors["nvmlDeviceGetComputeRunningProcesses"] = real.NVML_ERROR_NOT_SUPPORTED
    parent = _a100_mig(name=b"NVIDIA A100", migs={0: mig})
    whole = _gpu(1, util=0, used=30 * GIB, procs=[(88, 30 * GIB, 0)], errors=dict(no_list))
    # busy (at 0 % every sharer's share would be 0 whatever the split)
    shared = _gpu(2, util=35, used=8 * GIB, procs=[(99, 8 * GIB, 0)], errors=dict(no_list))
    poll = NvmlGpuSource(fake_nvml([parent, whole, shared], mig_monitor=False)).poll()
    assert poll.process_list_failures == (parent.uuid, whole.uuid, shared.uuid)
    allocs = [
        Allocation("ml", "mig-nb", "nb", "nvidia.com/mig-3g.20gb", mig.uuid),
        Allocation("ml", "nb", "nb", "nvidia.com/gpu", whole.uuid),
        Allocation("ml", "s1", "nb", "nvidia.com/gpu.shared", f"{shared.uuid}::0"),
        Allocation("ml", "s2", "nb", "nvidia.com/gpu.shared", f"{shared.uuid}::1"),
    ]
    pods = [PodMeta("ml", name, f"u-{name}") for name in ("mig-nb", "nb", "s1", "s2")]
    rows = attribute(poll, allocs, pods, containers={})  # the resolver ran
    # a sole holder's use is the device's (MIG: no utilisation there); sharers unknown
    assert [(r.pod, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("mig-nb", None, 5 * GIB),
        ("nb", 0.0, 30 * GIB),
        ("s1", None, None),
        ("s2", None, None),
    ]


def test_process_utilisation_not_supported_is_unknown_not_zero() -> None:
    dev = _gpu(
        0,
        procs=[(5, GIB, 0)],
        errors={"nvmlDeviceGetProcessUtilization": real.NVML_ERROR_NOT_SUPPORTED},
    )
    poll = NvmlGpuSource(fake_nvml([dev])).poll()
    assert poll.processes[0].utilization_ratio is None


@pytest.mark.parametrize(
    ("errors", "samples"),
    [
        ({"nvmlDeviceGetProcessUtilization": real.NVML_ERROR_NOT_SUPPORTED}, []),
        ({}, [(4242, 10**15, 37100)]),  # only a garbage sample this poll (nvtop#110)
    ],
)
def test_a_sole_holder_found_by_its_process_gets_the_device_utilisation(
    errors: dict[str, int], samples: list[tuple[int, ...]]
) -> None:
    """Its process's share unknown this poll, the only holder of a whole GPU whose
    process is placed gets the device's 85 %, as it would with its process unplaced;
    two holders' split stays unknown."""
    dev = _gpu(
        0, util=85, used=10 * GIB, procs=[(4242, 10 * GIB, 0)], errors=errors, samples=samples
    )
    poll = NvmlGpuSource(fake_nvml([dev]), clock=lambda: 1.7e9).poll()
    assert poll.processes[0].utilization_ratio is None
    pods = [PodMeta("ml", "train", "u", container_ids={"main": "c1"}), PodMeta("ml", "nb", "v")]
    sole = [Allocation("ml", "train", "main", "nvidia.com/gpu", dev.uuid)]
    found = {4242: ContainerRef("c1")}
    for containers in (found, None):
        (row,) = attribute(poll, sole, pods, containers)
        assert (row.utilization_ratio, row.memory_used_bytes) == (0.85, 10 * GIB)
    shared = [
        Allocation("ml", "train", "main", "nvidia.com/gpu.shared", f"{dev.uuid}::0"),
        Allocation("ml", "nb", "main", "nvidia.com/gpu.shared", f"{dev.uuid}::1"),
    ]
    rows = attribute(poll, shared, pods, found)
    assert [(r.pod, r.utilization_ratio) for r in rows] == [("nb", 0.0), ("train", None)]


def test_mig_instances_become_devices() -> None:
    mig_a = _mig_3g(b"NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    mig_b = Dev(
        uuid="MIG-22222222-0000-0000-0000-000000000000",
        name="NVIDIA A100-SXM4-40GB MIG 2g.10gb",
        gpu_instance_id=5,
        used=0,
        total=10 * GIB,
    )
    parent = _a100_mig(
        index=3, migs={0: mig_a, 4: mig_b}, procs=[(77, 4 * GIB, 1)], samples=[(77, 10, 99)]
    )
    parent_uuid = parent.uuid
    nv = fake_nvml([parent])
    poll = NvmlGpuSource(nv).poll()
    assert [
        (d.index, d.uuid, d.gpu_instance_id, d.mig_uuids, d.mig_profile) for d in poll.devices
    ] == [
        (3, parent_uuid, 1, (mig_a.uuid,), "3g.20gb"),
        (3, parent_uuid, 5, (mig_b.uuid,), "2g.10gb"),
    ]
    assert poll.devices[0].model == "NVIDIA A100-SXM4-40GB"
    assert poll.devices[0].utilization_ratio is None
    assert poll.devices[0].memory_total_bytes == 20 * GIB
    (proc,) = poll.processes
    assert (proc.pid, proc.device_uuid, proc.gpu_instance_id, proc.utilization_ratio) == (
        77,
        parent_uuid,
        1,
        None,  # per-process utilisation is not available under MIG
    )
    assert "nvmlDeviceGetProcessUtilization" not in nv.calls


def test_mig_processes_are_listed_per_instance_without_the_monitor_privilege() -> None:
    """The DaemonSet has no MIG monitor privilege: NVML refuses the MIG GPU's
    aggregate process lists (NO_PERMISSION) and gives each instance's on its MIG
    device handle. Every process is read, on its own GPU instance, once even where
    two compute instances of one GPU instance both list it, the MPS server of
    instance 9 (41: a compute process beside an MPS client) too, as a MIG instance
    is never in EXCLUSIVE_PROCESS mode. The instance's sole holder gets the
    instance's memory: NVML gives no figure for its MPS client, so its processes'
    sum would leave that client out."""
    parent, ci_a, ci_b = _compute_instances_of_one_2g()
    ci_a.procs = [(31, 2 * GIB, 3)]
    ci_b.procs = [(31, 2 * GIB, 3), (32, GIB, 3)]
    other = parent.migs[2]
    other.used = 768 * 2**20
    other.procs = [(41, 512 * 2**20, 9)]
    other.mps_procs = [(42, None, 9)]  # usedGpuMemory NVML_VALUE_NOT_AVAILABLE
    nv = fake_nvml([parent], mig_monitor=False)
    with pytest.raises(real.NVMLError_NoPermission):
        nv.nvmlDeviceGetComputeRunningProcesses(parent)
    poll = NvmlGpuSource(nv).poll()
    assert poll.failures == () and poll.process_list_failures == ()
    assert [
        (p.pid, p.device_uuid, p.gpu_instance_id, p.memory_used_bytes, p.utilization_ratio)
        for p in poll.processes
    ] == [
        (31, parent.uuid, 3, 2 * GIB, None),
        (32, parent.uuid, 3, GIB, None),
        (41, parent.uuid, 9, 512 * 2**20, None),
        (42, parent.uuid, 9, None, None),
    ]
    allocs = [Allocation("ml", "small", "nb", "nvidia.com/mig-1g.5gb", other.uuid)]
    (row,) = attribute(
        poll,
        allocs,
        [PodMeta("ml", "small", "u-small", container_ids={"nb": "c-small"})],
        {41: ContainerRef("c-small", "u-small"), 42: ContainerRef("c-small", "u-small")},
    )
    assert (row.gpu_instance_id, row.memory_used_bytes) == (9, 768 * 2**20)


def _count_process_lists(nv: types.ModuleType) -> Counter[tuple[str, str]]:
    """Count each process-list call the source makes, by (unversioned name, UUID of
    the handle asked: a GPU's or a MIG device's)."""
    asked: Counter[tuple[str, str]] = Counter()
    for name in PROCESS_LISTS:
        call = getattr(nv, name)

        def counted(dev: Dev, *, _name: str = name, _call=call) -> list:
            asked[_name, dev.uuid] += 1
            return _call(dev)

        setattr(nv, name, counted)
    return asked


def test_a_refused_mig_aggregate_is_not_asked_again() -> None:
    """NVML refuses a MIG GPU's aggregate process list for want of a capability (the
    DaemonSet drops CAP_SYS_ADMIN), which the process keeps for its life: each GPU's
    aggregate is asked once, and later polls read the instances' lists straight
    away, with the same processes."""
    parent, ci_a, _ = _compute_instances_of_one_2g()
    ci_a.procs = [(31, 2 * GIB, 3)]
    parent.migs[2].procs = [(41, GIB, 9)]
    mig = _mig_3g(b"NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    mig.procs = [(51, GIB, 1)]
    second = Dev(
        uuid="GPU-abcdef01-0000-0000-0000-000000000000",
        name=b"NVIDIA A100-SXM4-40GB",
        index=1,
        mig_mode=real.NVML_DEVICE_MIG_ENABLE,
        migs={0: mig},
    )
    nv = fake_nvml([parent, second], mig_monitor=False)
    asked = _count_process_lists(nv)
    source = NvmlGpuSource(nv)
    for _ in range(3):
        poll = source.poll()
        assert poll.failures == () and poll.process_list_failures == ()
        assert [(p.pid, p.device_uuid, p.gpu_instance_id) for p in poll.processes] == [
            (31, parent.uuid, 3),
            (41, parent.uuid, 9),
            (51, second.uuid, 1),
        ]
    # the compute list is the first asked: its refusal spares the other two
    compute = "nvmlDeviceGetComputeRunningProcesses"
    assert {key: n for key, n in asked.items() if key[1].startswith("GPU-")} == {
        (compute, parent.uuid): 1,
        (compute, second.uuid): 1,
    }
    assert asked[compute, ci_a.uuid] == asked[compute, mig.uuid] == 3


def test_a_refused_mig_aggregate_is_asked_again_after_nvml_is_initialised_again() -> None:
    """A refusal belongs to one NVML session: once the driver was away and NVML is
    initialised again (a reloaded driver may grant what the old one did not), the
    aggregate is asked again, once."""
    parent, ci_a, _ = _compute_instances_of_one_2g()
    ci_a.procs = [(31, 2 * GIB, 3)]
    nv = fake_nvml([parent], mig_monitor=False)
    asked = _count_process_lists(nv)
    source = NvmlGpuSource(nv)
    source.open()
    source.poll()
    parent.errors["nvmlDeviceGetUUID"] = real.NVML_ERROR_DRIVER_NOT_LOADED
    away = source.poll()
    assert away.processes == () and away.failures and not source.driver_loaded
    del parent.errors["nvmlDeviceGetUUID"]
    for _ in range(2):
        assert [p.pid for p in source.poll().processes] == [31]
    assert nv.calls.count("nvmlInit") == 2
    assert asked["nvmlDeviceGetComputeRunningProcesses", parent.uuid] == 2


def test_mig_disabled_gpu_is_a_whole_device() -> None:
    dev = _gpu(0, mig_mode=real.NVML_DEVICE_MIG_DISABLE, util=20)
    poll = NvmlGpuSource(fake_nvml([dev])).poll()
    assert poll.devices[0].gpu_instance_id is None
    assert poll.devices[0].utilization_ratio == pytest.approx(0.2)


def test_device_count_failure_fails_the_poll() -> None:
    nv = fake_nvml([])

    def broken() -> int:
        raise real.NVMLError(real.NVML_ERROR_UNKNOWN)  # driver-gone codes: test_gpu_lifecycle

    nv.nvmlDeviceGetCount = broken
    with pytest.raises(CollectorError, match="device count"):
        NvmlGpuSource(nv).poll()


def test_open_without_library_gives_the_one_line_message() -> None:
    with pytest.raises(NvmlUnavailable) as info:
        NvmlGpuSource(fake_nvml([], init_error=real.NVML_ERROR_LIBRARY_NOT_FOUND)).open()
    assert str(info.value) == NO_NVML_MESSAGE
    with pytest.raises(NvmlUnavailable, match="initialisation failed: Insufficient Permissions"):
        NvmlGpuSource(fake_nvml([], init_error=real.NVML_ERROR_NO_PERMISSION)).open()


def test_real_pynvml_on_this_machine_reports_no_driver() -> None:
    """No GPU here: the real library must fail in the documented way, not crash."""
    source = NvmlGpuSource()
    try:
        source.open()
    except NvmlUnavailable as err:
        assert str(err) == NO_NVML_MESSAGE
    else:  # pragma: no cover - only on a machine with a driver
        source.close()
        pytest.skip("an NVIDIA driver is present")


def test_close_does_not_wait_for_a_hung_nvml_call() -> None:
    """A GPU off the bus can block an NVML call for minutes: shutdown must not wait."""
    nv = fake_nvml([_gpu(0, util=10)])
    entered, release = threading.Event(), threading.Event()
    util = nv.nvmlDeviceGetUtilizationRates

    def hang(handle):
        entered.set()
        release.wait(30)
        return util(handle)

    nv.nvmlDeviceGetUtilizationRates = hang
    src = NvmlGpuSource(nv)
    src.open()
    poller = threading.Thread(target=src.poll, daemon=True)
    poller.start()
    try:
        assert entered.wait(10)
        closer = threading.Thread(target=lambda: src.close(timeout_seconds=0.05), daemon=True)
        closer.start()
        closer.join(5)
        assert not closer.is_alive(), "close() waits for the hung NVML call"
        assert "nvmlShutdown" not in nv.calls  # NVML is busy: left to the process exit
    finally:
        release.set()
        poller.join(10)
    src.close()  # once the call returned, close shuts NVML down as usual
    assert nv.calls.count("nvmlShutdown") == 1


def test_driver_without_process_list_v3_reads_the_v2_list() -> None:
    """R470 drivers (and some R535 builds) have no
    ``nvmlDeviceGetComputeRunningProcesses_v3``: pynvml's unversioned call then raises
    ``NVMLLibraryMismatchError``, which is no NVMLError. The list comes from ``_v2``."""
    gpu0 = _gpu(0, util=60, procs=[(4242, 3 * GIB, 0)], samples=[(4242, 100, 60)])
    nv = fake_nvml([gpu0, _gpu(1)], missing=("nvmlDeviceGetComputeRunningProcesses_v3",))
    with pytest.raises(real.NVMLLibraryMismatchError):  # the fake wraps it as pynvml does
        nv.nvmlDeviceGetComputeRunningProcesses(gpu0)
    poll = NvmlGpuSource(nv).poll()
    assert poll.failures == () and poll.process_list_failures == ()
    assert [d.uuid for d in poll.devices] == [gpu0.uuid, _gpu(1).uuid]
    assert [(p.pid, p.memory_used_bytes, p.utilization_ratio) for p in poll.processes] == [
        (4242, 3 * GIB, pytest.approx(0.6))
    ]


def c_process_lists(
    procs: list[tuple[int, int | None, int]], *, wide_v3: bool, missing: tuple[str, ...] = ()
):
    """A stand-in for ``pynvml._nvmlGetFunctionPointer`` over a driver listing ``procs``:
    its process-list symbols are C functions as ctypes calls them (handle, count
    pointer, record buffer or None), ``_v3`` writing 32-byte records if ``wide_v3``;
    every other symbol is found unless ``missing``."""

    def lookup(name: str):
        if name in missing:
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        if "RunningProcesses" not in name:
            return name
        wide = wide_v3 and name.endswith("_v3")

        def c_function(handle: object, c_count: object, buf: object) -> int:
            count = ctypes.cast(c_count, ctypes.POINTER(ctypes.c_uint))
            count[0] = len(procs)
            if not buf:
                return real.NVML_ERROR_INSUFFICIENT_SIZE if procs else real.NVML_SUCCESS
            raw = driver_records(procs, RECORD_V3_WIDE if wide else RECORD_V2)
            ctypes.memmove(buf, raw, len(raw))
            return real.NVML_SUCCESS

        return c_function

    return lookup


GIB_PROCS = [(4242, 3 * GIB, 0xFFFFFFFF), (5353, 5 * GIB, 0xFFFFFFFF), (6464, 7 * GIB, 0xFFFFFFFF)]


@pytest.mark.parametrize("wide_v3", [True, False], ids=["r535-32-byte-v3", "24-byte-v3"])
def test_the_fake_reads_the_driver_records_as_pynvml_does(
    monkeypatch: pytest.MonkeyPatch, wide_v3: bool
) -> None:
    """The fake's lists give what pynvml's own wrappers read from the same driver
    bytes: on a 32-byte ``_v3`` every record after the first misaligned."""
    monkeypatch.setattr(
        real, "_nvmlGetFunctionPointer", c_process_lists(GIB_PROCS, wide_v3=wide_v3)
    )
    dev = _gpu(0, procs=GIB_PROCS)
    nv = fake_nvml([dev], process_record_bytes=32 if wide_v3 else 24)
    for version in ("_v3", "_v2"):
        name = "nvmlDeviceGetComputeRunningProcesses" + version
        got = [(p.pid, p.usedGpuMemory) for p in getattr(nv, name)(dev)]
        assert got == [(p.pid, p.usedGpuMemory) for p in getattr(real, name)(dev)]
    misread = [(p.pid, p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses(dev)]
    assert (misread[1:] == [(0, 5353), (0xFFFFFFFF, 0)]) is wide_v3


@pytest.mark.parametrize(
    ("missing", "wide_v3"),
    [
        (WIDE_V3_MISSING, True),  # 535.54.03: 32-byte _v3
        ((), False),  # R550 and later: nvmlDeviceGetRunningProcessDetailList, 24-byte _v3
        (("nvmlDeviceGetConfComputeMemSizeInfo", *WIDE_V3_MISSING), False),  # R515
    ],
    ids=["r535", "r550", "r515"],
)
def test_each_driver_generation_s_process_records_are_read_whole(
    monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...], wide_v3: bool
) -> None:
    """pynvml reads ``_v3`` records 24 bytes apart, which R525–R535 drivers write 32
    apart (usedGpuCcProtectedMemory): told as nvitop tells it (the library has
    ``nvmlDeviceGetConfComputeMemSizeInfo`` and not
    ``nvmlDeviceGetRunningProcessDetailList``), that driver is read through ``_v2``.
    pynvml's real wrappers read the C functions' bytes here."""
    lookup = c_process_lists(GIB_PROCS, wide_v3=wide_v3, missing=missing)
    monkeypatch.setattr(real, "_nvmlGetFunctionPointer", lookup)
    dev = _gpu(0, used=15 * GIB, procs=GIB_PROCS)
    nv = fake_nvml([dev], missing=missing)
    nv._nvmlGetFunctionPointer = lookup
    for family in ("Compute", "MPSCompute", "Graphics"):
        for version in ("", "_v2", "_v3"):
            name = f"nvmlDeviceGet{family}RunningProcesses{version}"
            setattr(nv, name, getattr(real, name))
    poll = NvmlGpuSource(nv).poll()
    assert poll.process_list_failures == ()
    assert [(p.pid, p.memory_used_bytes) for p in poll.processes] == [
        (pid, mem) for pid, mem, _ in GIB_PROCS
    ]


@pytest.mark.parametrize("family", list(PROCESS_LISTS.values()))
def test_wide_records_are_read_in_every_process_list(family: str) -> None:
    """The compute, MPS and graphics lists share the record: a 32-byte ``_v3`` driver's
    are all read through ``_v2``."""
    dev = _gpu(0, **{family: GIB_PROCS})
    nv = fake_nvml([dev], missing=WIDE_V3_MISSING, process_record_bytes=32)
    poll = NvmlGpuSource(nv).poll()
    assert poll.process_list_failures == ()
    assert [(p.pid, p.memory_used_bytes) for p in poll.processes] == [
        (pid, mem) for pid, mem, _ in GIB_PROCS
    ]
    assert not [c for c in nv.calls if c.endswith("RunningProcesses_v3")]


@pytest.mark.parametrize("n_procs", [2, 3])
def test_a_misaligned_process_list_is_unknown_not_pids_0_and_4294967295(n_procs: int) -> None:
    """Records of a layout the source did not tell (a library whose symbols say
    24-byte ``_v3`` while its records are 32): pynvml reads pid 0 or 0xFFFFFFFF
    among them, which no process has. The list is unknown, its holders' usage too,
    not a process 0 charged another's memory and the real ones missing."""
    dev = _gpu(0, used=15 * GIB, procs=GIB_PROCS[:n_procs])
    nv = fake_nvml([dev], process_record_bytes=32)
    poll = NvmlGpuSource(nv).poll()
    assert poll.processes == ()
    assert poll.process_list_failures == (dev.uuid,)


# what a driver older than R450 lacks of the calls the exporter makes
PRE_R450_MISSING = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetMigMode",
)


def test_driver_without_any_versioned_process_list_keeps_the_devices() -> None:
    """Neither ``_v3`` nor ``_v2`` (a driver older than R450): the process list is
    unknown, the devices are still read; the mismatch error never escapes a read.
    Such a driver has no MIG either: ``nvmlDeviceGetMigMode`` came with MIG in R450
    (CUDA 11), and pynvml fails the symbol it cannot find with FUNCTION_NOT_FOUND
    (``_nvmlGetFunctionPointer``): no MIG, not a failing device, asked once."""
    nv = fake_nvml(
        [_gpu(0, util=20, procs=[(7, GIB, 0)]), _gpu(1, util=40)], missing=PRE_R450_MISSING
    )
    source = NvmlGpuSource(nv)
    for _ in range(2):
        poll = source.poll()
        assert poll.failures == () and poll.processes == ()
        assert [d.utilization_ratio for d in poll.devices] == [
            pytest.approx(0.2),
            pytest.approx(0.4),
        ]
        assert all(d.gpu_instance_id is None for d in poll.devices)
        assert poll.process_list_failures == (_gpu(0).uuid, _gpu(1).uuid)
    assert nv.calls.count("nvmlDeviceGetMigMode") == 1


def test_a_driver_without_any_process_list_is_asked_for_one_once() -> None:
    """A driver older than R450 has no compute list, ``_v3`` nor ``_v2``: each symbol
    is looked up once (pynvml caches no failed lookup: a lock, an exception and a log
    line per device per poll), and the list stays unknown on every poll of every
    device, never "no process". The MPS and graphics lists are not asked for: with the
    compute list unknown, the device's processes are."""
    nv = fake_nvml([_gpu(0, procs=[(7, GIB, 0)]), _gpu(1)], missing=PRE_R450_MISSING)
    source = NvmlGpuSource(nv)
    for _ in range(3):
        poll = source.poll()
        assert poll.failures == () and poll.processes == ()
        assert poll.process_list_failures == (_gpu(0).uuid, _gpu(1).uuid)
    lists = Counter(c for c in nv.calls if "RunningProcesses" in c)
    assert lists == {
        "nvmlDeviceGetComputeRunningProcesses_v3": 1,
        "nvmlDeviceGetComputeRunningProcesses_v2": 1,
    }


def test_memory_used_leaves_out_the_driver_reserve() -> None:
    """An idle GPU uses no memory although the driver reserves some (v1's ``used``
    counts the reserve: 912 MB on an idle A100, rust-nvml/nvml-wrapper#57): its sole
    holder is charged none, and the holders of an idle shared GPU read 0, not unknown."""
    idle = _gpu(0, reserved=900 * 2**20, used=0)
    shared = _gpu(1, reserved=900 * 2**20, used=0)
    busy = _gpu(2, reserved=900 * 2**20, used=6 * GIB, util=50)
    poll = NvmlGpuSource(fake_nvml([idle, shared, busy])).poll()
    assert [(d.memory_used_bytes, d.memory_total_bytes) for d in poll.devices] == [
        (0, 16 * GIB),
        (0, 16 * GIB),
        (6 * GIB, 16 * GIB),
    ]
    allocs = [
        Allocation("ml", "solo", "nb", "nvidia.com/gpu", idle.uuid),
        Allocation("ml", "s1", "nb", "nvidia.com/gpu.shared", f"{shared.uuid}::0"),
        Allocation("ml", "s2", "nb", "nvidia.com/gpu.shared", f"{shared.uuid}::1"),
        Allocation("ml", "big", "nb", "nvidia.com/gpu", busy.uuid),
    ]
    pods = [PodMeta("ml", name, f"u-{name}") for name in ("solo", "s1", "s2", "big")]
    rows = attribute(poll, allocs, pods, None)  # no process attribution: device values
    assert [(r.pod, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("solo", 0.0, 0),
        ("s1", 0.0, 0),
        ("s2", 0.0, 0),
        ("big", pytest.approx(0.5), 6 * GIB),
    ]


@pytest.mark.parametrize(
    ("missing", "v2_error"),
    [
        (("nvmlDeviceGetMemoryInfo_v2",), None),
        ((), real.NVML_ERROR_NOT_SUPPORTED),
        ((), real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH),
    ],
    ids=["v2-symbol-missing", "v2-not-supported", "v2-version-mismatch"],
)
def test_memory_without_v2_is_read_with_v1(missing: tuple[str, ...], v2_error: int | None) -> None:
    """A driver without (or refusing) ``nvmlDeviceGetMemoryInfo_v2`` is still read:
    v1's ``used``, the reserve included, is the best it gives."""
    errors = {} if v2_error is None else {"nvmlDeviceGetMemoryInfo_v2": v2_error}
    dev = _gpu(0, reserved=GIB, used=2 * GIB, errors=errors)
    poll = NvmlGpuSource(fake_nvml([dev], missing=missing)).poll()
    assert poll.failures == ()
    assert [(d.memory_used_bytes, d.memory_total_bytes) for d in poll.devices] == [
        (3 * GIB, 16 * GIB)
    ]


def test_memory_v2_failing_the_device_is_not_hidden_by_v1() -> None:
    dev = _gpu(0, errors={"nvmlDeviceGetMemoryInfo_v2": real.NVML_ERROR_GPU_IS_LOST})
    poll = NvmlGpuSource(fake_nvml([dev])).poll()
    assert poll.devices == ()
    assert [(f.uuid, f.reason) for f in poll.failures] == [(dev.uuid, "gpu_lost")]


NOW = 1_760_000_000.0  # the source's clock in these tests (unix seconds)
NOW_US = int(NOW * 1e6)


def test_a_unified_memory_gpu_is_read_without_a_memory_figure() -> None:
    """A GPU sharing the host's memory (DGX Spark's GB10, Jetson Thor) answers
    NOT_SUPPORTED to both memory calls. That is "no device memory figure", not a
    failing GPU: taken for one, the GPU read failing every poll (read_success 0,
    GpuEtaGpuReadFailing firing for good), without its info series, utilisation or
    processes. It is read like any other, its memory series left out, and its only
    holder gets the device's utilisation and its processes' own memory."""
    dev = _gpu(
        0,
        name=b"NVIDIA GB10",
        util=70,
        procs=[(4242, 3 * GIB, 0)],
        samples=[(4242, NOW_US - 1_000_000, 60)],
        errors={"nvmlDeviceGetMemoryInfo": real.NVML_ERROR_NOT_SUPPORTED},
    )
    nv = fake_nvml([dev])
    poll = NvmlGpuSource(nv, clock=lambda: NOW).poll()
    assert poll.failures == ()
    assert "nvmlDeviceGetMemoryInfo_v2" in nv.calls and "nvmlDeviceGetMemoryInfo" in nv.calls
    assert [
        (d.uuid, d.model, d.utilization_ratio, d.memory_used_bytes, d.memory_total_bytes)
        for d in poll.devices
    ] == [(dev.uuid, "NVIDIA GB10", pytest.approx(0.7), None, None)]
    assert [(p.pid, p.memory_used_bytes, p.utilization_ratio) for p in poll.processes] == [
        (4242, 3 * GIB, pytest.approx(0.6))
    ]
    pods = [PodMeta("ml", "train", "u", container_ids={"main": "c1"})]
    allocs = [Allocation("ml", "train", "main", "nvidia.com/gpu", dev.uuid)]
    rows = attribute(poll, allocs, pods, {4242: ContainerRef("c1")})
    assert [(r.pod, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("train", pytest.approx(0.6), 3 * GIB)
    ]
    no_process_data = attribute(poll, allocs, pods, None)
    assert [(r.utilization_ratio, r.memory_used_bytes) for r in no_process_data] == [
        (pytest.approx(0.7), None)
    ]
    snap = Snapshot(node="n1", timestamp=0.0, devices=poll.devices, pod_gpus=rows)
    text = SnapshotExposition(SnapshotHolder(snap), version="0").exposition().decode()
    assert f'gpu_eta_gpu_read_success{{UUID="{dev.uuid}",gpu="0",node="n1"}} 1.0' in text
    assert 'gpu_eta_gpu_info{UUID="' + dev.uuid in text
    assert "gpu_eta_gpu_memory_used_bytes{" not in text
    assert "gpu_eta_gpu_memory_total_bytes{" not in text


def test_garbage_process_samples_are_skipped() -> None:
    """What NVML answered with a zombie process on the GPU (Syllo/nvtop#110): an entry
    with smUtil 37100, pid-0 padding. The process whose only sample is garbage has an
    unknown share this poll (not 100 %), the others keep theirs."""
    dev = _gpu(
        0,
        procs=[(50554, GIB, 0), (50017, GIB, 0)],
        samples=[
            (50554, 217144956601725, 37100, 50583),
            (50017, NOW_US - 1_000_000, 5),
            *[(0, 0, 0)] * 3,
        ],
    )
    poll = NvmlGpuSource(fake_nvml([dev]), clock=lambda: NOW).poll()
    assert {p.pid: p.utilization_ratio for p in poll.processes} == {
        50554: None,
        50017: pytest.approx(0.05),
    }


def test_a_sample_with_memory_use_over_100_percent_is_skipped() -> None:
    dev = _gpu(0, procs=[(7, GIB, 0)], samples=[(7, NOW_US - 1_000_000, 40, 2147483632)])
    poll = NvmlGpuSource(fake_nvml([dev]), clock=lambda: NOW).poll()
    assert [p.utilization_ratio for p in poll.processes] == [None]


def test_padding_entries_do_not_move_the_last_seen_timestamp() -> None:
    """pid 0 is no process: an entry for it is padding, whatever its timestamp says."""
    dev = _gpu(0, procs=[(7, GIB, 0)], samples=[(7, 500, 40), (0, 900, 0)])
    nv = fake_nvml([dev])
    source = NvmlGpuSource(nv, clock=lambda: NOW)
    source.poll()
    source.poll()
    assert nv.last_seen_args == [0, 500]


def test_a_sample_from_the_future_does_not_silence_later_samples() -> None:
    """A timestamp an hour ahead, kept as the last seen, would make NVML answer
    NOT_FOUND to every later call: every process idle until a restart. It is
    skipped; the last seen timestamp is the newest sample read, at most the clocks'
    slack past now (cut back to now, that sample would be handed back and counted
    again)."""
    clock = [NOW]
    dev = _gpu(
        0,
        procs=[(7, GIB, 0), (8, GIB, 0)],
        samples=[(7, NOW_US + 3600 * 1_000_000, 90), (8, NOW_US + 500_000, 30)],
    )
    nv = fake_nvml([dev])
    source = NvmlGpuSource(nv, clock=lambda: clock[0])
    first = source.poll()
    # half a second ahead is within the clocks' slack: read, and kept as last seen
    assert {p.pid: p.utilization_ratio for p in first.processes} == {
        7: None,
        8: pytest.approx(0.3),
    }
    clock[0] = NOW + 10
    dev.samples = [(7, NOW_US + 9_000_000, 60)]
    second = source.poll()
    assert nv.last_seen_args == [0, NOW_US + 500_000]
    assert {p.pid: p.utilization_ratio for p in second.processes} == {
        7: pytest.approx(0.6),
        8: 0.0,
    }


def test_a_clock_stepped_back_does_not_make_busy_processes_idle() -> None:
    """The host clock steps back ten minutes (an NTP step, a VM resumed): NVML stamps
    the new samples with the stepped clock, all older than the last seen timestamp
    kept from before. Passed on, NVML would answer NOT_FOUND, every busy process read
    0 % until the clock caught up, and GpuEtaGpuAllocatedIdle fired on busy pods. A
    kept timestamp beyond the slack past the clock is forgotten: the GPU is read as
    at start (0: what NVML holds), the samples stamped before the step, now in the
    future, are not read, and the poll after reads on from the new samples."""
    clock = [NOW]
    dev = _gpu(0, procs=[(7, GIB, 0)], samples=[(7, NOW_US - 100_000, 90)])
    nv = fake_nvml([dev])
    source = NvmlGpuSource(nv, clock=lambda: clock[0])
    assert [p.utilization_ratio for p in source.poll().processes] == [pytest.approx(0.9)]
    stepped_us = NOW_US - 600 * 1_000_000
    clock[0] = NOW - 600 + 5
    dev.samples = [(7, NOW_US - 100_000, 90), (7, stepped_us + 4_000_000, 80)]
    assert [p.utilization_ratio for p in source.poll().processes] == [pytest.approx(0.8)]
    clock[0] += 5
    dev.samples.append((7, stepped_us + 9_000_000, 40))
    assert [p.utilization_ratio for p in source.poll().processes] == [pytest.approx(0.4)]
    assert nv.last_seen_args == [0, 0, stepped_us + 4_000_000]


def test_a_sample_within_the_clock_slack_is_read_once() -> None:
    """A 90 % sample stamped half a second ahead, then 5 s later one new 10 % sample:
    the second poll reads 10 %, not the mean with the first sample read again."""
    clock = [NOW]
    dev = _gpu(0, procs=[(7, GIB, 0)], samples=[(7, NOW_US + 500_000, 90)])
    nv = fake_nvml([dev])
    source = NvmlGpuSource(nv, clock=lambda: clock[0])
    assert [p.utilization_ratio for p in source.poll().processes] == [pytest.approx(0.9)]
    clock[0] = NOW + 5
    dev.samples = [(7, NOW_US + 500_000, 90), (7, NOW_US + 4_000_000, 10)]
    assert [p.utilization_ratio for p in source.poll().processes] == [pytest.approx(0.1)]


def test_samples_taken_during_a_slow_utilisation_call_are_read() -> None:
    """``nvmlDeviceGetProcessUtilization`` taking 2.5 s (a busy driver, many
    processes): NVML stamps the samples it takes meanwhile with the host clock, up to
    the call's return. Bounded by the clock read before the call, those more than the
    slack (1 s) after it were garbage and the process's share unknown for the poll;
    bounded by the clock at the call's return, they are read, and a sample later than
    that (beyond the slack) is still garbage."""
    clock = [NOW]
    dev = _gpu(
        0,
        procs=[(7, GIB, 0), (8, GIB, 0)],
        samples=[
            (7, NOW_US + 500_000, 30),
            (7, NOW_US + 2_000_000, 50),  # taken during the call
            (8, NOW_US + 2_400_000, 20),  # the same
            (9, NOW_US + 3_600_000, 90),  # 3.6 s: beyond the return's slack
        ],
    )
    nv = fake_nvml([dev])
    answer = nv.nvmlDeviceGetProcessUtilization

    def slow_call(handle: Dev, timeStamp: int) -> list:
        clock[0] += 2.5
        return answer(handle, timeStamp)

    nv.nvmlDeviceGetProcessUtilization = slow_call
    dev.procs.append((9, GIB, 0))
    poll = NvmlGpuSource(nv, clock=lambda: clock[0]).poll()
    assert {p.pid: p.utilization_ratio for p in poll.processes} == {
        7: pytest.approx(0.4),
        8: pytest.approx(0.2),
        9: None,
    }


@pytest.mark.parametrize("privileged", [True, False], ids=["privileged", "unprivileged"])
def test_mig_gpu_without_instances_is_still_reported(privileged: bool) -> None:
    """MIG on, no instance created yet (the MIG manager between its two steps, or a
    GPU left so): the GPU itself is reported, so its info and read_success series
    (dashboards, the read-failing alert) do not vanish. NVML gives no utilisation
    under MIG; the parent's memory only to a privileged caller."""
    errors = {} if privileged else {"nvmlDeviceGetMemoryInfo": real.NVML_ERROR_NO_PERMISSION}
    parent = _a100_mig(index=2, total=40 * GIB, errors=errors)
    poll = NvmlGpuSource(fake_nvml([parent])).poll()
    assert poll.failures == ()
    assert [
        (d.index, d.uuid, d.model, d.gpu_instance_id, d.utilization_ratio) for d in poll.devices
    ] == [(2, parent.uuid, "NVIDIA A100-SXM4-40GB", None, None)]
    (dev,) = poll.devices
    if privileged:
        assert (dev.memory_used_bytes, dev.memory_total_bytes) == (0, 40 * GIB)
    else:
        assert (dev.memory_used_bytes, dev.memory_total_bytes) == (None, None)


def test_mig_slot_answering_invalid_argument_is_skipped() -> None:
    """As go-nvlib's VisitMigDevices does: INVALID_ARGUMENT for a slot, like
    NOT_FOUND, is a slot without an instance, not a failing GPU."""
    mig = _mig_3g(b"NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    parent = _a100_mig(migs={0: mig}, mig_slot_errors={1: real.NVML_ERROR_INVALID_ARGUMENT})
    poll = NvmlGpuSource(fake_nvml([parent])).poll()
    assert poll.failures == ()
    assert [(d.gpu_instance_id, d.mig_uuids) for d in poll.devices] == [(1, (mig.uuid,))]


def test_mig_index_ids_name_the_nvml_slot() -> None:
    """The device plugin's ``<i>:<j>`` (``--device-id-strategy=index``) numbers a MIG
    device by its ``nvmlDeviceGetMigDeviceHandleByIndex`` slot (go-nvlib's
    ``VisitMigDevices`` passes ``j`` on past empty slots): with instances in slots 0
    and 4, ``3:4`` is the second instance and ``3:1`` names none."""
    mig_a = _mig_3g(b"NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    mig_b = Dev(
        uuid="MIG-22222222-0000-0000-0000-000000000000",
        name="NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        gpu_instance_id=13,
        total=5 * GIB,
    )
    parent = _a100_mig(index=3, migs={0: mig_a, 4: mig_b})
    poll = NvmlGpuSource(fake_nvml([parent])).poll()
    assert [(d.gpu_instance_id, d.mig_slots) for d in poll.devices] == [(1, (0,)), (13, (4,))]
    allocs = [
        Allocation("ml", "big", "nb", "nvidia.com/mig-3g.20gb", "3:0"),
        Allocation("ml", "small", "nb", "nvidia.com/mig-1g.5gb", "3:4"),
        Allocation("ml", "none", "nb", "nvidia.com/mig-1g.5gb", "3:1"),
    ]
    pods = [PodMeta("ml", name, f"u-{name}") for name in ("big", "small", "none")]
    rows = attribute(poll, allocs, pods, None)
    assert [(r.pod, r.gpu_instance_id) for r in rows] == [("big", 1), ("small", 13)]
    assert [a.pod for a, _ in unresolved_allocations(poll, allocs)] == ["none"]


def _compute_instances_of_one_2g() -> tuple[Dev, Dev, Dev]:
    """GPU instance 3 (a 2g.10gb profile) split into two 1-slice compute instances:
    NVML answers one MIG device handle per compute instance (a MIG device handle
    "maps to a MIG compute instance", nvmlDeviceIsMigDeviceHandle), each with its
    own ``MIG-…`` UUID and slot, the same GPU instance id, the GPU instance's memory
    (its compute instances share it) and the compute-instance profile in its name
    (``1c.2g.10gb``, as go-nvlib's ``MigProfileInfo.String`` writes a C < G profile).
    Slot 2 holds a 1g.5gb GPU instance of its own. Returns the parent and the two."""
    ci = {
        "name": b"NVIDIA A100-SXM4-40GB MIG 1c.2g.10gb",
        "gpu_instance_id": 3,
        "used": 3 * GIB,
        "total": 10 * GIB,
    }
    ci_a = Dev(uuid="MIG-aaaaaaaa-0000-0000-0000-000000000000", **ci)
    ci_b = Dev(uuid="MIG-bbbbbbbb-0000-0000-0000-000000000000", **ci)
    other = Dev(
        uuid="MIG-cccccccc-0000-0000-0000-000000000000",
        name=b"NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        gpu_instance_id=9,
        total=5 * GIB,
    )
    parent = _a100_mig(index=0, migs={0: ci_a, 1: ci_b, 2: other})
    return parent, ci_a, ci_b


def test_compute_instances_of_one_gpu_instance_are_one_device() -> None:
    """Series are per GPU instance, as dcgm-exporter's (it watches DCGM_FE_GPU_I
    entities and labels GPU_I_ID, GPU_I_PROFILE; no compute-instance label): two
    compute instances of GPU instance 3 are one device, not two identical series,
    and each one's id (MIG UUID, ``<i>:<j>`` slot) resolves to it."""
    parent, ci_a, ci_b = _compute_instances_of_one_2g()
    poll = NvmlGpuSource(fake_nvml([parent])).poll()
    assert [
        (d.gpu_instance_id, d.mig_profile, d.mig_uuids, d.mig_slots, d.memory_used_bytes)
        for d in poll.devices
    ] == [
        (3, "2g.10gb", (ci_a.uuid, ci_b.uuid), (0, 1), 3 * GIB),
        (9, "1g.5gb", ("MIG-cccccccc-0000-0000-0000-000000000000",), (2,), 0),
    ]
    allocs = [
        Allocation("ml", "a", "nb", "nvidia.com/mig-1c.2g.10gb", ci_a.uuid),
        Allocation("ml", "b", "nb", "nvidia.com/mig-1c.2g.10gb", "0:1"),
    ]
    pods = [PodMeta("ml", name, f"u-{name}") for name in ("a", "b")]
    rows = attribute(poll, allocs, pods, None)
    assert [(r.pod, r.gpu_instance_id) for r in rows] == [("a", 3), ("b", 3)]
    assert unresolved_allocations(poll, allocs) == ()
    snap = Snapshot(node="n1", timestamp=0.0, devices=poll.devices, pod_gpus=rows)
    text = SnapshotExposition(SnapshotHolder(snap), version="0").exposition().decode()
    series = [line.rpartition(" ")[0] for line in text.splitlines() if line[:1] != "#"]
    assert len(series) == len(set(series)), "the same series twice in one exposition"
    assert text.count('gpu_eta_gpu_memory_total_bytes{GPU_I_ID="3"') == 1


def test_mig_instances_publish_no_utilisation() -> None:
    """NVML measures no utilisation on a MIG device handle: it answers NOT_SUPPORTED to
    ``nvmlDeviceGetUtilizationRates`` and ``nvmlDeviceGetProcessUtilization`` there
    (NVML API reference; nvitop#5, dask/distributed#8693), as the fake does for every
    instance, without a test opting in. So no instance and no holder of one has a
    utilisation series: a 0 there is a figure real NVML never gives, an idle instance
    that may be busy. Memory is still published."""
    parent, ci_a, _ = _compute_instances_of_one_2g()
    ci_a.procs = [(31, 2 * GIB, 3)]
    ci_a.samples = [(31, 10, 50)]  # what a whole GPU would answer: not asked under MIG
    nv = fake_nvml([parent])
    for mig in parent.migs.values():
        with pytest.raises(real.NVMLError_NotSupported):
            nv.nvmlDeviceGetUtilizationRates(mig)
        with pytest.raises(real.NVMLError_NotSupported):
            nv.nvmlDeviceGetProcessUtilization(mig, 0)
    poll = NvmlGpuSource(nv).poll()
    assert [(d.gpu_instance_id, d.utilization_ratio) for d in poll.devices] == [
        (3, None),
        (9, None),
    ]
    assert [(p.pid, p.utilization_ratio) for p in poll.processes] == [(31, None)]
    allocs = [
        Allocation("ml", "a", "nb", "nvidia.com/mig-1c.2g.10gb", ci_a.uuid),
        Allocation("ml", "c", "nb", "nvidia.com/mig-1g.5gb", "0:2"),
    ]
    pods = [PodMeta("ml", name, f"u-{name}", container_ids={"nb": f"c-{name}"}) for name in "ac"]
    rows = attribute(poll, allocs, pods, {31: ContainerRef("c-a", "u-a")})
    # c runs nothing on its instance, whose process list is complete: an idle holder
    # by the process list (docs/attribution.md), not by a utilisation reading
    assert [(r.pod, r.gpu_instance_id, r.utilization_ratio) for r in rows] == [
        ("a", 3, None),
        ("c", 9, 0.0),
    ]
    snap = Snapshot(node="n1", timestamp=0.0, devices=poll.devices, pod_gpus=rows)
    text = SnapshotExposition(SnapshotHolder(snap), version="0").exposition().decode()
    assert "gpu_eta_gpu_utilization_ratio{" not in text
    assert [line for line in text.splitlines() if "pod_gpu_utilization_ratio{" in line] == [
        'gpu_eta_pod_gpu_utilization_ratio{GPU_I_ID="9",UUID="' + parent.uuid + '",'
        'container="nb",gpu="0",namespace="ml",node="n1",pod="c"} 0.0'
    ]
    assert text.count("gpu_eta_gpu_memory_used_bytes{GPU_I_ID=") == 2


def test_mps_clients_are_the_devices_processes_and_the_server_is_none() -> None:
    """Under MPS (the device plugin's ``sharing.mps``, its daemon setting the GPU to
    EXCLUSIVE_PROCESS) NVML lists the clients through
    ``nvmlDeviceGetMPSComputeRunningProcesses``; the compute list holds the MPS
    server. Each client is a process of the device with its own memory; one without
    a utilisation sample of its own has an unknown share, not 0 (NVML may credit
    the server with its work). The server is left out: it runs in the device
    plugin's mps-control-daemon pod, which holds no GPU, and as a process of that
    pod it gave the pod a row of its own on every MPS GPU of the node."""
    server, c1, c2 = 900, 4242, 4343
    dev = _gpu(
        0,
        util=70,
        used=6 * GIB,
        procs=[(server, 512 * 2**20, 0)],
        mps_procs=[(c1, 2 * GIB, 0), (c2, 3 * GIB, 0)],
        compute_mode=real.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
        samples=[(server, NOW_US - 1_000_000, 30), (c1, NOW_US - 1_000_000, 40)],
    )
    poll = NvmlGpuSource(fake_nvml([dev]), clock=lambda: NOW).poll()
    assert [(p.pid, p.memory_used_bytes, p.utilization_ratio) for p in poll.processes] == [
        (c1, 2 * GIB, pytest.approx(0.4)),
        (c2, 3 * GIB, None),
    ]
    allocs = [
        Allocation("ml", "a", "main", "nvidia.com/gpu.shared", f"{dev.uuid}::0"),
        Allocation("ml", "b", "main", "nvidia.com/gpu.shared", f"{dev.uuid}::1"),
    ]
    pods = [
        PodMeta("ml", "a", "u-a", container_ids={"main": "ca"}),
        PodMeta("ml", "b", "u-b", container_ids={"main": "cb"}),
        PodMeta("nvidia", "mps-control-daemon", "u-m", container_ids={"mps": "cm"}),
    ]
    containers = {server: ContainerRef("cm"), c1: ContainerRef("ca"), c2: ContainerRef("cb")}
    rows = attribute(poll, allocs, pods, containers)
    assert [(r.pod, r.allocated, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("a", True, pytest.approx(0.4), 2 * GIB),
        ("b", True, None, 3 * GIB),
    ]


def test_no_process_of_a_mig_aggregate_is_taken_for_an_mps_server() -> None:
    """A privileged caller reads a MIG GPU's processes from its aggregate lists, every
    instance's in one. A MIG-enabled GPU cannot be in EXCLUSIVE_PROCESS mode (NVML
    answers NOT_SUPPORTED on its handle; the device plugin shares no MIG device
    with MPS): MPS clients on GPU instance 1 leave its other compute process, the
    server of a pod's own MPS, a process of the GPU like the one of instance 5."""
    server, client, plain = 500, 501, 600
    mps_instance = _mig_3g(b"NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    mps_instance.procs = [(server, 256 * 2**20, 1)]
    mps_instance.mps_procs = [(client, 2 * GIB, 1)]
    other = Dev(
        uuid="MIG-22222222-0000-0000-0000-000000000000",
        name=b"NVIDIA A100-SXM4-40GB MIG 2g.10gb",
        gpu_instance_id=5,
        total=10 * GIB,
        procs=[(plain, GIB, 5)],
    )
    parent = _a100_mig(migs={0: mps_instance, 1: other})
    poll = NvmlGpuSource(fake_nvml([parent], mig_monitor=True)).poll()
    assert sorted((p.pid, p.gpu_instance_id) for p in poll.processes) == [
        (server, 1),
        (client, 1),
        (plain, 5),
    ]


def test_the_only_mps_client_is_its_gpus_sole_holder() -> None:
    """One pod on an MPS GPU, its client without a sample of its own (NVML credited
    its work to the server): with the server a process of the mps-control-daemon
    pod, the GPU had two holders, the real one lost "sole" and its utilisation was
    unknown while the daemon's pod showed the GPU's 80 % and the server's memory.
    The server is no holder: the pod is the GPU's only one and gets its 80 %."""
    server, client = 100, 200
    dev = _gpu(
        0,
        util=80,
        used=3 * GIB,
        procs=[(server, 300 * 2**20, 0)],
        mps_procs=[(client, 2 * GIB, 0)],
        samples=[(server, NOW_US - 100_000, 80)],
        compute_mode=real.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
    )
    poll = NvmlGpuSource(fake_nvml([dev]), clock=lambda: NOW).poll()
    allocs = [Allocation("ml", "train", "trainer", "nvidia.com/gpu", f"{dev.uuid}::0")]
    pods = [
        PodMeta("ml", "train", "u1", container_ids={"trainer": "a" * 64}),
        PodMeta(
            "nvidia-device-plugin",
            "mps-control-daemon-x",
            "u2",
            container_ids={"mps-control-daemon": "d" * 64},
        ),
    ]
    containers = {server: ContainerRef("d" * 64, "u2"), client: ContainerRef("a" * 64, "u1")}
    rows = attribute(poll, allocs, pods, containers)
    assert [(r.pod, r.allocated, r.utilization_ratio, r.memory_used_bytes) for r in rows] == [
        ("train", True, pytest.approx(0.8), 2 * GIB)
    ]


@pytest.mark.parametrize(
    ("missing", "errors", "listed"),
    [
        (("nvmlDeviceGetMPSComputeRunningProcesses_v3",), {}, [8]),
        (
            (
                "nvmlDeviceGetMPSComputeRunningProcesses_v3",
                "nvmlDeviceGetMPSComputeRunningProcesses_v2",
            ),
            {},
            [7],
        ),
        (
            (),
            {"nvmlDeviceGetMPSComputeRunningProcesses": real.NVML_ERROR_NOT_SUPPORTED},
            [7],
        ),
    ],
    ids=["mps-v3-missing", "no-mps-symbol", "mps-not-supported"],
)
def test_mps_list_a_driver_lacks_or_refuses(
    missing: tuple[str, ...], errors: dict[str, int], listed: list[int]
) -> None:
    """The MPS list read from ``_v2`` where the library has no ``_v3`` (as the compute
    list): its client 8 is the device's process, the compute list's 7 the MPS
    server. A driver with neither, or answering NOT_SUPPORTED, has no MPS client to
    list: the compute list stands, complete."""
    dev = _gpu(
        0,
        procs=[(7, GIB, 0)],
        mps_procs=[(8, GIB, 0)],
        errors=errors,
        compute_mode=real.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
    )
    poll = NvmlGpuSource(fake_nvml([dev], missing=missing)).poll()
    assert [p.pid for p in poll.processes] == listed
    assert poll.process_list_failures == ()


def test_mps_list_failing_otherwise_leaves_the_list_unknown() -> None:
    dev = _gpu(
        0,
        procs=[(7, GIB, 0)],
        errors={"nvmlDeviceGetMPSComputeRunningProcesses": real.NVML_ERROR_NO_PERMISSION},
    )
    poll = NvmlGpuSource(fake_nvml([dev])).poll()
    assert poll.processes == () and poll.process_list_failures == (dev.uuid,)


def test_a_process_in_two_lists_is_one_process() -> None:
    """A process with both a compute and a graphics context is in both lists (nvidia-smi
    shows it as C+G): one process, its memory counted once."""
    dev = _gpu(0, procs=[(7, 2 * GIB, 0)], graphics_procs=[(7, 2 * GIB, 0), (9, GIB, 0)])
    poll = NvmlGpuSource(fake_nvml([dev])).poll()
    assert [(p.pid, p.memory_used_bytes) for p in poll.processes] == [(7, 2 * GIB), (9, GIB)]


def test_a_call_the_driver_lacks_is_not_tried_again() -> None:
    """pynvml loads the driver's library once: a call it lacks (``_v3`` process
    lists, ``nvmlDeviceGetMemoryInfo_v2``) is missing for the process' life, and is
    tried once, not on every device of every poll."""
    nv = fake_nvml(
        [_gpu(0, procs=[(7, GIB, 0)]), _gpu(1)],
        missing=(
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetMPSComputeRunningProcesses_v3",
            "nvmlDeviceGetMPSComputeRunningProcesses_v2",
            "nvmlDeviceGetMemoryInfo_v2",
        ),
    )
    tried: Counter[str] = Counter()

    def counting(name: str) -> None:
        call = getattr(nv, name)

        def counted(*args: object, **kwargs: object) -> object:
            tried[name + ("_v2" if "version" in kwargs else "")] += 1
            return call(*args, **kwargs)

        setattr(nv, name, counted)

    for name in (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetMPSComputeRunningProcesses",
        "nvmlDeviceGetMPSComputeRunningProcesses_v2",
        "nvmlDeviceGetMemoryInfo",
    ):
        counting(name)
    source = NvmlGpuSource(nv)
    for _ in range(3):
        poll = source.poll()
        assert [p.pid for p in poll.processes] == [7] and poll.process_list_failures == ()
        assert all(d.memory_used_bytes is not None for d in poll.devices)
    assert tried["nvmlDeviceGetComputeRunningProcesses"] == 1  # the unversioned (_v3)
    assert tried["nvmlDeviceGetMPSComputeRunningProcesses"] == 1
    assert tried["nvmlDeviceGetMPSComputeRunningProcesses_v2"] == 1
    assert tried["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert tried["nvmlDeviceGetMemoryInfo"] == 6  # v1: every device, every poll


def test_one_device_answering_not_supported_is_not_remembered_for_the_others() -> None:
    """What the library lacks is remembered; what one device answers is that device's:
    a T4 answering NOT_SUPPORTED to ``nvmlDeviceGetMigMode`` and to the v2 memory
    call, ahead of an A100 in MIG mode, leaves the A100 read as its instances, with
    v2 memory, on every poll."""
    t4 = _gpu(
        0,
        reserved=GIB,
        used=2 * GIB,
        errors={"nvmlDeviceGetMemoryInfo_v2": real.NVML_ERROR_NOT_SUPPORTED},
    )
    mig = _mig_3g(b"NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    a100 = _a100_mig(index=1, migs={0: mig})
    nv = fake_nvml([t4, a100])
    source = NvmlGpuSource(nv)
    for _ in range(2):
        poll = source.poll()
        assert poll.failures == ()
        assert [(d.uuid, d.gpu_instance_id, d.memory_used_bytes) for d in poll.devices] == [
            (t4.uuid, None, 3 * GIB),  # v1: the reserve included
            (a100.uuid, 1, 5 * GIB),
        ]
    assert nv.calls.count("nvmlDeviceGetMigMode") == 4  # each GPU, each poll


def _time_sliced_with_a_pods_own_mps(**kw) -> Dev:
    """GPU 0 time-sliced between pod a, which runs its own MPS (server 100, client 101),
    and pod b's plain CUDA process 200 (6 GiB, 80 % SM): the GPU is in DEFAULT
    compute mode, where an MPS server and ordinary processes share it."""
    return _gpu(
        0,
        util=90,
        used=8 * GIB,
        procs=[(100, 300 * 2**20, 0), (200, 6 * GIB, 0)],
        mps_procs=[(101, 2 * GIB, 0)],
        samples=[(200, NOW_US - 1_000, 80)],
        **kw,
    )


def test_a_plain_process_beside_an_mps_server_is_kept_in_default_compute_mode() -> None:
    """Only in EXCLUSIVE_PROCESS mode (what the device plugin's MPS daemon sets) is
    every non-client compute process the MPS server. In DEFAULT mode pod b's process
    was taken for the server and dropped: pod b, busy at 80 % with 6 GiB, read 0 and
    0 — an idle holder, GpuEtaGpuAllocatedIdle firing."""
    dev = _time_sliced_with_a_pods_own_mps()
    poll = NvmlGpuSource(fake_nvml([dev]), clock=lambda: NOW).poll()
    assert sorted(p.pid for p in poll.processes) == [100, 101, 200]
    allocs = [
        Allocation("ml", "a", "c", "nvidia.com/gpu", f"{dev.uuid}::0"),
        Allocation("ml", "b", "c", "nvidia.com/gpu", f"{dev.uuid}::1"),
    ]
    pods = [
        PodMeta("ml", "a", "ua", container_ids={"c": "a" * 64}),
        PodMeta("ml", "b", "ub", container_ids={"c": "b" * 64}),
    ]
    containers = {
        100: ContainerRef("a" * 64, "ua"),
        101: ContainerRef("a" * 64, "ua"),
        200: ContainerRef("b" * 64, "ub"),
    }
    rows = {r.pod: r for r in attribute(poll, allocs, pods, containers)}
    assert rows["b"].utilization_ratio == pytest.approx(0.8)
    assert rows["b"].memory_used_bytes == 6 * GIB


@pytest.mark.parametrize(
    ("missing", "error"),
    [
        ((), real.NVML_ERROR_NOT_SUPPORTED),
        ((), real.NVML_ERROR_NO_PERMISSION),
        ((), real.NVML_ERROR_UNKNOWN),
        (("nvmlDeviceGetComputeMode",), None),
    ],
    ids=["not-supported", "no-permission", "unknown", "no-symbol"],
)
def test_a_compute_mode_nvml_does_not_give_drops_no_process(
    missing: tuple[str, ...], error: int | None
) -> None:
    """The GPU in EXCLUSIVE_PROCESS mode, but NVML not saying so (an error, or a library
    without the call): the mode is unknown and no process is dropped on a guess —
    dropped, a workload made its busy pod read idle. The device still reads, and a
    call the library lacks is asked once."""
    errors = {} if error is None else {"nvmlDeviceGetComputeMode": error}
    dev = _time_sliced_with_a_pods_own_mps(
        compute_mode=real.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, errors=errors
    )
    nv = fake_nvml([dev], missing=missing)
    source = NvmlGpuSource(nv, clock=lambda: NOW)
    for _ in range(2):
        poll = source.poll()
        assert poll.failures == () and poll.process_list_failures == ()
        assert sorted(p.pid for p in poll.processes) == [100, 101, 200]
    assert nv.calls.count("nvmlDeviceGetComputeMode") == (1 if missing else 2)


def test_the_compute_mode_is_read_only_beside_mps_clients() -> None:
    """In EXCLUSIVE_PROCESS mode the compute process beside the client is the server
    and is left out; a device without MPS clients costs no compute-mode call."""
    exclusive = real.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    mps = _time_sliced_with_a_pods_own_mps(compute_mode=exclusive)
    plain = _gpu(1, procs=[(300, GIB, 0)], compute_mode=exclusive)
    nv = fake_nvml([mps, plain])
    poll = NvmlGpuSource(nv, clock=lambda: NOW).poll()
    assert [(p.device_uuid, p.pid) for p in poll.processes] == [(mps.uuid, 101), (plain.uuid, 300)]
    assert nv.calls.count("nvmlDeviceGetComputeMode") == 1
