"""gpu_eta.forecaster.queries: a fixed, small set of well-formed PromQL templates."""

from __future__ import annotations

import random
import re

import pytest

from gpu_eta.forecaster import queries
from gpu_eta.forecaster.series import Sample


def test_fixed_count_within_budget() -> None:
    # the instant and range queries, the step range query, one folded pending query and
    # the node labels pending pods select
    assert queries.QUERIES_PER_CYCLE == len(queries.INSTANT) + len(queries.RANGE) + 3 <= 20


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


def test_the_means_for_some_pods_match_every_selector_in_both_pod_labels() -> None:
    for name in queries.SPAN:
        tpl = queries.INSTANT[name]
        q = queries.for_pods(tpl, 600, 300, ["p-b", "p.a"])
        assert q is not None
        plain, exported = q.count('{pod=~"p-b|p\\\\.a"}'), q.count('{exported_pod=~"p-b|p\\\\.a"}')
        selectors = tpl.count("[{window}]")  # util_mean: 5 of ours (gpu_use), 1 of DCGM's
        assert tpl.count("{pods}[{window}]") == selectors >= 2  # every selector matchable
        assert plain == exported == selectors  # each form on every selector
        full = queries.render(tpl, 600, 300)
        assert re.sub(r"\{(exported_)?pod=~\"[^\"]*\"\}", "", q) == f"({full}) or ({full})"
        assert "{" not in full  # every pod: no matcher
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
    }
    for _ in range(100):
        names = ["".join(rng.choice(chars) for _ in range(rng.randint(1, 30))) for _ in range(50)]
        for render in renders.values():
            limit = max(len(render([n])) for n in names) + rng.randint(0, 3000)
            want = _greedy(render, names, limit)
            got = queries._pack(names, render, limit)
            assert got is not None and [batch for batch, _ in got] == want
            assert all(query == render(batch) and len(query) <= limit for batch, query in got)
