"""Collectors by name, as node_exporter registers them: each collector's own file
calls ``register`` once with its name — the ``--collector.<name>`` /
``--no-collector.<name>`` flags and the ``collector="<name>"`` label of
``gpu_eta_exporter_collector_*`` — its help line, what kind of reading it gives
(``kind``: which part of the cycle runs it) and how it is built from the running
exporter's context, for real and on a simulated node. ``load()`` imports every module
of this package, so adding a collector is adding its file (and its test).

A collector of a kind the cycle does not join with others (``kind="families"``) has a
``poll()`` that returns ready metric families; the scheduler runs it like any other
(timeout, status, last good data), checks its families (``checked_families``: a
family that would break the scrape is skipped and fails the collector, its others
served) and the exposition appends them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_eta.exporter.collectors import StartupError, names

# What the cycle does with a collector's reading, in the order a cycle runs them;
# the Sources field each fills.
KINDS = (
    "gpu",  # devices and processes (GpuSource)
    "allocations",  # device -> container (AllocationSource)
    "pods",  # pod metadata (PodSource)
    "logs",  # progress from container logs (LogPoller)
    "progress",  # the progress endpoint (ProgressEndpoint)
    "processes",  # pid -> container (ProcessResolver), after gpu
    "host_memory",  # container host memory (HostMemorySource), after pods
    "families",  # its own metric families (FamilySource)
)


@dataclass
class BuildContext:
    """What a collector's ``build`` may use and set while the exporter starts."""

    cfg: Any  # gpu_eta.exporter.config.Config
    node: str
    simulated: Any = None  # the SimulatedNode on --simulate, else None
    store: Any = None  # the shared ProgressStore when progress or logs is on
    pods_now: Callable[[], Any] = lambda: ()  # this node's pods now
    pod_by_ip: Callable[[str], Any] = lambda ip: None  # set by the pod source
    # stopped in reverse order after the scheduler (and after the progress store is
    # saved); ``stop_first``: before the scheduler (servers taking input)
    closers: list[Callable[[], None]] = field(default_factory=list)
    stop_first: list[Callable[[], None]] = field(default_factory=list)
    # liveness: each says why only a restart of the process helps, or None (``/healthz``)
    health_checks: list[Callable[[], str | None]] = field(default_factory=list)
    # run once the first collection is done, before serving: each raises
    # ``StartupError`` for an answer a source got then that ends the start (a source
    # whose first read is still blocked has no answer, and the exporter serves)
    start_checks: list[Callable[[], None]] = field(default_factory=list)


@dataclass(frozen=True)
class Collector:
    """One collector: its name, help line, kind, and how to build its source."""

    name: str
    help: str
    kind: str
    build: Callable[[BuildContext], Any]
    order: int = 100  # position in --help and in the start-up order
    needs_progress_store: bool = False  # writes training progress (progress, logs)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"collector {self.name}: unknown kind {self.kind!r}")


_REGISTERED: dict[str, Collector] = {}


def register(collector: Collector) -> Collector:
    """Add ``collector`` (at import of its module); a name used twice is a bug."""
    known = _REGISTERED.get(collector.name)
    if known is not None and known is not collector:
        raise ValueError(f"collector {collector.name!r} registered twice")
    _REGISTERED[collector.name] = collector
    return collector


def unregister(name: str) -> None:
    """Remove a collector (tests that register one of their own)."""
    _REGISTERED.pop(name, None)


def load() -> Mapping[str, Collector]:
    """Every collector of this package, by name, in their ``order``: each module is
    imported once and must register the collector it is named after. A module that
    cannot be imported (a package of the ``exporter`` extra missing) becomes a
    collector whose start is a one-line error naming the flag that turns it off. An
    import of gpu_eta's own code that fails (a typo, a module renamed) is raised: it is
    a bug in this build, which that line would present as a packaging choice."""
    for name in names():
        module = f"{__package__}.{name}"
        try:
            importlib.import_module(module)
        except ImportError as err:
            if is_ours(err.name):
                raise
            if name not in _REGISTERED:
                register(_unavailable(name, module, err))
            continue
        if name not in _REGISTERED:
            raise RuntimeError(f"{module} registers no collector named {name!r}")
    return registered()


def is_ours(module: str | None) -> bool:
    """Whether ``module`` (an ``ImportError``'s ``name``) is part of gpu_eta itself,
    which every build ships whole. None (an error raised by a package's own code) is
    not: a package that refuses to load is as missing as one not installed."""
    return module is not None and (module == "gpu_eta" or module.startswith("gpu_eta."))


def unavailable(name: str, module: str, err: ImportError) -> StartupError:
    """The one-line start-up error of collector ``name`` whose ``module`` (or a
    package it needs, ``err``) cannot be imported: it names the flag that turns it off.
    Also for a module that imports its packages only once it is built."""
    return StartupError(
        f"collector {name} is not available in this build ({module}: {err}); "
        f"disable it with --no-collector.{name}"
    )


def _unavailable(name: str, module: str, err: ImportError) -> Collector:
    def build(ctx: BuildContext) -> None:
        raise unavailable(name, module, err)

    return Collector(name, f"(not available in this build: {err})", "families", build, 1000)


def registered() -> Mapping[str, Collector]:
    """The collectors registered so far, in their ``order`` (then by name)."""
    return {c.name: c for c in sorted(_REGISTERED.values(), key=lambda c: (c.order, c.name))}
