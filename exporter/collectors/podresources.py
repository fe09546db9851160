"""GPU → container allocations from the kubelet pod-resources API (``v1.PodResourcesLister/List``).

This is how NVIDIA's DCGM exporter finds a device's owner, and the only source that
still names the owner of a GPU whose holder runs nothing on it. The kubelet serves
it over a unix socket (``/var/lib/kubelet/pod-resources/kubelet.sock``); mount the
directory, not the socket, because a kubelet restart deletes and recreates the
file and a bind-mounted socket would keep pointing at the dead one.

Reconnection: a gRPC channel retries a broken unix connection with exponential
backoff (up to minutes), which would leave us reading nothing long after the
kubelet is back. So the channel is dropped after any failed call and whenever the
socket file's inode changes, and the next poll dials afresh.

grpc and the protobuf stubs are imported when a ``PodResourcesSource`` is made, not
with this module: a simulated node (or any exporter not reading the kubelet) would
carry about 12 MB of RSS for nothing. Whether they are installed is still checked at
import, so a build without them lists the collector as unavailable as before.

Which resources are GPUs: ``nvidia.com/gpu``, its time-sliced replicas renamed by the
device plugin's ``renameByDefault`` (``nvidia.com/gpu.shared``) and MIG slices
(``nvidia.com/mig-<profile>``), the resources the forecaster counts as GPUs
(``common.gpu_resources.KSM_GPU_RESOURCES``), plus the names given with
``--kubelet.gpu-resource``. Not everything under ``nvidia.com/``: NVIDIA's Network
Operator advertises ``nvidia.com/rdma_shared_device_a`` (ids "0", "1"… that read as
GPU indexes) and ``nvidia.com/hostdev`` / SR-IOV VFs (PCI addresses) there. dcgm-exporter
filters the same way (``nvidia.com/gpu``, ``nvidia.com/mig-*``, its
``NvidiaResourceNames``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import stat
import threading
from collections.abc import Collection, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from gpu_eta.exporter.attribution import MAX_DEVICE_ID_CHARS
from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors.registry import (
    BuildContext,
    Collector,
    is_ours,
    register,
    unavailable,
)
from gpu_eta.exporter.config import DEFAULT_COLLECTION_TIMEOUT_SECONDS, DEFAULT_KUBELET_SOCKET
from gpu_eta.exporter.readings import Allocation
from gpu_eta.exporter.snapshot import ALLOCATION_SKIP_REASONS

if TYPE_CHECKING:
    import grpc

    from gpu_eta.exporter._proto import api_pb2, api_pb2_grpc

# What the stubs need, checked (not imported) here: without them this module fails to
# import as ``import grpc`` would, and the registry lists the collector as unavailable.
for _needed in ("grpc", "google.protobuf"):
    if importlib.util.find_spec(_needed) is None:
        raise ModuleNotFoundError(f"No module named {_needed!r}", name=_needed)

__all__ = [
    "DEFAULT_SOCKET",
    "MAX_RECEIVE_BYTES",
    "Listing",
    "PodResourcesSource",
    "allocations_from_response",
    "is_gpu_resource",
]

log = logging.getLogger(__name__)

DEFAULT_SOCKET = DEFAULT_KUBELET_SOCKET
# DCGM exporter's figure: a node with many pods and devices exceeds gRPC's 4 MiB default.
MAX_RECEIVE_BYTES = 16 * 1024 * 1024
# Bounds on what one List may contribute: a node runs at most a few hundred pods.
MAX_ALLOCATIONS = 65536
_MAX_NAME_CHARS = 253
# NVIDIA's device plugin: whole GPUs, and their time-sliced replicas under
# renameByDefault (the plugin appends ".shared"); MIG slices are resources by profile.
GPU_RESOURCE_NAMES = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# Why a GPU device id of a List is left out (``gpu_eta_exporter_allocations_skipped``)


class Listing(NamedTuple):
    """One ``List`` read: the GPU allocations kept, and the GPU device ids left out
    by reason (every ``ALLOCATION_SKIP_REASONS`` key), with the first one's owner for the log."""

    allocations: tuple[Allocation, ...]
    skipped: Mapping[str, int]
    first_skipped: str = ""


