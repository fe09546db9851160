"""The overlays render the same with the kustomize of the kubectl releases sites run
(1.28–1.33) as with the pinned kubectl the other tests use (1.37): a kustomize feature
newer than a site's kubectl would otherwise pass every test here and fail its first
``kubectl apply -k``.

The older kubectl binaries are the Google Cloud SDK's (``kubectl.1.28`` … beside its
``kubectl``), on this project's test machines; where there are none the test is skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.ops.k8s import OVERLAYS, build_overlay, kustomize

SDK_BIN = Path("/usr/lib/google-cloud-sdk/bin")
OLDEST_SUPPORTED = (1, 28)


def site_kubectls() -> list[Path]:
    """The SDK's versioned kubectl binaries from ``OLDEST_SUPPORTED`` on, oldest first."""
    found = []
    for path in SDK_BIN.glob("kubectl.1.*") if SDK_BIN.is_dir() else ():
        match = re.fullmatch(r"kubectl\.(\d+)\.(\d+)", path.name)
        if match and (int(match[1]), int(match[2])) >= OLDEST_SUPPORTED:
            found.append(((int(match[1]), int(match[2])), path))
    return [path for _version, path in sorted(found)]


KUBECTLS = site_kubectls()


@pytest.mark.skipif(not KUBECTLS, reason=f"no versioned kubectl under {SDK_BIN}")
@pytest.mark.parametrize("binary", KUBECTLS, ids=lambda p: p.name)
@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_an_overlay_renders_the_same_with_a_sites_kubectl(name: str, binary: Path) -> None:
    assert kustomize(OVERLAYS[name], str(binary)) == build_overlay(name)
