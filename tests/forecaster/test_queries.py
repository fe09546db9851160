"""gpu_eta.forecaster.queries: a fixed, small set of well-formed PromQL templates."""

from __future__ import annotations

import random
import re

import pytest

from gpu_eta.common.gpu_use import ALLOCATED_SINCE, UTIL
from gpu_eta.forecaster import queries
from gpu_eta.forecaster.series import Sample, Series, joined


def test_fixed_count_within_budget() -> None:
    # the instant and range queries, the step range query, one folded pending query and
    # the node labels pending pods select
    assert queries.QUERIES_PER_CYCLE == len(queries.INSTANT) + len(queries.RANGE) + 3 <= 20


def test_the_most_queries_a_cycle_sends_counts_every_split_read() -> None:
    """The ending runs' means are read split only for at most ``MAX_UNKNOWN_RUNS`` runs,
    which a long range read takes in one window: the windows and the split means never
    add up in one cycle, so the bound counts the larger (docs/forecaster.md, "Queries")."""
    assert queries.MAX_UNKNOWN_RUNS <= queries.MAX_CHANGES_RUNS
    assert len(queries.range_windows(0, 6 * 3600, 1, queries.MAX_UNKNOWN_RUNS)) == 1
    windows = queries.range_windows(0, 6 * 3600, 1, 10**6)
    assert len(queries.RANGE) * (len(windows) - 1) == queries.EXTRA_RANGE_WINDOWS
    assert queries.MOST_QUERIES_PER_CYCLE == queries.QUERIES_PER_CYCLE + 18 + 10 + 1 + 1 == 50


# 60 run ids of 36 characters (a uuid's length), as a site names its runs
LONG_RUN_IDS = [f"{i:012x}-{i:022x}" for i in range(60)]


def test_the_step_reads_fit_the_query_bound_with_the_most_restarted_runs_named() -> None:
    """The step query folded with the start step's held the restarted runs' match 12
    times, and ``again_match`` budgets six: with 34 restarted runs of 36-character ids
    it made a 17,298-character query, which VictoriaMetrics refuses (HTTP 422 over
    ``-search.maxQueryLen`` 16,384), every cycle. Each query the step reads send fits
    ``MAX_QUERY_CHARS``, with any match ``again_match`` lets through; with few runs named
    the two parts still go in one query (the cycle's count unchanged)."""
    for n in range(len(LONG_RUN_IDS) + 1):
        again = queries.again_match(LONG_RUN_IDS[:n])
        reads = queries.step_reads(6 * 3600, 300, again)
        assert all(queries.fits(parts) for parts in reads), n
        assert sorted(name for parts in reads for name in parts) == sorted(queries.STEP_PARTS)
    assert len(queries.step_reads(6 * 3600, 300, queries.again_match(LONG_RUN_IDS[:5]))) == 1


def test_fold_tags_every_part_and_unfold_splits_them_back() -> None:
    folded = queries.fold({"a": "up", "b": "x or y"})
    assert folded == (
        'label_replace((up), "forecaster_query", "a", "__name__", ".*") or '
        'label_replace((x or y), "forecaster_query", "b", "__name__", ".*")'
    )
    answer = [
        Sample({"pod": "p", queries.TAG: "b"}, 2.0, 1.0),
        Sample({"pod": "p", queries.TAG: "a"}, 1.0, 1.0),
        Sample({"pod": "q"}, 3.0, 1.0),  # untagged: not any part's
        Sample({"pod": "q", queries.TAG: "zzz"}, 4.0, 1.0),
    ]
    got = queries.unfold(answer, ["a", "b", "c"])
    assert got == {"a": [answer[1]], "b": [answer[0]], "c": []}


def test_render_fills_every_placeholder() -> None:
    for tpl in queries.INSTANT.values():
        q = queries.render(tpl, 3600.4, 299.6)
        assert "{window}" not in q and "{idle}" not in q
        for span in re.findall(r"\[([^\]]+)\]", q):
            assert span in ("3600s", "300s")


def test_duration_is_whole_seconds_at_least_one() -> None:
    assert queries.duration(0.2) == "1s"
    assert queries.duration(90.6) == "91s"


