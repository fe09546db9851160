"""The running exporter: sources, scheduler, metrics server and progress listener
wired from a ``Config`` (``gpu_eta.exporter.main`` builds the Config and runs this)."""

from __future__ import annotations

import importlib
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.exporter.collectors import ExporterError, StartupError, registry
from gpu_eta.exporter.config import Config, version
from gpu_eta.exporter.exposition import SnapshotExposition
from gpu_eta.exporter.readings import PodMeta
from gpu_eta.exporter.scheduler import SLOTS, Scheduler, Sources
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder

log = logging.getLogger("exporter")


class Runtime:
    """The running exporter: sources, scheduler, metrics server, progress listener.

    ``start()`` raises ``ExporterError`` (one line) for anything a user can fix; it
    leaves nothing running if it fails part-way. ``stop()`` is idempotent.
    """

    def __init__(self, cfg: Config, version_text: str = "") -> None:
        self.cfg = cfg
        self.version = version_text or version()
        self.node = ""
        self.holder: SnapshotHolder | None = None
        self.scheduler: Scheduler | None = None
        self.server: MetricsServer | None = None
        self.listener: Any = None
        self.store: Any = None
        self._ctx = registry.BuildContext(cfg=cfg, node="", pods_now=self._pods)
        self._pod_source: Any = None

    # -- sources ---------------------------------------------------------------------

    def _build_sources(self) -> Sources:
        """Each enabled collector's source, built by its own module (``registry``), in
        the collectors' order; a simulated node stands in for the real sources."""
        cfg = self.cfg
        ctx = self._ctx
        if cfg.simulate is not None:
            from gpu_eta.exporter.simulated_node import SimulatedNode

            ctx.simulated = SimulatedNode(Path(cfg.simulate) if cfg.simulate else None)
            ctx.pod_by_ip = ctx.simulated.pods.by_ip
            self.node = cfg.node_name or ctx.simulated.node_name
        else:
            self.node = cfg.node_name or socket.gethostname().lower()
        ctx.node = self.node
        enabled = [c for c in registry.load().values() if cfg.enabled(c.name)]
        if any(c.needs_progress_store for c in enabled):
            store_mod = _import("progress", "gpu_eta.exporter.progress_store")
            state = Path(cfg.progress_state_file) if cfg.progress_state_file else None
            # os.path.isdir is False on any error (EACCES, a denied SELinux label): the
            # store then handles an unreadable path itself, as it must (Path.exists
            # raised PermissionError here, and the exporter refused to start at all)
            if state is not None and os.path.isdir(state):
                # a mistake in the flag, not stored progress: say so now (the store
                # would run without persisting, every report answered 503)
                raise StartupError(
                    f"--progress.state-file {state} is not a regular file (a directory?); "
                    f"name a file, e.g. {state / 'progress.json'}"
                )
            self.store = ctx.store = store_mod.ProgressStore(
                state_path=state, gone_grace_seconds=cfg.progress_gone_grace_seconds
            )
            if ctx.simulated is None and not cfg.enabled("kube"):
                log.warning(
                    "collector kube is off: progress reports and container logs cannot be "
                    "matched to pods, so every report is refused (403) and logs are skipped"
                )
        sources = Sources(progress_store=self.store)
        for collector in enabled:
            source = collector.build(ctx)
            if collector.kind == "families":
                sources.families[collector.name] = source
            else:
                setattr(sources, SLOTS[collector.kind], source)
                sources.names[SLOTS[collector.kind]] = collector.name
            if collector.kind == "progress":
                self.listener = source
            if collector.kind == "pods":
                self._pod_source = source
        return sources

    def _pods(self) -> tuple[PodMeta, ...]:
        """This node's pods now, for the log collector and the progress listener: the
        pod source's own list (a cache, never the API), so that a pod listed in this
        cycle has its logs read in this cycle; the last snapshot's list only while the
        source has nothing yet."""
        source = self._pod_source
        if source is not None:
            try:
                return tuple(source.poll())
            except ExporterError:
                pass
        return () if self.holder is None else self.holder.get().pods

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Build everything, run a first collection, then serve."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        cfg = self.cfg
        sources = self._build_sources()
        self.holder = SnapshotHolder(Snapshot(node=self.node, timestamp=time.time()))
        exposition = SnapshotExposition(
            self.holder, pod_labels=cfg.pod_labels, version=self.version
        )
        self.scheduler = Scheduler(
            self.node,
            sources,
            self.holder,
            interval_seconds=cfg.collection_interval_seconds,
            timeout_seconds=cfg.collection_timeout_seconds,
            prepare=exposition.prepare,
        )
        process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=process)  # the exporter's own CPU and memory

        def render(accept: str) -> tuple[bytes, str]:
            # always the text format 0.0.4, as node_exporter serves by default:
            # Prometheus accepts it whatever it asks for first
            return exposition.exposition() + generate_latest(process), TEXT_FORMAT

        addr = cfg.web_listen_address
        self.server = MetricsServer(
            addr.host,
            addr.port,
            render,
            self.health,
            title="gpu-eta exporter",
            description="Per-pod GPU, GPU memory, host memory and training progress metrics.",
        )
        # the first collection runs before serving, so no scrape sees an empty node;
        # each of its calls bounded by the collection timeout, so a call that hangs
        # (nvmlInit on a GPU in a bad state) delays serving by that timeout only; a
        # refusal it answers later is logged by its source, which asks again at the
        # next poll (``NvmlGpuSource._init_late``): past the start checks, it ends nothing
        self.scheduler.start()
        for check in self._ctx.start_checks:
            check()
        try:
            self.server.start()
        except OSError as err:
            self.server = None
            raise StartupError(
                f"cannot listen on --web.listen-address {addr}: {err.strerror or err}"
            ) from err

    def metrics_address(self) -> str:
        """Where /metrics is served (the real port when 0 was asked)."""
        if self.server is None:
            return str(self.cfg.web_listen_address)
        return f"{self.server.host or '0.0.0.0'}:{self.server.port}"

    def health(self) -> tuple[bool, str]:
        """``/healthz``: the loop runs, the snapshot is not older than 3 cycles, and no
        source asks for a restart (``BuildContext.health_checks``: the NVML library
        outdated by a driver upgrade, which only a new process can load)."""
        if self.scheduler is None or self.holder is None or not self.scheduler.alive():
            return False, "collection loop not running"
        for check in self._ctx.health_checks:
            reason = check()
            if reason:
                return False, reason
        cfg = self.cfg
        limit = 3 * cfg.collection_interval_seconds + 2 * cfg.collection_timeout_seconds
        age = self.holder.age_seconds()
        if age > limit:
            return False, f"snapshot is {age:.1f}s old (limit {limit:.1f}s)"
        return True, "ok"

    def stop(self) -> None:
        """Stop serving and collecting, persist progress, release NVML; idempotent."""
        first = [self.server.stop] if self.server is not None else []
        first += reversed(self._ctx.stop_first)  # servers taking input (progress)
        self._ctx.stop_first.clear()
        for stop in first:
            try:
                stop()
            except Exception as err:
                log.warning("stopping %s: %s", getattr(stop, "__qualname__", stop), err)
        self.server = None
        self.listener = None
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self.store is not None:
            try:
                self.store.close()
            except Exception as err:
                log.warning("saving progress state failed: %s", err)
        closers = self._ctx.closers
        while closers:
            closer = closers.pop()
            try:
                closer()
            except Exception as err:
                log.warning("closing a source: %s", err)


def _import(collector: str, module: str) -> Any:
    """Import a collector's module; a missing one is a one-line startup error."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise StartupError(
            f"collector {collector} is not available in this build ({module}: {err}); "
            f"disable it with --no-collector.{collector}"
        ) from err
