"""Helpers for tests and trials: servers on 127.0.0.1 that a program starts and stops.

* :class:`EmbeddedServer`: SecantusDB, a MongoDB-compatible server, in memory, in a
  child process on a free port; a context manager that never outlives its program
  (``pip install 'greenpool[demo]'``). ``python -m greenpool server`` runs one in the
  foreground.
* :class:`ReplicaSet`: a replica set on one machine, member processes in front of one
  shared SecantusDB, with controls to step the primary down, elect another member, stop
  and start members (:class:`MemberConfig`, :class:`MemberStatus`); ``python -m
  greenpool server --replset N`` runs one in the foreground.

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
from greenpool.cli.replset import MemberConfig, MemberStatus, ReplicaSet

__all__ = ["EmbeddedServer", "MemberConfig", "MemberStatus", "ReplicaSet"]