def test_range_step_caps_points() -> None:
    assert queries.range_step(600, 15, 240) == 15
    step = queries.range_step(22 * 86400, 15, 240)
    assert 22 * 86400 / step + 1 <= 240
    with pytest.raises(ValueError):
        queries.range_step(60, 15, 1)


def test_set_match_escapes_regex_and_promql_and_refuses_what_it_cannot_name() -> None:
    m = queries.matcher("run_id", ["run-1", "a.b", 'x"y', "c\\d", "e|f", "run-1"])
    assert m == '{run_id=~"a\\\\.b|c\\\\\\\\d|e\\\\|f|run-1|x\\"y"}'
    assert queries.matcher("pod", []) is None
    assert queries.matcher("pod", ["ok", "tab\there"]) is None  # not printable
    assert queries.matcher("pod", ["ok", "é"]) is None  # not ASCII
    q = queries.render(queries.PLANNED, 60, 300, runs=queries.matcher("run_id", ["r1", "r2"]))
    assert 'gpu_eta_training_epochs_planned{run_id=~"r1|r2"}[60s]' in q
    assert queries.render(queries.PLANNED, 60, 300).count("{") == 0  # a full read: no matcher


def test_the_restarted_runs_clause_names_only_them_and_only_when_asked() -> None:
    """``again``: every read of a series a restarted run may not send (``AGAIN_SERIES``)
    leaves out, for the runs named, what is no longer present now while the run is; its
    selectors all carry the set match (an index lookup, not every run's series). Without
    it the queries are as they were; a match too long for six copies in one query is
    not made."""
    again = queries.again_match(["exp", "a.b"])
    assert again == '{run_id=~"a\\\\.b|exp"}'
    for name, tpl in queries.INSTANT.items():
        plain, named = queries.render(tpl, 60, 300), queries.render(tpl, 60, 300, again=again)
        carried = [s for s in queries.AGAIN_SERIES if f"{{again_{s}}}" in tpl]
        if not carried:
            assert named == plain, name
            continue
        assert "again" not in plain and "{" not in plain.replace("{}", ""), name
        for series in carried:
            clause = (
                f" unless on ({queries.RUN_LABELS}) ((last_over_time(gpu_eta_training_{series}"
                f"{again}[60s]) unless on ({queries.RUN_LABELS}) gpu_eta_training_{series}{again})"
                f" and on ({queries.RUN_KEY_LABELS}) "
                f"gpu_eta_training_last_report_timestamp_seconds{again})"
            )
            assert clause in named, (name, series)
            named = named.replace(clause, "")
        assert named == plain, name
    wanted = {"planned", "epoch", "steps_planned", "step", "batch_size"}
    assert {n for n, t in queries.INSTANT.items() if "{again_" in t} == wanted
    # the longest match made still fits the longest template six times over
    ids = [f"run-{i:04d}-{'x' * 30}" for i in range(200)]
    most = max(n for n in range(1, 201) if queries.again_match(ids[:n]))
    assert 30 <= most < 200  # about 40 runs of 40-character ids
    longest = queries.again_match(ids[:most])
    for name in wanted:
        rendered = queries.render(queries.INSTANT[name], 3600, 300, again=longest)
        assert len(rendered) <= queries.MAX_QUERY_CHARS, name
    assert queries.again_match([]) == "" and queries.again_match(["é"]) == ""


def test_the_step_range_reads_the_restarted_runs_plans_with_their_clause() -> None:
    """``step_range``: without a run named, ``STEP_RANGE`` as it was; with runs named,
    its plans take their clause over the same 5 minutes (not the cycle's window), the
    runs' set match kept on the steps."""
    runs = queries.matcher("run_id", ["exp"])
    assert queries.step_range() == queries.STEP_RANGE.format(runs="")
    assert queries.step_range(runs) == queries.STEP_RANGE.format(runs=runs)
    again = queries.again_match(["exp"])
    named = queries.step_range(runs, again)
    clause = (
        f" unless on ({queries.RUN_LABELS}) ((last_over_time(gpu_eta_training_epochs_planned"
        f"{again}[5m]) unless on ({queries.RUN_LABELS}) gpu_eta_training_epochs_planned{again})"
        f" and on ({queries.RUN_KEY_LABELS}) "
        f"gpu_eta_training_last_report_timestamp_seconds{again})"
    )
    assert named == (
        f"gpu_eta_training_step{runs} unless "
        f"(last_over_time(gpu_eta_training_epochs_planned[5m]){clause})"
    )
    longest = queries.again_match([f"run-{i:04d}-{'x' * 30}" for i in range(200)][:35])
    assert longest and len(queries.step_range(runs, longest)) <= queries.MAX_QUERY_CHARS


