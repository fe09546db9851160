"""``gpu_eta.launch.victoria``'s import helpers, pure parts and against a real VictoriaMetrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from gpu_eta.launch.victoria import (
    import_openmetrics,
    prometheus_lines,
    start_victoriametrics,
)


def test_prometheus_lines_milliseconds_and_no_comments() -> None:
    om = [
        "# TYPE jobs_total counter\n",
        'jobs_total{pod="a b",ns="x"} 3.0 1795570000.250\n',
        "up 1 1795570000\n",
        "\n",
        "# EOF\n",
    ]
    assert list(prometheus_lines(om)) == [
        'jobs_total{pod="a b",ns="x"} 3.0 1795570000250\n',
        "up 1 1795570000000\n",
    ]


def test_a_sample_without_timestamp_names_its_line() -> None:
    with pytest.raises(ValueError, match="line 2: a sample without a timestamp"):
        list(prometheus_lines(["# TYPE up gauge\n", "up 1\n"]))


@pytest.mark.integration
def test_every_sample_of_the_file_arrives(tmp_path: Path) -> None:
    """All samples, on the first import (vmctl lost some in one import in three)."""
    now = 1795570000
    lines = ["# TYPE g gauge\n"]
    for series in range(40):
        lines += [f'g{{s="{series}"}} {t} {now - 7200 + 30 * t}\n' for t in range(241)]
    lines.append("# EOF\n")
    om = tmp_path / "h.om"
    om.write_text("".join(lines))
    vm = start_victoriametrics([], data_dir=tmp_path / "vm")
    try:
        assert import_openmetrics([om], vm.url, batch_lines=1000) == 40 * 241
        body = requests.get(
            f"{vm.url}/api/v1/export",
            params={"match[]": "g", "start": now - 8000, "end": now + 10},
            timeout=30,
        ).text
        got = [json.loads(line) for line in body.splitlines()]
        assert len(got) == 40
        assert all(len(series["timestamps"]) == 241 for series in got)
    finally:
        vm.stop()
