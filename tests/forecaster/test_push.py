"""Pushing with credentials (``forecaster/push.py``): the flags, and the header each
push sends, read from its file at that push."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gpu_eta.forecaster.config import ConfigError
from gpu_eta.forecaster.errors import ExitCode, ForecasterError
from gpu_eta.forecaster.main import build_parser, config_from_args, main
from gpu_eta.forecaster.publish import ServiceState
from gpu_eta.forecaster.push import NO_AUTH, PushAuth, push_auth, push_metrics
from tests.support.net import dead_port, loopback_server


@contextlib.contextmanager
def gateway_answering(
    status: int = 200, headers: tuple[tuple[str, str], ...] = ()
) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """A loopback server answering every push (PUT, POST) with ``status`` and
    ``headers``: its URL and, per request, the method and Authorization it carried."""
    seen: list[tuple[str, str | None]] = []

    class H(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            seen.append((self.command, self.headers.get("Authorization")))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_PUT

        def log_message(self, *args: object) -> None:
            pass

    with loopback_server(H) as url:
        yield url, seen


@pytest.fixture
def gateway() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """A gateway taking every push (200)."""
    with gateway_answering() as answer:
        yield answer


def _basic_auth(tmp_path: Path) -> tuple[Path, PushAuth]:
    """User ``pusher`` with the password file (``s3cret``) written under ``tmp_path``."""
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    flags = ["--pushgateway.basic-auth-user", "pusher"]
    return secret, _auth(*flags, "--pushgateway.basic-auth-password-file", str(secret))


def _auth(*flags: str) -> PushAuth:
    args = build_parser().parse_args(["once", "--pushgateway.url", "http://pg:9091", *flags])
    return push_auth(args)


def test_without_flags_a_push_carries_no_authorization(gateway) -> None:
    url, seen = gateway
    assert _auth() is NO_AUTH
    push_metrics(url, "j", ServiceState(), True, 5)
    assert seen == [("PUT", None)]


def test_basic_auth_is_sent_and_its_password_file_read_at_each_push(gateway, tmp_path) -> None:
    url, seen = gateway
    secret, auth = _basic_auth(tmp_path)
    push_metrics(url, "j", ServiceState(), True, 5, auth)
    secret.write_text("rotated-longer\n")  # a Secret updated while the CronJob lives
    push_metrics(url, "j", ServiceState(), False, 5, auth)  # a failed cycle: POST
    expected = [
        ("PUT", "Basic " + base64.b64encode(b"pusher:s3cret").decode()),
        ("POST", "Basic " + base64.b64encode(b"pusher:rotated-longer").decode()),
    ]
    assert seen == expected


def test_a_bearer_token_is_sent(gateway, tmp_path) -> None:
    url, seen = gateway
    token = tmp_path / "token"
    token.write_text("abc.def\n")
    push_metrics(
        url, "j", ServiceState(), True, 5, _auth("--pushgateway.bearer-token-file", str(token))
    )
    assert seen == [("PUT", "Bearer abc.def")]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (
            ["--pushgateway.basic-auth-password-file", "{file}"],
            "needs --pushgateway.basic-auth-user",
        ),
        (
            ["--pushgateway.basic-auth-user", "a", "--pushgateway.bearer-token-file", "{file}"],
            "exclusive",
        ),
        (["--pushgateway.bearer-token-file", "{empty}"], "empty"),
        (["--pushgateway.bearer-token-file", "{missing}"], "No such file"),
        (["--pushgateway.basic-auth-user", "a:b"], "printable ASCII without ':'"),
        (["--pushgateway.basic-auth-user", "ali\u00e7e"], "--pushgateway.basic-auth-user"),
    ],
)
def test_bad_push_flags_are_usage_errors_naming_the_flag(
    flags: list[str], needle: str, tmp_path: Path, capsys
) -> None:
    (tmp_path / "file").write_text("x\n")
    (tmp_path / "empty").write_text("\n")
    paths = {k: str(tmp_path / k) for k in ("file", "empty", "missing")}
    argv = [f.format(**paths) for f in flags]
    with pytest.raises(ConfigError, match=None) as info:
        _auth(*argv)
    assert needle in str(info.value), info.value
    # the command itself: one line, exit 2, nothing pushed or queried
    assert main(["once", "--pushgateway.url", "http://127.0.0.1:9", *argv]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_a_refused_push_is_one_line_without_the_secret(tmp_path) -> None:
    """A gateway answering 401 (wrong password): ForecasterError naming the status."""
    _, auth = _basic_auth(tmp_path)
    with gateway_answering(401) as (url, _), pytest.raises(ForecasterError) as info:
        push_metrics(url, "j", ServiceState(), True, 5, auth)
    assert "401" in str(info.value) and "s3cret" not in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("ok", [True, False])
def test_a_redirected_push_fails_and_the_credentials_stay(gateway, tmp_path, ok: bool) -> None:
    """A gateway answering 302 elsewhere (a login page, an https upgrade): urllib
    re-sent a failed cycle's POST as a GET there, Authorization included, and the push
    "succeeded" with nothing pushed. Now the redirect is the push's failure."""
    elsewhere, seen = gateway
    token = tmp_path / "token"
    token.write_text("SECRET-TOKEN\n")
    auth = _auth("--pushgateway.bearer-token-file", str(token))
    redirect = (("Location", elsewhere + "/login"),)
    with gateway_answering(302, redirect) as (url, _), pytest.raises(ForecasterError) as info:
        push_metrics(url, "j", ServiceState(), ok, 5, auth)
    assert "302" in str(info.value) and "not followed" in str(info.value)
    assert "SECRET" not in str(info.value)
    assert seen == []  # nothing reached the other place


def test_credentials_without_a_pushgateway_url_are_a_usage_error(tmp_path, capsys) -> None:
    """Without --pushgateway.url once prints the metrics: the credentials were ignored."""
    token = tmp_path / "token"
    token.write_text("t\n")
    assert main(["once", "--pushgateway.bearer-token-file", str(token)]) == ExitCode.USAGE
    assert "need --pushgateway.url" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--pushgateway.url", "ftp://pg:9091"], "--pushgateway.url must be http(s)://host"),
        (["--pushgateway.url", "HTTP://pg:9091"], "--pushgateway.url must be http(s)://host"),
        (["--pushgateway.url", "http://:9091"], "--pushgateway.url must be http(s)://host"),
        (["--pushgateway.url", "http://pg:9091", "--pushgateway.job", ""], "--pushgateway.job"),
    ],
)
def test_bad_push_settings_stop_once_before_its_cycle(
    flags: list[str], needle: str, tmp_path: Path, capsys
) -> None:
    """A push that cannot work is a usage error at start (one line, exit 2), before the
    cycle queries Prometheus and writes its history: ``ftp://`` was pushed to as
    ``http://ftp://…`` and an empty job got HTTP 400 from the gateway, each only after
    the cycle (exit 1). ``HTTP://`` is refused too: prometheus_client prefixes
    ``http://`` to any URL not starting with ``http://`` or ``https://``."""
    db = tmp_path / "history.sqlite"
    argv = ["once", "--prometheus.url", f"http://127.0.0.1:{dead_port()}", "--history.db", str(db)]
    assert main([*argv, *flags]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists()  # no cycle ran


def test_a_plain_host_port_and_https_are_pushgateway_urls() -> None:
    """The forms prometheus_client pushes to as given (``host:port`` gets ``http://``)."""
    for url in ("pg:9091", "http://pg:9091", "https://pg.example/prefix"):
        args = build_parser().parse_args(["once", "--pushgateway.url", url])
        assert config_from_args(args).pushgateway_url == url
