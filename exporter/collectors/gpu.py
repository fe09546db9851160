"""GPU readings through NVML (nvidia-ml-py's ``pynvml``): devices, MIG, processes.

Thin on purpose: it maps NVML calls to ``DeviceReading``/``ProcessSample`` records and
decides nothing else. The ``pynvml`` module is injected (constructor argument), so
tests drive it with a fake module that keeps pynvml's function names, ctypes return
structs and error classes; nothing here can be tested against a real GPU on a
machine without one.

Failure granularity follows the issue: an ``NVMLError`` on one device (lost GPU,
Xid, not supported) becomes a ``DeviceFailure`` with a short reason and the other
devices keep flowing; only failing to enumerate devices at all fails the poll
(``CollectorError``). Missing NVML (no driver) is ``NvmlUnavailable`` at
``load_library()`` (or ``open()``), which the CLI turns into its one-line message —
unless ``wait_for_driver`` is set (the DaemonSet does): then the source waits for
the driver instead. The exporter never calls ``nvmlInit`` outside a poll: it can
block, and a poll runs under the scheduler's timeout (``build``).

The driver's lifecycle (GPU Operator upgrades it, or changes MIG, under a running
exporter): when an NVML call says the driver is gone (not loaded, library not
found, uninitialised), the source shuts NVML down at once — so it holds
nothing that keeps the kernel module from unloading — and reports every device it
knew as unread (``DeviceFailure`` reason ``driver_not_loaded``:
``gpu_eta_gpu_read_success`` 0), kept as last read with its MIG instances
(``unread_poll``), as a failing device is: a MIG holder's ``MIG-…`` or ``<i>:<j>``
id names no whole GPU, so without them its row went and it counted unresolved. Each later poll tries ``nvmlInit`` again and
reads normally once it succeeds. With no device known yet (no driver at start) a
poll raises ``CollectorError`` (``gpu_eta_exporter_collector_success{collector="gpu"}``
0) instead of exiting, and ``/healthz`` stays up: a clean wait, not a crash loop.

A driver upgraded under a running exporter comes back as another version: pynvml
loaded ``libnvidia-ml.so.1`` once (``_LoadNvmlLibrary``) and never loads it again,
and the library the container runtime injected is the old one, so every
``nvmlInit`` answers LIB_RM_VERSION_MISMATCH until the container restarts. The
source then asks for that restart (``restart_reason``, which ``/healthz`` reports)
once the mismatch has lasted ``mismatch_grace_seconds`` and
``MISMATCH_GRACE_POLLS`` polls: a mismatch seen only while the upgrade itself runs
(the new module loaded before the new library is in place) passes without one.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Sequence
from types import ModuleType
from typing import Any, TypeVar

from gpu_eta.exporter.collectors import CollectorError, ExporterError, StartupError
from gpu_eta.exporter.collectors.registry import BuildContext, Collector, register
from gpu_eta.exporter.readings import (
    DeviceFailure,
    DeviceReading,
    GpuPoll,
    ProcessSample,
    unread_poll,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")

NO_NVML_MESSAGE = "NVML library not found (no NVIDIA driver on this node)"
MISMATCH_REASON = "version_mismatch"
# "… MIG 2g.10gb", or "… MIG 1c.2g.10gb" for a compute instance smaller than its GPU
# instance: the GPU instance's profile is the part after "<n>c." (DCGM's GPU_I_PROFILE)
_MIG_PROFILE_RE = re.compile(r"MIG\s+(?:[0-9]+c\.)?(\S+)\s*$")
# NVML error constant name -> short, low-cardinality reason label
_REASONS = {
    "NVML_ERROR_GPU_IS_LOST": "gpu_lost",
    "NVML_ERROR_NOT_SUPPORTED": "not_supported",
    "NVML_ERROR_NO_PERMISSION": "no_permission",
    "NVML_ERROR_RESET_REQUIRED": "reset_required",
    "NVML_ERROR_TIMEOUT": "timeout",
    "NVML_ERROR_IRQ_ISSUE": "irq_issue",
    "NVML_ERROR_CORRUPTED_INFOROM": "corrupted_inforom",
    "NVML_ERROR_INSUFFICIENT_POWER": "insufficient_power",
    "NVML_ERROR_GPU_NOT_FOUND": "gpu_not_found",
    "NVML_ERROR_MEMORY": "memory",
    "NVML_ERROR_UNKNOWN": "unknown",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": MISMATCH_REASON,
}
# A version mismatch lasting this long (and this many polls) is the driver upgraded
# under this process, not the moment of the upgrade: restart (see the module doc).
MISMATCH_GRACE_SECONDS = 60.0
MISMATCH_GRACE_POLLS = 3


# How far past the source's clock a process-utilisation sample's timestamp may be
# (NVML stamps them with the host's clock, in µs): a sample later than that is garbage
SAMPLE_CLOCK_SLACK_US = 1_000_000

# How long close() waits for a poll's NVML calls before it gives up on nvmlShutdown.
CLOSE_WAIT_SECONDS = 2.0

DRIVER_GONE_REASON = "driver_not_loaded"
# NVML errors that mean the driver (not one device) is away: shut down, wait, re-init.
_DRIVER_GONE = (
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_UNINITIALIZED",
)
# Answers of one device meaning "nothing to read here" (a symbol the library lacks is
# that for every device: ``NvmlGpuSource._unless_absent``):
# nvmlDeviceGetMemoryInfo_v2's, read v1 instead
_MEMORY_V1 = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")
# an MPS or graphics process list's, the driver has none to list; nvmlDeviceGetMigMode's,
# a GPU without MIG; nvmlDeviceGetMemoryInfo's (v1), a GPU without memory of its own
_NOT_SUPPORTED = ("NVML_ERROR_NOT_SUPPORTED",)

# One process record as the ``_v2`` lists write it (nvmlProcessInfo_v2_t: pid,
# usedGpuMemory, gpuInstanceId, computeInstanceId) and as R525–R535 drivers write it
# from ``_v3`` (nvmlProcessInfo_v3_t, usedGpuCcProtectedMemory added), in bytes
PROCESS_RECORD_V2_BYTES = 24
PROCESS_RECORD_V3_WIDE_BYTES = 32
# The symbols that tell those drivers, as nvitop tells them (api/libnvml.py): the wide
# record came with confidential computing and went when its memory moved to
# nvmlDeviceGetRunningProcessDetailList (R550)
_WIDE_V3_PRESENT = "nvmlDeviceGetConfComputeMemSizeInfo"
_WIDE_V3_ABSENT = "nvmlDeviceGetRunningProcessDetailList"
# pids no process has: what a list read at the wrong record size shows (the bytes of
# another record's memory or gpuInstanceId, 0xFFFFFFFF off MIG)
_NO_PID = (0, 0xFFFFFFFF)


class NvmlUnavailable(ExporterError):
    """NVML cannot be loaded or initialised on this node (no driver, no library)."""


class GarbledProcessList(ExporterError):
    """An NVML process list holding a record no process has (pid 0 or 0xFFFFFFFF):
    read at the wrong record size, so no record of it can be trusted."""


def _codes_of(nvml: Any, names: Sequence[str]) -> set[int]:
    """The codes of the named NVML errors this pynvml defines (an older release lacks
    some: a name it lacks is no code, not an AttributeError)."""
    return {getattr(nvml, name) for name in names if hasattr(nvml, name)}


def _text(value: Any) -> str:
    """pynvml returns ``bytes`` or ``str`` depending on its version."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class NvmlGpuSource:
    """``GpuSource`` over NVML. Call ``open()`` once, then ``poll()`` each cycle."""

    def __init__(
        self,
        nvml: ModuleType | Any | None = None,
        *,
        wait_for_driver: bool = False,
        clock: Callable[[], float] = time.time,
        mismatch_grace_seconds: float = MISMATCH_GRACE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        poll_timeout_seconds: float | None = None,
    ) -> None:
        """``poll_timeout_seconds``: how long the scheduler waits for a ``poll()``
        (``--collection.timeout``); an ``nvmlInit`` slower than that answers a poll
        nobody waits for, so its failure is logged here (``_init_late``)."""
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py: imports fine without a driver
        self._nvml = nvml
        self._clock = clock  # unix seconds: bounds the process samples' timestamps
        self._wait_for_driver = wait_for_driver
        self._mismatch_grace_seconds = mismatch_grace_seconds
        self._monotonic = monotonic  # how long a version mismatch (or an nvmlInit) lasted
        self._poll_timeout_seconds = poll_timeout_seconds
        self._late_said: str | None = None  # the last late nvmlInit failure logged
        # the unbroken run of polls answering LIB_RM_VERSION_MISMATCH: since, how many
        self._mismatch_since: float | None = None
        self._mismatch_polls = 0
        self._restart_reason: str | None = None
        self._initialised = False
        # whether nvmlInit has been called once; its first failure if that ends the start
        self._init_tried = False
        self._startup_error: NvmlUnavailable | None = None
        # by index, the UUID of every device read since the driver last came up and its
        # last readings (a MIG GPU's: one per instance): reported unread while the
        # driver is away or the device fails (``unread_poll``)
        self._known: dict[int, tuple[str, tuple[DeviceReading, ...]]] = {}
        self._driver_gone_codes = _codes_of(nvml, _DRIVER_GONE)
        self._lock = threading.Lock()
        # per device UUID: newest process-utilisation sample timestamp (µs) seen
        self._last_seen: dict[str, int] = {}
        self._codes = {
            getattr(nvml, name): reason for name, reason in _REASONS.items() if hasattr(nvml, name)
        }
        self._memory_v1_codes = _codes_of(nvml, _MEMORY_V1)
        self._not_supported_codes = _codes_of(nvml, _NOT_SUPPORTED)
        # A symbol the driver's libnvidia-ml lacks: FUNCTION_NOT_FOUND from a versioned
        # call, NVMLLibraryMismatchError (a plain Exception, no NVMLError) from pynvml's
        # unversioned wrappers (``throwOnVersionMismatch``); older nvidia-ml-py releases
        # have no such class
        self._symbol_missing: tuple[type[BaseException], ...] = (
            nvml.NVMLError_FunctionNotFound,
            *(getattr(nvml, n) for n in ("NVMLLibraryMismatchError",) if hasattr(nvml, n)),
        )
        # the NVML calls the driver's library was found to lack: not tried again
        # (``_unless_absent``)
        self._absent: set[str] = set()
        # UUIDs of the MIG GPUs whose aggregate process list NVML refused this NVML
        # session: their instances' lists are read straight away (``_mig_processes``)
        self._aggregate_refused: set[str] = set()
        # whether pynvml's unversioned (``_v3``) process lists read the driver's records
        # at their size: told once (``_v3_lists_readable``), the library is loaded once
        self._v3_readable: bool | None = None
        self._garbled_logged = False

    # -- lifecycle -------------------------------------------------------------------

    def open(self) -> None:
        """``nvmlInit``; ``NvmlUnavailable`` with a one-line reason if it cannot —
        or, with ``wait_for_driver`` and no driver loaded, a warning and a wait
        (each ``poll()`` tries again).

        The exporter does not call it: ``nvmlInit`` can block (the RM lock held by a
        stuck process), and its first ``poll()`` initialises NVML under the
        scheduler's timeout instead, the same answer kept for ``startup_error``.
        """
        with self._lock:
            self._init_tried = True
            try:
                self._init()
            except NvmlUnavailable as err:
                if self._fatal_at_start(err):
                    raise
                self._log_wait(err)

    def _log_wait(self, err: NvmlUnavailable) -> None:
        """The one line saying what a first ``nvmlInit`` failure waits for."""
        if self._mismatch(err.__cause__):  # polls decide: it may pass
            log.warning("%s: waiting for it to pass (or a restart)", err)
        else:
            log.warning("%s: waiting for the driver (GPU metrics follow once it loads)", err)

    def _init_late(self, err: NvmlUnavailable, took_seconds: float, first: bool) -> None:
        """Log the failure of an ``nvmlInit`` that took longer than the poll timeout
        (once per answer; a first one that waits for the driver has had its line,
        ``_log_wait``, and no driver is the poll's own answer, ``_away``): the
        scheduler gave its poll up, so the error it raises is never seen. Why: a
        refusal (no permission on the device nodes) answered after the start had gone
        on showed only as "timed out" at every poll. A first refusal answered that
        late ends nothing: it is logged as an ERROR and the next poll asks NVML again,
        since a driver loading slowly at boot (UNKNOWN, or NO_PERMISSION until udev
        fixes the device nodes) answers so and then comes up, and a lasting version
        mismatch must reach ``_count_mismatch`` to ask for the restart."""
        timeout = self._poll_timeout_seconds
        if not self._late(took_seconds) or str(err) == self._late_said:
            return
        self._late_said = str(err)
        if first and self._fatal_at_start(err):
            log.error(
                "%s (nvmlInit answered after %.1fs, the start having gone on at the %gs "
                "collection timeout): NVML is asked again at each poll",
                err,
                took_seconds,
                timeout,
            )
        elif not first and str(err) != NO_NVML_MESSAGE:
            log.warning(
                "%s (nvmlInit answered after %.1fs, past the %gs collection timeout)",
                err,
                took_seconds,
                timeout,
            )

    def _late(self, took_seconds: float) -> bool:
        """Whether an ``nvmlInit`` took longer than the scheduler waits for a poll."""
        timeout = self._poll_timeout_seconds
        return timeout is not None and took_seconds > timeout

    def load_library(self) -> None:
        """Load ``libnvidia-ml.so.1`` without initialising NVML (a ``dlopen``, which
        does not wait on the driver as ``nvmlInit`` can): ``NvmlUnavailable`` with
        the no-driver line where there is none, unless ``wait_for_driver``. So a node
        without the driver is told so first, before any other start-up error. A
        pynvml without ``_LoadNvmlLibrary`` loads it at ``nvmlInit`` instead."""
        load = getattr(self._nvml, "_LoadNvmlLibrary", None)
        if load is None:
            return
        try:
            load()
        except self._nvml.NVMLError as err:
            if self._driver_gone(err) and not self._wait_for_driver:
                raise NvmlUnavailable(NO_NVML_MESSAGE) from err
            log.debug("NVML library not loaded: %s", err)

    def _fatal_at_start(self, err: NvmlUnavailable) -> bool:
        """Whether NVML's first answer ends the start: any failure, except (with
        ``wait_for_driver``) no driver loaded or a version mismatch, which polls wait
        out."""
        if not self._wait_for_driver:
            return True
        return not self._mismatch(err.__cause__) and str(err) != NO_NVML_MESSAGE

    def startup_error(self) -> NvmlUnavailable | None:
        """The failure of the first ``nvmlInit`` (made by ``open()`` or the first
        ``poll()``) that ends the start, or None: none, or no answer yet (a call
        still blocked is no reason to stop), or an answer past the poll timeout (the
        start has gone on: polls ask again). Lock-free, as ``restart_reason``."""
        return self._startup_error

    def _init(self) -> None:
        nv = self._nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as err:
            if getattr(err, "value", None) in self._driver_gone_codes:
                raise NvmlUnavailable(NO_NVML_MESSAGE) from err
            raise NvmlUnavailable(f"NVML initialisation failed: {err}") from err
        self._initialised = True
        # A refused aggregate is asked again in a new session: the driver reloaded
        # under us may set its capability device nodes otherwise. What the library
        # lacks (``_absent``) stays: pynvml never loads it again.
        self._aggregate_refused.clear()

    def close(self, timeout_seconds: float = CLOSE_WAIT_SECONDS) -> None:
        """``nvmlShutdown``; errors ignored (the process is ending).

        A poll holds the lock across its NVML calls, and an NVML call on a GPU that
        fell off the bus can block for minutes. Shutdown must not wait for it (the
        kubelet's SIGKILL would come first): after ``timeout_seconds`` without the
        lock, NVML is left initialised — the process exit releases it anyway.
        """
        if not self._lock.acquire(timeout=timeout_seconds):
            log.warning(
                "an NVML call has not returned for %.1fs: exiting without nvmlShutdown",
                timeout_seconds,
            )
            return
        try:
            self._shutdown()
        finally:
            self._lock.release()

    def _shutdown(self) -> None:
        if not self._initialised:
            return
        self._initialised = False
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as err:
            log.debug("nvmlShutdown: %s", err)

    @property
    def driver_loaded(self) -> bool:
        """Whether NVML is initialised (the driver answered the last init)."""
        return self._initialised

    def _driver_gone(self, err: BaseException) -> bool:
        return getattr(err, "value", None) in self._driver_gone_codes

    def _mismatch(self, err: BaseException | None) -> bool:
        return err is not None and self.reason(err) == MISMATCH_REASON

    def restart_reason(self) -> str | None:
        """Why only a restart of the process can read the GPUs again, or None: the
        NVML library no longer matches the driver (see the module doc). Lock-free:
        ``/healthz`` reads it while a poll may hang inside NVML."""
        return self._restart_reason

    def _count_mismatch(self, mismatch: bool) -> None:
        """Record one poll's outcome: a mismatch extends the run, anything else ends
        it; the run past its grace sets ``restart_reason`` (one log line)."""
        if not mismatch:
            if self._restart_reason is not None:
                log.warning("the NVML/RM version mismatch ended: no restart needed")
            self._mismatch_since, self._mismatch_polls = None, 0
            self._restart_reason = None
            return
        now = self._monotonic()
        if self._mismatch_since is None:
            self._mismatch_since = now
        self._mismatch_polls += 1
        lasted = now - self._mismatch_since
        if (
            self._restart_reason is None
            and self._mismatch_polls >= MISMATCH_GRACE_POLLS
            and lasted >= self._mismatch_grace_seconds
        ):
            self._restart_reason = (
                f"NVML/RM version mismatch for {lasted:.0f}s: the NVIDIA driver was "
                "upgraded under this process and its NVML library is the old one; "
                "only a restart loads the new one"
            )
            log.error("%s: /healthz fails so that the container is restarted", self._restart_reason)

    def _away(self, detail: str) -> GpuPoll:
        """The poll while the driver is away: every known device unread, kept as last
        read (``unread_poll``) so that its MIG instances' holders keep their rows."""
        if not self._known:
            raise CollectorError(f"{NO_NVML_MESSAGE}: waiting for the driver ({detail})")
        failures: list[DeviceFailure] = []
        last: list[DeviceReading] = []
        for index, (uuid, devs) in sorted(self._known.items()):
            failures.append(DeviceFailure(index, uuid, DRIVER_GONE_REASON, detail[:200]))
            last.extend(devs)
        return unread_poll(last, failures)

    def reason(self, err: BaseException) -> str:
        """Short reason label of an NVML error (``gpu_lost``, ``not_supported``...)."""
        return self._codes.get(getattr(err, "value", None), "nvml_error")

    # -- polling ---------------------------------------------------------------------

    def poll(self) -> GpuPoll:
        """Every device; one device's NVML error is a ``DeviceFailure``, not an exception."""
        nv = self._nvml
        with self._lock:
            if not self._initialised:
                first, self._init_tried = not self._init_tried, True
                started = self._monotonic()
                try:
                    self._init()
                except NvmlUnavailable as err:
                    took = self._monotonic() - started
                    if first and self._fatal_at_start(err):
                        # answered past the timeout, the start has gone on: no start
                        # error then, later polls ask again (``_init_late``)
                        if not self._late(took):
                            self._startup_error = err
                    elif first:
                        self._log_wait(err)
                    self._init_late(err, took, first)
                    self._count_mismatch(self._mismatch(err.__cause__))
                    if str(err) != NO_NVML_MESSAGE:
                        raise CollectorError(str(err)) from err
                    return self._away(str(err.__cause__ or err))
                self._late_said = None
                if first:
                    log.info("NVML initialised")
                else:
                    log.warning("NVIDIA driver loaded: NVML initialised, reading GPUs again")
                self._known.clear()
                self._last_seen.clear()
            try:
                count = int(nv.nvmlDeviceGetCount())
            except nv.NVMLError as err:
                self._count_mismatch(self._mismatch(err))
                if self._driver_gone(err):
                    return self._release(err)
                raise CollectorError(f"NVML device count failed: {err}") from err
            try:
                driver = _text(nv.nvmlSystemGetDriverVersion())
            except nv.NVMLError:
                driver = ""
            devices: list[DeviceReading] = []
            processes: list[ProcessSample] = []
            failures: list[DeviceFailure] = []
            unlisted: list[str] = []
            for i in range(count):
                uuid: str | None = None
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(i)
                    uuid = _text(nv.nvmlDeviceGetUUID(handle))
                    devs, procs = self._read_device(handle, i, uuid)
                except nv.NVMLError as err:
                    if self._driver_gone(err):
                        return self._release(err)
                    # A GPU off the bus fails at its handle: name it by the UUID read
                    # before, so its series (and the DCGM join, its holders' rows) stay.
                    uuid = uuid or self._known.get(i, (None, ()))[0]
                    failures.append(DeviceFailure(i, uuid, self.reason(err), str(err)[:200]))
                    # kept as last read (by UUID), MIG instances too: a holder's MIG-… or
                    # <i>:<j> id names no failing GPU
                    last = next((d for u, d in self._known.values() if u == uuid), ())
                    kept = unread_poll(last, ())
                    devices.extend(kept.devices)
                    unlisted.extend(kept.process_list_failures)
                    continue
                self._known[i] = (uuid, tuple(devs))
                devices.extend(devs)
                if procs is None:
                    unlisted.append(uuid)
                else:
                    processes.extend(procs)
            # every device failing with the mismatch is the library outdated (those
            # read before are kept as last read: ``devices`` is not empty then)
            self._count_mismatch(
                bool(failures)
                and len(failures) == count
                and all(f.reason == MISMATCH_REASON for f in failures)
            )
            return GpuPoll(
                tuple(devices), tuple(processes), tuple(failures), driver, tuple(unlisted)
            )

    def _release(self, err: BaseException) -> GpuPoll:
        """The driver went away mid-poll: let NVML go now, report the devices unread."""
        log.warning("NVIDIA driver gone (%s): NVML released until it is back", err)
        self._shutdown()
        return self._away(str(err))

    def _read_device(
        self, handle: Any, position: int, uuid: str
    ) -> tuple[list[DeviceReading], list[ProcessSample] | None]:
        nv = self._nvml
        try:
            index = int(nv.nvmlDeviceGetIndex(handle))
        except nv.NVMLError:
            index = position
        model = _text(nv.nvmlDeviceGetName(handle))
        if self._mig_enabled(handle):
            devices, instances = self._mig_devices(handle, index, uuid, model)
            if not devices:
                devices = [self._mig_parent(handle, index, uuid, model)]
            return devices, self._mig_processes(handle, uuid, instances)
        device = DeviceReading(index=index, uuid=uuid, model=model, **self._usage(handle))
        return [device], self._processes(handle, uuid, mig=False)

    def _usage(self, handle: Any) -> dict[str, Any]:
        """Utilisation and memory of a whole GPU or one MIG instance: the same NVML
        calls answer both, given the device's or the instance's handle."""
        nv = self._nvml
        util = self._unless_absent(
            "nvmlDeviceGetUtilizationRates",
            nv.nvmlDeviceGetUtilizationRates,
            handle,
            not_here=self._not_supported_codes,
        )
        mem = self._memory(handle)
        return {
            "utilization_ratio": None if util is None else min(1.0, util.gpu / 100.0),
            "memory_used_bytes": None if mem is None else int(mem.used),
            "memory_total_bytes": None if mem is None else int(mem.total),
        }

    def _memory(self, handle: Any) -> Any | None:
        """Memory info whose ``used`` is the memory allocated on the device; None for a
        device with no memory figure.

        ``nvmlMemory_v2_t.used`` is allocated memory alone, the driver's and
        firmware's reserve apart in ``reserved`` (nvidia-smi's "used"); the v1
        ``nvmlMemory_t.used`` counts the reserve too, hundreds of MB on an idle GPU,
        so it is never 0 and a sole holder would be charged the driver's memory. A
        driver whose library has no ``nvmlDeviceGetMemoryInfo_v2``, or that refuses
        it or the struct version, is read with v1.

        A GPU that shares the host's memory (DGX Spark's GB10, Jetson Thor) answers
        NOT_SUPPORTED to v1 too: it has no device memory to report, which is no
        failing GPU (its utilisation and processes read as any other's).
        """
        nv = self._nvml
        version = getattr(nv, "nvmlMemory_v2", None)
        mem = None
        if version is not None:
            mem = self._unless_absent(
                "nvmlDeviceGetMemoryInfo_v2",
                nv.nvmlDeviceGetMemoryInfo,
                handle,
                version=version,
                not_here=self._memory_v1_codes,
            )
        if mem is not None:
            return mem
        return self._unless_absent(
            "nvmlDeviceGetMemoryInfo",
            nv.nvmlDeviceGetMemoryInfo,
            handle,
            not_here=self._not_supported_codes,
        )

    def _mig_parent(self, handle: Any, index: int, uuid: str, model: str) -> DeviceReading:
        """A MIG-enabled GPU with no instance yet (the MIG manager between enabling MIG
        and creating instances, or a GPU left so): the GPU itself, so that its info
        and read-success series stay. NVML measures no utilisation under MIG, and
        gives the parent's memory only to a privileged caller: unknown otherwise."""
        nv = self._nvml
        try:
            mem = self._memory(handle)
        except nv.NVMLError_NoPermission:
            mem = None
        return DeviceReading(
            index=index,
            uuid=uuid,
            model=model,
            utilization_ratio=None,
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
        )

    def _mig_enabled(self, handle: Any) -> bool:
        """Whether MIG is on; not on a GPU without MIG (NOT_SUPPORTED) nor on a driver
        older than MIG (R450), whose library has no ``nvmlDeviceGetMigMode``: pynvml
        fails it with FUNCTION_NOT_FOUND, which is no failing device (and is not
        asked again: the library is loaded once)."""
        nv = self._nvml
        mode = self._unless_absent(
            "nvmlDeviceGetMigMode",
            nv.nvmlDeviceGetMigMode,
            handle,
            not_here=self._not_supported_codes,
        )
        return mode is not None and int(mode[0]) == int(nv.NVML_DEVICE_MIG_ENABLE)

    def _mig_devices(
        self, handle: Any, index: int, uuid: str, model: str
    ) -> tuple[list[DeviceReading], list[tuple[Any, int]]]:
        """The GPU's MIG GPU instances, in the order of their first slot, and each MIG
        device handle (compute instance) with its GPU instance id.

        A MIG device handle is a compute instance (nvmlDeviceIsMigDeviceHandle), and a
        GPU instance may be split into several (a 2g profile into two 1c compute
        instances): each has its own handle, slot and ``MIG-…`` UUID, but the GPU
        instance id, and the memory, are the GPU instance's. The device is the GPU
        instance, as DCGM's series are (dcgm-exporter watches GPU instances, labelled
        ``GPU_I_ID``/``GPU_I_PROFILE``, no compute-instance label): one reading per
        instance id, read once, holding every compute instance's slot and UUID so that
        each id the device plugin hands out resolves to it. One reading per handle
        gave the same series twice, which Prometheus keeps only once.
        """
        nv = self._nvml
        by_giid: dict[int, DeviceReading] = {}
        instances: list[tuple[Any, int]] = []
        for j in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            except (nv.NVMLError_NotFound, nv.NVMLError_InvalidArgument):
                # slot j holds no instance; INVALID_ARGUMENT is skipped too, as
                # NVIDIA's go-nvlib (device.VisitMigDevices) does, not a failing GPU
                continue
            giid = int(nv.nvmlDeviceGetGpuInstanceId(mig))
            instances.append((mig, giid))
            mig_uuid = _text(nv.nvmlDeviceGetUUID(mig))
            seen = by_giid.get(giid)
            if seen is not None:  # another compute instance of that GPU instance
                by_giid[giid] = dataclasses.replace(
                    seen,
                    mig_uuids=(*seen.mig_uuids, mig_uuid),
                    mig_slots=(*seen.mig_slots, j),
                )
                continue
            profile_match = _MIG_PROFILE_RE.search(_text(nv.nvmlDeviceGetName(mig)))
            by_giid[giid] = DeviceReading(
                index=index,
                uuid=uuid,
                model=model,
                **self._usage(mig),
                gpu_instance_id=giid,
                mig_uuids=(mig_uuid,),
                mig_profile=profile_match.group(1) if profile_match else None,
                mig_slots=(j,),  # the device plugin's <i>:<j> names the slot
            )
        return list(by_giid.values()), instances

    def _mig_processes(
        self, handle: Any, uuid: str, instances: Sequence[tuple[Any, int]]
    ) -> list[ProcessSample] | None:
        """The processes of a MIG-enabled GPU, each with its GPU instance id.

        NVML lists them on the GPU's handle (the aggregate, ``gpuInstanceId`` in each
        record) "only if the caller has appropriate privileges" (the MIG monitor
        nvidia-capability, which uid 0 holds implicitly only with CAP_SYS_ADMIN: MIG
        user guide, "Device Nodes and Capabilities"; the DaemonSet drops every
        capability) and answers NO_PERMISSION otherwise; per-instance lists come from the MIG device handles
        (NVML API reference, nvmlDeviceGetComputeRunningProcesses_v3). So a refused
        aggregate is read instance by instance, each process given the GPU instance
        id of the handle that listed it; one instance's list failing leaves the GPU's
        processes unknown (``None``), as the refused aggregate did before.

        The refusal is the process' capabilities' answer, which do not change: it is
        remembered per GPU, and the aggregate is not asked again until NVML is
        initialised again (``_init``).
        """
        nv = self._nvml
        if uuid not in self._aggregate_refused:
            try:
                return self._processes(handle, uuid, mig=True, refused=nv.NVMLError_NoPermission)
            except nv.NVMLError_NoPermission as err:
                self._aggregate_refused.add(uuid)
                log.debug("device %s: aggregate process list refused: %s", uuid, err)
        if not instances:
            return None
        out: list[ProcessSample] = []
        seen: set[tuple[int, int | None]] = set()
        for mig, giid in instances:
            procs = self._processes(mig, uuid, mig=True, gpu_instance_id=giid)
            if procs is None:
                return None
            for proc in procs:  # two compute instances of one GPU instance: once
                if (proc.pid, proc.gpu_instance_id) not in seen:
                    seen.add((proc.pid, proc.gpu_instance_id))
                    out.append(proc)
        return out

    def _processes(
        self,
        handle: Any,
        uuid: str,
        *,
        mig: bool,
        gpu_instance_id: int | None = None,
        refused: type[BaseException] | tuple[()] = (),
    ) -> list[ProcessSample] | None:
        """The device's processes with their memory and (if available) SM share; None
        when NVML refuses the list — unknown, which is not "no process". An error of
        the ``refused`` class is raised instead (the caller reads the list another
        way). ``gpu_instance_id`` is that of the MIG device handle listed; without it,
        a MIG GPU's records give theirs.

        ``nvmlDeviceGetProcessUtilization`` returns samples newer than the last-seen
        timestamp we pass; NOT_FOUND means none arrived (idle processes: 0). An MPS
        client without a sample of its own has an unknown share instead: NVML may
        credit its work to the MPS server. Under MIG it is not supported and
        utilisation stays unknown (None).
        """
        nv = self._nvml
        try:
            running = self._running_processes(handle)
        except refused:
            raise
        except nv.NVMLError as err:
            log.debug("device %s: process list unavailable: %s", uuid, err)
            return None
        except GarbledProcessList as err:
            # once at WARNING: every list of every device is so until a restart
            log.log(
                logging.DEBUG if self._garbled_logged else logging.WARNING,
                "device %s: process list unknown: %s",
                uuid,
                err,
            )
            self._garbled_logged = True
            return None
        if running is None:  # the library has no compute list (logged once)
            return None
        infos, mps_clients = running
        util_by_pid: dict[int, float | None] | None = (
            None if mig else self._process_util(handle, uuid)
        )
        out: list[ProcessSample] = []
        for info in infos:
            pid = int(info.pid)
            memory = info.usedGpuMemory
            giid = gpu_instance_id
            if giid is None and mig:
                giid = getattr(info, "gpuInstanceId", None)
            util = None
            if util_by_pid is not None:
                util = util_by_pid.get(pid, None if pid in mps_clients else 0.0)
            out.append(
                ProcessSample(
                    pid=pid,
                    device_uuid=uuid,
                    gpu_instance_id=None if giid is None else int(giid),
                    memory_used_bytes=None if memory is None else int(memory),
                    utilization_ratio=util,
                )
            )
        return out

    def _running_processes(self, handle: Any) -> tuple[list[Any], frozenset[int]] | None:
        """Every process with a context on the device, one record per pid, the MPS
        server left out, and the pids that are MPS clients; None where the driver's
        library has no compute list (older than R450: neither ``_v3`` nor ``_v2``),
        remembered like any symbol it lacks (``_unless_absent``): the processes are
        unknown, never "none".

        NVML lists processes in three lists: compute contexts, MPS clients' compute
        contexts (``nvmlDeviceGetMPSComputeRunningProcesses``: under MPS, as the device
        plugin's ``sharing.mps`` runs it, the compute list shows the MPS server and
        not the pods' processes) and graphics contexts. A process in two lists (a
        compute and a graphics context) is kept once, with its first record. The
        compute list failing leaves the device's processes unknown; the other two
        are left out where the driver has not got them (no symbol, NOT_SUPPORTED),
        and fail the list like the compute one otherwise.

        While the MPS list names a client and the device is in EXCLUSIVE_PROCESS
        compute mode (``_exclusive_process``), a compute-list process that is no
        client is the MPS server: in that mode, which the device plugin's control
        daemon sets, the server holds the one compute context and the clients work
        through it. It is left out: it runs in the plugin's mps-control-daemon pod,
        which holds no GPU, and kept it gave that pod a row on every MPS GPU and made
        the GPU's real holder share it. In any other mode an MPS server and ordinary
        CUDA processes share the device (a pod running its own MPS on a time-sliced
        GPU; MIG instances, which cannot be set to EXCLUSIVE_PROCESS): the lists do
        not tell them apart, so every process is kept. Told by the lists and the
        mode, not by its name: ``/proc/<pid>/comm`` holds 15 characters
        (``nvidia-cuda-mps``, the control daemon's too) and is readable only where
        the exporter sees the host's ``/proc``, which this collector does not read.
        A server with no client left is not told apart (an idle process of the
        daemon's pod, without allocation).
        """
        compute = self._unless_absent(
            "nvmlDeviceGetComputeRunningProcesses_v2",
            self._process_list,
            handle,
            "nvmlDeviceGetComputeRunningProcesses",
        )
        if compute is None:
            return None
        mps = self._extra_process_list(handle, "nvmlDeviceGetMPSComputeRunningProcesses")
        graphics = self._extra_process_list(handle, "nvmlDeviceGetGraphicsRunningProcesses")
        compute_pids = {int(i.pid) for i in compute}
        mps_pids = {int(i.pid) for i in mps}
        servers: set[int] = set()
        if mps_pids and self._exclusive_process(handle):
            servers = compute_pids - mps_pids
        by_pid: dict[int, Any] = {}
        for info in (*compute, *mps, *graphics):
            if int(info.pid) not in servers:
                by_pid.setdefault(int(info.pid), info)
        return list(by_pid.values()), frozenset(mps_pids - compute_pids)

    def _exclusive_process(self, handle: Any) -> bool:
        """Whether the device is in EXCLUSIVE_PROCESS compute mode, where a compute
        process beside MPS clients can only be their server.

        A mode NVML does not give (no such call, NOT_SUPPORTED — a MIG-enabled GPU's
        own handle —, any other error) is not that mode: the processes are kept. A
        server kept shows as a process of the pod it runs in; a workload dropped on
        a guess would read its busy pod as idle, the worse mistake."""
        nv = self._nvml
        try:
            mode = self._unless_absent(
                "nvmlDeviceGetComputeMode", nv.nvmlDeviceGetComputeMode, handle
            )
        except nv.NVMLError as err:
            log.debug("compute mode unavailable (%s): MPS server not told apart", err)
            return False
        return mode is not None and int(mode) == int(nv.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)

    def _extra_process_list(self, handle: Any, name: str) -> Sequence[Any]:
        """An MPS or graphics process list: empty where the driver (or nvidia-ml-py)
        has not got it or answers NOT_SUPPORTED — it has no such process to list."""
        if not hasattr(self._nvml, name):
            return ()
        # _process_list fails with a missing symbol only when _v2 is missing too: the
        # list's absence is remembered under that name, as the compute list's is
        infos = self._unless_absent(
            name + "_v2", self._process_list, handle, name, not_here=self._not_supported_codes
        )
        return () if infos is None else infos

    def _process_list(self, handle: Any, name: str) -> Sequence[Any]:
        """One NVML process list, from ``_v2`` where pynvml cannot read the driver's
        ``_v3`` records; ``GarbledProcessList`` if a record names no process.

        pynvml's unversioned calls are ``_v3`` (added in R510), which R470 drivers and
        some R535 builds (535.98) lack: it then raises ``NVMLLibraryMismatchError``,
        which would escape every ``except NVMLError`` and fail the whole poll. A
        driver without ``_v2`` either (430, 440) fails it with FUNCTION_NOT_FOUND, an
        NVMLError. pynvml reads ``_v3`` records as ``c_nvmlProcessInfo_v2_t`` (24
        bytes), which R525–R535 drivers write 32 bytes apart: every record after the
        first misaligned (``_v3_lists_readable``). ``_v2`` writes 24-byte records on
        every driver, holding every field read here.
        """
        nv = self._nvml
        infos = None
        if self._v3_lists_readable():
            infos = self._unless_absent(name, getattr(nv, name), handle)
        if infos is None:
            infos = getattr(nv, name + "_v2")(handle)
        if any(int(info.pid) in _NO_PID for info in infos):
            raise GarbledProcessList(f"{name}: pid 0 or 0xFFFFFFFF among its records")
        return infos

    def _v3_lists_readable(self) -> bool:
        """Whether pynvml reads the ``_v3`` process lists at the size the driver
        writes them; told once from the library's symbols, as nvitop does.

        A driver with ``nvmlDeviceGetConfComputeMemSizeInfo`` and without
        ``nvmlDeviceGetRunningProcessDetailList`` (R525–R535, 535.54.03 among them:
        pynvml PR #48, go-nvml #75) writes 32-byte ``nvmlProcessInfo_v3_t`` records;
        the others write 24 bytes. pynvml's record is 24 bytes (its v3 struct is the
        v2 one). A pynvml without the lookup cannot tell: its ``_v3`` is taken as
        read, the pid check in ``_process_list`` guarding it.
        """
        if self._v3_readable is None:
            nv = self._nvml
            lookup = getattr(nv, "_nvmlGetFunctionPointer", None)
            if lookup is None:
                self._v3_readable = True
                return True
            driver = (
                PROCESS_RECORD_V3_WIDE_BYTES
                if self._has_symbol(lookup, _WIDE_V3_PRESENT)
                and not self._has_symbol(lookup, _WIDE_V3_ABSENT)
                else PROCESS_RECORD_V2_BYTES
            )
            record = getattr(nv, "c_nvmlProcessInfo_v3_t", None)
            read = PROCESS_RECORD_V2_BYTES if record is None else ctypes.sizeof(record)
            self._v3_readable = driver == read
            if not self._v3_readable:
                log.info(
                    "the driver's _v3 process lists write %d-byte records, pynvml reads %d: "
                    "reading the _v2 lists",
                    driver,
                    read,
                )
        return self._v3_readable

    def _has_symbol(self, lookup: Callable[[str], Any], name: str) -> bool:
        """Whether the driver's library has the C function ``name``; an NVML error
        other than FUNCTION_NOT_FOUND is raised (nothing is told)."""
        try:
            lookup(name)
        except self._nvml.NVMLError_FunctionNotFound:
            return False
        return True

    def _unless_absent(
        self,
        name: str,
        call: Callable[..., _T],
        *args: Any,
        not_here: Collection[int] = (),
        **kwargs: Any,
    ) -> _T | None:
        """``call(*args, **kwargs)``, NVML's ``name``; None where it has nothing to read,
        for the caller's fallback.

        A symbol the driver's library lacks (``_symbol_missing``) is absent for the
        process' life — pynvml loads the library once — so ``name`` is remembered in
        ``_absent`` and not called again (a failed symbol lookup is not cached by
        pynvml: a lock, an exception and a log line per device per poll). An NVML
        error coded in ``not_here`` is this device's answer (a T4 has no MIG, an
        A100 beside it has): None this time, asked again next time. Any other error
        is raised.
        """
        if name in self._absent:
            return None
        try:
            return call(*args, **kwargs)
        except self._symbol_missing as err:
            self._absent.add(name)
            log.debug("no %s (%s): not asked again", name, err)
        except self._nvml.NVMLError as err:
            if getattr(err, "value", None) not in not_here:
                raise
        return None

    def _process_util(self, handle: Any, uuid: str) -> dict[int, float | None] | None:
        """Each process's SM share (mean of its new samples); None for a process whose
        new samples were all garbage (unknown this poll, not idle).

        NVML has answered garbage entries (Syllo/nvtop#110: pid 0 padding, smUtil
        37100 beside real ones): pid 0 is skipped, an entry with a share over 100 %
        or a timestamp later than the call's return (beyond the slack) is not read.

        NVML answers only samples newer than the last seen timestamp passed, so one
        later than the clock would make every process idle until the clock caught
        up. Kept, it is at most the slack past the clock it was read by (later
        samples are garbage); a kept one beyond the slack past the clock now means
        the clock stepped back (an NTP step, a VM resumed) and NVML stamps the new
        samples with the stepped clock: it is forgotten, and the device read as at
        start (0: every sample NVML holds, the ones stamped before the step now
        garbage). Cutting it back to now instead would miss the samples taken since
        the last poll (all older than now), and cutting a kept one within the slack
        back would hand its sample back next time, counted twice.
        """
        nv = self._nvml
        asked_us = int(self._clock() * 1_000_000)
        last_seen = self._last_seen.get(uuid, 0)
        if last_seen > asked_us + SAMPLE_CLOCK_SLACK_US:
            log.info(
                "device %s: last utilisation sample %.0fs past the clock (stepped back?): "
                "reading the device's samples afresh",
                uuid,
                (last_seen - asked_us) / 1e6,
            )
            last_seen = self._last_seen[uuid] = 0
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, last_seen)
        except nv.NVMLError_NotFound:
            return {}
        except nv.NVMLError as err:
            log.debug("device %s: process utilisation unavailable: %s", uuid, err)
            return None
        # the samples' bound is the clock at the call's return: NVML stamps the ones it
        # takes during the call up to then, and bounded by the clock read before it a
        # call over the slack (1 s) made them garbage, the processes' shares unknown
        answered_us = int(self._clock() * 1_000_000)
        sums: dict[int, list[float]] = {}
        garbage: set[int] = set()
        newest = last_seen
        for sample in samples:
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid == 0:
                continue
            if (
                sample.smUtil > 100
                or sample.memUtil > 100
                or stamp > answered_us + SAMPLE_CLOCK_SLACK_US
            ):
                garbage.add(pid)
                continue
            sums.setdefault(pid, []).append(float(sample.smUtil))
            newest = max(newest, stamp)
        if garbage:
            log.debug("device %s: garbage utilisation samples of pids %s", uuid, sorted(garbage))
        # the newest sample read, at most SAMPLE_CLOCK_SLACK_US past the clock (later
        # ones are garbage, above); not cut back to now: NVML would hand the samples
        # between now and it back next time, and they would count twice
        self._last_seen[uuid] = newest
        shares: dict[int, float | None] = {pid: None for pid in garbage}
        shares.update((pid, sum(v) / len(v) / 100.0) for pid, v in sums.items())
        return shares


