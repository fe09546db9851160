"""What reading the ending runs' pods' GPU-use and memory means costs a cycle.

Why a bench of its own: in a cycle where runs end between two full reads, the
forecaster reads the GPU-use and memory means of their pods only (``Cycle._ending_means``),
so that a finished run's means cover its last cycles. The pods are named by a set match,
in at most ``queries.MAX_POD_QUERIES`` queries of ``queries.MAX_QUERY_CHARS`` each per
mean; pods that do not fit make a read of every pod's means instead. ``UTIL_MEAN``
repeats the match on each of its six selectors (``gpu_eta.common.gpu_use``), so where
that takes more queries the GPU use is read as the raw samples of its series with the
match written once (``queries.util_samples_split``) and computed in Python
(``queries.util_mean_of``).

On ``--holders`` GPU holders with 37-character pod names (``--shared`` of them on
time-sliced GPUs, with utilisation samples only at the device's dips to 0 %;
``--dcgm`` with DCGM's series only), scraped every 15 s for ``--minutes`` and backfilled
into a real Prometheus (``--tsdb victoriametrics`` or ``both``: VictoriaMetrics through
its import API), it prints:

* how many pods one query names, per form, and how many ending pods a cycle reads by
  set match before it reads every pod's means;
* the read of every pod's means (what a full read sends, and what the ending pods'
  read falls back to): ``UTIL_MEAN``, its raw samples computed in Python, ``MEMORY_RATIO``;
* for each count of ending pods in ``--ending`` (spread over the holders): the cycle's
  read (queries; wall seconds, the answers parsed and the means computed), and as the
  peer in the same run the read without the raw samples (``UTIL_MEAN`` by
  ``queries.for_pods_split``, or every pod's beyond ``MAX_POD_QUERIES``), with the same
  memory read.

Each read is made ``--repeat`` times; the median is printed.

    python bench/ending_means.py                       # 3,000 holders, 60 min (~1 min)
    python bench/ending_means.py --tsdb both --ending 20,100,300,600
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from flag_types import at_least, counts, positive, share

from gpu_eta.common.gpu_use import ALLOCATED_SINCE, UTIL
from gpu_eta.forecaster import queries
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.series import Sample
from gpu_eta.launch.prometheus import start_prometheus
from gpu_eta.launch.victoria import import_openmetrics, start_victoriametrics

STEP = 15.0
DCGM_MODEL = "NVIDIA A100-SXM4-80GB"  # modelName on the DCGM holders' series
LIMIT = 3.2e10  # each container's memory limit


@dataclass(frozen=True)
class Holder:
    """One container holding one GPU: ``kind`` dedicated (a sample every scrape),
    shared (a time-sliced GPU: samples at the device's dips only) or dcgm (DCGM's
    series only, no exporter of ours on its node)."""

    index: int
    pod: str
    kind: str


def holders(n: int, shared: float, dcgm: float) -> list[Holder]:
    """``n`` holders, the kinds spread evenly by index; pod names of 37 characters."""
    out = []
    for i in range(n):
        kind = "dedicated"
        if int((i + 1) * shared) > int(i * shared):
            kind = "shared"
        elif int((i + 1) * dcgm + 0.5) > int(i * dcgm + 0.5):  # half a period on
            kind = "dcgm"
        out.append(Holder(i, f"ml-train-resnet50-sweep-{i:04d}-worker-0", kind))
    return out


def openmetrics(all_holders: Sequence[Holder], now: float, minutes: float) -> str:
    """Every holder's series every 15 s for ``minutes`` up to ``now`` (OpenMetrics, for a
    backfill): ours (utilisation, allocation start) or DCGM's, and memory."""
    n = int(minutes * 60 // STEP)
    stamps = [now - (n - k) * STEP for k in range(n + 1)]
    fams: dict[str, list[str]] = {}

    def add(name: str, labels: str, values: Sequence[tuple[float, float]]) -> None:
        fams.setdefault(name, []).extend(f"{name}{{{labels}}} {v:.6g} {ts:.3f}" for ts, v in values)

    for h in all_holders:
        node, gpu = divmod(h.index, 8)
        where = f'node="node-{node:05d}",gpu="{gpu}",UUID="GPU-{h.index:08x}"'
        pod = f'namespace="team-{h.index % 20}",pod="{h.pod}",container="main"'
        use = 0.5 + 0.45 * ((h.index * 2654435761) % 1000) / 1000
        if h.kind == "dcgm":
            # dcgm-exporter's own labels (Kubernetes mode): no ``node``, its host is
            # ``Hostname``
            device = (
                f'gpu="{gpu}",UUID="GPU-{h.index:08x}",device="nvidia{gpu}",'
                f'modelName="{DCGM_MODEL}",Hostname="node-{node:05d}"'
            )
            add("DCGM_FI_DEV_GPU_UTIL", f"{device},{pod}", [(ts, 100 * use) for ts in stamps])
        else:
            dips = h.kind == "shared"
            util = [
                (ts, 0.0 if dips else use) for k, ts in enumerate(stamps) if not dips or k % 20 < 2
            ]
            add(UTIL, f"{where},{pod}", util)
            add(ALLOCATED_SINCE, f"{where},{pod}", [(ts, now - 86400) for ts in stamps])
        memory = [(ts, 8.0e9 + (h.index % 5) * 1.0e9) for ts in stamps]
        add("gpu_eta_pod_memory_working_set_bytes", f'node="node-{node:05d}",{pod}', memory)
        add(
            "gpu_eta_pod_memory_limit_bytes",
            f'node="node-{node:05d}",{pod}',
            [(ts, LIMIT) for ts in stamps],
        )
    out = []
    for name, lines in fams.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def split(name: str, span: float, most: int) -> Callable[[list[str]], list[str] | None]:
    """The queries of a set of pods in form ``name``, at most ``most`` of them."""
    limit, idle = queries.MAX_QUERY_CHARS, CycleSettings().idle_window_seconds
    if name == "util_mean, raw samples":
        return lambda pods: queries.util_samples_split(pods, span, STEP, limit, most)
    tpl = queries.MEMORY_RATIO if name == "memory_ratio" else queries.UTIL_MEAN
    return lambda pods: queries.for_pods_split(tpl, span, idle, pods, limit, most)


def most_pods(split: Callable[[list[str]], list[str] | None], names: Sequence[str]) -> int:
    """The most of ``names`` (from the first) ``split`` reads by set match."""
    low, high = 0, len(names)
    while low < high:
        mid = (low + high + 1) // 2
        if split(list(names[:mid])) is None:
            high = mid - 1
        else:
            low = mid
    return low


def per_query(split: Callable[[list[str]], list[str] | None], names: Sequence[str]) -> int:
    """How many of ``names`` the first query of ``split`` names (``split`` without a
    limit on queries; 400 names: within the raw samples' bound at the default span)."""
    parts = split(list(names[:400]))
    if not parts:
        return 0
    # the pods' set match: the last ``=~`` of the query (the raw form's first is the names')
    return parts[0].rsplit('pod=~"', 1)[1].split('"', 1)[0].count("|") + 1


def use_form(pods: Sequence[str], span: float, raw: bool) -> str:
    """How the GPU use of ``pods`` is read (``queries.pods_use_queries``, as the cycle
    reads it; ``raw`` False: as before the raw samples) and in how many queries."""
    idle = CycleSettings().idle_window_seconds
    if raw:
        samples, use = queries.pods_use_queries(pods, span, idle, STEP)
    else:
        samples, use = (
            False,
            split("util_mean, PromQL set match", span, queries.MAX_POD_QUERIES)(list(pods)),
        )
    if use is None:
        return "every pod's UTIL_MEAN, 1"
    return f"{'raw samples' if samples else 'UTIL_MEAN by set match'}, {len(use)}"


def timed(read: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``read``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_before(
    client: PromClient, pods: Sequence[str], span: float, at: float
) -> dict[str, list[Sample]]:
    """The ending pods' means as read with ``UTIL_MEAN`` itself by set match (the peer):
    each mean by ``for_pods_split``, or every pod's beyond ``MAX_POD_QUERIES``."""
    idle = CycleSettings().idle_window_seconds
    out = {}
    for name in queries.SPAN:
        tpl = queries.INSTANT[name]
        parts = queries.for_pods_split(
            tpl, span, idle, pods, queries.MAX_QUERY_CHARS, queries.MAX_POD_QUERIES
        ) or [queries.render(tpl, span, idle)]
        out[name] = [x for q in parts for x in client.instant(q, at=at)]
    return out


def full_raw(client: PromClient, span: float, at: float) -> list[Sample]:
    """Every pod's GPU-use mean from the raw samples of every holder (no set match)."""
    names = "|".join(queries.UTIL_SAMPLES)
    series = client.samples(f'{{__name__=~"{names}"}}[{queries.duration(span)}]', at=at)
    return queries.util_mean_of(series, at)


def run(
    kind: str, url: str, names: list[str], args: argparse.Namespace, at: float, work: Path
) -> None:
    client = PromClient(url)
    store = HistoryStore.open(work / f"{kind}.sqlite")
    cycle = Cycle(client, store, CycleSettings())
    span, idle, repeat = args.span, CycleSettings().idle_window_seconds, args.repeat
    try:
        print(
            f"\n{kind}: {len(names)} holders, {args.minutes} min at 15 s, means over {span:.0f} s"
        )
        for label, tpl in (
            ("util_mean (PromQL)", queries.UTIL_MEAN),
            ("memory_ratio", queries.MEMORY_RATIO),
        ):
            t = timed(
                lambda tpl=tpl: client.instant(queries.render(tpl, span, idle), at=at), repeat
            )
            print(f"  every pod's {label:<28} {t:7.3f} s")
        t = timed(lambda: full_raw(client, span, at), repeat)
        print(f"  every pod's util_mean (raw samples)     {t:7.3f} s")
        print(
            "  ending pods: the cycle's read: queries, wall s (GPU use: form, queries)"
            " | peer: without the raw samples"
        )
        for n in args.ending:
            pods = names[:: max(1, len(names) // n)][:n]
            before = client.stats.success
            now_s = timed(lambda pods=pods: cycle._ending_means(pods, span, at, []), repeat)
            sent = (client.stats.success - before) // repeat
            before = client.stats.success
            peer_s = timed(lambda pods=pods: read_before(client, pods, span, at), repeat)
            peer_sent = (client.stats.success - before) // repeat
            print(
                f"  {n:5d} pods: {sent:2d} queries {now_s:7.3f} s ({use_form(pods, span, True)})"
                f" | peer {peer_sent:2d} queries {peer_s:7.3f} s ({use_form(pods, span, False)})"
            )
    finally:
        store.close()
        client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--holders", type=at_least(1), default=3000)
    parser.add_argument("--minutes", type=at_least(1), default=60)
    parser.add_argument("--shared", type=share, default=0.1)
    parser.add_argument("--dcgm", type=share, default=0.1)
    parser.add_argument("--span", type=positive, default=420.0, help="seconds the means cover")
    parser.add_argument("--ending", default="20,70,100,300,600", type=counts)
    parser.add_argument("--repeat", type=at_least(1), default=5)
    parser.add_argument(
        "--tsdb", choices=("prometheus", "victoriametrics", "both"), default="prometheus"
    )
    args = parser.parse_args(argv)
    everyone = holders(args.holders, args.shared, args.dcgm)
    names = [h.pod for h in everyone]
    limit, most = queries.MAX_QUERY_CHARS, queries.MAX_POD_QUERIES
    print(f"pods of 37 characters, queries of at most {limit} characters, {most} per mean:")
    for name in ("util_mean, PromQL set match", "util_mean, raw samples", "memory_ratio"):
        print(
            f"  {name:<28} {per_query(split(name, args.span, 10**6), names):4d} pods a query, "
            f"every pod's read above {most_pods(split(name, args.span, most), names)} ending pods"
        )
    now = float(int(time.time()))
    at = now - 5.0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        om = work / "holders.om"
        om.write_text(openmetrics(everyone, now, args.minutes))
        if args.tsdb in ("prometheus", "both"):
            prom = start_prometheus([], data_dir=work / "prom", backfill_files=[om])
            try:
                run("Prometheus", prom.url, names, args, at, work)
            finally:
                prom.stop()
        if args.tsdb in ("victoriametrics", "both"):
            vm = start_victoriametrics([], data_dir=work / "vm")
            try:
                import_openmetrics([om], vm.url)
                run("VictoriaMetrics", vm.url, names, args, at, work)
            finally:
                vm.stop()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
