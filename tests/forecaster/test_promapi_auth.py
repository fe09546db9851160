"""The Prometheus client behind authentication: credentials files that rotate
(``secret_file``) and extra request headers (``--prometheus.header``), against a local
HTTP server that checks what each request carries, as a kube-rbac-proxy or a Mimir
gateway does."""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
from pathlib import Path

import pytest

from gpu_eta.forecaster.config import ConfigError
from gpu_eta.forecaster.promapi import PromAPIError, PromClient
from gpu_eta.forecaster.promflags import add_prometheus_flags, prometheus_connection
from tests.forecaster.test_promapi import VECTOR, http_server, reply  # noqa: F401 (fixture)


def connect(url: str, *argv: str) -> PromClient:
    """The client as ``serve``, ``once`` and ``top`` build it from their flags."""
    parser = argparse.ArgumentParser()
    add_prometheus_flags(parser)
    args = parser.parse_args(["--prometheus.url", url, "--prometheus.retries", "0", *argv])
    return PromClient(args.prometheus_url, **prometheus_connection(args))


def projected_volume(root: Path, token: str) -> Path:
    """A directory laid out as the kubelet writes a projected volume: ``token`` links
    to ``..data/token`` and ``..data`` to a timestamped directory; the path to give."""
    root.mkdir(exist_ok=True)
    rotate(root, token)
    (root / "token").symlink_to("..data/token")
    return root / "token"


def rotate(root: Path, token: str) -> None:
    """The kubelet's atomic update: a new timestamped directory, then ``..data`` swapped
    to it with a rename (the old directory goes away)."""
    version = root / f"..2026_{os.urandom(4).hex()}"
    version.mkdir()
    (version / "token").write_text(token + "\n")
    tmp = root / "..data_tmp"
    tmp.symlink_to(version.name)
    old = os.readlink(root / "..data") if (root / "..data").is_symlink() else None
    os.replace(tmp, root / "..data")
    if old:
        (root / old / "token").unlink()
        (root / old).rmdir()


def checks_token(expected: list[str]):
    """A handler answering 200 only to ``Authorization: Bearer <expected[0]>`` (401
    otherwise, as kube-rbac-proxy does with an expired token)."""

    def handle(req) -> None:
        if req.headers.get("Authorization") == f"Bearer {expected[0]}":
            reply(req, 200, json.dumps(VECTOR).encode())
        else:
            reply(req, 401, b"Unauthorized\n", "text/plain")

    return handle


