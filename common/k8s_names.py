"""Kubernetes' name rules, for checking names that come from outside. Pure.

One definition for every package that checks one: the exporter (report and log
identities, scenario files), ``top``'s ``--namespace``; and how kube-state-metrics
turns a Kubernetes name into a Prometheus label name (``ksm_label``). The client library
(``gpu_eta_report``) keeps its own copy on purpose: it installs alone, and a test holds
the two equal.
"""

from __future__ import annotations

import re

# A DNS-1123 label: container and namespace names (lower-case alphanumerics and '-',
# starting and ending alphanumeric, at most 63)
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
# A DNS-1123 subdomain: pod names (DNS-1123 labels joined by '.', at most 253 in all;
# IsDNS1123Subdomain: no empty label, none starting or ending with '-')
DNS_SUBDOMAIN = re.compile(
    r"(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)


_NOT_IN_LABEL = re.compile(r"[^a-zA-Z0-9_]")
# The name part of a qualified name (label keys, resource names): at most 63
# alphanumerics, '-', '_', '.', starting and ending alphanumeric
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


def is_extended_resource_name(name: str) -> bool:
    """Whether ``name`` is a Kubernetes extended resource name, as the API server checks
    it (``IsExtendedResourceName``): not a native resource (no ``/``, or
    ``kubernetes.io/`` anywhere in it: ``IsPrefixedNativeResource``), not starting
    ``requests.`` (the quota prefix), and ``requests.<name>`` (its quota spelling) a
    qualified name: a DNS subdomain, ``/``, a name part. A device plugin can only
    advertise such a name, so anything else given as one is a typo."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    domain, _, part = ("requests." + name).partition("/")
    return bool(DNS_SUBDOMAIN.match(domain) and _QUALIFIED_NAME_PART.match(part))


def ksm_label(name: str) -> str:
    """A Kubernetes label key, resource or taint key as kube-state-metrics spells it in
    a label name or value: every character outside ``[a-zA-Z0-9_]`` becomes ``_``
    (``nvidia.com/gpu`` → ``nvidia_com_gpu``)."""
    return _NOT_IN_LABEL.sub("_", name)
