"""Which Kubernetes resources are GPUs, and how a site names more of them. Pure.

Built in: NVIDIA's device plugin's ``nvidia.com/gpu``, its time-sliced replicas under
``renameByDefault`` (``nvidia.com/gpu.shared``) and MIG slices (``nvidia.com/mig-*``).
A site whose time-slicing config renames its replicas (``rename: a100-shared`` gives
``nvidia.com/a100-shared``) names those once, to every part: the exporter's
``--kubelet.gpu-resource``, the forecaster's ``--pending.gpu-resource``, top's
``--gpu-resource`` and the chart's ``gpuResources``. One parser checks the names for
all of them, so a name one part refuses is refused by each, with the same words.

kube-state-metrics writes a resource in its ``resource`` label sanitised
(``SanitizeLabelName``: every character outside ``[a-zA-Z0-9_]`` becomes ``_``, case
kept), so the queries match ``ksm_resource_regex`` of the names, not the names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpu_eta.common.k8s_names import is_extended_resource_name, ksm_label

# The built-in GPU resources in kube-state-metrics' spelling, a PromQL (RE2) regex.
# Written out as is in rules/gpu-eta.rules.yaml and grafana/build.py, where the chart
# replaces it (charts/gpu-eta, gpuResources): tests/ops/test_chart.py holds them equal.
KSM_GPU_RESOURCES = "nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"
_BUILT_IN = re.compile(KSM_GPU_RESOURCES)  # fullmatch, as PromQL anchors a matcher's regex
# names a site gives at most: it renames its time-sliced GPUs to a few
MAX_GPU_RESOURCES = 32


def parse_gpu_resources(value: Any) -> tuple[str, ...]:
    """Extended resource names (one, or a list), deduplicated, at most
    ``MAX_GPU_RESOURCES``. ``ValueError`` (the caller adds its flag's name) for a name
    a device plugin could not advertise: a typo would otherwise leave that resource's
    pods and nodes out of every GPU count, silently."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a resource name or a list of them, got {value!r}")
    out: list[str] = []
    for item in items:
        name = item.strip() if isinstance(item, str) else item
        if not isinstance(name, str) or not is_extended_resource_name(name):
            raise ValueError(
                "not a Kubernetes extended resource name (DOMAIN/NAME outside "
                f"kubernetes.io, e.g. nvidia.com/gpu-a100): {item!r}"
            )
        if name not in out:
            out.append(name)
    if len(out) > MAX_GPU_RESOURCES:
        raise ValueError(f"at most {MAX_GPU_RESOURCES} resource names, got {len(out)}")
    return tuple(out)


def ksm_gpu_resources(extra: Sequence[str] = ()) -> tuple[str, ...]:
    """``extra`` (Kubernetes names) as kube-state-metrics spells them in ``resource``,
    deduplicated, in order (``nvidia.com/a100-shared`` → ``nvidia_com_a100_shared``)."""
    return tuple(dict.fromkeys(ksm_label(name) for name in extra))


def is_built_in(resource: str) -> bool:
    """Whether a ``resource`` label (KSM spelling) is one ``KSM_GPU_RESOURCES`` matches,
    whole, as PromQL anchors a matcher's regex: what the queries read as built in."""
    return bool(_BUILT_IN.fullmatch(resource))


def beyond_built_in(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` (Kubernetes names) but those ``KSM_GPU_RESOURCES`` matches in KSM's
    spelling (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, every ``nvidia.com/mig-*``).

    Why: a site with MIG nodes tends to list its profiles (``nvidia.com/mig-1g.10gb``,
    ``nvidia.com/mig-3g.40gb``...) to every part as it lists them to the exporter, and
    each name written into the regex is written in every GPU matcher of every query:
    in the forecaster's queue five profiles took the first round from 8,500 characters
    past 12,000, ten past the 16 KiB VictoriaMetrics takes (``-search.maxQueryLen``).
    They match ``nvidia_com_mig_.+`` anyway: the same series are read."""
    return tuple(name for name in names if not is_built_in(ksm_label(name)))


def ksm_resource_regex(extra: Sequence[str] = ()) -> str:
    """The regex a ``resource=~"..."`` matcher takes for the built-in GPU resources
    and ``extra`` (Kubernetes names): ``KSM_GPU_RESOURCES`` alone without any, else
    it with ``|`` and the label of each extra name it does not match already
    (``beyond_built_in``). A sanitised name holds only ``[a-zA-Z0-9_]``, nothing RE2
    or a PromQL string reads specially, so it is written as is (no escape a Helm
    template would have to repeat)."""
    return "|".join((KSM_GPU_RESOURCES, *ksm_gpu_resources(beyond_built_in(extra))))
