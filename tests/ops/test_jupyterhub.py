"""Notebooks on Zero to JupyterHub (z2jh): the values gpu-eta ships,
jupyterhub/z2jh-values.yaml, let a user's pod report progress to the
exporter and open nothing else private, and the hub may query Prometheus for the
spawn page's estimates (docs/pending.md's snippets where a site is stricter). The policies are z2jh's as its chart
renders them (tests/ops/z2jh.py) next to gpu-eta's own, kustomize and Helm, and are
evaluated with the NetworkPolicy API's rules, egress and ingress (tests/ops/k8s.py).
"""

from __future__ import annotations

import logging
import re
import sys
import types
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from gpu_eta.forecaster.spawner_profiles import label
from gpu_eta_report import ProgressReporter
from tests.ops import k8s, z2jh
from tests.ops.k8s import ROOT, Endpoint, egress_allowed, find, pod_spec, template_labels
from tests.support.net import dead_port

VALUES = ROOT / "jupyterhub" / "z2jh-values.yaml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
PENDING_DOC = ROOT / "docs" / "pending.md"
NOTEBOOK = Endpoint("jupyterhub", z2jh.notebook_labels(), ip="10.42.2.9")
NODE = Endpoint(ip="10.0.0.11")  # a GPU node's address: the hostPort's destination


def _gpu_eta(form: str) -> list[dict]:
    if form == "kustomize":
        return k8s.build_overlay("prometheus-operator")
    return k8s.helm_defaults()


def _pod(objects: list[dict], kind: str, name: str, ip: str) -> Endpoint:
    """A running pod of that workload, as a NetworkPolicy sees it."""
    workload = find(objects, kind, name)
    containers = pod_spec(workload)["containers"]
    ports = {p["name"]: p["containerPort"] for c in containers for p in c.get("ports", [])}
    namespace = workload["metadata"]["namespace"]
    return Endpoint(namespace, template_labels(workload), ip=ip, port_names=ports)


def _reaches(policies: list[dict], source: Endpoint, dest: Endpoint, port: int) -> bool:
    """Out of the source pod and into the destination pod, both."""
    return k8s.egress_allowed(policies, source, dest, port) and k8s.ingress_allowed(
        policies, source, dest, port
    )


def _values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def _doc_yaml(*needles: str, doc: Path = DEPLOY_DOC) -> object:
    blocks = re.findall(r"```yaml\n(.*?)```", doc.read_text(), flags=re.S)
    (block,) = [b for b in blocks if all(n in b for n in needles)]
    return yaml.safe_load(block)


def test_z2jh_policy_as_rendered_keeps_users_off_private_addresses() -> None:
    """The reproduction of z2jh's singleuser policy, with the chart's defaults, does
    what z2jh documents: the hub, DNS and the Internet, no private address, no cloud
    metadata server (so the evaluator and the renderer are not vacuous)."""
    policies = [z2jh.singleuser_policy()]
    hub = Endpoint("jupyterhub", z2jh.match_labels("hub", "jupyterhub"), ip="10.42.0.3")
    dns = Endpoint("kube-system", {"k8s-app": "kube-dns"}, ip="10.42.0.2")
    assert egress_allowed(policies, NOTEBOOK, hub, 8081)
    assert not egress_allowed(policies, NOTEBOOK, hub, 8082)
    assert egress_allowed(policies, NOTEBOOK, dns, 53, "UDP")
    assert egress_allowed(policies, NOTEBOOK, Endpoint(ip="140.82.112.3"), 443)
    assert not egress_allowed(policies, NOTEBOOK, Endpoint(ip="169.254.169.254"), 80)
    for private in ("10.1.2.3", "172.20.0.5", "192.168.1.10"):
        assert not egress_allowed(policies, NOTEBOOK, Endpoint(ip=private), 443)
    # a pod of another release is not this policy's: not isolated by it
    other = Endpoint("jupyterhub", z2jh.notebook_labels(release="staging"), ip="10.42.2.10")
    assert egress_allowed(policies, other, Endpoint(ip="10.1.2.3"), 443)
    # privateIPs: true (what the values below avoid) opens every private address
    wide_open = {"singleuser": {"networkPolicy": {"egressAllowRules": {"privateIPs": True}}}}
    wide = [z2jh.singleuser_policy(wide_open)]
    assert egress_allowed(wide, NOTEBOOK, Endpoint(ip="10.1.2.3"), 5432)