def test_the_means_for_some_pods_match_every_selector_in_both_pod_labels() -> None:
    for name in queries.SPAN:
        tpl = queries.INSTANT[name]
        q = queries.for_pods(tpl, 600, 300, ["p-b", "p.a"])
        assert q is not None
        plain, exported = q.count('{pod=~"p-b|p\\\\.a"}'), q.count('{exported_pod=~"p-b|p\\\\.a"}')
        selectors = tpl.count("[{window}]")  # util_mean: 5 of ours (gpu_use), 1 of DCGM's
        assert tpl.count("{pods}[{window}]") == selectors >= 2  # every selector matchable
        assert plain == exported == selectors  # each form on every selector
        parts: tuple[str, ...] = (tpl,)
        if name == "util_mean":  # part by part (ours, then DCGM's), each in both labels
            parts = queries.UTIL_MEAN_PARTS
            assert " or ".join(f"({part})" for part in parts) == tpl
        full = [queries.render(part, 600, 300) for part in parts]
        bare = re.sub(r"\{(exported_)?pod=~\"[^\"]*\"\}", "", q)
        assert bare == " or ".join(f"({x})" for x in full for _ in queries.POD_LABELS)
        assert "{" not in queries.render(tpl, 600, 300)  # every pod: no matcher
        assert queries.for_pods(tpl, 600, 300, ["ok", "é"]) is None


def test_the_means_of_many_pods_are_cut_into_queries_that_each_fit() -> None:
    """Every pod in exactly one query, each within the limit; None where one pod alone
    does not fit, a pod cannot be named, or more queries than allowed are needed."""
    tpl = queries.INSTANT["util_mean"]
    pods = [f"train-{i:03d}-worker" for i in range(40)]
    limit = len(queries.for_pods(tpl, 600, 300, pods[:10]) or "")
    parts = queries.for_pods_split(tpl, 600, 300, reversed(pods), limit, 10)
    assert parts is not None and len(parts) == 4
    assert all(len(q) <= limit for q in parts)
    named = [set(re.findall(r'pod=~"([^"]*)"', q)[0].split("|")) for q in parts]
    assert sorted(p for n in named for p in n) == pods  # each pod once, none lost
    assert queries.for_pods_split(tpl, 600, 300, pods, 10**6, 1) == [
        queries.for_pods(tpl, 600, 300, pods)
    ]
    assert queries.for_pods_split(tpl, 600, 300, pods, limit, 3) is None  # 4 needed
    assert queries.for_pods_split(tpl, 600, 300, pods, 100, 10) is None  # one alone
    assert queries.for_pods_split(tpl, 600, 300, [*pods, "é"], limit, 10) is None


def _greedy(render, names, max_chars):
    """The plain cut ``_pack`` must equal: add names in order while the render fits."""
    out, chunk = [], []
    for name in sorted(set(names)):
        if chunk and len(render([*chunk, name])) > max_chars:
            out.append(chunk)
            chunk = []
        chunk.append(name)
    return [*out, chunk] if chunk else out


def test_the_pods_are_cut_as_rendering_every_candidate_query_would_cut_them() -> None:
    """The cut computes a query's length from its pods' queries alone (a set match's
    length is a sum over its names): the same batches as rendering each candidate, for
    names with regex and PromQL escapes, for every template cut by pods."""
    rng = random.Random(7)
    chars = 'abz-.09\\"|*'
    renders = {
        "util_mean": lambda p: queries.for_pods(queries.UTIL_MEAN, 600, 300, p),
        "memory_ratio": lambda p: queries.for_pods(queries.MEMORY_RATIO, 600, 300, p),
        "raw": lambda p: queries.util_samples("exported_pod", p, 600),
    }
    for _ in range(100):
        names = ["".join(rng.choice(chars) for _ in range(rng.randint(1, 30))) for _ in range(50)]
        for render in renders.values():
            limit = max(len(render([n])) for n in names) + rng.randint(0, 3000)
            want = _greedy(render, names, limit)
            got = queries._pack(names, render, limit)
            assert got is not None and [batch for batch, _ in got] == want
            assert all(query == render(batch) and len(query) <= limit for batch, query in got)


