"""Scripted deployments of tests/fake_server.py servers: a replica set, mongoses.

:class:`FakeReplicaSet` starts N fake members of one replica set on 127.0.0.1. Each
answers hello as the member it is now (``setName``, ``hosts``, ``primary``, ``me``,
``electionId``, ``setVersion``, ``topologyVersion``, ``logicalSessionTimeoutMinutes``)
and records every command with the member that got it::

    with FakeReplicaSet(3) as rs:
        with Client(rs.uri()) as client:
            client.command("db", {"insert": "c", "documents": [{}]})
        assert rs.received("insert") == [0]      # the primary, member 0
        rs.step_down()                            # no primary now
        rs.elect(1)                               # member 1 is, with a newer electionId

A member that is not the primary refuses writes with NotWritablePrimary (labelled
RetryableWriteError, with its topologyVersion, as mongod 4.4+ does); any member
answers reads: ``find`` opens a cursor of one document per batch naming the member,
``getMore`` ends it. Replies carry an increasing ``$clusterTime`` when asked.

:class:`FakeMongoses` starts N fake mongoses (``msg: "isdbgrid"``) that accept
everything, for sharded topologies. Nothing here decides anything for the client:
each server only answers as scripted.
"""

from __future__ import annotations

import itertools
from typing import Any

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from tests.fake_server import FakeServer, Request

SET_NAME = "rs"


class FakeReplicaSet:
    """``members`` scripted members of replica set ``rs``; member 0 starts as primary."""

    def __init__(self, members: int = 3, *, cluster_time: bool = False,
                 primary: int | None = 0) -> None:
        self.servers = [FakeServer(handlers=self._handlers(index)) for index in range(members)]
        self.primary = primary
        self.cluster_time = cluster_time
        self._process = [ObjectId() for _ in range(members)]
        self._counter = [0] * members
        self._election = itertools.count(1)
        self._election_id = ObjectId(f"{next(self._election):024x}")
        self._ticks = itertools.count(1)
        #: (member index, request) for every command but hello, in arrival order.
        self.log: list[tuple[int, Request]] = []
        #: Per member, fields that override its hello (None removes one).
        self.overrides: list[dict[str, Any]] = [{} for _ in range(members)]

    # -- life ----------------------------------------------------------------------------

    def __enter__(self) -> FakeReplicaSet:
        for server in self.servers:
            server.start()
        self.refresh()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for server in self.servers:
            server.stop()

    # -- what the set is ---------------------------------------------------------------------

    def host(self, index: int) -> str:
        host, port = self.servers[index].address
        return f"{host}:{port}"

    def address(self, index: int) -> tuple[str, int | None]:
        return self.servers[index].address

    def uri(self, *seeds: int, **options: Any) -> str:
        """A connection string naming ``seeds`` (all members if none) and
        ``replicaSet=rs`` (unless ``replicaSet=None``), plus ``options``."""
        hosts = ",".join(self.host(i) for i in (seeds or range(len(self.servers))))
        options = {"replicaSet": SET_NAME, "heartbeatFrequencyMS": 500, **options}
        query = "&".join(f"{key}={value}" for key, value in options.items()
                         if value is not None)
        return f"mongodb://{hosts}/?{query}"

    def step_down(self) -> None:
        """The primary steps down: no primary until :meth:`elect`."""
        if self.primary is not None:
            self._counter[self.primary] += 1
        self.primary = None
        self.refresh()

    def elect(self, index: int) -> None:
        """Member ``index`` becomes primary, with a new electionId."""
        self.step_down()
        self.primary = index
        self._counter[index] += 1
        self._election_id = ObjectId(f"{next(self._election):024x}")
        self.refresh()

    def refresh(self) -> None:
        """Give every member the hello of its role now."""
        hosts = [self.host(i) for i in range(len(self.servers))]
        for index, server in enumerate(self.servers):
            is_primary = index == self.primary
            fields: dict[str, Any] = {
                "setName": SET_NAME, "hosts": hosts, "me": self.host(index),
                "isWritablePrimary": is_primary, "secondary": not is_primary,
                "setVersion": 1, "logicalSessionTimeoutMinutes": 30,
                "topologyVersion": self._version(index),
                "primary": self.host(self.primary) if self.primary is not None else None,
                "electionId": self._election_id if is_primary else None,
            }
            fields.update(self.overrides[index])
            server.hello.clear()
            server.hello.update(fields)

    def received(self, name: str) -> list[int]:
        """The members that received command ``name``, in order."""
        return [index for index, request in self.log if request.name == name]

    def requests(self, name: str) -> list[Request]:
        return [request for _, request in self.log if request.name == name]

    # -- answers ---------------------------------------------------------------------------

    def _version(self, index: int) -> dict[str, Any]:
        return {"processId": self._process[index], "counter": Int64(self._counter[index])}

    def _handlers(self, index: int) -> dict[str, Any]:
        def record(reply: Any) -> Any:
            def handler(request: Request) -> Any:
                self.log.append((index, request))
                answer = reply(index, request)
                if self.cluster_time and isinstance(answer, dict):
                    answer["$clusterTime"] = {
                        "clusterTime": Timestamp(1_700_000_000, next(self._ticks)),
                        "signature": {"hash": b"\0" * 20, "keyId": Int64(0)}}
                return answer
            return handler

        return {name: record(reply) for name, reply in (
            ("insert", self._write), ("update", self._write), ("delete", self._write),
            ("find", self._find), ("getMore", self._get_more), ("killCursors", self._ok),
            ("count", self._count), ("ping", self._ok), ("endSessions", self._ok),
            ("commitTransaction", self._ok), ("abortTransaction", self._ok))}

    def _write(self, index: int, request: Request) -> dict[str, Any]:
        if index == self.primary:
            return {"ok": 1.0, "n": 1}
        return {"ok": 0.0, "code": 10107, "codeName": "NotWritablePrimary",
                "errmsg": "not primary", "topologyVersion": self._version(index),
                "errorLabels": ["RetryableWriteError"]}

    def _find(self, index: int, request: Request) -> dict[str, Any]:
        namespace = f"{request.db}.{request.command['find']}"
        return {"ok": 1.0, "cursor": {"id": Int64(1000 + index), "ns": namespace,
                                      "firstBatch": [{"member": index}]}}

    def _get_more(self, index: int, request: Request) -> dict[str, Any]:
        namespace = f"{request.db}.{request.command['collection']}"
        return {"ok": 1.0, "cursor": {"id": Int64(0), "ns": namespace,
                                      "nextBatch": [{"member": index}]}}

    def _count(self, index: int, request: Request) -> dict[str, Any]:
        return {"ok": 1.0, "n": index}

    def _ok(self, index: int, request: Request) -> dict[str, Any]:
        return {"ok": 1.0}


