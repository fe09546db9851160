"""gpu_eta.common.text: the URL helpers that make start-up messages (which end up in
pod logs) never show a password, however it is spelled. Pure."""

from __future__ import annotations

import pytest

from gpu_eta.common.text import (
    masked_credentials,
    query_or_fragment,
    url_parse_problem,
    without_credentials,
)

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


@pytest.mark.parametrize(
    "url", ["alice:s3cret@host:9090", "alice:s3/cret@pg:9091", "alice:s3?cret@host:9090"]
)
def test_a_url_without_a_scheme_hides_its_password_too(url: str) -> None:
    """Without ``//`` the URL is refused, and the refusal quotes it: still masked."""
    shown = without_credentials(url)
    assert "s3" not in shown and "alice" not in shown and shown.startswith("***"), shown


def test_without_credentials_keeps_what_is_not_a_password() -> None:
    assert without_credentials("http://alice:pw@prom:9090/pfx") == "http://***@prom:9090/pfx"
    assert without_credentials("http://prom:9090/pfx") == "http://prom:9090/pfx"
    assert without_credentials("https://prom/?q=1") == "https://prom/?q=1"
    assert without_credentials("prom:9090/pfx") == "prom:9090/pfx"


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


def test_an_at_sign_in_a_query_string_is_not_called_a_password() -> None:
    """After a ``/`` an ``@`` may end a password holding a raw ``/`` or be a query's:
    nothing past ``//`` is shown, and the message names the query string first."""
    problem = query_or_fragment("http://host:9090/prom?tok=a@b")
    assert problem is not None and "has a query string" in problem, problem
    assert "has a '?' or '#' in its user" not in problem and "a@b" not in problem, problem
    problem = query_or_fragment("http://alice:s3/c?ret@host:9090")
    assert problem is not None and "s3" not in problem and "alice" not in problem, problem


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://alice:s3/cret@127.0.0.1:9090", "port"),
        ("http://prom:abc", "port"),
        ("http://127.0.0.1:99999", "port"),
        ("http://[::1", "IPv6"),
        ("http://alice:p[w@host:9090", "%5B"),
        ("http://alice:p]w@host:9090", "%5D"),
    ],
)
def test_a_url_urllib_cannot_read_is_described_without_quoting_it(url: str, said: str) -> None:
    problem = url_parse_problem(url)
    assert problem is not None and said in problem, problem
    assert "s3" not in problem and "abc" not in problem, problem
    assert "could not be cast" not in problem, problem
    assert url_parse_problem("http://alice:pw@prom:9090/pfx") is None


def test_a_library_error_quoting_a_password_with_a_raw_question_mark_is_masked() -> None:
    """A proxy URL from the environment is quoted whole by requests' errors."""
    for password in ("s3?cret", "s3#cret"):
        text = f"Cannot connect to proxy http://alice:{password}@proxy:3128 (refused)"
        assert masked_credentials(text) == (
            "Cannot connect to proxy http://***@proxy:3128 (refused)"
        ), masked_credentials(text)
