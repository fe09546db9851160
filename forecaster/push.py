"""Pushing the forecaster's metrics to a Pushgateway (``once``, the CronJob variant),
with the credentials a gateway that asks for them needs.

Why credentials: a Pushgateway accepts a push from anyone who reaches it, so sites put
it behind its own ``--web.config.file`` basic auth or an authenticating proxy (a
kube-rbac-proxy, an ingress). The forecaster sends basic auth or a bearer token from
files (a mounted Secret, a projected ServiceAccount token), never on the command line
or in the URL, where ``ps`` and the pod spec would show them. A file is read again at
each push, so a rotated token is used without a restart.
"""

from __future__ import annotations

import argparse
import base64
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from typing import IO, TYPE_CHECKING, NoReturn

from gpu_eta.common.text import first_line, without_credentials
from gpu_eta.forecaster.config import ConfigError
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.promflags import check_user, read_secret
from gpu_eta.forecaster.secret_file import SecretFile

if TYPE_CHECKING:
    from gpu_eta.forecaster.publish import ServiceState


@dataclass(frozen=True)
class PushAuth:
    """What a push authenticates with: basic auth (user, password file or none for an
    empty password), or a bearer token file, or nothing."""

    user: str | None = None
    password: SecretFile | None = None
    token: SecretFile | None = None

    def header(self) -> str | None:
        """The Authorization header's value now (files read again if they changed)."""
        if self.token is not None:
            return f"Bearer {self.token.value()}"
        if self.user is not None:
            password = self.password.value() if self.password is not None else ""
            return "Basic " + base64.b64encode(f"{self.user}:{password}".encode()).decode()
        return None


NO_AUTH = PushAuth()


def add_push_auth_flags(parser: argparse.ArgumentParser) -> None:
    """``--pushgateway.basic-auth-user``, ``…-password-file`` and ``…bearer-token-file``."""
    parser.add_argument(
        "--pushgateway.basic-auth-user",
        dest="pushgateway_user",
        default=None,
        help="basic-auth user for the Pushgateway (its password from the next flag's file)",
    )
    parser.add_argument(
        "--pushgateway.basic-auth-password-file",
        dest="pushgateway_password_file",
        default=None,
        metavar="FILE",
        help="file holding the Pushgateway basic-auth password (read at each push)",
    )
    parser.add_argument(
        "--pushgateway.bearer-token-file",
        dest="pushgateway_token_file",
        default=None,
        metavar="FILE",
        help="file holding a bearer token for the Pushgateway (read at each push)",
    )


def push_auth(args: argparse.Namespace) -> PushAuth:
    """The push flags checked (ConfigError naming the flag: a user that cannot be sent,
    a password file without a user, basic auth and a token both, a missing, unreadable
    or empty file), their files read once so a bad one stops ``once`` before its cycle."""
    user = getattr(args, "pushgateway_user", None)
    password_file = getattr(args, "pushgateway_password_file", None)
    token_file = getattr(args, "pushgateway_token_file", None)
    if (user or password_file or token_file) and not getattr(args, "pushgateway_url", None):
        raise ConfigError(
            "--pushgateway credentials need --pushgateway.url (without it the metrics are"
            " printed, not pushed)"
        )
    if (user or password_file) and token_file:
        raise ConfigError(
            "--pushgateway.bearer-token-file and --pushgateway basic auth are exclusive:"
            " a request carries one Authorization header"
        )
    if token_file:
        token = read_secret(token_file, "--pushgateway.bearer-token-file")
        if token is None or not token.value():
            raise ConfigError(f"--pushgateway.bearer-token-file {token_file}: empty")
        return PushAuth(token=token)
    if password_file and not user:
        raise ConfigError(
            "--pushgateway.basic-auth-password-file needs --pushgateway.basic-auth-user"
        )
    if user:
        check_user(user, "--pushgateway.basic-auth-user")
        return PushAuth(
            user=user,
            password=read_secret(password_file, "--pushgateway.basic-auth-password-file"),
        )
    return NO_AUTH


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect answered to a push is its failure, never followed.

    Why: urllib re-sends a redirected POST (a failed cycle's push) as a GET to the new
    place, so the push "succeeded" with nothing pushed; and a login page or https
    upgrade elsewhere would have got the credentials (an unredirected header is not
    re-sent, but the redirect still ends the push without pushing)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> NoReturn:
        raise urllib.error.HTTPError(
            req.full_url,
            code,
            f"{msg}, redirected to {without_credentials(newurl)}: not followed "
            "(give --pushgateway.url the gateway's own address)",
            headers,
            fp,
        )


def _handler(auth: PushAuth) -> Callable[..., Callable[[], None]]:
    """prometheus_client's push handler, with ``auth``'s Authorization header (sent to
    the URL given only) and redirects refused (``_RefuseRedirects``)."""

    def handler(
        url: str,
        method: str,
        timeout: float | None,
        headers: list[tuple[str, str]],
        data: bytes,
    ) -> Callable[[], None]:
        def handle() -> None:
            request = urllib.request.Request(url, data=data, method=method)
            for name, value in headers:
                request.add_header(name, value)
            if (value := auth.header()) is not None:
                request.add_unredirected_header("Authorization", value)
            opener = urllib.request.build_opener(_RefuseRedirects)
            with opener.open(request, timeout=timeout) as resp:
                if resp.code >= 400:  # urllib raises for these; kept as prometheus_client does
                    raise OSError(f"error talking to pushgateway: {resp.code} {resp.msg}")

        return handle

    return handler


def push_metrics(
    url: str,
    job: str,
    state: ServiceState,
    ok: bool,
    timeout_seconds: float,
    auth: PushAuth = NO_AUTH,
) -> None:
    """Push ``state`` to the Pushgateway at ``url`` under ``job=job``: after a good cycle
    the whole group (PUT, so finished jobs disappear), after a failed one only the
    self-monitoring series (POST keeps the forecasts the gateway holds).

    The quantile families go untyped (``make_registry(for_push=True)``): pushed as
    summaries, the gateway would add a zero ``_sum`` and ``_count`` to each label set.
    Raises ``ForecasterError`` (one line) when the push fails.
    """
    from prometheus_client import exposition

    from gpu_eta.forecaster.publish import make_registry

    registry = make_registry(state, self_only=not ok, for_push=True)
    try:
        push = exposition.push_to_gateway if ok else exposition.pushadd_to_gateway
        push(url, job=job, registry=registry, timeout=timeout_seconds, handler=_handler(auth))
    except Exception as err:  # urllib errors: refused, 4xx/5xx
        raise ForecasterError(
            f"push to {without_credentials(url)} failed: {first_line(err)}"
        ) from None