def build(ctx: BuildContext) -> Any:
    """The NVML source, or the simulated node's devices.

    NVML is not initialised here: ``nvmlInit`` can block for minutes, and the
    exporter starts its servers only after the sources are built. The first poll
    initialises it under the collection timeout; a refusal it answers then ends the
    start (``start_checks``), a call still blocked does not (its refusal, once
    answered, is logged and later polls ask again: ``NvmlGpuSource._init_late``). No
    library at all (no driver) is the one-line start-up error at once
    (``load_library``)."""
    if ctx.simulated is not None:
        return ctx.simulated.gpus
    nvml = NvmlGpuSource(
        wait_for_driver=ctx.cfg.nvml_wait_for_driver,
        poll_timeout_seconds=ctx.cfg.collection_timeout_seconds,
    )
    ctx.health_checks.append(nvml.restart_reason)

    def raise_startup(err: NvmlUnavailable | None) -> None:
        if err is None:
            return
        if str(err) == NO_NVML_MESSAGE:
            raise StartupError(f"{err}; use --simulate for a simulated node") from err
        raise err

    try:
        nvml.load_library()
    except NvmlUnavailable as err:
        raise_startup(err)
    ctx.start_checks.append(lambda: raise_startup(nvml.startup_error()))
    ctx.closers.append(nvml.close)
    return nvml


register(
    Collector(
        "gpu",
        "GPU devices, MIG instances and per-process samples (NVML, or the scenario)",
        kind="gpu",
        build=build,
        order=10,
    )
)
