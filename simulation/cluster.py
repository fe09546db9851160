"""The simulated cluster: nodes, job arrivals, GPU placement, time-slicing, fates.

A discrete-event simulation in wall-clock seconds relative to an anchor. Jobs arrive
as a Poisson process, are placed on a free GPU (or a free replica of a node's
time-sliced GPU, or wait in a FIFO queue), and work through their epochs at a rate
of ``gpu speed × time_scale / active trainers on the device`` (seed 001: sharing
slows each job roughly in proportion to the number of sharers). Stalled jobs hold
their GPU and do nothing; cancelled ones vanish part-way; notebooks hold a GPU idle
for long stretches.

Everything is seeded: the same ``ClusterConfig`` gives the same cluster, the same
pods, the same epoch ends. The simulation is incremental (``advance(until)``) so the
live demo can run for as long as the user wants while it plans only a little ahead;
the history backfill runs the same code over a past window.

Pure: no I/O. ``gpu_eta.simulation.scenarios`` turns pods into the exporter's scenario files,
``gpu_eta.simulation.driver`` turns events into progress reports and log lines.
"""

from __future__ import annotations

import heapq
import math
import random
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from gpu_eta.simulation.epochs import JobDraw, JobMix, sample_job


class ClusterConfigError(ValueError):
    """A cluster parameter is out of range."""