def is_gpu_resource(name: str, extra: Collection[str] = ()) -> bool:
    """Whether allocations of resource ``name`` are GPUs: ``GPU_RESOURCE_NAMES``, a MIG
    profile (``nvidia.com/mig-1g.10gb``, also its ``.shared`` replicas) or one of
    ``extra`` (``--kubelet.gpu-resource``: a time-slicing ``rename:`` to a name of the
    site's own). Any other resource's device ids are not GPU ids, even under
    ``nvidia.com/``: an RDMA device "0" would read as GPU 0 and make its pod a holder."""
    return name in GPU_RESOURCE_NAMES or name.startswith(MIG_RESOURCE_PREFIX) or name in extra


def _grpc_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """grpc and the generated stubs (``api_pb2``, ``api_pb2_grpc``), imported on the
    first call: only an exporter that reads the kubelet's socket pays for them.

    Any failure of those imports is an ImportError (``build`` makes it the one-line
    start-up error): a protobuf the stubs do not match raises TypeError ("Descriptors
    cannot be created directly"), grpc's compiled part can raise others."""
    try:
        import grpc

        from gpu_eta.exporter._proto import api_pb2, api_pb2_grpc
    except ImportError:
        raise
    except Exception as err:  # any failure to load is "not available"
        raise ImportError(f"{type(err).__name__}: {err}") from err

    return grpc, api_pb2, api_pb2_grpc


class PodResourcesSource:
    """Polls the kubelet's ``List`` and returns the allocations of GPU resources
    (``is_gpu_resource``, with ``extra_gpu_resources`` added).

    ``timeout_seconds`` is the List's gRPC deadline: the exporter passes its collection
    timeout (``build``), the time the scheduler waits for a poll. Why not more: an
    answer after it is thrown away, while the call keeps the kubelet and the poll's
    thread busy into the next cycle (which then fails as still running); why not less:
    a List the scheduler would still wait for would be given up for nothing."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        timeout_seconds: float = DEFAULT_COLLECTION_TIMEOUT_SECONDS,
        extra_gpu_resources: Collection[str] = (),
    ) -> None:
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self.extra_gpu_resources = frozenset(extra_gpu_resources)
        self._grpc, self._api, self._stubs = _grpc_modules()
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._inode: tuple[int, int] | None = None
        # the GPU device ids the last List left out, by reason (``counts``)
        self._skipped: Mapping[str, int] = dict.fromkeys(ALLOCATION_SKIP_REASONS, 0)

    def _socket_identity(self) -> tuple[int, int]:
        try:
            st = os.stat(self.socket_path)
        except FileNotFoundError:
            raise CollectorError(
                f"kubelet pod-resources socket {self.socket_path} does not exist "
                "(is the kubelet running and its pod-resources directory mounted?)"
            ) from None
        except OSError as err:
            raise CollectorError(
                f"kubelet pod-resources socket {self.socket_path}: {err.strerror or err}"
            ) from None
        if not stat.S_ISSOCK(st.st_mode):
            raise CollectorError(f"kubelet pod-resources path {self.socket_path} is not a socket")
        return (st.st_dev, st.st_ino)

    def _drop_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None
        self._inode = None

    def _connect(self) -> api_pb2_grpc.PodResourcesListerStub:
        identity = self._socket_identity()
        if self._stub is not None and identity == self._inode:
            return self._stub
        self._drop_channel()
        self._channel = self._grpc.insecure_channel(
            f"unix://{os.path.abspath(self.socket_path)}",
            options=[
                ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                # A fresh channel per kubelet instance; never wait minutes to redial.
                ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 2000),
            ],
        )
        self._stub = self._stubs.PodResourcesListerStub(self._channel)
        self._inode = identity
        return self._stub

    def poll(self) -> tuple[Allocation, ...]:
        """One ``List`` call → allocations; ``CollectorError`` with the cause on any failure."""
        with self._lock:
            stub = self._connect()
            try:
                response = stub.List(
                    self._api.ListPodResourcesRequest(), timeout=self.timeout_seconds
                )
            except self._grpc.RpcError as err:
                self._drop_channel()
                code = err.code() if hasattr(err, "code") else None
                details = err.details() if hasattr(err, "details") else str(err)
                name = code.name if code is not None else "UNKNOWN"
                raise CollectorError(
                    f"kubelet pod-resources List on {self.socket_path} failed: {name}: {details}"
                ) from None
            listing = allocations_from_response(response, self.extra_gpu_resources)
            self._note_skipped(listing)
            return listing.allocations

    def _note_skipped(self, listing: Listing) -> None:
        """Keep the List's left-out counts; log when ids start or stop being left out
        (not on every poll: the kubelet answers the same List each cycle)."""
        was = sum(self._skipped.values())
        self._skipped = dict(listing.skipped)
        now = sum(listing.skipped.values())
        if now and not was:
            log.warning(
                "kubelet pod-resources List: %d GPU allocations left out (%s), first of %s; "
                "their pods get no allocation rows",
                now,
                ", ".join(f"{reason}: {n}" for reason, n in listing.skipped.items() if n),
                listing.first_skipped,
            )
        elif was and not now:
            log.info("kubelet pod-resources List: no GPU allocation left out any more")

    def counts(self) -> Mapping[str, int]:
        """The GPU device ids the last List left out, by reason (``ALLOCATION_SKIP_REASONS``)."""
        return self._skipped

    def close(self) -> None:
        """Close the channel (the next poll would dial again)."""
        with self._lock:
            self._drop_channel()


def _valid_name(value: str) -> bool:
    return 0 < len(value) <= _MAX_NAME_CHARS


def _owner(pod: Any, container: Any) -> str:
    """A left-out entry's owner for the log, each name cut to 64 characters."""
    return "/".join(repr(name[:64]) for name in (pod.namespace, pod.name, container.name))