class FakeMongoses:
    """``count`` scripted mongoses of one sharded cluster: each answers hello
    as a mongos and accepts every command, recording it with its index."""

    def __init__(self, count: int = 2) -> None:
        self.servers = [FakeServer(hello={"msg": "isdbgrid", "logicalSessionTimeoutMinutes": 30},
                                   handlers=self._handlers(index)) for index in range(count)]
        #: (mongos index, request) for every command but hello, in arrival order.
        self.log: list[tuple[int, Request]] = []
        #: Per command name, a reply that replaces the usual one (once each).
        self.failures: dict[str, list[dict[str, Any]]] = {}

    def __enter__(self) -> FakeMongoses:
        for server in self.servers:
            server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for server in self.servers:
            server.stop()

    def uri(self, **options: Any) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in (s.address for s in self.servers))
        query = "&".join(f"{key}={value}" for key, value in options.items())
        return f"mongodb://{hosts}/" + (f"?{query}" if query else "")

    def received(self, name: str) -> list[int]:
        return [index for index, request in self.log if request.name == name]

    def requests(self, name: str) -> list[Request]:
        return [request for _, request in self.log if request.name == name]

    def _handlers(self, index: int) -> dict[str, Any]:
        def handler(request: Request) -> dict[str, Any]:
            self.log.append((index, request))
            pending = self.failures.get(request.name)
            if pending:
                return pending.pop(0)
            if request.name == "find":
                namespace = f"{request.db}.{request.command['find']}"
                return {"ok": 1.0, "cursor": {"id": Int64(0), "ns": namespace,
                                              "firstBatch": [{"mongos": index}]}}
            return {"ok": 1.0, "n": 1}

        return {name: handler for name in (
            "insert", "find", "ping", "endSessions", "commitTransaction", "abortTransaction")}
