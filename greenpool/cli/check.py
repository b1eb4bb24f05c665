"""``python -m greenpool check URI``: can this program reach its MongoDB?

Rules of this module: the ``check`` command's steps and report; it uses the library's
public layers as an application would and adds no connection logic of its own.

It connects the way a :class:`~greenpool.Client` would (name resolution,
TCP, TLS, handshake, authentication, all as the connection string says),
then prints what the server reported, round-trip times of a few pings, and
the pool's counts and CMAP events after a short burst of pings from many
greenlets::

    $ python -m greenpool check "mongodb://app:secret@db.example.com/?tls=true"

(``python`` being the environment greenpool is installed in: ``.venv/bin/python``
in a clone set up by ``devtools/dev.py``.)

The connection string is printed with its password and other secrets (see
:func:`greenpool.client.config.uri.redact_uri`) replaced by ``***``.
When something fails, one line on standard error says what, and the exit
status tells the class of failure:

=====  ===========================================================
code   meaning
=====  ===========================================================
0      connected; everything printed
1      another error (the line says which)
2      bad URI: the connection string does not parse or validate
3      DNS: the host name does not resolve
4      TLS: the handshake failed (certificate, host name, protocol)
5      authentication: the server refused the credentials
6      unreachable: connection refused, or no answer in time
7      not MongoDB: something answered, but not as a MongoDB server
       (a web server or another service at that host and port)
=====  ===========================================================

``--timeout`` (seconds, 5 by default) is the serverSelectionTimeoutMS and the
longest connectTimeoutMS the check uses, unless the connection string sets
them itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import socket
import ssl
import statistics
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import gevent
from pymongo import errors as _pymongo_errors

from greenpool.address import format_address
from greenpool.client.api.client import Client, link_options
from greenpool.client.config.settings import Secret
from greenpool.client.config.uri import parse_uri, redact_uri, uri_secrets
from greenpool.errors import AuthenticationError, ConfigurationError, NotMongoDBError
from greenpool.pool.monitoring import EventCounter
from greenpool.wire.link import Link

__all__ = ["EXIT_CODES", "Failure", "classify", "main", "redact_uri", "run_check"]

#: Exit status by failure class.
EXIT_CODES = {
    "error": 1,
    "bad URI": 2,
    "DNS": 3,
    "TLS": 4,
    "authentication": 5,
    "unreachable": 6,
    "not MongoDB": 7,
}

_HINTS = {
    "bad URI": "check the connection string's syntax and option names",
    "DNS": "check the host name, and that this machine can resolve it",
    "TLS": "check tlsCAFile (the CA that signed the server's certificate) and the host name",
    "authentication": "check the user name, the password, authSource and authMechanism",
    "unreachable": "check the host and port, that the server runs, and firewalls",
    "not MongoDB": "check the port: another service (a web server?) listens there",
    "error": "see the message",
}


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failed check: its class (a key of :data:`EXIT_CODES`) and a one-line message."""

    kind: str
    message: str

    @property
    def exit_code(self) -> int:
        """The process exit status for this class of failure."""
        return EXIT_CODES[self.kind]

    def line(self) -> str:
        """The line printed on standard error."""
        return f"greenpool check: {self.kind} failure: {self.message} ({_HINTS[self.kind]})"


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify(error: BaseException, secrets: Sequence[str] = ()) -> Failure:
    """The :class:`Failure` an exception from connecting or a command stands for.

    ``secrets`` are removed from the message, should any appear in it.
    """
    message = " ".join(str(error).split()) or type(error).__name__
    for secret in secrets:
        if secret:
            message = message.replace(secret, "***")
    chain = list(_chain(error))
    text = " ".join(str(e) for e in chain)
    if isinstance(error, ConfigurationError | _pymongo_errors.InvalidURI):
        # Not PyMongo's own ConfigurationError: the handshake raises that for a
        # server greenpool cannot work with, which is no fault of the URI.
        kind = "bad URI"
    elif isinstance(error, AuthenticationError) or (
        isinstance(error, _pymongo_errors.OperationFailure) and error.code == 18
    ):
        kind = "authentication"
    elif any(isinstance(e, NotMongoDBError) for e in chain):
        kind = "not MongoDB"
    elif any(isinstance(e, socket.gaierror) for e in chain):
        kind = "DNS"
    elif any(isinstance(e, ssl.SSLError) for e in chain) or "TLS handshake failed" in text:
        kind = "TLS"
    elif isinstance(error, _pymongo_errors.ConnectionFailure | OSError):
        kind = "unreachable"
    else:
        kind = "error"
    return Failure(kind, message)