def allocations_from_response(
    response: api_pb2.ListPodResourcesResponse, extra_gpu_resources: Collection[str] = ()
) -> Listing:
    """Flatten a ``List`` response to one Allocation per (container, device id).

    Only GPU resources are kept (``is_gpu_resource``, with ``extra_gpu_resources``
    added): the others' ids are no GPU's, so they neither name a holder nor count as
    unresolved. A GPU device id is left out, and counted, when a name it comes under
    or the id itself is empty or oversized (``invalid``) and past ``MAX_ALLOCATIONS``
    (``over_limit``: the kubelet is trusted, but its answer is still bounded); one
    bad entry does not cost the others theirs.
    """
    out: list[Allocation] = []
    skipped = dict.fromkeys(ALLOCATION_SKIP_REASONS, 0)
    first = ""

    def skip(reason: str, n: int, pod: Any, container: Any) -> None:
        nonlocal first
        if n:
            skipped[reason] += n
            first = first or _owner(pod, container)

    for pod in response.pod_resources:
        pod_ok = _valid_name(pod.name) and _valid_name(pod.namespace)
        for container in pod.containers:
            ok = pod_ok and _valid_name(container.name)
            for devices in container.devices:
                resource = devices.resource_name
                if not is_gpu_resource(resource, extra_gpu_resources):
                    continue
                if not (ok and len(resource) <= _MAX_NAME_CHARS):
                    skip("invalid", len(devices.device_ids), pod, container)
                    continue
                for device_id in devices.device_ids:
                    if not device_id or len(device_id) > MAX_DEVICE_ID_CHARS:
                        skip("invalid", 1, pod, container)
                    elif len(out) >= MAX_ALLOCATIONS:
                        skip("over_limit", 1, pod, container)
                    else:  # Allocation(namespace, pod, container, resource_name, device_id)
                        out.append(
                            Allocation(pod.namespace, pod.name, container.name, resource, device_id)
                        )
    return Listing(tuple(out), skipped, first)


def build(ctx: BuildContext) -> Any:
    """The kubelet's pod-resources socket (``--kubelet.socket``) keeping GPU resources
    and ``--kubelet.gpu-resource``'s, its List given up at ``--collection.timeout``,
    or the simulated node's allocations."""
    if ctx.simulated is not None:
        return ctx.simulated.allocations
    try:
        source = PodResourcesSource(
            ctx.cfg.kubelet_socket,
            timeout_seconds=ctx.cfg.collection_timeout_seconds,
            extra_gpu_resources=ctx.cfg.kubelet_gpu_resources,
        )
    except ImportError as err:  # installed, but grpc or its stubs fail to import
        if is_ours(err.name):
            raise  # a bug of this build, not a packaging choice (``registry.load``)
        raise unavailable("podresources", __name__, err) from err
    ctx.closers.append(source.close)
    return source


register(
    Collector(
        "podresources",
        "which container the kubelet allocated each GPU to (pod-resources List)",
        kind="allocations",
        build=build,
        order=20,
    )
)
