"""common/gpu_resources.py: the site's GPU resource names, checked once for every part,
and the regex kube-state-metrics' sanitised ``resource`` label is matched with."""

from __future__ import annotations

import re

import pytest

from gpu_eta.common.gpu_resources import (
    KSM_GPU_RESOURCES,
    MAX_GPU_RESOURCES,
    beyond_built_in,
    ksm_gpu_resources,
    ksm_resource_regex,
    parse_gpu_resources,
)
from tests.forecaster.test_kube_state_rounds import MIG


def test_names_are_spelt_as_kube_state_metrics_spells_them() -> None:
    """KSM's ``SanitizeLabelName``: every character outside ``[a-zA-Z0-9_]`` becomes
    ``_``, case kept; two names that sanitise alike are one label."""
    assert ksm_gpu_resources(("nvidia.com/a100-shared",)) == ("nvidia_com_a100_shared",)
    assert ksm_gpu_resources(
        ("Example.com/GPU_x.big", "example.com/gpu-a", "example.com/gpu.a")
    ) == (
        "Example_com_GPU_x_big",
        "example_com_gpu_a",
    )
    assert ksm_gpu_resources(()) == ()


def test_the_regex_is_the_built_in_one_plus_each_name_whole() -> None:
    assert ksm_resource_regex() == KSM_GPU_RESOURCES
    regex = ksm_resource_regex(("nvidia.com/a100-shared", "example.com/gpu"))
    assert regex == KSM_GPU_RESOURCES + "|nvidia_com_a100_shared|example_com_gpu"
    # PromQL anchors a label matcher's regex at both ends, as fullmatch does
    for label, matches in (
        ("nvidia_com_gpu", True),
        ("nvidia_com_mig_1g_5gb", True),
        ("nvidia_com_a100_shared", True),
        ("example_com_gpu", True),
        ("nvidia_com_a100_shared_x", False),
        ("example_com_gpus", False),
        ("nvidia_com_rdma_shared_device_a", False),
        ("cpu", False),
    ):
        assert bool(re.fullmatch(regex, label)) is matches, label


def test_names_the_built_in_regex_matches_are_not_written() -> None:
    """MIG profiles, ``nvidia.com/gpu`` and ``nvidia.com/gpu.shared`` listed by a site
    leave the regex as it is without them (``nvidia_com_mig_.+`` matches every profile):
    each name written stands in every GPU matcher of every query that uses the regex.
    A name beyond them is still written, and matched."""
    listed = ("nvidia.com/gpu", "nvidia.com/gpu.shared", *MIG)
    assert beyond_built_in((*listed, "amd.com/gpu")) == ("amd.com/gpu",)
    assert ksm_resource_regex(listed) == KSM_GPU_RESOURCES
    regex = ksm_resource_regex((*MIG, "amd.com/gpu"))
    assert regex == KSM_GPU_RESOURCES + "|amd_com_gpu"
    assert re.fullmatch(regex, "amd_com_gpu") and re.fullmatch(regex, "nvidia_com_mig_1g_5gb")
    # a name that only starts like a built-in one is the site's own
    assert beyond_built_in(("nvidia.com/gpu-a100", "nvidia.com/gpushared")) == (
        "nvidia.com/gpu-a100",
        "nvidia.com/gpushared",
    )


def test_names_are_checked_deduplicated_and_bounded() -> None:
    assert parse_gpu_resources("nvidia.com/a100-shared") == ("nvidia.com/a100-shared",)
    assert parse_gpu_resources([" example.com/gpu ", "example.com/gpu"]) == ("example.com/gpu",)
    for bad in ("gpu.shared", "kubernetes.io/gpu", "nvidia.com/", "nvidia.com/a b", 3):
        with pytest.raises(ValueError, match=r"^not a Kubernetes extended resource name"):
            parse_gpu_resources([bad])
    with pytest.raises(ValueError, match=r"^expected a resource name or a list"):
        parse_gpu_resources({"a": 1})
    many = [f"example.com/gpu-{i}" for i in range(MAX_GPU_RESOURCES + 1)]
    with pytest.raises(ValueError, match=f"at most {MAX_GPU_RESOURCES} "):
        parse_gpu_resources(many)
    assert len(parse_gpu_resources(many[1:])) == MAX_GPU_RESOURCES


@pytest.mark.parametrize(
    "name",
    [
        "-nvidia.com/a100-shared",  # a label starting with '-' (the chart refuses it)
        ".nvidia.com/a100-shared",  # an empty first label (the chart refuses it)
        "nvidia..com/a100-shared",  # an empty label inside
        "nvidia.-com/a100-shared",  # a label starting with '-'
        "requests.nvidia.com/gpu",  # IsExtendedResourceName: the quota prefix is refused
        "mykubernetes.io/gpu",  # IsPrefixedNativeResource: contains "kubernetes.io/"
    ],
)
def test_a_name_kubernetes_refuses_is_refused(name: str) -> None:
    """Kubernetes' ``IsExtendedResourceName`` refuses each of these (the domain is a
    DNS-1123 subdomain: labels start and end alphanumeric; a name starting
    ``requests.`` or containing ``kubernetes.io/`` is none), so no device plugin can advertise it: refused here too,
    as the chart's ``gpuResources`` check refuses the first two."""
    with pytest.raises(ValueError):
        parse_gpu_resources([name])
