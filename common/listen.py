"""Listen addresses (``HOST:PORT``, ``:PORT``, ``[v6]:PORT``): the one parser every
program's ``--web.listen-address`` (and the exporter's progress listener) uses. Pure
(the config modules import it); binding is ``listen_socket``'s."""

from __future__ import annotations

import re
from dataclasses import dataclass

_V6 = re.compile(r"^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$")
_HOST = re.compile(r"^([A-Za-z0-9.\-]*):(\d{1,5})$")


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """``HOST:PORT``; an empty host (``:9842``) means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen_address(value: object) -> ListenAddress:
    """``HOST:PORT``, ``:PORT`` or ``[v6]:PORT`` with a port in 0..65535;
    ``ValueError`` saying what was expected otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    text = value.strip()
    match = _V6.match(text) or _HOST.match(text)
    if match is None:
        raise ValueError(f"expected HOST:PORT (e.g. :9842 or 127.0.0.1:9842), got {value!r}")
    port = int(match.group(2))
    if port > 65535:
        raise ValueError(f"port {port} out of range")
    return ListenAddress(match.group(1), port)
