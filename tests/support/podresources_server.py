"""A real gRPC server speaking the kubelet's ``v1.PodResourcesLister`` over a unix socket.

Used by the pod-resources tests, the exporter's integration tests and the demo to
stand in for the kubelet: same proto, same transport, same socket-file lifecycle
(``restart()`` deletes and recreates the socket as a kubelet restart does).

Allocations are given as ``{(namespace, pod): {container: [(resource, [device ids])]}}``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent import futures

import grpc

from gpu_eta.exporter._proto import api_pb2, api_pb2_grpc

PodAllocations = Mapping[tuple[str, str], Mapping[str, Sequence[tuple[str, Sequence[str]]]]]


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, owner: PodResourcesServer) -> None:
        self._owner = owner

    def List(self, request, context):  # gRPC method name
        self._owner.list_calls += 1
        return self._owner.response()

    def Get(self, request, context):
        for pod in self._owner.response().pod_resources:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")

    def GetAllocatableResources(self, request, context):
        return api_pb2.AllocatableResourcesResponse()


class PodResourcesServer:
    """Start with ``start()``; always ``stop()`` (safe to call twice)."""

    def __init__(self, socket_path: str, allocations: PodAllocations | None = None) -> None:
        self.socket_path = socket_path
        self.list_calls = 0
        self._lock = threading.Lock()
        self._allocations: PodAllocations = dict(allocations or {})
        self._server: grpc.Server | None = None

    def set_allocations(self, allocations: PodAllocations) -> None:
        with self._lock:
            self._allocations = dict(allocations)

    def response(self) -> api_pb2.ListPodResourcesResponse:
        with self._lock:
            allocations = self._allocations
        pods = []
        for (namespace, name), containers in allocations.items():
            pods.append(
                api_pb2.PodResources(
                    name=name,
                    namespace=namespace,
                    containers=[
                        api_pb2.ContainerResources(
                            name=cname,
                            devices=[
                                api_pb2.ContainerDevices(resource_name=res, device_ids=list(ids))
                                for res, ids in devices
                            ],
                        )
                        for cname, devices in containers.items()
                    ],
                )
            )
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)

    def start(self) -> PodResourcesServer:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), server)
        server.add_insecure_port(f"unix://{os.path.abspath(self.socket_path)}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket file, as a stopping kubelet does."""
        if self._server is not None:
            self._server.stop(grace=None).wait(10)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> PodResourcesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
