"""Collectors by name: one module per collector, registered by its own file.

The last tests add a collector the way a contributor would, as one new file in the
collectors package (here a temporary folder added to the package's path), and check
that this file alone gives the flags, the ``collector`` label, the
``gpu_eta_exporter_collector_*`` series and its own series.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.exporter import collectors
from gpu_eta.exporter.collectors import StartupError, registry
from gpu_eta.exporter.main import parse_config
from gpu_eta.exporter.runtime import Runtime
from gpu_eta.launch.prometheus import free_port

BUILT_IN = ("gpu", "podresources", "kube", "cgroup", "hostmemory", "progress", "logs")


def test_every_module_is_the_collector_it_is_named_after() -> None:
    loaded = registry.load()
    assert tuple(loaded) == BUILT_IN  # their ``order``: the flags' order in --help
    assert sorted(collectors.names()) == sorted(BUILT_IN)
    for name, collector in loaded.items():
        assert collector.name == name and collector.kind in registry.KINDS
        assert collector.build.__module__ == f"gpu_eta.exporter.collectors.{name}"


def test_a_name_registered_twice_is_an_error() -> None:
    first = registry.registered()["gpu"]
    clone = registry.Collector("gpu", "other", "gpu", first.build)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(clone)


NEW_COLLECTOR = """
from prometheus_client.core import GaugeMetricFamily

from gpu_eta.exporter.collectors.registry import Collector, register


class Temperature:
    def poll(self):
        family = GaugeMetricFamily("gpu_eta_test_temperature_celsius", "A test series", labels=["node"])
        family.add_metric(["n"], 42.0)
        return [family]


register(Collector("temperature", "a collector added as one file", "families", lambda ctx: Temperature()))
"""


@pytest.fixture
def new_collector_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on the collectors package's path, for new collector modules."""
    folder = tmp_path / "more_collectors"
    folder.mkdir()
    monkeypatch.setattr(collectors, "__path__", [*collectors.__path__, str(folder)])
    yield folder
    for name in ("temperature", "broken", "typo", "sloppy"):
        registry.unregister(name)
        sys.modules.pop(f"gpu_eta.exporter.collectors.{name}", None)


def _scrape(args: list[str]) -> str:
    cfg = parse_config(
        [
            "--simulate",
            "",
            "--web.listen-address",
            f"127.0.0.1:{free_port()}",
            "--progress.listen-address",
            f"127.0.0.1:{free_port()}",
            "--no-collector.logs",
            "--collection.interval",
            "60s",
            *args,
        ],
        env={},
    )
    runtime = Runtime(cfg, "test")
    try:
        runtime.start()
        import urllib.request

        with urllib.request.urlopen(f"http://{runtime.metrics_address()}/metrics", timeout=30) as r:
            return r.read().decode()
    finally:
        runtime.stop()


def test_a_collector_added_as_one_file_has_its_flag_label_and_series(
    new_collector_file: Path,
) -> None:
    (new_collector_file / "temperature.py").write_text(textwrap.dedent(NEW_COLLECTOR))
    text = _scrape([])
    assert 'gpu_eta_test_temperature_celsius{node="n"} 42.0' in text
    assert re.search(
        r'gpu_eta_exporter_collector_success\{collector="temperature",node="[^"]+"\} 1\.0', text
    )
    off = _scrape(["--no-collector.temperature"])
    assert "gpu_eta_test_temperature_celsius" not in off
    assert 'collector="temperature"' not in off
    assert 'collector="gpu"' in off


def test_a_collector_that_cannot_be_imported_is_a_one_line_startup_error(
    new_collector_file: Path,
) -> None:
    (new_collector_file / "broken.py").write_text("import gpu_eta_no_such_package\n")
    with pytest.raises(
        StartupError, match=r"collector broken is not available .*--no-collector\.broken"
    ):
        _scrape([])
    assert 'collector="gpu"' in _scrape(["--no-collector.broken"])


@pytest.mark.parametrize(
    "source",
    [
        "from gpu_eta.exporter.readings import NoSuchReading\n",
        "import gpu_eta.exporter.no_such_module\n",
    ],
)
def test_a_broken_import_of_our_own_code_is_not_called_a_missing_package(
    new_collector_file: Path, source: str
) -> None:
    # a typo in a gpu_eta import is a bug in this build, not a packaging choice: it
    # must fail the start naming the bad import, not suggest --no-collector.typo
    (new_collector_file / "typo.py").write_text(source)
    with pytest.raises(ImportError) as caught:
        registry.load()
    assert caught.value.name is not None and caught.value.name.startswith("gpu_eta.exporter.")
    assert "typo" not in registry.registered()


SLOPPY_COLLECTOR = """
from prometheus_client.core import GaugeMetricFamily

from gpu_eta.exporter.collectors.registry import Collector, register


class Sloppy:
    def poll(self):
        if {output!r} == "none":
            return None
        family = GaugeMetricFamily("gpu_eta_test_temperature_celsius", "A test series", labels=["node", "gpu"])
        family.add_metric(["n", 0], 42.0)  # the gpu index as an int, as NVML gives it
        return [family]


register(Collector("sloppy", "a collector with bad output", "families", lambda ctx: Sloppy()))
"""


@pytest.mark.parametrize("output", ["int-label", "none"])
def test_a_collectors_bad_output_fails_the_collector_not_the_start_or_the_scrape(
    new_collector_file: Path, output: str
) -> None:
    """The real exporter on a simulated node: it starts, /metrics answers 200 with every
    other series, and the collector reads success 0."""
    (new_collector_file / "sloppy.py").write_text(
        textwrap.dedent(SLOPPY_COLLECTOR).replace("{output!r}", repr(output))
    )
    text = _scrape([])
    assert re.search(
        r'gpu_eta_exporter_collector_success\{collector="sloppy",node="[^"]+"\} 0\.0', text
    )
    assert re.search(
        r'gpu_eta_exporter_collector_success\{collector="gpu",node="[^"]+"\} 1\.0', text
    )
    assert "gpu_eta_gpu_info{" in text
    assert "gpu_eta_test_temperature_celsius" not in text
