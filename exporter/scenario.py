"""Scenario files: a simulated GPU node described in YAML (parsing and maths only).

Tests, the benchmark and the demo all describe a node the same way: its GPUs (whole,
time-sliced or MIG), its pods with their containers, the devices the kubelet gave
them and how their utilisation and memory evolve over time. ``parse_scenario`` turns
the YAML mapping into frozen records and rejects anything malformed with a
``ScenarioError`` naming the offending path, so a bad file written by the demo is a
one-line log, never a traceback. ``evaluate`` is a pure function of the scenario and
a unix time: the simulated backend (``gpu_eta.exporter.simulated_node``) is only the
I/O around it. The format is documented in ``docs/scenario.md``.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from gpu_eta.common.k8s_names import DNS_SUBDOMAIN
from gpu_eta.exporter.collectors import ExporterError

SCENARIO_VERSION = 1
MAX_SCENARIO_BYTES = 4 * 1024 * 1024
MAX_GPUS = 64
MAX_PODS = 4096
MAX_CONTAINERS_PER_POD = 32
# bounds checked before float(): an integer beyond float range makes float() raise
# OverflowError, and a size string of 400 digits becomes inf. 1e15 s is 30 million
# years; 2**60 bytes (1 EiB) is beyond any device or host.
MAX_NUMBER = 1e15
MAX_SIZE_BYTES = 2**60
PROFILE_KINDS = ("constant", "noise", "periodic", "steps")
_NAME_RE = DNS_SUBDOMAIN
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]i?B?|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 1000,
    "KB": 1000,
    "KIB": 1024,
    "KI": 1024,
    "M": 1000**2,
    "MB": 1000**2,
    "MI": 1024**2,
    "MIB": 1024**2,
    "G": 1000**3,
    "GB": 1000**3,
    "GI": 1024**3,
    "GIB": 1024**3,
    "T": 1000**4,
    "TB": 1000**4,
    "TI": 1024**4,
    "TIB": 1024**4,
    "P": 1000**5,
    "PB": 1000**5,
    "PI": 1024**5,
    "PIB": 1024**5,
}


class ScenarioError(ExporterError):
    """A scenario file is unreadable or invalid; the message names the path in it."""


@dataclass(frozen=True, slots=True)
class Profile:
    """How one value evolves over time (seconds since the pod started).

    ``kind`` is one of ``constant`` (``value``), ``noise`` (uniform noise of
    ``amplitude`` around ``value``), ``periodic`` (a sine between ``low`` and
    ``high`` over ``period_seconds``, shifted by ``phase_seconds``; ``square`` for a
    square wave), ``steps`` (piecewise constant: ``steps`` is ``((at, value), ...)``
    sorted by ``at``). Any kind may add ``noise`` (an amplitude) on top. Results are
    clipped to ``[minimum, maximum]``.
    """

    kind: str
    value: float = 0.0
    amplitude: float = 0.0
    low: float = 0.0
    high: float = 0.0
    period_seconds: float = 60.0
    phase_seconds: float = 0.0
    square: bool = False
    steps: tuple[tuple[float, float], ...] = ()
    noise: float = 0.0
    minimum: float = 0.0
    maximum: float = math.inf


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG GPU instance of a MIG-enabled GPU."""

    gpu_instance_id: int
    uuid: str  # MIG-...
    profile: str
    memory_total_bytes: int


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One physical GPU of the node."""

    index: int
    uuid: str  # GPU-...
    model: str
    memory_total_bytes: int
    replicas: int = 1  # >1: time-sliced, the kubelet hands out GPU-<uuid>::<n>
    mig: tuple[MigInstance, ...] = ()
    # (reason, start_seconds, end_seconds): the device fails to read in that window
    failure: tuple[str, float, float] | None = None


@dataclass(frozen=True, slots=True)
class GpuUse:
    """One device a container holds, and its process on it (if any)."""

    gpu: int
    device_id: str  # raw id as the kubelet reports it
    gpu_instance_id: int | None
    pid: int | None  # None: holds the device, runs nothing on it (an idle holder)
    utilization: Profile
    memory: Profile
    replica: int | None = None  # which replica of a time-sliced GPU (None: not one)


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """One container of a pod."""

    name: str
    container_id: str
    gpus: tuple[GpuUse, ...]
    host_memory: Profile | None
    host_memory_limit_bytes: int | None


@dataclass(frozen=True, slots=True)
class PodSpec:
    """One pod, present from ``start_seconds`` to ``end_seconds`` after the anchor."""

    namespace: str
    name: str
    uid: str
    ip: str | None
    host_network: bool
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_kind: str
    owner_name: str
    start_seconds: float
    end_seconds: float | None
    active_deadline_seconds: float | None
    containers: tuple[ContainerSpec, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole simulated node. ``start_timestamp`` None: anchored when loaded."""

    node: str
    seed: int
    start_timestamp: float | None
    driver_version: str
    gpus: tuple[GpuSpec, ...]
    pods: tuple[PodSpec, ...]
    source: str = field(default="", compare=False)

    def anchored(self, at: float) -> Scenario:
        """The same scenario with ``start_timestamp`` set (if it was not)."""
        if self.start_timestamp is not None:
            return self
        return Scenario(
            self.node,
            self.seed,
            at,
            self.driver_version,
            self.gpus,
            self.pods,
            self.source,
        )