def _with_default_options(uri: str, options: dict[str, str]) -> str:
    """``uri`` plus ``options`` it does not set already."""
    query = uri.partition("?")[2]
    given = {pair.partition("=")[0].lower() for pair in query.split("&") if pair}
    missing = "&".join(f"{k}={v}" for k, v in options.items() if k.lower() not in given)
    if not missing:
        return uri
    if "?" in uri:
        return f"{uri}&{missing}" if query else f"{uri}{missing}"
    after_scheme = uri.partition("://")[2]
    return f"{uri}?{missing}" if "/" in after_scheme else f"{uri}/?{missing}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def run_check(
    uri: str,
    *,
    timeout: float = 5.0,
    pings: int = 5,
    greenlets: int = 50,
    operations: int = 200,
    out: TextIO | None = None,
) -> Failure | None:
    """Run the checks, printing to ``out`` (standard output by default).

    Returns None when everything worked, else the first :class:`Failure`.
    """
    out = sys.stdout if out is None else out

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    say(f"URI: {redact_uri(uri)}")
    secrets = list(uri_secrets(uri))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            settings = parse_uri(uri)
        if caught:
            # The connection string parses, but a value in it would be ignored.
            raise ConfigurationError(str(caught[0].message))
        credentials = settings.credentials
        if credentials is not None and credentials.password is not None:
            secrets.append(credentials.password.reveal())
        for value in (credentials.mechanism_properties.values() if credentials else ()):
            if isinstance(value, Secret):
                secrets.append(value.reveal())
        limit_ms = f"{timeout * 1000:g}"
        client_uri = _with_default_options(
            uri, {"serverSelectionTimeoutMS": limit_ms, "connectTimeoutMS": limit_ms})
        settings = parse_uri(client_uri)
        if len(settings.hosts) != 1:
            raise ConfigurationError(
                f"the check connects to one server or load balancer; the URI names "
                f"{len(settings.hosts)} hosts")
        address = settings.hosts[0]
        say(f"address: {format_address(address)}"
            f"{' (load balanced)' if settings.load_balanced else ''}"
            f"{', TLS' if settings.tls else ''}"
            f"{', as ' + str(credentials.username) if credentials is not None else ''}")
        options = dataclasses.replace(link_options(settings), socket_timeout=timeout)
        _report_server(address, options, say)
        watcher = EventCounter()
        with Client(client_uri, event_listeners=[watcher]) as client:
            _report_pings(client, pings, say)
            _report_burst(client, watcher, greenlets, operations, say)
    except Exception as error:
        return classify(error, secrets)
    say("OK")
    return None


