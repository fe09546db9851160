"""gpu_eta.top.main against a slow or silent Prometheus: a refresh ends at its deadline
(``--refresh-timeout``), each query given what is left of it; what was read is shown
with one line naming what was left out; ``--interval`` has a floor."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from gpu_eta.forecaster.promapi import PromClient, PromDeadlineError
from gpu_eta.top import main as top_main
from gpu_eta.top import queries as top_queries
from tests.forecaster.test_promapi import http_server, reply  # noqa: F401 (fixture)
from tests.top.test_top import answers, run_top

ASKED = list(top_queries.queries("5m"))


def slow(delay_seconds: float, asked: list[dict[str, str]]) -> Callable:
    """A handler answering each of top's queries after ``delay_seconds`` with
    ``answers()`` (the others with no series); each request's parameters go to
    ``asked``."""
    names = {expr: name for name, expr in top_queries.queries("5m").items()}
    served = answers()

    def handle(req) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length).decode() if length else urlsplit(req.path).query
        params = {k: v[0] for k, v in parse_qs(body).items()}
        asked.append({**params, "name": names.get(params.get("query", ""), "")})
        time.sleep(delay_seconds)
        data = {"resultType": "vector", "result": served.get(asked[-1]["name"], [])}
        reply(req, 200, json.dumps({"status": "success", "data": data}).encode())

    return handle


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_slow_prometheus_is_read_until_the_deadline_then_left_out_and_exit_1(
    http_server,  # noqa: F811
) -> None:
    """At 0.3 s a query the 24 queries take 7 s; the refresh ends at its 1.5 s
    deadline, shows what was read with one line naming the queries left out, and exits
    as a failed read does (1), saying so on stderr."""
    asked: list[dict[str, str]] = []
    url, _ = http_server(slow(0.3, asked))
    started = time.monotonic()
    code, out, err = run_top(
        "--prometheus.url", url, "--refresh-timeout", "1.5", "--once", "--plain"
    )
    took = time.monotonic() - started
    assert code == 1 and took < 4.0, (code, took, err)  # 1.5 s, not the 7 s of all 24
    read = [a["name"] for a in asked]
    assert read[0] == "gpu_info" and 3 <= len(read) <= 6  # the first ones, in order
    assert "4 seen" in out  # gpu_info's answer is shown
    late = [line for line in out.splitlines() if "answered too slowly" in line]
    assert len(late) == 1, out
    left = ASKED[len(read) - 1 :]  # the last one asked was cut short
    assert f"{len(left)} of {len(ASKED)} queries" in late[0] and "--refresh-timeout" in late[0]
    assert all(name in late[0] for name in left) and ASKED[0] not in late[0].split("(")[-1]
    assert err.count("\n") == 1 and err.startswith(f"gpu-eta top: {url}: ")
    assert "answered too slowly" in err
    # each query is given what is left of the refresh, not --prometheus.timeout's 10 s
    sent = [float(a["timeout"].removesuffix("ms")) / 1000 for a in asked]
    assert sent == sorted(sent, reverse=True) and sent[0] <= 1.5 and sent[-1] < 1.2


def test_json_of_a_refresh_cut_short_lists_the_line_in_errors_and_exits_1(
    http_server,  # noqa: F811
) -> None:
    asked: list[dict[str, str]] = []
    url, _ = http_server(slow(0.3, asked))
    code, out, err = run_top("--prometheus.url", url, "--refresh-timeout", "1", "--json")
    assert code == 1 and "answered too slowly" in err
    view = json.loads(out)
    assert len(view["gpus"]) == 4
    assert [e for e in view["errors"] if "answered too slowly" in e]
    # who holds each device was not read: no device is free, each says why
    assert {g["state"] for g in view["gpus"]} == {"unknown"}, view["gpus"]
    assert all("query allocated, holders_unknown not answered in time" in g["note"]
               for g in view["gpus"])  # fmt: skip
    assert view["allocations_unknown"] == "query allocated not answered in time"
    assert view["idle_unknown"] == "query allocated, pod_util_avg not answered in time"


def test_a_silent_prometheus_fails_at_the_deadline_not_after_every_retry(
    silent_server: str,
) -> None:
    """A server that never answers took 3 attempts × 10 s (32 s) to fail; it fails at
    the refresh's deadline, one line, exit 1, nothing on stdout."""
    started = time.monotonic()
    code, out, err = run_top("--prometheus.url", silent_server, "--refresh-timeout", "1", "--once")
    took = time.monotonic() - started
    assert code == 1 and out == "" and 0.9 < took < 8.0, (code, took, err)  # not 32 s
    assert err.count("\n") == 1 and "answered too slowly" in err
    assert "gpu_info" in err and "--refresh-timeout" in err


