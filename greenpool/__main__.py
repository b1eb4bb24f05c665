"""``python -m greenpool COMMAND``: greenpool's command line.

Rules of this module: parsing the command line and dispatching to a command; each command's
work lives in :mod:`greenpool.cli`.

Commands:

``check URI``
    connect to MongoDB as greenpool would and report (see :mod:`greenpool.cli.check`).
``server [--port N] [--replset [N]] [--auth USER:PASS] [--tls]``
    run an embedded SecantusDB on 127.0.0.1 in the foreground until Ctrl-C or
    SIGTERM, printing its URI; with ``--replset N``, a replica set of N member
    processes in front of it (see :mod:`greenpool.cli.server`; needs the ``demo``
    extra).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = ("usage: python -m greenpool check URI [--timeout SECONDS]\n"
         "       python -m greenpool server [--port N] [--replset [N]] [--auth USER:PASS] [--tls]\n"
         "(each command takes --help)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (``sys.argv[1:]`` by default); returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] == "check":
        from greenpool.cli.check import main as check

        return check(args[1:])
    if args[0] == "server":
        from greenpool.cli.server import main as server

        return server(args[1:])
    print(f"greenpool: unknown command {args[0]!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
