"""The ``--prometheus.*`` flags and their checked values: one definition for the
forecaster's commands and for ``top`` (``gpu_eta.top``), so that both reach a
Prometheus behind auth or TLS the same way. Standard library only."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from gpu_eta.forecaster.config import ConfigError
from gpu_eta.forecaster.request_headers import headers_problem, parse_header, sendable
from gpu_eta.forecaster.secret_file import SecretFile, UnsendableSecret


def add_prometheus_flags(
    parser: argparse.ArgumentParser, default_url: str = "http://localhost:9090"
) -> None:
    """The ``--prometheus.*`` flags: one definition for the forecaster and ``top``, so
    both reach a Prometheus behind auth or TLS the same way (``prometheus_connection``)."""
    g = parser.add_argument_group("Prometheus")
    g.add_argument(
        "--prometheus.url",
        dest="prometheus_url",
        default=default_url,
        help="base URL of any Prometheus-API server (Prometheus, Thanos, Mimir, VictoriaMetrics)",
    )
    g.add_argument(
        "--prometheus.timeout",
        dest="timeout_seconds",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="timeout of one HTTP request",
    )
    g.add_argument(
        "--prometheus.retries",
        dest="retries",
        type=int,
        default=2,
        help="extra attempts after a timeout, refused connection or HTTP 429, 502, 503 or 504",
    )
    g.add_argument(
        "--prometheus.backoff",
        dest="backoff_seconds",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="first retry delay (doubles each retry)",
    )
    g.add_argument(
        "--prometheus.bearer-token-file",
        dest="bearer_token_file",
        default=None,
        metavar="FILE",
        help="file holding a bearer token sent as Authorization; re-read when it changes "
        "(a rotated Kubernetes ServiceAccount token)",
    )
    g.add_argument(
        "--prometheus.basic-auth-user",
        dest="basic_auth_user",
        default=None,
        help="basic-auth user (password from --prometheus.basic-auth-password-file)",
    )
    g.add_argument(
        "--prometheus.basic-auth-password-file",
        dest="basic_auth_password_file",
        default=None,
        metavar="FILE",
        help="file holding the basic-auth password (re-read when it changes)",
    )
    g.add_argument(
        "--prometheus.header",
        dest="headers",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="extra HTTP header sent with every query, repeatable (e.g. "
        "X-Scope-OrgID=tenant for Mimir or Cortex); never logged, but visible in the "
        "process list like any flag; Authorization, Host and framing headers are refused",
    )
    g.add_argument(
        "--prometheus.ca-file",
        dest="ca_file",
        default=None,
        metavar="FILE",
        help="CA bundle to verify an https Prometheus",
    )
    g.add_argument(
        "--prometheus.insecure-skip-verify",
        dest="insecure_skip_verify",
        action="store_true",
        help="do not verify TLS certificates (test clusters only)",
    )
    g.add_argument(
        "--prometheus.max-response-bytes",
        dest="max_response_bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="larger responses are refused",
    )


def prometheus_connection(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--prometheus.*`` flags but the URL, as keyword arguments of both ``Config``
    and ``PromClient``; checked and secrets read from their files here, once for every
    command that has these flags (bad value, missing file or empty token file:
    ConfigError). The secrets are ``SecretFile``s: the client re-reads a file that
    changed (a rotated token) before a request."""
    # finite too: argparse's float takes "inf" and "nan", which passed "> 0" or every
    # comparison and ended in a traceback at the first request's or retry's sleep
    if not (math.isfinite(args.timeout_seconds) and args.timeout_seconds > 0):
        raise ConfigError(
            f"--prometheus.timeout must be > 0 and finite, got {args.timeout_seconds}"
        )
    if not (math.isfinite(args.backoff_seconds) and args.backoff_seconds >= 0):
        raise ConfigError(
            f"--prometheus.backoff must be >= 0 and finite, got {args.backoff_seconds}"
        )
    if args.retries < 0:
        raise ConfigError(f"--prometheus.retries must be >= 0, got {args.retries}")
    if args.max_response_bytes < 1024:
        raise ConfigError("--prometheus.max-response-bytes must be >= 1024")
    token = read_secret(args.bearer_token_file, "--prometheus.bearer-token-file")
    if token is not None and not token.value():
        # no Authorization header at all would be sent: a 401 at every query
        raise ConfigError(f"--prometheus.bearer-token-file {args.bearer_token_file}: empty")
    basic = None
    if args.basic_auth_user:
        check_user(args.basic_auth_user, "--prometheus.basic-auth-user")
        password = read_secret(
            args.basic_auth_password_file, "--prometheus.basic-auth-password-file"
        )
        basic = (args.basic_auth_user, password or "")  # no file: an empty password
    elif args.basic_auth_password_file:
        raise ConfigError(
            "--prometheus.basic-auth-password-file needs --prometheus.basic-auth-user"
        )
    headers = _headers(args.headers or [])
    if args.ca_file and not Path(args.ca_file).is_file():
        raise ConfigError(f"--prometheus.ca-file {args.ca_file}: no such file")
    return {
        "timeout_seconds": args.timeout_seconds,
        "retries": args.retries,
        "backoff_seconds": args.backoff_seconds,
        "bearer_token": token,
        "basic_auth": basic,
        "headers": headers,
        "ca_file": args.ca_file,
        "insecure_skip_verify": args.insecure_skip_verify,
        "max_response_bytes": args.max_response_bytes,
    }


def check_user(user: str, flag: str) -> None:
    """ConfigError unless ``user`` can be the user part of basic auth: printable ASCII
    (``sendable``: it goes in the Authorization header, which the HTTP client encodes
    as Latin-1, so a non-ASCII one was a UnicodeEncodeError at the first query, a
    traceback) and no ':' (RFC 7617: the server splits user from password at the first
    one, so it would read another user and password). Checked at start so it is a usage
    error naming the flag (exit 2). The message shows the user: it is no secret, and a
    look-alike character (a typographic apostrophe) is found by seeing it."""
    if ":" in user or not sendable(user):
        raise ConfigError(f"{flag} {user!r}: must be printable ASCII without ':'")


def _headers(texts: list[str]) -> dict[str, str]:
    """``--prometheus.header`` values → a name → value dict; a bad one, a name given
    twice (in any case) or more than MAX_HEADERS: ConfigError naming the header, never
    its value (it may be a secret). Checked here so a bad one is a usage error
    (exit 2) before anything starts."""
    headers: dict[str, str] = {}
    for text in texts:
        try:
            name, value = parse_header(text)
        except ValueError as err:
            raise ConfigError(f"--prometheus.header {err}") from None
        if name.lower() in (known.lower() for known in headers):
            raise ConfigError(f"--prometheus.header {name} given twice")
        headers[name] = value
    problem = headers_problem(headers)  # the count; each one was checked above
    if problem:
        raise ConfigError(f"--prometheus.header: {problem}")
    return headers


def read_secret(path: str | None, flag: str) -> SecretFile | None:
    """The secret file of ``flag``, read once here so that a missing or unreadable one
    stops the command at start (the client re-reads it when it changes later)."""
    if not path:
        return None
    try:
        return SecretFile(path, flag)
    except OSError as err:
        raise ConfigError(f"{flag} {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{flag} {path}: not UTF-8 text") from None
    except UnsendableSecret as err:
        raise ConfigError(f"{flag} {path}: {err}") from None