# ---------------------------------------------------------------------------
# parsing


def parse_size(value: Any, where: str) -> int:
    """Bytes from an int or a string like ``"80GiB"``, ``"512 MiB"``, ``"1.5GB"``."""
    if isinstance(value, bool):
        raise ScenarioError(f"{where}: expected a size, got {_show(value)}")
    size: float | None = None
    if isinstance(value, int | float):
        size = value
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        unit = (match.group(2) or "").upper() if match else "?"
        if match and unit in _SIZE_UNITS:
            size = float(match.group(1)) * _SIZE_UNITS[unit]  # 400 digits: inf, no error
    if size is None:
        raise ScenarioError(f"{where}: expected a size like 80GiB or 512MiB, got {_show(value)}")
    # compared before int(): NaN fails, inf and huge integers exceed the bound
    if not 0 <= size <= MAX_SIZE_BYTES:
        raise ScenarioError(f"{where}: size must be 0..{MAX_SIZE_BYTES} bytes, got {_show(value)}")
    return int(size)


def _show(value: Any) -> str:
    """``value`` for an error message, shortened: a 400-digit number stays one line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: Any, where: str, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{where}: expected a number, got {_show(value)}")
    # compared before float(): an integer beyond float range would raise OverflowError
    if not -MAX_NUMBER <= value <= MAX_NUMBER:
        raise ScenarioError(
            f"{where}: expected a finite number within ±{MAX_NUMBER:g}, got {_show(value)}"
        )
    out = float(value)
    if minimum is not None and out < minimum:
        raise ScenarioError(f"{where}: must be >= {minimum:g}, got {value!r}")
    return out


def _integer(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise ScenarioError(f"{where}: must be >= {minimum}, got {value!r}")
    return value


def _string(value: Any, where: str, *, max_len: int = 253) -> str:
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise ScenarioError(f"{where}: expected a non-empty string (<= {max_len} chars)")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _sequence(value: Any, where: str, limit: int) -> Sequence[Any]:
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > limit:
        raise ScenarioError(f"{where}: at most {limit} entries, got {len(value)}")
    return value


def _check_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unknown)}")


def _str_map(value: Any, where: str) -> Mapping[str, str]:
    data = _mapping(value, where)
    if len(data) > 64:
        raise ScenarioError(f"{where}: at most 64 entries")
    out: dict[str, str] = {}
    for key, val in data.items():
        out[_string(key, f"{where}.{key}")] = str(val)[:1024]
    return MappingProxyType(out)


def parse_profile(
    value: Any, where: str, *, is_size: bool = False, maximum: float = math.inf
) -> Profile:
    """A profile from a number/size (constant) or a mapping with ``kind``."""

    def amount(raw: Any, at: str) -> float:
        return float(parse_size(raw, at)) if is_size else _number(raw, at, minimum=0)

    if not isinstance(value, Mapping):
        val = amount(value, where)
        _check_max(val, maximum, where)
        return Profile(kind="constant", value=val, maximum=maximum)
    kind = value.get("kind", "constant")
    if kind not in PROFILE_KINDS:
        raise ScenarioError(f"{where}.kind: one of {', '.join(PROFILE_KINDS)}, got {kind!r}")
    noise = amount(value.get("noise", 0), f"{where}.noise")
    common = {"kind", "noise"}
    if kind == "constant":
        _check_keys(value, common | {"value"}, where)
        val = amount(value.get("value", 0), f"{where}.value")
        _check_max(val, maximum, f"{where}.value")
        return Profile(kind=kind, value=val, noise=noise, maximum=maximum)
    if kind == "noise":
        _check_keys(value, common | {"value", "amplitude"}, where)
        val = amount(value.get("value", 0), f"{where}.value")
        _check_max(val, maximum, f"{where}.value")
        amp = amount(value.get("amplitude", 0), f"{where}.amplitude")
        return Profile(kind=kind, value=val, amplitude=amp, noise=noise, maximum=maximum)
    if kind == "periodic":
        _check_keys(
            value, common | {"low", "high", "period_seconds", "phase_seconds", "shape"}, where
        )
        low = amount(value.get("low", 0), f"{where}.low")
        high = amount(value.get("high", 0), f"{where}.high")
        if high < low:
            raise ScenarioError(f"{where}: high must be >= low")
        _check_max(high, maximum, f"{where}.high")
        period = _number(value.get("period_seconds", 60), f"{where}.period_seconds", minimum=0.001)
        phase = _number(value.get("phase_seconds", 0), f"{where}.phase_seconds")
        shape = value.get("shape", "sine")
        if shape not in ("sine", "square"):
            raise ScenarioError(f"{where}.shape: sine or square, got {shape!r}")
        return Profile(
            kind=kind,
            low=low,
            high=high,
            period_seconds=period,
            phase_seconds=phase,
            square=shape == "square",
            noise=noise,
            maximum=maximum,
        )
    _check_keys(value, common | {"steps"}, where)
    raw_steps = _sequence(value.get("steps"), f"{where}.steps", 1000)
    if not raw_steps:
        raise ScenarioError(f"{where}.steps: at least one step")
    steps: list[tuple[float, float]] = []
    for i, step in enumerate(raw_steps):
        at_where = f"{where}.steps[{i}]"
        step_map = _mapping(step, at_where)
        _check_keys(step_map, {"at_seconds", "value"}, at_where)
        at = _number(step_map.get("at_seconds", 0), f"{at_where}.at_seconds", minimum=0)
        val = amount(step_map.get("value", 0), f"{at_where}.value")
        _check_max(val, maximum, f"{at_where}.value")
        if steps and at <= steps[-1][0]:
            raise ScenarioError(f"{at_where}.at_seconds: steps must be in increasing order")
        steps.append((at, val))
    return Profile(kind=kind, steps=tuple(steps), noise=noise, maximum=maximum)


def _check_max(val: float, maximum: float, where: str) -> None:
    if val > maximum:
        raise ScenarioError(f"{where}: must be <= {maximum:g}, got {val:g}")


def _derived_uuid(seed: int, *parts: object) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "gpu-eta-sim/" + "/".join(map(str, (seed, *parts)))))


def _gpu(data: Any, i: int, node: str, seed: int) -> GpuSpec:
    where = f"gpus[{i}]"
    gpu = _mapping(data, where)
    _check_keys(
        gpu,
        {"index", "uuid", "model", "memory_total", "time_slicing_replicas", "mig", "failure"},
        where,
    )
    index = _integer(gpu.get("index", i), f"{where}.index")
    uid = gpu.get("uuid") or "GPU-" + _derived_uuid(seed, node, "gpu", index)
    uid = _string(uid, f"{where}.uuid")
    if not uid.startswith("GPU-"):
        raise ScenarioError(f"{where}.uuid: must start with GPU-, got {uid!r}")
    model = _string(gpu.get("model", "NVIDIA A100-SXM4-80GB"), f"{where}.model", max_len=96)
    total = parse_size(gpu.get("memory_total", "80GiB"), f"{where}.memory_total")
    replicas = _integer(
        gpu.get("time_slicing_replicas", 1), f"{where}.time_slicing_replicas", minimum=1
    )
    mig: list[MigInstance] = []
    if "mig" in gpu:
        if replicas > 1:
            raise ScenarioError(f"{where}: a GPU is either time-sliced or MIG, not both")
        for j, inst in enumerate(_sequence(gpu["mig"], f"{where}.mig", 7)):
            iw = f"{where}.mig[{j}]"
            inst_map = _mapping(inst, iw)
            _check_keys(inst_map, {"gpu_instance_id", "uuid", "profile", "memory_total"}, iw)
            giid = _integer(inst_map.get("gpu_instance_id", j + 1), f"{iw}.gpu_instance_id")
            muid = inst_map.get("uuid") or "MIG-" + _derived_uuid(seed, node, "mig", index, giid)
            muid = _string(muid, f"{iw}.uuid")
            if not muid.startswith("MIG-"):
                raise ScenarioError(f"{iw}.uuid: must start with MIG-, got {muid!r}")
            profile = _string(inst_map.get("profile", "1g.10gb"), f"{iw}.profile", max_len=32)
            mtotal = parse_size(inst_map.get("memory_total", "10GiB"), f"{iw}.memory_total")
            if any(m.gpu_instance_id == giid for m in mig):
                raise ScenarioError(f"{iw}.gpu_instance_id: duplicate {giid}")
            mig.append(MigInstance(giid, muid, profile, mtotal))
        if not mig:
            raise ScenarioError(f"{where}.mig: at least one instance (or leave the key out)")
    failure = None
    if "failure" in gpu:
        fw = f"{where}.failure"
        fail = _mapping(gpu["failure"], fw)
        _check_keys(fail, {"reason", "start_seconds", "end_seconds"}, fw)
        reason = _string(fail.get("reason", "gpu_lost"), f"{fw}.reason", max_len=32)
        if not re.match(r"^[a-z_]+$", reason):
            raise ScenarioError(f"{fw}.reason: lower_snake_case, got {reason!r}")
        start = _number(fail.get("start_seconds", 0), f"{fw}.start_seconds")
        end = fail.get("end_seconds")
        end_f = math.inf if end is None else _number(end, f"{fw}.end_seconds")
        failure = (reason, start, end_f)
    return GpuSpec(index, uid, model, total, replicas, tuple(mig), failure)


def _gpu_use(
    data: Any,
    where: str,
    gpus: Mapping[int, GpuSpec],
    pid: int,
    replica_next: dict[int, int],
) -> GpuUse:
    if isinstance(data, int) and not isinstance(data, bool):
        data = {"gpu": data}
    use = _mapping(data, where)
    _check_keys(
        use,
        {"gpu", "gpu_instance_id", "replica", "device_id", "utilization", "memory", "pid"},
        where,
    )
    index = _integer(use.get("gpu"), f"{where}.gpu")
    if index not in gpus:
        raise ScenarioError(f"{where}.gpu: no GPU with index {index} in gpus")
    spec = gpus[index]
    giid: int | None = None
    replica: int | None = None
    if spec.mig:
        giid = _integer(use.get("gpu_instance_id"), f"{where}.gpu_instance_id")
        inst = next((m for m in spec.mig if m.gpu_instance_id == giid), None)
        if inst is None:
            raise ScenarioError(f"{where}.gpu_instance_id: GPU {index} has no instance {giid}")
        default_id = inst.uuid
        mem_max = float(inst.memory_total_bytes)
    elif "gpu_instance_id" in use:
        raise ScenarioError(f"{where}.gpu_instance_id: GPU {index} is not MIG-enabled")
    else:
        mem_max = float(spec.memory_total_bytes)
        if spec.replicas > 1:
            replica = _integer(use.get("replica", replica_next.get(index, 0)), f"{where}.replica")
            if replica >= spec.replicas:
                raise ScenarioError(
                    f"{where}.replica: GPU {index} has {spec.replicas} replicas, got {replica}"
                )
            replica_next[index] = replica + 1
            default_id = f"{spec.uuid}::{replica}"
        else:
            default_id = spec.uuid
    device_id = _string(use.get("device_id", default_id), f"{where}.device_id", max_len=128)
    has_process = "utilization" in use or "memory" in use
    util = parse_profile(use.get("utilization", 0), f"{where}.utilization", maximum=1.0)
    mem = parse_profile(use.get("memory", 0), f"{where}.memory", is_size=True, maximum=mem_max)
    proc_pid: int | None = None
    if has_process:
        proc_pid = _integer(use.get("pid", pid), f"{where}.pid", minimum=1)
    elif "pid" in use:
        raise ScenarioError(f"{where}.pid: a pid needs a utilization or memory profile")
    return GpuUse(index, device_id, giid, proc_pid, util, mem, replica)


def _pod(
    data: Any,
    i: int,
    node: str,
    seed: int,
    gpus: Mapping[int, GpuSpec],
    replica_next: dict[int, int],
) -> PodSpec:
    where = f"pods[{i}]"
    pod = _mapping(data, where)
    _check_keys(
        pod,
        {
            "namespace",
            "name",
            "uid",
            "ip",
            "host_network",
            "labels",
            "annotations",
            "owner_kind",
            "owner_name",
            "start_seconds",
            "end_seconds",
            "active_deadline_seconds",
            "containers",
        },
        where,
    )
    namespace = _string(pod.get("namespace", "default"), f"{where}.namespace", max_len=63)
    name = _string(pod.get("name"), f"{where}.name")
    for val, key in ((namespace, "namespace"), (name, "name")):
        if not _NAME_RE.match(val):
            raise ScenarioError(f"{where}.{key}: not a valid Kubernetes name: {val!r}")
    where = f"pods[{i}] ({namespace}/{name})"
    uid = _string(
        pod.get("uid") or _derived_uuid(seed, node, "pod", namespace, name), f"{where}.uid"
    )
    ip = pod.get("ip")
    if ip is not None:
        ip = _string(ip, f"{where}.ip", max_len=45)
    host_network = pod.get("host_network", False)
    if not isinstance(host_network, bool):
        raise ScenarioError(f"{where}.host_network: expected true or false")
    labels = _str_map(pod.get("labels", {}), f"{where}.labels")
    annotations = _str_map(pod.get("annotations", {}), f"{where}.annotations")
    owner_kind = str(pod.get("owner_kind", ""))[:63]
    owner_name = str(pod.get("owner_name", ""))[:253]
    start = _number(pod.get("start_seconds", 0), f"{where}.start_seconds")
    end_raw = pod.get("end_seconds")
    end = None if end_raw is None else _number(end_raw, f"{where}.end_seconds")
    if end is not None and end <= start:
        raise ScenarioError(f"{where}.end_seconds: must be after start_seconds")
    deadline_raw = pod.get("active_deadline_seconds")
    deadline = (
        None
        if deadline_raw is None
        else _number(deadline_raw, f"{where}.active_deadline_seconds", minimum=1)
    )
    raw_containers = _sequence(
        pod.get("containers", []), f"{where}.containers", MAX_CONTAINERS_PER_POD
    )
    if not raw_containers:
        raise ScenarioError(f"{where}.containers: at least one container")
    containers: list[ContainerSpec] = []
    for j, craw in enumerate(raw_containers):
        cw = f"{where}.containers[{j}]"
        cont = _mapping(craw, cw)
        _check_keys(cont, {"name", "id", "gpus", "host_memory", "host_memory_limit"}, cw)
        cname = _string(cont.get("name"), f"{cw}.name", max_len=63)
        if any(c.name == cname for c in containers):
            raise ScenarioError(f"{cw}.name: duplicate container {cname!r}")
        cid = (
            cont.get("id")
            or hashlib.sha256(f"{seed}/{node}/{namespace}/{name}/{cname}".encode()).hexdigest()
        )
        cid = _string(cid, f"{cw}.id", max_len=128)
        uses = []
        for k, graw in enumerate(_sequence(cont.get("gpus", []), f"{cw}.gpus", 16)):
            default_pid = _default_pid(seed, node, namespace, name, cname, k)
            uses.append(_gpu_use(graw, f"{cw}.gpus[{k}]", gpus, default_pid, replica_next))
        host_mem = None
        if "host_memory" in cont:
            host_mem = parse_profile(cont["host_memory"], f"{cw}.host_memory", is_size=True)
        limit = None
        if cont.get("host_memory_limit") is not None:
            limit = parse_size(cont["host_memory_limit"], f"{cw}.host_memory_limit")
        containers.append(ContainerSpec(cname, cid, tuple(uses), host_mem, limit))
    return PodSpec(
        namespace,
        name,
        uid,
        ip,
        host_network,
        labels,
        annotations,
        owner_kind,
        owner_name,
        start,
        end,
        deadline,
        tuple(containers),
    )


def _default_pid(seed: int, *parts: object) -> int:
    digest = hashlib.sha256("/".join(map(str, (seed, *parts))).encode()).digest()
    return 10_000 + int.from_bytes(digest[:4], "big") % 4_000_000


def parse_scenario(data: Any, source: str = "") -> Scenario:
    """Validate a loaded YAML document into a ``Scenario``; ``ScenarioError`` if bad."""
    top = _mapping(data, "scenario")
    _check_keys(
        top,
        {"version", "node", "seed", "start_timestamp", "driver_version", "gpus", "pods"},
        "scenario",
    )
    version = top.get("version", SCENARIO_VERSION)
    if version != SCENARIO_VERSION:
        raise ScenarioError(
            f"version: this exporter reads version {SCENARIO_VERSION}, got {version!r}"
        )
    node = _string(top.get("node", "sim-node-0"), "node")
    seed = _integer(top.get("seed", 0), "seed")
    start = top.get("start_timestamp")
    start_ts = None if start is None else _number(start, "start_timestamp", minimum=0)
    driver = _string(str(top.get("driver_version", "550.54.15")), "driver_version", max_len=32)
    gpu_list = [
        _gpu(g, i, node, seed)
        for i, g in enumerate(_sequence(top.get("gpus", []), "gpus", MAX_GPUS))
    ]
    by_index: dict[int, GpuSpec] = {}
    for gpu in gpu_list:
        if gpu.index in by_index:
            raise ScenarioError(f"gpus: duplicate index {gpu.index}")
        by_index[gpu.index] = gpu
    uuids = [g.uuid for g in gpu_list]
    if len(set(uuids)) != len(uuids):
        raise ScenarioError("gpus: duplicate uuid")
    replica_next: dict[int, int] = {}
    pods = [
        _pod(p, i, node, seed, by_index, replica_next)
        for i, p in enumerate(_sequence(top.get("pods", []), "pods", MAX_PODS))
    ]
    seen: set[tuple[str, str]] = set()
    pids: set[int] = set()
    for pod in pods:
        key = (pod.namespace, pod.name)
        if key in seen:
            raise ScenarioError(f"pods: duplicate pod {pod.namespace}/{pod.name}")
        seen.add(key)
        for cont in pod.containers:
            for use in cont.gpus:
                if use.pid is not None:
                    if use.pid in pids:
                        raise ScenarioError(
                            f"pods ({pod.namespace}/{pod.name}): pid {use.pid} used twice"
                        )
                    pids.add(use.pid)
    _check_one_holder(pods)
    return Scenario(node, seed, start_ts, driver, tuple(gpu_list), tuple(pods), source)


def _check_one_holder(pods: Sequence[PodSpec]) -> None:
    """Refuse two pods present at once on one exclusive GPU, time-sliced replica or MIG
    instance: the kubelet never hands a device out twice, so such a file would show two
    holders of one device (a simulated cluster that frees a GPU too early did)."""
    by_device: dict[tuple[int, int | None, int | None], list[PodSpec]] = {}
    for pod in pods:
        held = {(u.gpu, u.replica, u.gpu_instance_id) for c in pod.containers for u in c.gpus}
        for key in held:
            by_device.setdefault(key, []).append(pod)
    for (gpu, replica, giid), holders in by_device.items():
        holders.sort(key=lambda p: p.start_seconds)
        last = holders[0]
        for pod in holders[1:]:
            if pod.start_seconds < _end(last):
                device = f"GPU {gpu}"
                if replica is not None:
                    device += f" replica {replica}"
                if giid is not None:
                    device += f" instance {giid}"
                raise ScenarioError(
                    f"pods: {device} is held by {last.namespace}/{last.name} and"
                    f" {pod.namespace}/{pod.name} at once (from {pod.start_seconds:g} s)"
                )
            if _end(pod) > _end(last):
                last = pod


def _end(pod: PodSpec) -> float:
    return math.inf if pod.end_seconds is None else pod.end_seconds


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; every failure is a one-line ``ScenarioError``."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read: {err.strerror or err}") from err
    return _load_bytes(raw, str(path))


def default_scenario() -> Scenario:
    """The built-in node (``exporter/scenarios/default.yaml``)."""
    raw = resources.files("gpu_eta.exporter").joinpath("scenarios/default.yaml").read_bytes()
    return _load_bytes(raw, "<built-in default.yaml>")


class _AliasRefused(yaml.composer.ComposerError):
    """A scenario file used a YAML anchor or alias."""


class _NoAliasLoader(yaml.SafeLoader):
    """``SafeLoader`` refusing anchors and aliases.

    Why: aliases multiply what a file holds without its size growing (a 139 KB file of
    aliases expanded into 2 million device allocations: 22 s and 2 GB to parse, and
    every collection walks them), so the 4 MB cap bounded nothing. Scenario files are
    written by hand or by ``yaml.safe_dump`` of plain data, which uses neither.
    """

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _AliasRefused(
                None, None, "YAML anchors and aliases are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)


def _load_bytes(raw: bytes, source: str) -> Scenario:
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"{source}: larger than {MAX_SCENARIO_BYTES} bytes")
    try:
        data = yaml.load(raw, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        pos = f" (line {mark.line + 1})" if mark is not None else ""
        what = err.problem if isinstance(err, _AliasRefused) else "not valid YAML"
        raise ScenarioError(f"{source}: {what}{pos}") from err
    except RecursionError:
        raise ScenarioError(f"{source}: nested too deeply") from None
    except ValueError as err:  # an integer of thousands of digits
        raise ScenarioError(f"{source}: {str(err).split(':')[0][:80]}") from None
    try:
        return parse_scenario(data, source)
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from err


# ---------------------------------------------------------------------------
# evaluation (pure)


def _unit_noise(seed: int, key: str, t: float) -> float:
    """Deterministic uniform noise in [-1, 1] for a key and whole second ``t``."""
    digest = hashlib.blake2b(f"{seed}|{key}|{math.floor(t)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**63 - 1.0


def evaluate(profile: Profile, t: float, seed: int = 0, key: str = "") -> float:
    """The profile's value ``t`` seconds after its pod started (clipped, deterministic)."""
    if profile.kind == "periodic":
        angle = 2 * math.pi * (t + profile.phase_seconds) / profile.period_seconds
        if profile.square:
            frac = 1.0 if math.sin(angle) >= 0 else 0.0
        else:
            frac = (math.sin(angle) + 1) / 2
        val = profile.low + (profile.high - profile.low) * frac
    elif profile.kind == "steps":
        val = profile.steps[0][1]
        for at, step_value in profile.steps:
            if t >= at:
                val = step_value
            else:
                break
    else:
        val = profile.value
    amplitude = profile.noise + (profile.amplitude if profile.kind == "noise" else 0.0)
    if amplitude:
        val += amplitude * _unit_noise(seed, key, t)
    return min(max(val, profile.minimum), profile.maximum)


def pod_present(pod: PodSpec, rel: float) -> bool:
    """Whether the pod exists ``rel`` seconds after the scenario's anchor."""
    return pod.start_seconds <= rel and (pod.end_seconds is None or rel < pod.end_seconds)
