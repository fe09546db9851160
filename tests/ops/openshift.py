"""What an OpenShift render must hold, for tests/ops: the chart with
``openshift.enabled`` and kustomize with components/openshift are checked by the
same two functions (docs/deploy.md, "OpenShift").

``check`` asserts the objects OpenShift admits and scrapes; ``undo`` takes those
changes back, so that a test can hold what is left equal to the default render
(nothing else changes, in either direction).
"""

from __future__ import annotations

import copy

from tests.ops import k8s
from tests.ops.k8s import find, pod_spec

SCC_BINDING = "gpu-eta-exporter-scc-privileged"
PROMETHEUS_RBAC = "gpu-eta-prometheus-k8s"
PLATFORM_PROMETHEUS = {"kind": "ServiceAccount", "name": "prometheus-k8s",
                       "namespace": "openshift-monitoring"}  # fmt: skip
PLATFORM_PEER = {"namespaceSelector": {"matchLabels": {
    "kubernetes.io/metadata.name": "openshift-monitoring"}}}  # fmt: skip
FIXED_IDS = ("runAsUser", "runAsGroup", "fsGroup")
CLUSTER_MONITORING = "openshift.io/cluster-monitoring"
# the forecaster reads the platform Prometheus through thanos-querier (docs/deploy.md 2d)
MONITORING_VIEW = "gpu-eta-forecaster-cluster-monitoring-view"
THANOS_QUERIER = "https://thanos-querier.openshift-monitoring.svc:9091"
AUTH_DIR = "/var/run/secrets/gpu-eta/prometheus"
AUTH_ARGS = (f"--prometheus.bearer-token-file={AUTH_DIR}/token",
             f"--prometheus.ca-file={AUTH_DIR}/ca.crt")  # fmt: skip
AUTH_VOLUME = {"name": "prometheus-auth", "projected": {"sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
    {"configMap": {"name": "openshift-service-ca.crt",
                   "items": [{"key": "service-ca.crt", "path": "ca.crt"}]}}]}}  # fmt: skip
AUTH_MOUNT = {"name": "prometheus-auth", "mountPath": AUTH_DIR, "readOnly": True}


def _forecaster(objects: list[dict]) -> dict:
    (workload,) = [o for o in objects if o["kind"] in {"Deployment", "CronJob"}
                   and o["metadata"]["name"] == "gpu-eta-forecaster"]  # fmt: skip
    return workload


def _non_root_workloads(objects: list[dict]) -> list[dict]:
    return [o for o in objects if pod_spec(o) and o["metadata"]["name"] != "gpu-eta-exporter"]


def assert_binds(binding: dict, cluster_role: str, account: str, namespace: str) -> None:
    """BINDING grants ClusterRole CLUSTER_ROLE to ServiceAccount ACCOUNT of NAMESPACE."""
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": cluster_role}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": namespace}]  # fmt: skip


