"""Zero to JupyterHub's NetworkPolicies (singleuser and hub), rendered from values as
its chart renders them, so tests can check the z2jh values gpu-eta documents
against the policies a JupyterHub really gets.

z2jh's chart is not in this repository and tests fetch nothing, so this reproduces
its templates' logic rule for rule, with their defaults, from the newest copy the
reference index holds: z2jh chart 3.0.1-0.dev.git.6287.hbfb05cd6, vendored in
apecloud/kubeblocks at commit 9064df97c4d9a4d89193dc3d7f3f62420c5356da under
deploy/jupyterhub/ (its Chart.yaml names that z2jh build):

- templates/singleuser/netpol.yaml and templates/hub/netpol.yaml (the policies),
- templates/_helpers-netpol.tpl, ``jupyterhub.networkPolicy.renderEgressRules``
  (what ``egressAllowRules`` and ``egress`` add),
- values.yaml (``singleuser.networkPolicy``, ``hub.networkPolicy``,
  ``singleuser.cloudMetadata.ip``),
- templates/_helpers.tpl, ``jupyterhub.matchLabels`` (component, app, release).

The rules for private ranges match upstream's own files in
jupyterhub/zero-to-jupyterhub-k8s (templates/_helpers-netpol.tpl at 7723d86, the
first version after PR #2508 made ``singleuser...privateIPs`` default to false).
Helm merges values as ``k8s.helm_merge`` does: maps key by key, anything else (a list such
as ``egress``) replaced whole.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.ops.k8s import helm_merge

PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
APP = "jupyterhub"  # jupyterhub.name: nameOverride, else the chart's name

# values.yaml's defaults for what the two policies read
DEFAULTS: dict[str, Any] = {
    "hub": {
        "networkPolicy": {
            "enabled": True,
            "ingress": [],
            "egress": [],
            "egressAllowRules": {
                "cloudMetadataServer": True,
                "dnsPortsCloudMetadataServer": True,
                "dnsPortsKubeSystemNamespace": True,
                "dnsPortsPrivateIPs": True,
                "nonPrivateIPs": True,
                "privateIPs": True,
            },
            "interNamespaceAccessLabels": "ignore",
            "allowedIngressPorts": [],
        }
    },
    "singleuser": {
        "cloudMetadata": {"blockWithIptables": True, "ip": "169.254.169.254"},
        "networkPolicy": {
            "enabled": True,
            "ingress": [],
            "egress": [],
            "egressAllowRules": {
                "cloudMetadataServer": False,
                "dnsPortsCloudMetadataServer": True,
                "dnsPortsKubeSystemNamespace": True,
                "dnsPortsPrivateIPs": True,
                "nonPrivateIPs": True,
                "privateIPs": False,
            },
            "interNamespaceAccessLabels": "ignore",
            "allowedIngressPorts": [],
        },
        "extraLabels": {"hub.jupyter.org/network-access-hub": "true"},
    },
}


def match_labels(component: str, release: str) -> dict[str, str]:
    """``jupyterhub.matchLabels``: what the chart's policies select its pods by."""
    return {"component": component, "app": APP, "release": release}


def _egress_rules(values: dict, netpol: dict) -> list[dict]:
    """``jupyterhub.networkPolicy.renderEgressRules``, flag by flag in its order."""
    allow = netpol["egressAllowRules"]
    metadata_ip = f"{values['singleuser']['cloudMetadata']['ip']}/32"
    private = [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE_RANGES]
    rules: list[dict] = []
    dns_to: list[dict] = []
    if allow.get("dnsPortsCloudMetadataServer"):
        dns_to.append({"ipBlock": {"cidr": metadata_ip}})
    if allow.get("dnsPortsKubeSystemNamespace"):
        dns_to.append(
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
        )
    if allow.get("dnsPortsPrivateIPs"):
        dns_to += copy.deepcopy(private)
    if dns_to:
        dns_ports = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
        rules.append({"ports": dns_ports, "to": dns_to})
    if allow.get("nonPrivateIPs"):
        except_ = [*PRIVATE_RANGES, metadata_ip]
        rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": except_}}]})
    if allow.get("privateIPs"):
        rules.append({"to": copy.deepcopy(private)})
    if allow.get("cloudMetadataServer"):
        rules.append({"to": [{"ipBlock": {"cidr": metadata_ip}}]})
    return rules + copy.deepcopy(netpol.get("egress") or [])


