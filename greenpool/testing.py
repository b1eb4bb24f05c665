"""Helpers for tests and trials: servers on 127.0.0.1 that a program starts and stops.

* :class:`EmbeddedServer`: SecantusDB, a MongoDB-compatible server, in memory, in a
  child process on a free port; a context manager that never outlives its program
  (``pip install 'greenpool[demo]'``). ``python -m greenpool server`` runs one in the
  foreground.

::

    from greenpool.testing import EmbeddedServer

    with EmbeddedServer(replica_set=True) as server:
        with greenpool.Client(server.uri) as client:
            client.command("admin", {"ping": 1})

This module only gathers the helpers' public names; each helper lives with the command
line that runs it (``greenpool.cli``, see docs/architecture.rst). Not for production data.
"""

from __future__ import annotations

from greenpool.cli.embedded import EmbeddedServer

__all__ = ["EmbeddedServer"]