# Home-grade and data-centre GPUs as in seed 001, with a speed relative to a 2080 Ti.
GPU_MODELS: tuple[tuple[str, float, int], ...] = (
    ("NVIDIA GeForce GTX 1080 Ti", 0.8, 11 << 30),
    ("NVIDIA GeForce RTX 2080 Ti", 1.0, 11 << 30),
    ("NVIDIA GeForce RTX 3070", 1.1, 8 << 30),
    ("NVIDIA GeForce RTX 4080", 1.9, 16 << 30),
    ("NVIDIA A2", 0.6, 16 << 30),
    ("NVIDIA A100-SXM4-40GB", 2.6, 40 << 30),
)
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
# what the demo plants so its alerts fire (docs/demo.md): ClusterConfig(**ALERT_CAUSES)
ALERT_CAUSES = {"notebook_held_seconds": 26 * 3600.0, "hung_jobs": 1}
HUNG_SECONDS = 1e9  # a hung job's stall, cluster seconds: it never resumes
# Bounds of what the simulation can run (ClusterConfig). Job arrivals per wall second
# are time_scale / arrival_seconds: at most 2 keep a node within its 253 pod IPs
# (reused after 60 s) and the warm-up short; 5000x time raced through them ("out of
# pod IPs"), 20,000 arrivals per wall second hung the warm-up with no word. The
# warm-up simulates warm_start_seconds x time_scale cluster seconds: at most a day at
# the default 20x (about 9 s for 3 nodes).
MIN_TIME_SCALE = 0.1  # slower shows nothing happen within a demo
MAX_TIME_SCALE = 1000.0
MIN_ARRIVAL_WALL_SECONDS = 0.5
MAX_WARM_START_CLUSTER_SECONDS = 86400.0 * 20
# a heterogeneous site (ClusterConfig.tainted_nodes, pool_share): a GPU pool kept for one
# team by a taint, and the team's pods, which tolerate it
Taint = tuple[str, str, str]  # key, value, effect (as kube_node_spec_taint shows it)
POOL_TAINT: Taint = ("dedicated", "team-a", "NoSchedule")
POOL_NAMESPACE = "team-a"
# the taint the node lifecycle controller puts on a node under memory pressure, and a
# pod's toleration of it (PodTolerationRestriction adds it to Burstable and Guaranteed
# pods): ClusterConfig.pressure_node
PRESSURE_TAINT: Taint = ("node.kubernetes.io/memory-pressure", "", "NoSchedule")
# cluster seconds from the kubelet accepting a pod (``status.startTime``) to its
# containers running (phase Running): pulling a cached image and creating the containers,
# well inside the shortest startup (``ClusterConfig.startup_seconds``)
CONTAINERS_START_SECONDS = 10.0
# wall seconds a notebook server's pod name stays taken after its pod ended: KubeSpawner
# names a user's default server ``jupyter-<user>`` again only once the old pod is gone,
# and the node's scenario still lists a pod 10 s after its end
NAME_REUSE_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """What the user can tune (`python -m gpu_eta.demo --help` shows the same)."""

    nodes: int = 3
    gpus_min: int = 4
    gpus_max: int = 8
    seed: int = 0
    time_scale: float = 20.0  # cluster seconds per wall second
    arrival_seconds: float = 200.0  # mean gap between job arrivals, cluster seconds
    notebook_share: float = 0.12  # share of arrivals that are notebooks
    notebook_seconds: tuple[float, float] = (3600.0, 4 * 3600.0)  # cluster seconds
    notebooks_at_start: int = 1  # per node, already idle when the demo starts
    # how long (wall seconds before the live start) the first node's notebook has held
    # its GPU: a notebook left open since yesterday, so the long-occupancy and
    # idle-GPU alerts have a real cause to fire on (0: it opened with the others;
    # the demo uses ALERT_CAUSES)
    notebook_held_seconds: float = 0.0
    # the first N training jobs of the live cluster that report a planned total hang
    # after their first epoch (a stuck data loader: no progress, GPU idle) and never
    # recover, so the stalled-training alert has a real cause to fire on during a short
    # demo (a run without a plan is not checked for stalls: docs/forecaster.md)
    hung_jobs: int = 0
    log_share: float = 0.3  # share of training jobs that only print logs (no HTTP)
    two_gpu_share: float = 0.1
    timeslice_replicas: int = 3
    startup_seconds: tuple[float, float] = (30.0, 90.0)  # pod start → first report
    max_queue: int = 20  # pending jobs beyond this are turned away (users give up)
    # wall seconds the live cluster already ran before the demo's anchor: jobs at
    # various stages, a time-sliced GPU shared, notebooks idle for a while (0: empty)
    warm_start_seconds: float = 600.0
    mix: JobMix = field(default_factory=JobMix)
    # a heterogeneous site (bench/queue_start.py --scenario mixed). Off by default, and
    # off they draw nothing: a seed's cluster is the same as without them.
    # node i's GPU model is gpu_types[i % len] (names of GPU_MODELS); (): drawn at random
    gpu_types: tuple[str, ...] = ()
    # the last N nodes carry POOL_TAINT: only pods tolerating it (the pool's) start there
    tainted_nodes: int = 0
    # share of training pods that are the pool's (namespace POOL_NAMESPACE): they
    # tolerate POOL_TAINT and select the GPU type of the first tainted node
    pool_share: float = 0.0
    # share of the other training pods that select a GPU type (nvidia.com/gpu.product),
    # one of the untainted nodes' types at random; the rest take any type
    typed_share: float = 0.0
    # node ``pressure_node`` (-1: none) is under memory pressure (PRESSURE_TAINT) for the
    # first ``pressure_cycle_seconds[1]`` wall seconds of every ``[0]``: only pods
    # tolerating it start there meanwhile; a share ``pressure_tolerating_share`` of the
    # training pods do
    pressure_node: int = -1
    pressure_cycle_seconds: tuple[float, float] = (0.0, 0.0)
    pressure_tolerating_share: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 200:
            raise ClusterConfigError(f"nodes must be 1..200, got {self.nodes}")
        if not 1 <= self.gpus_min <= self.gpus_max <= 16:
            raise ClusterConfigError(
                f"need 1 <= gpus-min <= gpus-max <= 16, got {self.gpus_min}..{self.gpus_max}"
            )
        # the demo's flags are named in the messages: its usage errors are these
        if not MIN_TIME_SCALE <= self.time_scale <= MAX_TIME_SCALE:  # NaN fails too
            raise ClusterConfigError(
                f"time scale (--time-scale) must be {MIN_TIME_SCALE:g} to {MAX_TIME_SCALE:g},"
                f" got {self.time_scale}"
            )
        if not (
            math.isfinite(self.arrival_seconds)
            and self.arrival_seconds / self.time_scale >= MIN_ARRIVAL_WALL_SECONDS
        ):
            raise ClusterConfigError(
                "arrival seconds (--arrival-seconds) must be finite and at least"
                f" {MIN_ARRIVAL_WALL_SECONDS:g} x the time scale (at most"
                f" {1 / MIN_ARRIVAL_WALL_SECONDS:g} job arrivals per wall second):"
                f" {self.arrival_seconds:g} at time scale {self.time_scale:g}"
            )
        if not 0 <= self.warm_start_seconds <= 86400:
            raise ClusterConfigError(
                f"warm start (--warm-start) must be 0..86400 s, got {self.warm_start_seconds}"
            )
        if self.warm_start_seconds * self.time_scale > MAX_WARM_START_CLUSTER_SECONDS:
            raise ClusterConfigError(
                f"warm start (--warm-start) x time scale must be at most"
                f" {MAX_WARM_START_CLUSTER_SECONDS:g} simulated seconds, got"
                f" {self.warm_start_seconds:g} x {self.time_scale:g}"
            )
        if self.hung_jobs < 0:
            raise ClusterConfigError(f"hung_jobs must be >= 0, got {self.hung_jobs}")
        if not 0 <= self.notebook_held_seconds <= 30 * 86400:
            raise ClusterConfigError(
                f"notebook_held_seconds must be 0..30 days, got {self.notebook_held_seconds}"
            )
        for name in (
            "notebook_share",
            "log_share",
            "two_gpu_share",
            "pool_share",
            "typed_share",
            "pressure_tolerating_share",
        ):
            if not 0 <= getattr(self, name) <= 1:
                raise ClusterConfigError(f"{name} must be in 0..1")
        known = {m[0] for m in GPU_MODELS}
        unknown = [t for t in self.gpu_types if t not in known]
        if unknown:
            raise ClusterConfigError(f"unknown GPU types {unknown}; known: {sorted(known)}")
        # one untainted node at least: notebooks and the other pods need somewhere to run
        if not 0 <= self.tainted_nodes < self.nodes:
            raise ClusterConfigError(
                f"tainted_nodes must be 0..nodes-1 ({self.nodes - 1}), got {self.tainted_nodes}"
            )
        if self.pool_share and not self.tainted_nodes:
            raise ClusterConfigError("pool_share needs tainted_nodes (the pool) >= 1")
        period, lasting = self.pressure_cycle_seconds
        if not -1 <= self.pressure_node < self.nodes:
            raise ClusterConfigError(f"pressure_node must be -1..{self.nodes - 1}")
        if self.pressure_node >= 0 and not 0 < lasting < period < math.inf:
            raise ClusterConfigError(
                f"pressure_cycle_seconds must be (period, lasting), 0 < lasting < period,"
                f" got {self.pressure_cycle_seconds}"
            )


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One device of a simulated node."""

    index: int
    uuid: str
    model: str
    speed: float
    memory_total_bytes: int
    replicas: int  # 1: exclusive; >1: time-sliced


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A simulated node: its name, GPUs and the loopback /24 its pod IPs come from."""

    index: int
    name: str
    gpus: tuple[GpuSpec, ...]
    ip_prefix: str  # "127.0.1" → pods get 127.0.1.2 ... 127.0.1.254
    taints: tuple[Taint, ...] = ()  # only pods tolerating each of them start here

    @property
    def gpu_model(self) -> str:
        return self.gpus[0].model