@pytest.mark.parametrize("form", ["kustomize", "helm"])
def test_z2jh_values_let_a_notebook_reach_the_exporter_and_nothing_else(form: str) -> None:
    """Without the values a notebook's report is dropped (privateIPs: false); with
    them it reaches the exporter's progress port, through z2jh's egress and
    gpu-eta's ingress, and no other private port or pod."""
    gpu_eta = _gpu_eta(form)
    exporter = _pod(gpu_eta, "DaemonSet", "gpu-eta-exporter", "10.42.1.7")
    forecaster = _pod(gpu_eta, "Deployment", "gpu-eta-forecaster", "10.42.1.8")
    before = [z2jh.singleuser_policy(), *gpu_eta]
    after = [z2jh.singleuser_policy(_values()), *gpu_eta]

    assert not _reaches(before, NOTEBOOK, exporter, 9843)
    assert _reaches(after, NOTEBOOK, exporter, exporter.port_names["progress"])
    assert not _reaches(after, NOTEBOOK, exporter, exporter.port_names["metrics"])
    assert not egress_allowed(after, NOTEBOOK, forecaster, 9843)
    assert not egress_allowed(after, NOTEBOOK, forecaster, forecaster.port_names["metrics"])
    lookalike = Endpoint("team-a", exporter.labels, ip="10.42.3.4")  # same labels, elsewhere
    assert not egress_allowed(after, NOTEBOOK, lookalike, 9843)
    assert not egress_allowed(after, NOTEBOOK, NODE, 9843)  # the ipBlock is opt-in (below)
    assert not egress_allowed(after, NOTEBOOK, Endpoint(ip="172.20.0.5"), 5432)
    assert not k8s.helm_merge(z2jh.DEFAULTS, _values())["singleuser"]["networkPolicy"][
        "egressAllowRules"
    ]["privateIPs"]
    # what z2jh allows by default still holds
    dns = Endpoint("kube-system", {"k8s-app": "kube-dns"}, ip="10.42.0.2")
    assert egress_allowed(after, NOTEBOOK, dns, 53, "UDP")
    assert egress_allowed(after, NOTEBOOK, Endpoint(ip="140.82.112.3"), 443)


def test_z2jh_values_point_the_client_at_the_progress_service() -> None:
    """GPU_ETA_URL names the Service that keeps a report on its node, on its port."""
    objects = _gpu_eta("kustomize")
    service = find(objects, "Service", "gpu-eta-progress")
    url = urllib.parse.urlsplit(_values()["singleuser"]["extraEnv"]["GPU_ETA_URL"])
    assert url.hostname == f"gpu-eta-progress.{service['metadata']['namespace']}.svc"
    assert url.port == service["spec"]["ports"][0]["port"] == 9843
    assert service["spec"]["internalTrafficPolicy"] == "Local"


def test_documented_hostport_rule_opens_the_nodes_progress_port_only() -> None:
    """HOST_IP path: where the plugin checks egress before the hostPort's rewrite, the
    destination is the node; the documented ipBlock rule admits the nodes' 9843 and
    no other port of theirs (the kubelet's 10250) nor any other private address."""
    values = _values()
    (rule,) = _doc_yaml("ipBlock", "9843", "your GPU nodes' addresses")
    values["singleuser"]["networkPolicy"]["egress"].append(rule)
    assert "HOST_IP" in _doc_yaml("status.hostIP")["singleuser"]["extraEnv"]
    policies = [z2jh.singleuser_policy(values)]
    assert egress_allowed(policies, NOTEBOOK, NODE, 9843)
    assert not egress_allowed(policies, NOTEBOOK, NODE, 10250)
    assert not egress_allowed(policies, NOTEBOOK, Endpoint(ip="10.42.3.4"), 9843)


