"""Server addresses: ``(host, port)`` tuples, as PyMongo uses them.

Rules of this module: parsing and formatting ``(host, port)`` addresses; no name
resolution, no sockets, no imports from greenpool.

A Unix domain socket is ``(path, None)``.
"""

from __future__ import annotations

from typing import TypeAlias

Address: TypeAlias = tuple[str, int | None]

DEFAULT_PORT = 27017


def parse_address(value: object) -> Address:
    """Normalise ``"host"``, ``"host:port"``, ``"[v6]:port"`` or a tuple.

    >>> parse_address("db.example.com")
    ('db.example.com', 27017)
    >>> parse_address(("127.0.0.1", 5000))
    ('127.0.0.1', 5000)
    >>> parse_address("/tmp/mongodb-27017.sock")
    ('/tmp/mongodb-27017.sock', None)
    """
    if isinstance(value, tuple) and len(value) == 2:
        host, port = value
        if isinstance(host, str) and host and (port is None or _is_port(port)):
            return (host, port)
    elif isinstance(value, str) and value:
        return _parse_string(value)
    raise ValueError(f"not a server address: {value!r} (expected 'host:port' or (host, port))")


def format_address(address: Address) -> str:
    """``host:port`` (IPv6 hosts in brackets), or the socket path."""
    host, port = address
    if port is None:
        return host
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def _parse_string(text: str) -> Address:
    if text.endswith(".sock") or text.startswith("/"):
        return (text, None)
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"not a server address: {text!r}")
        return (host, _port(rest[1:], text) if rest else DEFAULT_PORT)
    host, sep, port_text = text.rpartition(":")
    if not sep:
        return (text, DEFAULT_PORT)
    if not host or ":" in host:
        raise ValueError(f"not a server address: {text!r} (IPv6 hosts need [brackets])")
    return (host, _port(port_text, text))


def _port(text: str, whole: str) -> int:
    if text.isdigit() and _is_port(int(text)):
        return int(text)
    raise ValueError(f"not a server address: {whole!r} (bad port {text!r})")


def _is_port(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536
