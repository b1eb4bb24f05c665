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

This package's ``__init__`` gathers the helpers' public names; the helpers live in its
modules (the embedded server, the replica set emulator and its member processes, see
docs/architecture.rst), which ``python -m greenpool server`` (:mod:`greenpool.cli`) runs.
Not for production data.

Layer rule: the test servers may import the client, the wire layer, the pool core and the
base modules; never the command line or the adapter. A member process of the emulator
loads its three modules (``_replmember.py``, ``_replhello.py``, ``_replfailpoint.py``)
without the package: they import only the standard library, bson and each other.
"""

from __future__ import annotations

from greenpool.testing.embedded import EmbeddedServer
from greenpool.testing.replset import MemberConfig, MemberStatus, ReplicaSet

__all__ = ["EmbeddedServer", "MemberConfig", "MemberStatus", "ReplicaSet"]