def check(objects: list[dict], namespace: str = "gpu-eta") -> None:
    """The OpenShift blockers of a first apply, each answered in these objects."""
    assert not k8s.validate_all(objects)
    # restricted-v2 refuses the exporter: its ServiceAccount may use privileged
    binding = find(objects, "RoleBinding", SCC_BINDING)
    assert binding["metadata"]["namespace"] == namespace
    assert_binds(binding, "system:openshift:scc:privileged", "gpu-eta-exporter", namespace)
    account = find(objects, "ServiceAccount", "gpu-eta-exporter")
    assert account["metadata"]["namespace"] == namespace
    exporter = pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))
    assert exporter["serviceAccountName"] == "gpu-eta-exporter"
    # RHCOS enforces SELinux; CRI-O has no "nvidia" handler, its hook needs the env only
    assert exporter["securityContext"]["seLinuxOptions"] == {"type": "spc_t"}
    assert "runtimeClassName" not in exporter
    env = {e["name"]: e.get("value") for e in exporter["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    # restricted-v2 takes only the namespace's ids: none named, non-root still required
    workloads = _non_root_workloads(objects)
    assert workloads
    for workload in workloads:
        context = pod_spec(workload)["securityContext"]
        assert context["runAsNonRoot"] is True, workload["metadata"]["name"]
        assert not set(FIXED_IDS) & set(context), workload["metadata"]["name"]
    # the platform Prometheus may discover the targets and reach the metrics ports
    role = find(objects, "Role", PROMETHEUS_RBAC)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"],
                              "verbs": ["get", "list", "watch"]}]  # fmt: skip
    reader = find(objects, "RoleBinding", PROMETHEUS_RBAC)
    assert reader["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": PROMETHEUS_RBAC}  # fmt: skip
    assert reader["subjects"] == [PLATFORM_PROMETHEUS]
    ports = {"gpu-eta-exporter": 9842, "gpu-eta-forecaster": 9844, "gpu-eta-pushgateway": 9091}
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policies
    for policy in policies:
        port = ports[policy["metadata"]["name"]]
        scraper = {"app.kubernetes.io/name": "prometheus"}
        assert k8s.policy_allows(policy, port=port, namespace="openshift-monitoring",
                                 pod_labels=scraper)  # fmt: skip
        assert not k8s.policy_allows(policy, port=port, namespace="openshift-user-workload-monitoring",
                                     pod_labels=scraper)  # fmt: skip
    for ns in (o for o in objects if o["kind"] == "Namespace"):
        assert ns["metadata"]["labels"][CLUSTER_MONITORING] == "true"
    # the forecaster queries thanos-querier: its ServiceAccount may (kube-rbac-proxy
    # checks `get` on namespaces), with a projected token and the service CA
    viewer = find(objects, "ClusterRoleBinding", MONITORING_VIEW)
    assert_binds(viewer, "cluster-monitoring-view", "gpu-eta-forecaster", namespace)
    settings = find(objects, "ConfigMap", "gpu-eta-settings")
    assert settings["data"]["PROMETHEUS_URL"] == THANOS_QUERIER
    forecaster = pod_spec(_forecaster(objects))
    assert forecaster["serviceAccountName"] == "gpu-eta-forecaster"
    (container,) = forecaster["containers"]
    assert [a for a in container["args"] if a.startswith(AUTH_ARGS)] == list(AUTH_ARGS)
    assert AUTH_MOUNT in container["volumeMounts"]
    assert AUTH_VOLUME in forecaster["volumes"]


def undo(objects: list[dict], default: list[dict]) -> list[dict]:
    """OBJECTS with the OpenShift changes taken back, as far as DEFAULT (the render
    without them) shows what they were: the four RBAC objects gone, the exporter's
    RuntimeClass back and its SELinux type off, the fixed ids back, the platform
    Prometheus' peer and the namespace label gone, the forecaster's thanos-querier
    URL back (with the chart's checksum of it on the Deployment) and its token and CA
    flags, mount and volume gone."""
    out = []
    for obj in copy.deepcopy(objects):
        key = (obj["kind"], obj["metadata"]["name"])
        if key in {("RoleBinding", SCC_BINDING), ("Role", PROMETHEUS_RBAC),
                   ("RoleBinding", PROMETHEUS_RBAC),
                   ("ClusterRoleBinding", MONITORING_VIEW)}:  # fmt: skip
            continue
        before = find(default, *key)
        spec, was = pod_spec(obj), pod_spec(before)
        if spec is not None:
            if "runtimeClassName" in was:
                spec["runtimeClassName"] = was["runtimeClassName"]
            spec["securityContext"].pop("seLinuxOptions", None)
            for name in FIXED_IDS:
                if name in was["securityContext"]:
                    spec["securityContext"][name] = was["securityContext"][name]
        if key in {("Deployment", "gpu-eta-forecaster"), ("CronJob", "gpu-eta-forecaster")}:
            if key[0] == "Deployment":
                # the chart's checksum of gpu-eta-settings follows the URL
                was_annotations = before["spec"]["template"]["metadata"].get("annotations", {})
                if "checksum/settings" in was_annotations:
                    annotations = obj["spec"]["template"]["metadata"]["annotations"]
                    annotations["checksum/settings"] = was_annotations["checksum/settings"]
            (container,) = spec["containers"]
            container["args"] = [a for a in container["args"] if a not in AUTH_ARGS]
            container["volumeMounts"].remove(AUTH_MOUNT)
            spec["volumes"].remove(AUTH_VOLUME)
        if key == ("ConfigMap", "gpu-eta-settings"):
            assert obj["data"]["PROMETHEUS_URL"] == THANOS_QUERIER
            obj["data"]["PROMETHEUS_URL"] = before["data"]["PROMETHEUS_URL"]
        if obj["kind"] == "NetworkPolicy":
            for rule in obj["spec"]["ingress"]:
                rule["from"] = [p for p in rule["from"] if p != PLATFORM_PEER]
        if obj["kind"] == "Namespace":
            obj["metadata"]["labels"].pop(CLUSTER_MONITORING)
        out.append(obj)
    return out