def test_a_refreshing_view_shows_what_a_slow_refresh_read_and_keeps_the_last_good_one(
    http_server,  # noqa: F811
) -> None:
    """A refresh cut short is shown as read (its line among the errors); a later
    refresh without any answer shows the last complete view, marked stale."""
    delay = {"seconds": 0.0}
    asked: list[dict[str, str]] = []
    handler = slow(0.0, asked)

    def handle(req) -> None:
        time.sleep(delay["seconds"])
        handler(req)

    url, _ = http_server(handle)
    views = top_main.RefreshingView(PromClient(url, retries=0), refresh_timeout_seconds=1.0)
    complete = views.view()
    assert not complete.errors and len(complete.gpus) == 4
    delay["seconds"] = 0.3
    cut = views.view()
    assert len(cut.gpus) == 4 and any("answered too slowly" in e for e in cut.errors)
    # what the cut refresh read, not the last good view marked stale: who holds each
    # device was not read, so none is known free or busy
    assert not any(e.startswith("showing the last good view") for e in cut.errors)
    assert {g.state for g in cut.gpus} == {"unknown"} != {g.state for g in complete.gpus}
    assert views.last_good is complete
    delay["seconds"] = 1.5  # not even the first query answers
    stale = views.view()
    assert "answered too slowly" in stale.errors[0]
    assert stale.errors[1].startswith("showing the last good view")
    assert stale.jobs == complete.jobs


def test_the_deadline_is_one_for_a_refresh_and_a_fast_one_is_whole(http_server) -> None:  # noqa: F811
    asked: list[dict[str, str]] = []
    url, _ = http_server(slow(0.0, asked))
    view = top_main.refresh(PromClient(url, retries=0), refresh_timeout_seconds=5.0)
    assert [a["name"] for a in asked] == ASKED and not view.errors
    # the first query is sent the whole deadline (below --prometheus.timeout)
    assert 4.5 <= float(asked[0]["timeout"].removesuffix("ms")) / 1000 <= 5.0


def test_a_client_call_with_a_deadline_ends_at_it_and_one_without_keeps_its_timeout(
    silent_server: str,
) -> None:
    """``PromClient.instant(deadline=)``: the attempt and its retries end at the
    caller's deadline (``PromDeadlineError``); without it the client's own timeout and
    retries hold (the forecaster's)."""
    # a timeout of 5 s an attempt: past the deadline, the call would take 15 s, far
    # from the 2.5 s bound however loaded the machine (0.3 s when right)
    slow = PromClient(silent_server, timeout_seconds=5.0, retries=2, backoff_seconds=0.05)
    started = time.monotonic()
    with pytest.raises(PromDeadlineError, match="deadline"):
        slow.instant("up", deadline=time.monotonic() + 0.3)
    assert time.monotonic() - started < 2.5
    client = PromClient(silent_server, timeout_seconds=0.4, retries=2, backoff_seconds=0.05)
    started = time.monotonic()
    with pytest.raises(top_main.PromAPIError, match="failed after 3 attempts"):
        client.instant("up")
    assert 3 * 0.4 <= time.monotonic() - started < 3 * 0.4 + 3.0


def test_a_retry_whose_backoff_would_pass_the_deadline_is_not_waited_for(
    http_server,  # noqa: F811
) -> None:
    url, seen = http_server(lambda r: reply(r, 503, b"busy"))
    waits: list[float] = []
    client = PromClient(url, retries=2, backoff_seconds=5.0, sleep=waits.append)
    with pytest.raises(PromDeadlineError, match="HTTP 503"):
        client.instant("up", deadline=time.monotonic() + 1.0)
    assert waits == [] and len(seen) == 1


@pytest.mark.parametrize("interval", ["0.0001", "0.5", "0"])
def test_an_interval_below_the_floor_is_a_usage_error(interval: str) -> None:
    """``--interval 0.0001`` refreshed back to back, 24 queries each, no pause."""
    code, out, err = run_top("--interval", interval, "--once")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--interval must be at least 1" in err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e10"])
def test_a_bad_refresh_timeout_is_a_usage_error(value: str) -> None:
    code, out, err = run_top("--refresh-timeout", value, "--once")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("gpu-eta top: --refresh-timeout")


def test_a_refreshing_view_on_a_terminal_says_it_is_asking_before_the_first_answer(
    silent_server: str,
) -> None:
    """The first refresh may take all of --refresh-timeout: the terminal says what
    top is waiting for at once, not blank until then."""
    from tests.top.test_top import on_a_terminal

    argv = ["-m", "gpu_eta.top", "--prometheus.url", silent_server, "--interval", "60",
            "--refresh-timeout", "60"]  # fmt: skip
    started = time.monotonic()
    out, _ = on_a_terminal(argv, b"asking Prometheus")
    took = time.monotonic() - started
    # blank until the refresh times out would be 30 s (on_a_terminal's wait); a Python
    # starting on a loaded machine takes a few
    assert b"asking Prometheus" in out and took < 20, (took, out)
    assert silent_server.encode() in out and b"--refresh-timeout" in out