def _establish(address: Any, options: Any) -> tuple[Link, list[tuple[str, float]]]:
    """:func:`greenpool.wire.connector.connect`, one step at a time: the link and each step's name
    and seconds (only the steps that ran)."""
    steps: list[tuple[str, float]] = []
    host, port = address
    literal = port is None or _is_ip_literal(host)
    opening = "connect" if literal else "resolve and connect"
    if options.ssl_context is not None:
        opening += " and TLS"
    started = time.perf_counter()
    link = Link.open(address, options)
    try:
        steps.append((opening, time.perf_counter() - started))
        started = time.perf_counter()
        link.handshake()
        steps.append(("handshake", time.perf_counter() - started))
        if options.credentials is not None:
            started = time.perf_counter()
            link.authenticate()
            steps.append(("authentication", time.perf_counter() - started))
    except BaseException:
        link.close()
        raise
    return link, steps


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _report_server(address: Any, options: Any, say: Any) -> None:
    link, steps = _establish(address, options)
    try:
        hello = dict(link.hello or {})
        say(f"connected in {_ms(sum(took for _, took in steps))} ("
            + ", ".join(f"{name} {_ms(took)}" for name, took in steps) + ")")
        try:
            version = link.command("admin", {"buildInfo": 1}).get("version", "unknown")
        except _pymongo_errors.OperationFailure as error:
            version = f"unknown (buildInfo refused: {error.code})"
        say(f"server version: {version}")
        say(f"maxWireVersion: {link.max_wire_version}")
        say(f"connectionId: {link.server_connection_id}")
        if options.load_balanced:
            say(f"serviceId: {link.service_id}")
        for name in ("setName", "msg", "maxBsonObjectSize", "maxMessageSizeBytes"):
            if name in hello:
                say(f"{name}: {hello[name]}")
        if link.compressor is not None:
            say(f"compression: {link.compressor}")
    finally:
        link.close()


def _report_pings(client: Client, pings: int, say: Any) -> None:
    client.command("admin", {"ping": 1})  # waits for the server, opens a connection
    times = []
    for _ in range(max(pings, 1)):
        started = time.perf_counter()
        client.command("admin", {"ping": 1})
        times.append(time.perf_counter() - started)
    say(f"ping round trips ({len(times)}): min {_ms(min(times))}, "
        f"median {_ms(statistics.median(times))}, max {_ms(max(times))}")


def _report_burst(client: Client, watcher: EventCounter, greenlets: int, operations: int,
                  say: Any) -> None:
    greenlets = max(greenlets, 1)
    share, extra = divmod(max(operations, 0), greenlets)

    def work(count: int) -> None:
        for _ in range(count):
            client.command("admin", {"ping": 1})

    started = time.perf_counter()
    jobs = [gevent.spawn(work, share + (1 if i < extra else 0)) for i in range(greenlets)]
    gevent.joinall(jobs, raise_error=True)
    took = time.perf_counter() - started
    stats = client.stats()
    say(f"burst: {operations} pings from {greenlets} greenlets in {_ms(took)}")
    say(f"pool: state {stats.state}, generation {stats.generation}, total {stats.total}, "
        f"available {stats.available}, in use {stats.in_use}, pending {stats.pending}, "
        f"waiting {stats.waiting}, maxPoolSize {stats.max_pool_size}")
    say("CMAP events: " + ", ".join(
        f"{name.removesuffix('Event')} {count}" for name, count in sorted(watcher.counts.items())))


def main(argv: Sequence[str] | None = None) -> int:
    """The ``check`` command; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m greenpool check",
        description="Connect to MongoDB as greenpool would and report what happened.")
    parser.add_argument("uri", help="a mongodb:// or mongodb+srv:// connection string")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="serverSelectionTimeoutMS and connectTimeoutMS, in seconds, "
                             "when the URI does not set them (default: 5)")
    parser.add_argument("--pings", type=int, default=5, help="pings to time (default: 5)")
    parser.add_argument("--greenlets", type=int, default=50,
                        help="greenlets in the burst (default: 50)")
    parser.add_argument("--operations", type=int, default=200,
                        help="pings in the burst (default: 200)")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error("--timeout must be > 0")
    failure = run_check(args.uri, timeout=args.timeout, pings=args.pings,
                        greenlets=args.greenlets, operations=args.operations)
    if failure is None:
        return 0
    print(failure.line(), file=sys.stderr, flush=True)
    return failure.exit_code
