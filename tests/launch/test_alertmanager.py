"""``gpu_eta.launch.alertmanager``: the real Alertmanager found under Debian's name or
upstream's, started ready and stopped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_eta.launch import prometheus as launch_prometheus
from gpu_eta.launch.alertmanager import start_alertmanager
from gpu_eta.launch.prometheus import PrometheusNotInstalled, find_binary


@pytest.fixture
def upstream_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding the real Alertmanager only as ``alertmanager`` (upstream's release
    archive names it so), and no fallback directory that holds Debian's name."""
    debian = find_binary("prometheus-alertmanager")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "alertmanager").symlink_to(debian)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(launch_prometheus, "FALLBACK_DIRS", ())
    return bin_dir


def test_upstream_binary_name_starts(upstream_path: Path, tmp_path: Path) -> None:
    assert shutil.which("prometheus-alertmanager") is None
    server = start_alertmanager(data_dir=tmp_path / "am")
    try:
        assert server.process.args[0] == str(upstream_path / "alertmanager")
        assert server.alerts() == []
    finally:
        server.stop()
    assert server.process.returncode is not None


def test_missing_binary_names_the_debian_package(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(launch_prometheus, "FALLBACK_DIRS", ())
    with pytest.raises(PrometheusNotInstalled) as info:
        start_alertmanager(data_dir=tmp_path / "am").stop()  # stopped if it ever starts
    message = str(info.value)
    assert "alertmanager" in message and "apt-get install prometheus-alertmanager" in message
    assert "pushgateway" not in message