def test_the_raw_samples_of_some_pods_name_them_once_in_one_pod_label() -> None:
    q = queries.util_samples("pod", ["p-b", "p.a"], 600.4)
    assert q == (
        '{__name__=~"gpu_eta_pod_gpu_utilization_ratio|'
        'gpu_eta_pod_gpu_allocated_since_timestamp_seconds|DCGM_FI_DEV_GPU_UTIL",'
        'pod=~"p-b|p\\\\.a"}[600s]'
    )
    assert queries.util_samples("exported_pod", ["ok", "é"], 600) is None


def test_many_pods_raw_samples_are_cut_into_a_query_per_pod_label_each_within_the_limit() -> None:
    """Each batch of pods is asked by ``pod`` and by ``exported_pod``, each query within
    the limit; None where the queries are too many, one pod alone does not fit, a pod
    cannot be named or the samples would be too many to parse."""
    pods = [f"ml-train-resnet50-sweep-{i:04d}-worker-0" for i in range(700)]
    parts = queries.util_samples_split(pods[:600], 420, 15, queries.MAX_QUERY_CHARS, 4)
    assert parts is not None and len(parts) == 4
    assert all(len(q) <= queries.MAX_QUERY_CHARS for q in parts)
    named = [re.fullmatch(r'\{__name__=~"[^"]*",(\w+)=~"([^"]*)"\}\[420s\]', q) for q in parts]
    assert [m.group(1) for m in named if m] == ["pod", "exported_pod"] * 2
    for label in queries.POD_LABELS:
        got = [p for m in named if m and m.group(1) == label for p in m.group(2).split("|")]
        assert sorted(got) == pods[:600]  # each pod once in each label, none lost
    assert len(named[0].group(2).split("|")) > 300  # type: ignore[union-attr]
    assert queries.util_samples_split(pods, 420, 15, queries.MAX_QUERY_CHARS, 4) is None
    assert queries.util_samples_split(pods[:10], 420, 15, 100, 4) is None  # one alone
    assert queries.util_samples_split([*pods[:10], "é"], 420, 15, 12_000, 4) is None
    assert queries.util_samples_split(pods[:10], 600, 15, 12_000, 4) is not None
    # the samples' bound: 2 series per pod, one sample per 15 s of the window
    most = queries.MAX_RAW_SAMPLES // (queries.RAW_SERIES_PER_POD * 3600 // 15)
    assert queries.util_samples_split(pods[:most], 3600, 15, 12_000, 4) is not None
    assert queries.util_samples_split(pods[: most + 1], 3600, 15, 12_000, 4) is None
    assert queries.util_samples_split([], 420, 15, 12_000, 4) == []


def _series(name: str, labels: dict[str, str], values: list[float]) -> Series:
    return Series({"__name__": name, **labels}, tuple((15.0 * i, v) for i, v in enumerate(values)))