def test_hub_may_query_prometheus_for_the_spawn_page() -> None:
    """The spawn page's hook queries Prometheus from the hub pod. z2jh's hub policy
    allows private addresses by default; a hub with privateIPs off needs the
    documented rule (Prometheus' pod port, nothing wider), and a Prometheus isolated
    by its own policy (kube-prometheus') the documented ingress policy."""
    hub = Endpoint("jupyterhub", z2jh.match_labels("hub", "jupyterhub"), ip="10.42.0.3")
    prometheus_labels = {
        "app.kubernetes.io/name": "prometheus",
        "app.kubernetes.io/instance": "k8s",
    }
    prometheus = Endpoint("monitoring", prometheus_labels, ip="10.42.4.4")
    assert egress_allowed([z2jh.hub_policy()], hub, prometheus, 9090)
    tight = {"hub": {"networkPolicy": {"egressAllowRules": {"privateIPs": False}}}}
    assert not egress_allowed([z2jh.hub_policy(tight)], hub, prometheus, 9090)
    rule = _doc_yaml("hub:", "networkPolicy", "9090", doc=PENDING_DOC)
    fixed = [z2jh.hub_policy(k8s.helm_merge(tight, rule))]
    assert egress_allowed(fixed, hub, prometheus, 9090)
    assert not egress_allowed(fixed, hub, prometheus, 9091)
    assert not egress_allowed(fixed, hub, Endpoint(ip="10.1.2.3"), 9090)

    # Prometheus' side: deploy.md's policy for the forecaster isolates prometheus-k8s
    # as kube-prometheus' own does; the hub's policy lets the hub in, not notebooks
    forecaster_in = _doc_yaml("kind: NetworkPolicy", "prometheus-k8s")
    hub_in = _doc_yaml("kind: NetworkPolicy", "prometheus-k8s", doc=PENDING_DOC)
    assert not k8s.validate_all([hub_in])
    assert not k8s.ingress_allowed([forecaster_in], hub, prometheus, 9090)
    assert k8s.ingress_allowed([forecaster_in, hub_in], hub, prometheus, 9090)
    assert not k8s.ingress_allowed([forecaster_in, hub_in], NOTEBOOK, prometheus, 9090)


def test_the_z2jh_snippet_for_the_spawn_page_hook_mounts_it_where_z2jh_imports_from() -> None:
    """docs/pending.md's Zero to JupyterHub values: the copied module mounted in
    /usr/local/etc/jupyterhub (the directory z2jh's jupyterhub_config.py puts on the
    import path, and the one hub.extraFiles mounts into) under the name the
    extraConfig imports, and the hook set as KubeSpawner's profile_list."""
    hub = _doc_yaml("extraFiles", doc=PENDING_DOC)["hub"]
    (mounted,) = hub["extraFiles"].values()
    path = Path(mounted["mountPath"])
    assert path.parent == Path("/usr/local/etc/jupyterhub") and path.suffix == ".py"
    (config,) = hub["extraConfig"].values()
    assert f"from {path.stem} import profile_list_hook" in config
    assert "c.KubeSpawner.profile_list = profile_list_hook(" in config


def test_the_z2jh_snippet_shows_the_users_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """z2jh's hub pod sets no TZ: without ``tz`` the spawn page's times are UTC. The
    documented extraConfig runs as Python (the hub executes it) and passes a zoneinfo
    zone as ``tz``, which the hook accepts."""
    hub = _doc_yaml("extraFiles", doc=PENDING_DOC)["hub"]
    (config,) = hub["extraConfig"].values()
    given: dict = {}
    module = types.ModuleType("spawner_profiles")
    module.profile_list_hook = lambda profiles, **kwargs: given.update(kwargs)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spawner_profiles", module)
    c = types.SimpleNamespace(KubeSpawner=types.SimpleNamespace())
    exec(config, {"c": c})  # the documented config, as the hub runs it
    assert isinstance(given["tz"], ZoneInfo)
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()
    start = datetime.fromtimestamp(now + 7200, given["tz"])
    assert label(now + 7200, now, given["tz"]) == f"~{start:%H:%M %Z}"


def test_documented_sign_of_a_notebooks_dropped_reports_is_what_the_client_gives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/deploy.md says how a notebook whose reports z2jh's policy drops shows it: the
    client's WARNING, quoted, and the reporter's ``stats`` count (a property: no call).
    Both as a real reporter gives them, sending to a port nothing listens on."""
    text = DEPLOY_DOC.read_text()
    start = text.index("### Notebooks on Zero to JupyterHub")
    section = text[start : text.index("```", start)]
    quoted = re.search(r"`(gpu-eta: cannot send progress to)\s+http[^`]*`", section)
    assert quoted, "the z2jh section quotes the client's warning"
    assert '`reporter.stats["failed"]`' in section
    assert not re.findall(r"stats\(\)", text), "stats is a property"
    reporter = ProgressReporter(f"http://127.0.0.1:{dead_port()}", epochs=3, timeout_seconds=0.5)
    with caplog.at_level(logging.WARNING, logger="gpu_eta.report"):
        reporter.epoch_end(0)
        reporter.close(flush_timeout_seconds=3)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith(quoted.group(1)) for m in warnings), warnings
    assert isinstance(type(reporter).stats, property)
    assert reporter.stats["failed"] >= 1