def _ingress_rules(netpol: dict, access_label: str, port: str) -> list[dict]:
    """The ingress both templates write: allowedIngressPorts open to all, PORT to pods
    labelled ACCESS_LABEL (of any namespace, and pods of labelled namespaces, with
    interNamespaceAccessLabels: accept), then the values' own ingress."""
    rules: list[dict] = []
    if netpol.get("allowedIngressPorts"):
        rules.append({"ports": [{"port": p} for p in netpol["allowedIngressPorts"]]})
    labelled: dict = {"podSelector": {"matchLabels": {access_label: "true"}}}
    peers = [labelled]
    if netpol.get("interNamespaceAccessLabels") == "accept":
        labelled["namespaceSelector"] = {"matchLabels": {}}
        peers.append({"namespaceSelector": {"matchLabels": {access_label: "true"}}})
    rules.append({"ports": [{"port": port}], "from": peers})
    return rules + copy.deepcopy(netpol.get("ingress") or [])


def _policy(name: str, namespace: str, selector: dict, ingress: list, egress: list) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


# The two templates differ only in these: the component the policy is for, the chart's
# pods it may reach first (component, ports), and the label and port of its ingress.
_TEMPLATES = {
    "singleuser": (
        "singleuser-server",
        (("hub", (8081,)), ("proxy", (8000,)), ("autohttps", (8080, 8443))),
        "hub.jupyter.org/network-access-singleuser",
        "notebook-port",
    ),
    "hub": (
        "hub",
        (("proxy", (8001,)), ("singleuser-server", (8888,))),
        "hub.jupyter.org/network-access-hub",
        "http",
    ),
}


def _render(name: str, values: dict | None, release: str, namespace: str) -> dict | None:
    """templates/<name>/netpol.yaml with VALUES (None when disabled)."""
    full = helm_merge(DEFAULTS, values)
    netpol = full[name]["networkPolicy"]
    if not netpol["enabled"]:
        return None
    component, reaches, access_label, port = _TEMPLATES[name]
    egress = [
        {"to": [_pods(other, release)], "ports": [{"port": p} for p in ports]}
        for other, ports in reaches
    ]
    egress += _egress_rules(full, netpol)
    ingress = _ingress_rules(netpol, access_label, port)
    # fullnameOverride "" (the default): the component alone names the policy
    return _policy(name, namespace, match_labels(component, release), ingress, egress)


def singleuser_policy(
    values: dict | None = None, *, release: str = "jupyterhub", namespace: str = "jupyterhub"
) -> dict | None:
    """templates/singleuser/netpol.yaml with VALUES (None when disabled)."""
    return _render("singleuser", values, release, namespace)


def hub_policy(
    values: dict | None = None, *, release: str = "jupyterhub", namespace: str = "jupyterhub"
) -> dict | None:
    """templates/hub/netpol.yaml with VALUES (None when disabled)."""
    return _render("hub", values, release, namespace)


def _pods(component: str, release: str) -> dict:
    return {"podSelector": {"matchLabels": match_labels(component, release)}}


def notebook_labels(values: dict | None = None, *, release: str = "jupyterhub") -> dict:
    """The labels the policy above selects a user's pod by, plus singleuser.extraLabels
    (KubeSpawner's component label is ``singleuser-server``)."""
    full = helm_merge(DEFAULTS, values)
    return {**match_labels("singleuser-server", release), **full["singleuser"]["extraLabels"]}
