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
# A DNS-1123 subdomain: pod names (labels joined by '.', at most 253)
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")


_NOT_IN_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def ksm_label(name: str) -> str:
    """A Kubernetes label key, resource or taint key as kube-state-metrics spells it in
    a label name or value: every character outside ``[a-zA-Z0-9_]`` becomes ``_``
    (``nvidia.com/gpu`` → ``nvidia_com_gpu``)."""
    return _NOT_IN_LABEL.sub("_", name)
