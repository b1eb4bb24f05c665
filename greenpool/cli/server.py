"""``python -m greenpool server``: a throwaway server in the foreground, until Ctrl-C.

Rules of this module: the command line of ``server`` (its options, what it prints, the
signals that stop it); the servers are :mod:`greenpool.testing.embedded`'s (one SecantusDB)
and :mod:`greenpool.testing.replset`'s (a replica set of member processes in front of one).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from greenpool.errors import ConfigurationError
from greenpool.testing.embedded import HOST, EmbeddedServer
from greenpool.testing.replset import ReplicaSet, describe

__all__ = ["main"]


class _Server(Protocol):
    @property
    def uri(self) -> str: ...

    def start(self) -> object: ...

    def stop(self) -> None: ...


class _Stopped(Exception):
    """SIGTERM or SIGINT arrived."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m greenpool server",
        description="Run SecantusDB (a MongoDB-compatible server, in memory) on 127.0.0.1 "
                    "in the foreground, print its URI, and stop it on Ctrl-C or SIGTERM.")
    parser.add_argument("--port", type=int, default=27017,
                        help="the port to listen on (default 27017; 0 picks a free one); "
                             "with --replset N, the first member's (the others follow)")
    parser.add_argument("--replset", nargs="?", const=1, type=int, metavar="N",
                        help="a replica set: alone (or N=1), SecantusDB's own one-node set "
                             "'secantus' (for transactions); with N of 2 or more, N member "
                             "processes (set 'rs0') in front of one SecantusDB, with "
                             "elections, stepdowns and stopped members on demand")
    parser.add_argument("--auth", metavar="USER:PASS",
                        help="create this user (role root) and require authentication")
    parser.add_argument("--tls", action="store_true",
                        help="serve TLS only, with a CA made for this server")
    return parser


def main(argv: Sequence[str]) -> int:
    """``python -m greenpool server``: run a server until Ctrl-C or SIGTERM."""
    parser = _parser()
    args = parser.parse_args(argv)
    members = args.replset or 0
    if args.replset is not None and members < 1:
        parser.error(f"--replset wants a number of members of 1 or more, not {members}")
    if members > 1:
        if args.auth is not None or args.tls:
            parser.error("--auth and --tls serve one server; they do not go with --replset N")
        if args.port and not 0 < args.port <= 65536 - members:
            parser.error(f"--port {args.port} leaves no room for {members} members")
        ports = [args.port + i for i in range(members)] if args.port else []
        replica_set = ReplicaSet(members, ports=ports)
        return _foreground(replica_set, lambda: describe(replica_set))
    auth = None
    if args.auth is not None:
        user, colon, password = args.auth.partition(":")
        if not colon or not user or not password:
            parser.error(f"--auth wants USER:PASS, not {args.auth!r}")
        auth = (user, password)
    server = EmbeddedServer(port=args.port, replica_set=members == 1, auth=auth,
                            tls=args.tls)

    def started() -> list[str]:
        kind = "a one-node replica set 'secantus'" if members else "a standalone"
        storage = "in memory" if auth is None else "data in a temporary directory"
        return [f"SecantusDB ({kind}, {storage}) on {HOST}:{server.port}, pid {server.pid}; "
                "Ctrl-C or SIGTERM stops it.", f"URI: {server.uri}", "In another shell:"]

    return _foreground(server, started)


def _foreground(server: _Server, started: Callable[[], list[str]]) -> int:
    """Start ``server``, print ``started()`` and the export line, wait for a signal, stop."""
    # Both raise in the main thread, wherever it is (starting, waiting), so the server
    # is stopped in order and the command ends without a traceback.
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, _raise_stopped)
    try:
        try:
            server.start()
        except ConfigurationError as error:
            print(f"greenpool server: {error}", file=sys.stderr)
            return 1
        for line in started():
            print(line)
        print(f"export MONGODB_URI={shlex.quote(server.uri)}", flush=True)
        while True:
            signal.pause()
    except _Stopped:
        print("stopping", flush=True)
        return 0
    finally:
        # A second Ctrl-C must not interrupt the stop itself (and print a traceback).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop()