def test_util_mean_of_follows_util_means_rule_grouping_and_precedence() -> None:
    """Per holder ``use_mean_of``, averaged per container; DCGM's per container over 100
    where ours has no answer with the same labels; each series once."""
    util, since, dcgm = UTIL, ALLOCATED_SINCE, queries.DCGM_UTIL

    def plain(pod: str, uuid: str) -> dict[str, str]:
        return {"namespace": "ml", "pod": pod, "container": "main", "UUID": uuid}

    exported = {
        "namespace": "gpu-operator",
        "pod": "dcgm-x",
        "exported_namespace": "ml",
        "exported_pod": "dcgm-exp",
        "exported_container": "main",
        "UUID": "GPU-5",
    }
    series = [
        _series(util, plain("shared", "GPU-0"), [0.0, 0.0]),  # 2 samples in 10 scrapes
        _series(since, plain("shared", "GPU-0"), [1.0] * 10),
        _series(util, plain("nosince", "GPU-1"), [0.2, 0.4]),
        _series(util, plain("late", "GPU-2"), [0.5] * 10),  # its start known lately
        _series(since, plain("late", "GPU-2"), [1.0] * 4),
        _series(util, plain("two", "GPU-3"), [1.0, 1.0]),  # a container on two GPUs
        _series(util, plain("two", "GPU-4"), [0.0, 0.0]),
        _series(dcgm, plain("two", "GPU-4"), [99.0]),  # ours answers: left out
        _series(dcgm, plain("dcgm-only", "GPU-6"), [30.0, 50.0]),
        _series(dcgm, exported, [40.0]),
        _series(util, plain("nosample", "GPU-7"), []),  # no sample: no answer
        _series(since, plain("nosample", "GPU-7"), [1.0]),
        _series(util, plain("nosince", "GPU-1"), [0.2, 0.4]),  # asked by both labels
    ]
    got = {tuple(sorted(x.labels.items())): x.value for x in queries.util_mean_of(series, 9.0)}

    def key(**labels: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(labels.items()))

    assert got == pytest.approx(
        {
            key(namespace="ml", pod="shared", container="main"): 1 - 2 / 10,
            key(namespace="ml", pod="nosince", container="main"): 0.3,
            key(namespace="ml", pod="late", container="main"): 0.5,
            key(namespace="ml", pod="two", container="main"): 0.5,
            key(namespace="ml", pod="dcgm-only", container="main"): 0.4,
            key(namespace="ml", pod="dcgm-exp", container="main"): 0.4,  # the holder's
        }
    )
    assert {x.timestamp for x in queries.util_mean_of(series, 9.0)} == {9.0}
    assert queries.util_mean_of([], 9.0) == []


def test_util_mean_of_reads_ours_before_dcgms_and_each_holder_in_either_label_form() -> None:
    """Series scraped without honor_labels name their holder by ``exported_*`` (their
    ``namespace``/``pod``/``container`` the scraped exporter's own), as ``UTIL_MEAN``'s
    ``label_replace`` reads them: ours is read for a container whichever form either
    came in, DCGM's only where ours has none, and holders on one exporter of ours stay
    apart."""
    util, since, dcgm = UTIL, ALLOCATED_SINCE, queries.DCGM_UTIL

    targets = {  # the scraped exporters' own labels
        "ours": {"namespace": "gpu-eta", "pod": "gpu-eta-exporter-q8x2m", "container": "e"},
        "dcgm": {"namespace": "gpu-operator", "pod": "dcgm-exporter-x7k2p"},
    }

    def form(kind: str, pod: str, uuid: str) -> dict[str, str]:
        """The labels of a series of ``pod``'s holder scraped as ``kind``."""
        named = {"namespace": "ml", "pod": pod, "container": "main"}
        if kind == "plain":
            return {**named, "UUID": uuid}
        return {**targets[kind], **{f"exported_{k}": v for k, v in named.items()}, "UUID": uuid}

    series = []
    for i, (pod, ours, theirs) in enumerate(
        [
            ("busy-ts", "plain", "dcgm"),  # ours 0.0, DCGM's exported at 95
            ("exp-over-plain", "ours", "plain"),
            ("exp-over-exp", "ours", "dcgm"),
            ("alone", "ours", None),  # on the same exporter of ours as the two above
        ]
    ):
        value = 0.1 * i
        series.append(_series(util, form(ours, pod, f"GPU-{i}"), [value] * 4))
        series.append(_series(since, form(ours, pod, f"GPU-{i}"), [1.0] * 4))
        if theirs is not None:
            series.append(_series(dcgm, form(theirs, pod, f"GPU-{i}"), [95.0] * 4))
    series.append(_series(dcgm, form("dcgm", "dcgm-exp", "GPU-9"), [40.0]))
    got = {tuple(sorted(x.labels.items())): x.value for x in queries.util_mean_of(series, 9.0)}

    def key(pod: str) -> tuple[tuple[str, str], ...]:
        return (("container", "main"), ("namespace", "ml"), ("pod", pod))

    assert got == pytest.approx(
        {
            key("busy-ts"): 0.0,
            key("exp-over-plain"): 0.1,
            key("exp-over-exp"): 0.2,
            key("alone"): 0.3,
            key("dcgm-exp"): 0.4,
        }
    )


