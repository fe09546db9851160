"""gpu_eta.common.text: the URL helpers that make start-up messages (which end up in
pod logs) never show a password, however it is spelled. Pure."""

from __future__ import annotations

import pytest

from gpu_eta.common.text import query_or_fragment, url_parse_problem, without_credentials

# passwords holding a raw '?', '#', '/' or '@': the URL splits inside them
ODD_PASSWORDS = [
    "http://alice:s3?cret@127.0.0.1:9090",
    "http://alice:s3#cret@127.0.0.1:9090",
    "http://alice:s3/cret@127.0.0.1:9090",
    "http://alice:s3@cret@127.0.0.1:9090/pfx",
    "http://alice:s3?c@r#et@127.0.0.1:9090/pfx?x=1",
]


@pytest.mark.parametrize("url", ODD_PASSWORDS)
def test_without_credentials_hides_a_password_however_spelled(url: str) -> None:
    shown = without_credentials(url)
    assert "s3" not in shown and "alice" not in shown and shown.startswith("http://***"), shown


def test_without_credentials_keeps_what_is_not_a_password() -> None:
    assert without_credentials("http://alice:pw@prom:9090/pfx") == "http://***@prom:9090/pfx"
    assert without_credentials("http://prom:9090/pfx") == "http://prom:9090/pfx"
    assert without_credentials("https://prom/?q=1") == "https://prom/?q=1"


@pytest.mark.parametrize("url", ODD_PASSWORDS[:2])
def test_a_question_mark_or_hash_in_the_password_is_refused_without_showing_it(
    url: str,
) -> None:
    problem = query_or_fragment(url)
    assert problem is not None and "s3" not in problem and "percent-encode" in problem, problem


def test_a_query_string_is_refused_showing_the_url_up_to_it() -> None:
    problem = query_or_fragment("http://alice:pw@prom:9090/pfx?token=s3cret")
    assert problem is not None and problem.startswith("'http://***@prom:9090/pfx'…"), problem
    assert "s3cret" not in problem and "pw" not in problem
    assert query_or_fragment("http://alice:pw@prom:9090/pfx") is None


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://alice:s3/cret@127.0.0.1:9090", "port"),
        ("http://prom:abc", "port"),
        ("http://127.0.0.1:99999", "port"),
        ("http://[::1", "IPv6"),
    ],
)
def test_a_url_urllib_cannot_read_is_described_without_quoting_it(url: str, said: str) -> None:
    problem = url_parse_problem(url)
    assert problem is not None and said in problem, problem
    assert "s3" not in problem and "abc" not in problem, problem
    assert "could not be cast" not in problem, problem
    assert url_parse_problem("http://alice:pw@prom:9090/pfx") is None