@dataclass
class Pod:
    """A pod the simulation created; mutable while it runs, frozen in spirit after.

    Times are wall seconds relative to the simulation's anchor. ``util_steps`` are
    ``(t, utilisation)`` changes of its process on each of its devices;
    ``epoch_ends[k-1]`` is when epoch k ended.

    ``reports_plan``: False for an HTTP-reporting run of a family trained to a quality
    target (``Family.reports_plan``): its reports carry no ``epochs``/``steps`` and its
    last one is an ``end``, so the exporter makes what it reached its totals. Its log
    pods keep their plan (Keras and tqdm print ``Epoch k/N``). A flag and not a
    ``report`` value: ``report`` says how progress reaches the exporter, and such a run
    reaches it as any HTTP run does (the warm-up state file, retries, ``source="http"``);
    only its report bodies and its backfilled ``*_planned`` series differ.
    """

    namespace: str
    name: str
    uid: str
    ip: str
    node: int
    kind: str  # "training" | "notebook"
    gpus: tuple[tuple[int, int], ...]  # (gpu index, replica) — replica 0 on exclusive GPUs
    start: float
    end: float | None = None
    created: float | None = None  # arrival (queued jobs start later); None: = start
    job_name: str = ""
    run_id: str = ""
    epochs: int = 0
    batch_size: int = 0
    report: str = "http"  # "http", "log", or "real" (an outside process reports)
    log_format: str = "keras"  # for report == "log": "keras" or "tqdm"
    reports_plan: bool = True  # False: no epochs/steps in its HTTP reports (above)
    run_start: float | None = None
    epoch_ends: list[float] = field(default_factory=list)
    cancelled: bool = False
    stalled_between: tuple[float, float] | None = None
    util_steps: list[tuple[float, float]] = field(default_factory=list)
    memory_bytes: int = 0
    utilization_ratio: float = 0.0  # alone on the device, while training
    gpu_model: str = ""
    product: str = ""  # the GPU model its node selector asks for; "": any
    tolerations: tuple[Taint, ...] = ()  # the taints it tolerates (exactly these)

    @property
    def container(self) -> str:
        return "notebook" if self.kind == "notebook" else "trainer"

    @property
    def owner(self) -> tuple[str, str]:
        """Its controller's (kind, name): a training pod's Job, one per run and named as
        the pod (its job family and a generated suffix: a Job's name is unique in its
        namespace, so two runs of one family are two Jobs); ("", "") for a notebook,
        which JupyterHub's KubeSpawner creates as a bare pod (no ``ownerReferences``)."""
        if self.kind == "training":
            return ("Job", self.name)
        return ("", "")

    @property
    def completed(self) -> bool:
        return (
            self.kind == "training" and not self.cancelled and len(self.epoch_ends) == self.epochs
        )

    def alive_at(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass(frozen=True, slots=True)
class Event:
    """Something the driver acts on: ``pod_start``, ``run_start``, ``epoch_end``, ``pod_end``."""

    t: float
    kind: str
    pod: Pod
    epoch: int = 0


def make_nodes(config: ClusterConfig) -> tuple[NodeSpec, ...]:
    """The nodes, their GPUs (the last one time-sliced on nodes with ≥ 2), IP ranges and
    taints. ``gpu_types`` replaces the drawn model after the draw, so the other draws
    (GPU counts, UUIDs) stay those of the seed."""
    rng = random.Random(f"{config.seed}:nodes")
    by_name = {m[0]: m for m in GPU_MODELS}
    nodes = []
    for i in range(config.nodes):
        model, speed, memory = GPU_MODELS[rng.randrange(len(GPU_MODELS))]
        if config.gpu_types:
            model, speed, memory = by_name[config.gpu_types[i % len(config.gpu_types)]]
        n = rng.randint(config.gpus_min, config.gpus_max)
        gpus = tuple(
            GpuSpec(
                index=g,
                uuid=f"GPU-{uuidlib.UUID(int=rng.getrandbits(128), version=4)}",
                model=model,
                speed=speed,
                memory_total_bytes=memory,
                replicas=config.timeslice_replicas if (n >= 2 and g == n - 1) else 1,
            )
            for g in range(n)
        )
        taints = (POOL_TAINT,) if i >= config.nodes - config.tainted_nodes else ()
        nodes.append(NodeSpec(i, f"gpu-node-{i}", gpus, f"127.0.{i + 1}", taints))
    return tuple(nodes)


def under_pressure(config: ClusterConfig, node: int, t: float) -> bool:
    """Whether node ``node`` is under memory pressure at sim time ``t``
    (``ClusterConfig.pressure_cycle_seconds``): for the live cluster and its past alike."""
    if node != config.pressure_node:
        return False
    period, lasting = config.pressure_cycle_seconds
    return t % period < lasting


def containers_started(config: ClusterConfig, pod: Pod) -> float:
    """When ``pod``'s containers run (phase Running): ``CONTAINERS_START_SECONDS``
    (simulated) after its start, when its kubelet accepted it (``status.startTime``)."""
    return pod.start + CONTAINERS_START_SECONDS / config.time_scale


def taints_at(config: ClusterConfig, node: NodeSpec, t: float) -> tuple[Taint, ...]:
    """``node``'s taints at sim time ``t``: its own, and PRESSURE_TAINT while under pressure."""
    return (*node.taints, PRESSURE_TAINT) if under_pressure(config, node.index, t) else node.taints


@dataclass
class _Job:
    pod: Pod
    draw: JobDraw
    phase: str = "pending"  # startup, epoch, stall, done
    phase_end: float = math.inf  # for timed phases
    epoch: int = 0  # epochs completed
    remaining: float = 0.0  # work left in the current epoch (cluster seconds)
    stop_at: float = 0.0  # remaining work at which the epoch phase ends (cancel point)
    rate: float = 0.0  # work per wall second right now


class ClusterSim:
    """Incremental, seeded simulation of one cluster (see the module docstring)."""

    def __init__(self, config: ClusterConfig, stream: str = "live", start: float = 0.0) -> None:
        self.config = config
        self.nodes = make_nodes(config)
        self.now = start
        self._rng = random.Random(f"{config.seed}:{stream}")
        self._stream = stream
        self._seq = 0
        self._queue: list[_Job] = []
        self._running: list[_Job] = []
        self._slots: dict[tuple[int, int, int], Pod | None] = {
            (n.index, g.index, r): None
            for n in self.nodes
            for g in n.gpus
            for r in range(g.replicas)
        }
        self._ips_free: dict[int, list[int]] = {n.index: list(range(2, 255)) for n in self.nodes}
        self._ip_released: dict[int, list[tuple[float, int]]] = {n.index: [] for n in self.nodes}
        self._pending_events: list[Event] = []
        self.pods: list[Pod] = []
        self._next_arrival = start + self._gap()
        self._timers: list[tuple[float, int, Pod]] = []  # notebook ends
        # notebook spawns that found no GPU free: JupyterHub's spawn fails, nothing queued
        self.notebooks_turned_away = 0
        # finished pods lingering past their job's end: (end, tie-break, pod); their
        # GPU slots are freed at the pod's end, not the job's, so no queued job starts
        # on a device a still-running pod holds
        self._slot_releases: list[tuple[float, int, Pod]] = []
        self._release_seq = 0
        self._hung_left = config.hung_jobs if stream == "live" else 0
        if stream == "live":
            for node in self.nodes:
                if node.taints:
                    continue  # a notebook tolerates no pool's taint
                for k in range(config.notebooks_at_start):
                    held = config.notebook_held_seconds if node.index == k == 0 else 0.0
                    self._start_notebook(node_hint=node.index, lifetime=None, at=start - held)

    # ------------------------------------------------------------ helpers

    def _gap(self) -> float:
        return self._rng.expovariate(self.config.time_scale / self.config.arrival_seconds)

    def _name(self, base: str) -> str:
        self._seq += 1
        suffix = "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        return f"{base}-{suffix}"

    def _uid(self) -> str:
        return str(uuidlib.UUID(int=self._rng.getrandbits(128), version=4))

    def _take_ip(self, node: int, t: float) -> str:
        released = self._ip_released[node]
        # an address is reused only after 60 s, so late reports of a dead pod go nowhere
        while released and released[0][0] <= t - 60:
            self._ips_free[node].append(heapq.heappop(released)[1])
        free = self._ips_free[node]
        if not free:
            raise ClusterConfigError(f"node {node}: out of pod IPs")
        octet = free.pop(0)
        return f"{self.nodes[node].ip_prefix}.{octet}"

    def _release_ip(self, pod: Pod, t: float) -> None:
        heapq.heappush(self._ip_released[pod.node], (t, int(pod.ip.rsplit(".", 1)[1])))

    def _free_slots(self, exclusive: bool) -> list[tuple[int, int, int]]:
        out = []
        for (n, g, r), holder in self._slots.items():
            if holder is not None:
                continue
            replicas = self.nodes[n].gpus[g].replicas
            if (replicas == 1) == exclusive:
                out.append((n, g, r))
        return out

    def containers_started(self, pod: Pod) -> float:
        """When ``pod``'s containers run (phase Running): ``CONTAINERS_START_SECONDS``
        after its start, when its kubelet accepted it and set ``status.startTime``."""
        return containers_started(self.config, pod)

    def _notebook_name(self, user: str, at: float) -> str:
        """The pod name KubeSpawner gives ``user``'s server spawned at ``at``
        (``pod_name_template`` ``jupyter-{username}--{servername}``, the trailing ``-``
        stripped for the default server): ``jupyter-<user>`` while no pod of that name
        is alive or gone less than ``NAME_REUSE_SECONDS`` ago, else a named server,
        ``jupyter-<user>--<server>``. The server's name is drawn either way, so a seed's
        draws stay those of every other pod."""
        server = self._name("").lstrip("-")
        default = f"jupyter-{user}"
        taken = any(
            p.name == default and (p.end is None or p.end > at - NAME_REUSE_SECONDS)
            for p in self.pods
            if p.kind == "notebook"
        )
        return f"{default}--{server}" if taken else default

    def under_pressure(self, node: int, t: float) -> bool:
        """Whether ``node`` is under memory pressure at ``t`` (``pressure_cycle_seconds``)."""
        return under_pressure(self.config, node, t)

    def taints_at(self, node: int, t: float) -> tuple[Taint, ...]:
        """``node``'s taints at ``t``: its own, and PRESSURE_TAINT while under pressure."""
        return taints_at(self.config, self.nodes[node], t)

    def _next_pressure_change(self) -> float:
        """When the pressure node's pressure next starts or ends (inf: no such node)."""
        if self.config.pressure_node < 0:
            return math.inf
        period, lasting = self.config.pressure_cycle_seconds
        base = self.now - self.now % period
        return min(x for x in (base + lasting, base + period) if x > self.now)

    def _allowed(self, product: str, tolerations: tuple[Taint, ...]) -> set[int] | None:
        """The nodes a pod selecting ``product`` ("": any) and tolerating ``tolerations``
        may start on now; None: every node (no taint, no selector: the demo's cluster)."""
        taints = [self.taints_at(n.index, self.now) for n in self.nodes]
        if not product and not any(taints):
            return None
        return {
            n.index
            for n in self.nodes
            if (not product or n.gpu_model == product)
            and all(t in tolerations for t in taints[n.index])
        }

    def _place(
        self, n_gpus: int, allow_shared: bool, pod: Pod | None = None
    ) -> tuple[int, tuple[tuple[int, int], ...]] | None:
        """Pick (node, ((gpu, replica), ...)): exclusive first, then a time-sliced replica;
        only among the nodes ``pod`` may use (its GPU type, taints it tolerates; no pod:
        untainted nodes of any type)."""
        allowed = self._allowed(pod.product, pod.tolerations) if pod else self._allowed("", ())
        free = self._free_slots(exclusive=True)
        if allowed is not None:
            free = [s for s in free if s[0] in allowed]
        by_node: dict[int, list[tuple[int, int]]] = {}
        for n, g, r in free:
            by_node.setdefault(n, []).append((g, r))
        fitting = sorted(n for n, slots in by_node.items() if len(slots) >= n_gpus)
        if fitting:
            node = fitting[self._rng.randrange(len(fitting))]
            return node, tuple(sorted(by_node[node])[:n_gpus])
        if n_gpus == 1 and allow_shared:
            shared = self._free_slots(exclusive=False)
            if allowed is not None:
                shared = [s for s in shared if s[0] in allowed]
            if shared:
                n, g, r = shared[self._rng.randrange(len(shared))]
                return n, ((g, r),)
        return None

    def _fit_memory(self, pod: Pod, at: float) -> None:
        """Shrink a pod's GPU memory to what its time-sliced device has left.

        Time-slicing shares one device's memory: the pods on it must together hold
        at most its size (REVIEW2 item 14: an 11 GB card showed 18.9 GB held). A pod
        gets at most 90 % of the device minus what its co-tenants hold, and never
        less than half of what is really left, so the sum stays under the size.
        Exclusive devices keep the 90 % cap of ``gpu_eta.simulation.scenarios``. Deterministic:
        no random draw, so seeds give the same cluster as before.
        """
        for g, _ in pod.gpus:
            spec = self.nodes[pod.node].gpus[g]
            if spec.replicas == 1:
                continue
            others = sum(
                other.memory_bytes
                for other in self.pods
                if other is not pod
                and other.node == pod.node
                and any(og == g for og, _ in other.gpus)
                and (other.end is None or other.end > at)  # a finished pod lingers 5 s
            )
            left = max(0, spec.memory_total_bytes - others)
            budget = max(int(spec.memory_total_bytes * 0.9) - others, left // 2)
            pod.memory_bytes = min(pod.memory_bytes, budget)

    def _start_notebook(self, node_hint: int | None, lifetime: float | None, at: float) -> None:
        placed = None
        if node_hint is not None:
            slots = [(g, r) for (n, g, r) in self._free_slots(True) if n == node_hint]
            if slots:
                placed = (node_hint, (slots[0],))
        if placed is None:
            placed = self._place(1, allow_shared=True)
        if placed is None:
            self.notebooks_turned_away += 1
            return
        node, gpus = placed
        user = USERS[self._rng.randrange(len(USERS))]
        pod = Pod(
            namespace="jupyterhub",
            name=self._notebook_name(user, at),
            uid=self._uid(),
            ip=self._take_ip(node, at),
            node=node,
            kind="notebook",
            gpus=gpus,
            start=at,
            created=at,
            memory_bytes=int(self._rng.uniform(0.3, 2.5) * (1 << 30)),
            gpu_model=self.nodes[node].gpus[gpus[0][0]].model,
        )
        pod.util_steps.append((at, 0.0))
        for g, r in gpus:
            self._slots[(node, g, r)] = pod
        self._fit_memory(pod, at)
        self.pods.append(pod)
        self._pending_events.append(Event(at, "pod_start", pod))
        if lifetime is not None:
            heapq.heappush(self._timers, (at + lifetime, self._seq, pod))

    def _arrival(self, t: float) -> None:
        cfg = self.config
        if self._rng.random() < cfg.notebook_share:
            life = self._rng.uniform(*cfg.notebook_seconds) / cfg.time_scale
            self._start_notebook(None, life, t)
            return
        draw = sample_job(self._rng, cfg.mix)
        if len(self._queue) >= cfg.max_queue:
            return
        user = USERS[self._rng.randrange(len(USERS))]
        n_gpus = 2 if self._rng.random() < cfg.two_gpu_share else 1
        pod = Pod(
            namespace=f"ml-{user}",
            name=self._name(draw.family.job_name),
            uid=self._uid(),
            ip="",
            node=-1,
            kind="training",
            gpus=tuple((-1, 0) for _ in range(n_gpus)),
            start=t,
            created=t,
            job_name=draw.family.job_name,
            run_id=f"{self._stream}-{self._seq:06d}",
            epochs=draw.epochs,
            batch_size=draw.batch_size,
            report="log" if self._rng.random() < cfg.log_share else "http",
            log_format="keras" if self._rng.random() < 0.5 else "tqdm",
            memory_bytes=int(draw.family.memory_bytes * self._rng.uniform(0.9, 1.1)),
            utilization_ratio=draw.family.utilization_ratio,
        )
        # set after the draws above, which stay in their order (a seed's cluster is unchanged)
        pod.reports_plan = pod.report != "http" or draw.family.reports_plan
        # a hung run must report a plan: the forecaster checks no plan-less run for stalls
        if self._hung_left and draw.epochs > 1 and pod.reports_plan:
            self._hung_left -= 1
            draw = replace(
                draw, stall_after_epoch=1, stall_seconds=HUNG_SECONDS, cancel_after_epoch=None
            )
        # a heterogeneous site's draws come last and only when asked (a seed's demo cluster
        # is unchanged)
        if cfg.pool_share and self._rng.random() < cfg.pool_share:
            pool = next(n for n in self.nodes if n.taints)
            pod.namespace = POOL_NAMESPACE
            pod.product = pool.gpu_model
            pod.tolerations = pool.taints
        elif cfg.typed_share and self._rng.random() < cfg.typed_share:
            types = sorted({n.gpu_model for n in self.nodes if not n.taints})
            pod.product = types[self._rng.randrange(len(types))]
        if cfg.pressure_tolerating_share and self._rng.random() < cfg.pressure_tolerating_share:
            pod.tolerations = (*pod.tolerations, PRESSURE_TAINT)
        self._queue.append(_Job(pod=pod, draw=draw))

    def _schedule_queue(self, t: float) -> None:
        if not self._queue or all(holder is not None for holder in self._slots.values()):
            return
        still = []
        for job in self._queue:
            placed = self._place(len(job.pod.gpus), allow_shared=True, pod=job.pod)
            if placed is None:
                still.append(job)
                continue
            node, gpus = placed
            pod = job.pod
            pod.node, pod.gpus, pod.start = node, gpus, t
            pod.ip = self._take_ip(node, t)
            pod.gpu_model = self.nodes[node].gpus[gpus[0][0]].model
            for g, r in gpus:
                self._slots[(node, g, r)] = pod
            self._fit_memory(pod, t)
            job.phase = "startup"
            job.phase_end = (
                t + self._rng.uniform(*self.config.startup_seconds) / self.config.time_scale
            )
            pod.util_steps.append((t, 0.05))
            self.pods.append(pod)
            self._running.append(job)
            self._pending_events.append(Event(t, "pod_start", pod))
        self._queue = still

    def _sharers(self, node: int, gpu: int) -> int:
        replicas = self.nodes[node].gpus[gpu].replicas
        return sum(
            1
            for r in range(replicas)
            if (p := self._slots[(node, gpu, r)]) is not None
            and any(j.pod is p and j.phase == "epoch" for j in self._running)
        )

    def _update_rates(self, t: float) -> None:
        cfg = self.config
        for job in self._running:
            pod = job.pod
            if job.phase != "epoch":
                job.rate = 0.0
                util = 0.05 if job.phase == "startup" else 0.0
            else:
                rates = []
                shares = []
                for g, _ in pod.gpus:
                    k = max(1, self._sharers(pod.node, g))
                    rates.append(self.nodes[pod.node].gpus[g].speed * cfg.time_scale / k)
                    shares.append(k)
                job.rate = min(rates)
                util = pod.utilization_ratio / max(shares)
            util = round(util, 4)
            if not pod.util_steps or pod.util_steps[-1][1] != util:
                pod.util_steps.append((t, util))

    def _begin_epoch(self, job: _Job) -> None:
        k = job.epoch  # 0-based index of the epoch starting
        work = job.draw.work_seconds[k]
        job.phase = "epoch"
        job.remaining = work
        job.stop_at = 0.0
        if job.draw.cancel_after_epoch is not None and k == job.draw.cancel_after_epoch:
            job.stop_at = work * (1 - job.draw.cancel_fraction)

    def _finish(self, job: _Job, t: float, cancelled: bool) -> None:
        pod = job.pod
        job.phase = "done"
        pod.cancelled = cancelled
        # a finished job lingers a moment (final log lines, checkpoint) before the pod goes:
        # 5 s, so its last report still finds its pod on a loaded machine
        pod.end = t + (0.0 if cancelled else 5.0)
        self._running.remove(job)
        if pod.end > t:
            self._release_seq += 1
            heapq.heappush(self._slot_releases, (pod.end, self._release_seq, pod))
        else:
            self._free_pod_slots(pod)
        self._release_ip(pod, pod.end)
        pod.util_steps.append((t, 0.0))
        self._pending_events.append(Event(pod.end, "pod_end", pod))

    def _end_notebook(self, pod: Pod, t: float) -> None:
        if pod.end is not None:
            return
        pod.end = t
        self._free_pod_slots(pod)
        self._release_ip(pod, t)
        self._pending_events.append(Event(t, "pod_end", pod))

    def _free_pod_slots(self, pod: Pod) -> None:
        """Give ``pod``'s GPU slots back to the scheduler (those it still holds)."""
        for g, r in pod.gpus:
            if self._slots.get((pod.node, g, r)) is pod:
                self._slots[(pod.node, g, r)] = None

    def _next_job_event(self) -> tuple[float, _Job | None]:
        best, who = math.inf, None
        for job in self._running:
            if job.phase in ("startup", "stall"):
                when = job.phase_end
            elif job.phase == "epoch" and job.rate > 0:
                when = self.now + max(0.0, job.remaining - job.stop_at) / job.rate
            else:
                continue
            if when < best:
                best, who = when, job
        return best, who

    def _step_job(self, job: _Job, t: float) -> None:
        pod = job.pod
        if job.phase == "startup":
            pod.run_start = t
            self._pending_events.append(Event(t, "run_start", pod))
            self._begin_epoch(job)
            return
        if job.phase == "stall":
            self._begin_epoch(job)
            return
        # epoch phase ended: cancelled part-way, or the epoch completed
        if job.stop_at > 0:
            self._finish(job, t, cancelled=True)
            return
        job.epoch += 1
        pod.epoch_ends.append(t)
        self._pending_events.append(Event(t, "epoch_end", pod, epoch=job.epoch))
        if job.epoch >= pod.epochs:
            self._finish(job, t, cancelled=False)
        elif job.draw.stall_after_epoch == job.epoch:
            job.phase = "stall"
            job.phase_end = t + job.draw.stall_seconds / self.config.time_scale
            pod.stalled_between = (t, job.phase_end)
        else:
            self._begin_epoch(job)

    def advance(self, until: float) -> list[Event]:
        """Simulate up to ``until``; return the events that happened, in time order.

        ``until`` at or before the simulation's present (it was advanced further
        already) only hands out the events planned up to ``until``.
        """
        if until <= self.now:
            ready = sorted(
                (e for e in self._pending_events if e.t <= until),
                key=lambda e: (e.t, e.kind != "pod_start"),
            )
            self._pending_events = [e for e in self._pending_events if e.t > until]
            return ready
        self._update_rates(self.now)
        while True:
            t_job, job = self._next_job_event()
            t_nb = self._timers[0][0] if self._timers else math.inf
            t_pressure = self._next_pressure_change()
            t_free = self._slot_releases[0][0] if self._slot_releases else math.inf
            t = min(self._next_arrival, t_job, t_nb, t_pressure, t_free)
            if t > until:
                break
            for j in self._running:
                if j.phase == "epoch":
                    j.remaining -= j.rate * (t - self.now)
            self.now = t
            if t == t_free:
                # a finished pod went: its GPU is free for the queue from now on
                self._free_pod_slots(heapq.heappop(self._slot_releases)[2])
            elif t == t_job and job is not None:
                if job.phase == "epoch":
                    job.remaining = job.stop_at
                self._step_job(job, t)
            elif t == t_nb:
                _, _, pod = heapq.heappop(self._timers)
                self._end_notebook(pod, t)
            elif t == self._next_arrival:
                self._arrival(t)
                self._next_arrival = t + self._gap()
            # else: a node's pressure starts or ends; the queue is tried again below
            self._schedule_queue(t)
            self._update_rates(t)
        for j in self._running:
            if j.phase == "epoch":
                j.remaining -= j.rate * (until - self.now)
        self.now = max(self.now, until)
        events, self._pending_events = self._pending_events, []
        ready = [e for e in events if e.t <= until]
        self._pending_events = [e for e in events if e.t > until]
        ready.sort(key=lambda e: (e.t, e.kind != "pod_start"))
        return ready

    def reserve_pod(self, node: int) -> Pod:
        """A training pod held for an outside process (``--real-training``), from now on.

        It takes a GPU of ``node`` that ``end_pod(..., hold=True)`` kept for it, else a
        free GPU (or a time-sliced replica), and gets a pod IP; the caller reports its
        progress itself (``report="real"``) and ends it with ``end_pod``.
        """
        slots = [
            (g, r)
            for (n, g, r), holder in self._slots.items()
            if n == node and holder is not None and holder.kind == "reserved"
        ]
        slots = slots or [(g, r) for (n, g, r) in self._free_slots(True) if n == node]
        slots = slots or [(g, r) for (n, g, r) in self._free_slots(False) if n == node]
        if not slots:
            raise ClusterConfigError(f"node {node}: no free GPU for a real training pod")
        g, r = slots[0]
        pod = Pod(
            namespace="ml-real",
            name=self._name("torch-mlp"),
            uid=self._uid(),
            ip=self._take_ip(node, self.now),
            node=node,
            kind="training",
            gpus=((g, r),),
            start=self.now,
            created=self.now,
            job_name="torch-mlp",
            report="real",
            memory_bytes=600 << 20,
            utilization_ratio=0.6,
            gpu_model=self.nodes[node].gpus[g].model,
        )
        pod.util_steps.append((self.now, 0.6))
        self._slots[(node, g, r)] = pod
        self._fit_memory(pod, self.now)
        self.pods.append(pod)
        return pod

    def end_pod(self, pod: Pod, t: float, hold: bool = False) -> None:
        """End a reserved pod at ``t`` and free its GPU.

        ``hold``: keep the GPU for the next ``reserve_pod`` on the node instead of
        handing it to the queue. Why: the demo restarts a finished real training
        run 20 s later, and on a full cluster the scheduler would otherwise fill the
        freed GPU from its queue at once, so the real run never came back (REVIEW2
        item 15). The held GPU shows no holder meanwhile, as a freed GPU would.
        """
        if pod.end is not None:
            return
        pod.end = t
        pod.util_steps.append((t, 0.0))
        for g, r in pod.gpus:
            if self._slots.get((pod.node, g, r)) is pod:
                self._slots[(pod.node, g, r)] = _placeholder(pod.node, (g, r)) if hold else None
        self._release_ip(pod, t)

    def alive(self, t: float) -> Iterator[Pod]:
        """Pods alive at ``t`` (or starting later but already planned)."""
        return (p for p in self.pods if p.end is None or p.end > t)

    def forget_before(self, t: float) -> None:
        """Drop pods that ended before ``t`` (keeps a long demo's memory bounded)."""
        self.pods = [p for p in self.pods if p.end is None or p.end >= t]

    @property
    def queued(self) -> int:
        """Jobs waiting for a GPU."""
        return len(self._queue)

    def queued_pods(self) -> tuple[Pod, ...]:
        """The pods of the jobs waiting for a GPU, in queue order (``start`` = arrival)."""
        return tuple(job.pod for job in self._queue)


def _placeholder(node: int, slot: tuple[int, int]) -> Pod:
    """A slot holder that is no pod: keeps the scheduler off a GPU kept for ``reserve_pod``."""
    return Pod("", "reserved", "", "", node, "reserved", (slot,), 0.0)


def warm_start(
    config: ClusterConfig, keep_free: Sequence[int] = ()
) -> tuple[ClusterSim, list[Event]]:
    """The live cluster as it is at the anchor (t = 0), and what happened before it.

    Why: a demo that starts with an empty cluster shows one job and idle GPUs for
    its first minutes. The live simulation instead starts ``warm_start_seconds``
    before the anchor and is advanced to 0, so at t = 0 jobs are at every stage
    (their pods start at negative times, their earlier epoch ends are known), a
    time-sliced GPU may be shared and notebooks have been idle for a while. The
    past events are returned for the backfill (``gpu_eta.simulation.backfill.warm_history``) and
    the log replay (``gpu_eta.simulation.driver.Driver.replay``); the driver fires only later ones,
    with the same pods, run ids and run starts.

    ``keep_free``: node indexes, one GPU each kept free through the warm-up (so
    ``reserve_pod`` finds one at t = 0 on a full cluster: ``--real-training``).
    """
    sim = ClusterSim(config, stream="live", start=-config.warm_start_seconds)
    held = []
    for node in keep_free:
        slots = [(g, r) for (n, g, r) in sim._free_slots(True) if n == node]
        slots = slots or [(g, r) for (n, g, r) in sim._free_slots(False) if n == node]
        if slots:
            sim._slots[(node, *slots[0])] = _placeholder(node, slots[0])
            held.append((node, *slots[0]))
    past = sim.advance(0.0) if config.warm_start_seconds > 0 else []
    for key in held:
        sim._slots[key] = None
    return sim, past