def test_a_rotated_projected_token_is_sent_from_the_next_query_on(
    http_server,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    expected = ["token-1"]
    url, seen = http_server(checks_token(expected))
    path = projected_volume(tmp_path / "sa", "token-1")
    client = connect(url, "--prometheus.bearer-token-file", str(path))
    assert len(client.instant("up")) == 2
    rotate(tmp_path / "sa", "token-2")
    expected[0] = "token-2"  # the old token is refused from now on
    assert len(client.instant("up")) == 2
    assert [r.headers["Authorization"] for r in seen] == ["Bearer token-1", "Bearer token-2"]


def test_a_password_file_rewritten_in_place_is_read_again(http_server, tmp_path: Path) -> None:  # noqa: F811
    url, seen = http_server(lambda r: reply(r, 200, json.dumps(VECTOR).encode()))
    password = tmp_path / "pw"
    password.write_text("first")
    client = connect(
        url,
        "--prometheus.basic-auth-user", "me",
        "--prometheus.basic-auth-password-file", str(password),
    )  # fmt: skip
    client.instant("up")
    password.write_text("second-and-longer")
    client.instant("up")
    basic = [
        "Basic " + base64.b64encode(f"me:{pw}".encode()).decode()
        for pw in ("first", "second-and-longer")
    ]
    assert [r.headers["Authorization"] for r in seen] == basic


def token_one_client(serve, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """A client reading its token from a file that holds ``token-1``, the only token
    its server takes, with INFO logs captured: (client, requests seen, the file).
    ``serve`` is the ``http_server`` fixture."""
    url, seen = serve(checks_token(["token-1"]))
    token = tmp_path / "token"
    token.write_text("token-1\n")
    client = connect(url, "--prometheus.bearer-token-file", str(token))
    caplog.set_level(logging.INFO, logger="gpu_eta")
    return client, seen, token


def test_a_token_file_gone_or_empty_keeps_the_last_token_with_one_warning(
    http_server,  # noqa: F811 (the fixture)
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, seen, token = token_one_client(http_server, tmp_path, caplog)
    token.unlink()
    for _ in range(3):
        client.instant("up")
    token.write_text("")
    client.instant("up")
    token.unlink()
    token.mkdir()  # unreadable as a file, even for root
    client.instant("up")
    assert {r.headers["Authorization"] for r in seen} == {"Bearer token-1"}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No such file" in warnings[0].getMessage()
    assert "token-1" not in caplog.text
    token.rmdir()
    token.write_text("token-2\n")
    with pytest.raises(PromAPIError, match="HTTP 401"):  # read again: the server wants token-1
        client.instant("up")
    assert seen[-1].headers["Authorization"] == "Bearer token-2"
    token.unlink()  # bad again after a good read: warned again
    with pytest.raises(PromAPIError):
        client.instant("up")
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


@pytest.mark.parametrize("content", ["", "\n  \n"], ids=["empty", "blank"])
def test_an_empty_token_file_at_start_is_a_config_error(tmp_path: Path, content: str) -> None:
    token = tmp_path / "token"
    token.write_text(content)
    with pytest.raises(ConfigError, match=r"--prometheus.bearer-token-file .*token: empty"):
        connect("http://127.0.0.1:9", "--prometheus.bearer-token-file", str(token))


@pytest.mark.parametrize(
    ("flag", "content"),
    [
        ("--prometheus.bearer-token-file", "s3cr3t-tok\nline2\n"),  # two lines, a pasted PEM
        ("--prometheus.bearer-token-file", "s3cr3t-tok\u2026"),
        ("--prometheus.basic-auth-password-file", "p\u20acss"),
    ],
)
def test_a_secret_that_cannot_be_sent_is_a_config_error_that_never_shows_it(
    tmp_path: Path, flag: str, content: str
) -> None:
    """A line break inside a token was refused by the HTTP client only at request time,
    in an error quoting the header (the token) that ``serve`` logged every failing
    cycle; a non-ASCII character ended in a traceback."""
    secret = tmp_path / "secret"
    secret.write_text(content, encoding="utf-8")
    user = ["--prometheus.basic-auth-user", "u"] if "basic" in flag else []
    with pytest.raises(ConfigError, match="not sendable as a header") as err:
        connect("http://127.0.0.1:9", *user, flag, str(secret))
    assert content.strip() not in str(err.value) and "s3cr3t" not in str(err.value)


@pytest.mark.parametrize("user", ["\u0430\u043d\u043d\u0430", "ops\u2019team", "a:b", "me\n"])
def test_a_basic_auth_user_that_cannot_be_sent_is_a_config_error(tmp_path: Path, user: str) -> None:
    """The user goes in the Authorization header as Latin-1 before the ':' of the
    password: a non-ASCII one was a UnicodeEncodeError at the first query (a traceback
    from ``top --once``), and one holding ':' would be read by the server as a
    different user and password."""
    password = tmp_path / "password"
    password.write_text("hunter2\n")
    with pytest.raises(ConfigError, match=r"^--prometheus.basic-auth-user ") as err:
        connect(
            "http://127.0.0.1:9",
            "--prometheus.basic-auth-user",
            user,
            "--prometheus.basic-auth-password-file",
            str(password),
        )
    assert "hunter2" not in str(err.value)


def test_a_token_rotated_into_an_unsendable_one_keeps_the_last_good_one(
    http_server,  # noqa: F811 (the fixture)
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, seen, token = token_one_client(http_server, tmp_path, caplog)
    token.write_text("s3cr3t-tok\nline2\n")
    for _ in range(2):
        client.instant("up")
    assert {r.headers["Authorization"] for r in seen} == {"Bearer token-1"}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not sendable" in warnings[0].getMessage()
    assert "s3cr3t" not in caplog.text


def test_a_missing_token_file_at_start_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        connect("http://127.0.0.1:9", "--prometheus.bearer-token-file", str(tmp_path / "nope"))


def needs_org_id(req) -> None:
    """Mimir's and Cortex's answer to a query without a tenant."""
    if req.headers.get("X-Scope-OrgID") == "team-a|team-b":
        reply(req, 200, json.dumps(VECTOR).encode())
    else:
        reply(req, 401, b"no org id\n", "text/plain")


def test_extra_headers_are_sent_with_every_query(
    http_server,  # noqa: F811 (the fixture)
) -> None:
    url, seen = http_server(needs_org_id)
    with pytest.raises(PromAPIError, match="HTTP 401"):
        connect(url).instant("up")
    client = connect(
        url,
        "--prometheus.header", "X-Scope-OrgID=team-a|team-b",
        "--prometheus.header", "X-Gateway=a=b c",  # the first = splits; spaces inside stay
    )  # fmt: skip
    assert len(client.instant("up")) == 2
    last = seen[-1].headers
    assert last["X-Scope-OrgID"] == "team-a|team-b" and last["X-Gateway"] == "a=b c"


def test_extra_headers_go_with_the_token_and_a_long_query_posted(
    http_server,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    url, seen = http_server(needs_org_id)
    token = tmp_path / "token"
    token.write_text("t0k\n")
    client = connect(
        url,
        "--prometheus.header", "X-Scope-OrgID=team-a|team-b",
        "--prometheus.bearer-token-file", str(token),
    )  # fmt: skip
    long = 'up{run_id=~"' + "|".join(f"run-{i:05d}" for i in range(600)) + '"}'
    assert len(client.instant(long)) == 2
    assert seen[0].command == "POST" and seen[0].headers["Authorization"] == "Bearer t0k"
    assert seen[0].headers["Accept-Encoding"] == "gzip"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("X-Scope-OrgID", "expected NAME=VALUE"),
        ("X-Token: s3cret", "expected NAME=VALUE"),
        ("=tenant", "is not a header name"),
        ("X Scope=tenant", "is not a header name"),
        ("X-Scope-OrgID=", "empty value"),
        ("X-Scope-OrgID=a\r\nX-Evil: 1", "control character"),
        ("X-Scope-OrgID=a\tb", "control character"),
        ("X-Scope-OrgID=t\u00e9nant", "non-ASCII"),
        ("X-Scope-OrgID= tenant", "starts or ends with a space"),
        pytest.param("X-Scope-OrgID=" + "t" * 4097, "longer than 4096", id="long-value"),
        pytest.param("X" * 129 + "=v", "is not a header name", id="long-name"),
        ("Authorization=Bearer s3cret", "bearer-token-file"),
        ("host=prom.example", "cannot be set"),
        ("Accept-Encoding=br", "cannot be set"),
        ("content-type=application/json", "content-type cannot be set"),
    ],
)
def test_a_bad_header_is_a_config_error_that_never_shows_its_value(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        connect("http://127.0.0.1:9", "--prometheus.header", value)
    assert str(info.value).startswith("--prometheus.header")
    for secret in ("s3cret", "tenant", "X-Evil"):
        assert secret not in str(info.value)


def test_a_header_twice_or_too_many_headers_is_a_config_error() -> None:
    twice = ["--prometheus.header", "X-Scope-OrgID=a", "--prometheus.header", "x-scope-orgid=b"]
    with pytest.raises(ConfigError, match="x-scope-orgid given twice"):
        connect("http://127.0.0.1:9", *twice)
    many = [arg for i in range(33) for arg in ("--prometheus.header", f"X-H{i}=v")]
    with pytest.raises(ConfigError, match="at most 32 headers, got 33"):
        connect("http://127.0.0.1:9", *many)


def test_the_client_refuses_bad_headers_given_in_code() -> None:
    with pytest.raises(PromAPIError, match="control character"):
        PromClient("http://127.0.0.1:9", headers={"X-A": "a\nb"})
    with pytest.raises(PromAPIError, match="cannot be set"):
        PromClient("http://127.0.0.1:9", headers={"authorization": "Bearer x"})
    with pytest.raises(PromAPIError, match="Content-Type cannot be set"):
        PromClient("http://127.0.0.1:9", headers={"Content-Type": "application/json"})
