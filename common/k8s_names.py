"""Kubernetes' name rules, for checking names that come from outside. Pure.

One definition for every package that checks one: the exporter (report and log
identities, scenario files), ``top``'s ``--namespace``. The client library
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
