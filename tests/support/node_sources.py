"""The exporter's two Kubernetes sources against real stand-ins, ready to poll.

``real_node_sources`` starts the kubelet's gRPC pod-resources server on a unix
socket and the list/watch API fake, adds the pods, and yields a ``PodResourcesSource``
and a ``KubePodSource`` whose watch has listed them all; it stops everything on
exit, whatever the test did to the servers meanwhile (a stopped kubelet, deleted
pods). Tests that join allocations and pods the way the exporter reads them use it
instead of repeating the start-up, the wait for the first list and the teardown.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors.kube import KubePodSource
from gpu_eta.exporter.collectors.podresources import PodResourcesSource
from gpu_eta.exporter.readings import PodMeta
from tests.support.kubeapi import FakeKubeAPI
from tests.support.podresources_server import PodAllocations, PodResourcesServer


@dataclass
class NodeSources:
    """The running stand-ins and the exporter's sources reading them."""

    kubelet: PodResourcesServer
    api: FakeKubeAPI
    allocations: PodResourcesSource
    pods: KubePodSource

    def listed(self) -> tuple[PodMeta, ...]:
        """The pod watch's cache; () before its first list."""
        try:
            return self.pods.poll()
        except CollectorError:
            return ()


def wait_for(condition: Callable[[], bool], timeout_seconds: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout_seconds``."""
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the pod watch"
        time.sleep(0.05)


@contextlib.contextmanager
def real_node_sources(
    allocations: PodAllocations,
    pods: Sequence[dict[str, Any]],
    node: str,
    max_pods: int | None = None,
) -> Iterator[NodeSources]:
    """The kubelet serving ``allocations``, the API serving ``pods`` (API objects, as
    ``make_pod`` builds them, on ``node``), and the sources once the watch lists them
    (``max_pods``: the pod cache's cap, ``--kube.max-pods``; then once it has listed,
    however many it holds)."""
    sock_dir = tempfile.mkdtemp(prefix="pr-")  # short: unix socket paths are ~107 bytes
    kubelet = PodResourcesServer(f"{sock_dir}/kubelet.sock", allocations)
    api = FakeKubeAPI()
    pods_source: KubePodSource | None = None
    allocation_source: PodResourcesSource | None = None
    try:
        kubelet.start()
        api.start()
        for obj in pods:
            api.add_pod(obj)
        capped = {} if max_pods is None else {"max_pods": max_pods}
        pods_source = KubePodSource(
            node, api_url=api.url, backoff_initial_seconds=0.05, **capped
        ).start()
        allocation_source = PodResourcesSource(kubelet.socket_path)
        sources = NodeSources(kubelet, api, allocation_source, pods_source)
        if max_pods is None:
            wait_for(lambda: len(sources.listed()) == len(pods))
        else:
            wait_for(lambda: pods_source.status().listed)
        yield sources
    finally:
        if pods_source is not None:
            pods_source.stop()
        if allocation_source is not None:
            allocation_source.close()
        api.close()
        kubelet.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