def test_the_gpu_use_of_some_pods_is_read_in_the_fewer_queries_util_mean_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``UTIL_MEAN`` by set match while it takes no more queries than the raw samples (a
    few pods: one query, where the samples take one per pod label); the raw samples for
    more; ``UTIL_MEAN`` again where they would be too many, by set match while that fits
    (None: every pod's)."""
    pods = [f"ml-train-resnet50-sweep-{i:04d}-worker-0" for i in range(700)]

    def read(n: int) -> tuple[bool, int]:
        raw, use = queries.pods_use_queries(pods[:n], 420, 300, 15)
        return raw, -1 if use is None else len(use)

    assert [read(n) for n in (1, 20, 44, 50, 130, 600, 700)] == [
        (False, 1),
        (False, 1),
        (False, 2),  # 2 either way
        (True, 2),
        (True, 2),
        (True, 4),
        (False, -1),  # every pod's
    ]
    monkeypatch.setattr(queries, "MAX_RAW_SAMPLES", 100)
    assert [read(n) for n in (50, 130)] == [(False, 3), (False, -1)]


def test_a_long_read_takes_every_epoch_end_up_to_ten_thousand_runs() -> None:
    """A first cycle over 6 h at a 15 s step: the fine read of the epoch ends' changes
    (every epoch end the scrapes saw) up to ``MAX_CHANGES_RUNS`` runs a window and
    ``MAX_RANGE_WINDOWS`` windows; beyond, the plain selectors at the coarse step
    (span / 239), whose cost does not grow with the steps: the fine read's 1.45 s a
    query at 1,000 runs would pass the 10 s timeout near 10,000 in one query. A short
    span is read plain at the step whatever the runs."""
    most = queries.MAX_CHANGES_RUNS * queries.MAX_RANGE_WINDOWS
    fine, step = queries.range_reads(21600, 15, 240, runs=most)
    assert step == 15 and "offset 15000ms" in fine["epoch_end_range"]
    plain, coarse = queries.range_reads(21600, 15, 240, runs=most + 1)
    assert plain == dict(queries.RANGE) and coarse == 21600 / 239
    assert queries.range_reads(600, 15, 240, runs=50_000) == (dict(queries.RANGE), 15)


def _grid(windows: list[tuple[float, float]], step: float) -> list[float]:
    """The evaluation times a server takes from each window, in order."""
    return [a + i * step for a, b in windows for i in range(int((b - a) // step) + 1)]


@pytest.mark.parametrize("runs", [0, 1, 1000, 1001, 2500, 9999, 10_000, 40_000])
def test_range_windows_cut_the_one_query_s_steps_without_gap_or_overlap(runs: int) -> None:
    """The windows' evaluation times are the one query's, each once, on its grid (so
    the joined answer is the one answer); as many windows as thousands of runs (one up
    to ``MAX_CHANGES_RUNS``), at most ``MAX_RANGE_WINDOWS``; the last ends at ``end``."""
    start, end, step = 1_700_000_000.0, 1_700_000_000.0 + 21600.5, 15.0
    windows = queries.range_windows(start, end, step, runs)
    assert _grid(windows, step) == _grid([(start, end)], step)
    expected = min(queries.MAX_RANGE_WINDOWS, max(1, -(-runs // queries.MAX_CHANGES_RUNS)))
    assert len(windows) == expected and windows[-1][1] == end
    with pytest.raises(ValueError):
        queries.range_windows(end, start, step, runs)


def test_more_windows_than_steps_leave_none_empty() -> None:
    """A span of fewer steps than windows: one step a window, none empty or repeated."""
    windows = queries.range_windows(0.0, 30.0, 10.0, 50_000)
    assert windows == [(0.0, 0.0), (10.0, 10.0), (20.0, 20.0), (30.0, 30.0)]


def test_windows_answers_joined_as_one_answer() -> None:
    """A series in several windows' answers is one series with its points in window
    order; one found in a single window (a run that started or ended between them) is
    kept as it is; labels are compared whatever their order."""
    a = {"run_id": "a", "pod": "p"}
    first = [Series(a, ((1.0, 1.0),)), Series({"run_id": "b"}, ((1.0, 5.0),))]
    second = [Series({"pod": "p", "run_id": "a"}, ((2.0, 2.0), (3.0, 3.0)))]
    third = [Series({"run_id": "c"}, ((4.0, 9.0),)), Series(a, ((4.0, 4.0),))]
    assert joined([first, second, third]) == [
        Series(a, ((1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 4.0))),
        Series({"run_id": "b"}, ((1.0, 5.0),)),
        Series({"run_id": "c"}, ((4.0, 9.0),)),
    ]
