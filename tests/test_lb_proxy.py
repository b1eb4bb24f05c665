"""The load balancer fixture (tests/lb_proxy.py), through pymongo, greenpool links and raw
messages: round robin, serviceId, the refusal of a non load-balanced hello, pass-through of
cursors (exhaust included) and fail points, and its failure switches."""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from typing import Any

import bson
import gevent
import greenlet
import pymongo
import pytest
from bson.objectid import ObjectId
from gevent import socket as gsocket
from pymongo import monitoring
from pymongo.errors import (
    AutoReconnect,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    ServerSelectionTimeoutError,
)

from greenpool.wire.connector import connect
from greenpool.wire.link import Link, LinkOptions
from greenpool.wire.messages import (
    MORE_TO_COME,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    decode_message,
    decode_reply,
    encode_command,
    encode_query,
)
from tests.lb_proxy import (
    LB_MISMATCH_CODE,
    LB_MISMATCH_MESSAGE,
    LBCluster,
    LBProxy,
    encode_op_msg,
    parse_hello,
    read_message,
    without_compression,
)

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 5.0
EXHAUST_ALLOWED = 1 << 16


def lb_link(address: tuple[str, int], app_name: str | None = None, **options: Any) -> Link:
    settings: dict[str, Any] = {"connect_timeout": TIMEOUT, "socket_timeout": TIMEOUT}
    settings.update(options)
    return connect(address, LinkOptions(load_balanced=True, app_name=app_name, **settings))


@pytest.fixture
def app_name() -> str:
    return f"lbproxy-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def links(lb: LBCluster) -> Iterator[list[Link]]:
    """A list the test fills with links; all closed afterwards."""
    opened: list[Link] = []
    yield opened
    for link in opened:
        link.close()


def link_on(lb: LBCluster, backend: int, links: list[Link], app_name: str | None = None) -> Link:
    """A new load-balanced link that the proxy gave to ``backend`` (round robin: <= 2 tries)."""
    for _ in range(len(lb.backends)):
        link = lb_link(lb.proxy.address, app_name)
        links.append(link)
        if link.service_id == lb.backends[backend].service_id:
            return link
    raise AssertionError(f"no connection went to backend {backend}")


class RawConnection:
    """A plain socket to the proxy, for messages greenpool's Link would not send."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = gsocket.create_connection(address, timeout=TIMEOUT)

    @property
    def port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> tuple[Any, bytes, bytes]:
        return read_message(self.sock)

    def at_eof(self) -> bool:
        try:
            data: bytes = self.sock.recv(1)
        except ConnectionResetError:
            return True
        return data == b""

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(lb: LBCluster) -> Iterator[RawConnection]:
    conn = RawConnection(lb.proxy.address)
    yield conn
    conn.close()


class ServiceIds(monitoring.CommandListener):
    """Records each succeeded command's serviceId."""

    def __init__(self) -> None:
        self.service_ids: list[ObjectId] = []

    def started(self, event: Any) -> None:
        pass

    def succeeded(self, event: Any) -> None:
        self.service_ids.append(event.service_id)

    def failed(self, event: Any) -> None:
        pass


def lb_client(uri: str, **options: Any) -> Any:
    settings: dict[str, Any] = {
        "serverSelectionTimeoutMS": 5000,
        "connectTimeoutMS": 5000,
        "socketTimeoutMS": 10000,
    }
    settings.update(options)
    return pymongo.MongoClient(uri, **settings)


# -- through the proxy -----------------------------------------------------------------------


def test_pymongo_ping_through_the_proxy(lb: LBCluster, lb_uri: str) -> None:
    listener = ServiceIds()
    with lb_client(lb_uri, event_listeners=[listener]) as client:
        assert client.admin.command("ping")["ok"] == 1
    assert listener.service_ids[-1] in lb.service_ids


def test_link_ping_through_the_proxy(lb: LBCluster, links: list[Link]) -> None:
    link = lb_link(lb.proxy.address)
    links.append(link)
    assert link.command("admin", {"ping": 1})["ok"] == 1
    assert link.service_id in lb.service_ids


def test_consecutive_connections_alternate_backends(lb: LBCluster, links: list[Link]) -> None:
    before = [backend.accepted for backend in lb.backends]
    for _ in range(6):
        links.append(lb_link(lb.proxy.address))
    ids = [link.service_id for link in links]
    assert all(ids[i] != ids[i + 1] for i in range(5))
    assert ids[0::2] == [ids[0]] * 3 and ids[1::2] == [ids[1]] * 3
    assert set(ids) == set(lb.service_ids)
    assert [
        backend.accepted - count for backend, count in zip(lb.backends, before, strict=True)
    ] == [
        3,
        3,
    ]
    for backend in lb.backends:
        assert backend.open >= 3


def test_the_same_backend_always_has_the_same_service_id(lb: LBCluster, links: list[Link]) -> None:
    for index, backend in enumerate(lb.backends):
        for _ in range(2):
            link = link_on(lb, index, links)
            assert link.service_id == backend.service_id
            # The server behind it really is that backend.
            me = link.command("admin", {"hello": 1})["me"]
            assert me == f"{backend.address[0]}:{backend.address[1]}"
    assert len(set(lb.service_ids)) == len(lb.backends)
    assert all(isinstance(service_id, ObjectId) for service_id in lb.service_ids)


def test_a_client_port_maps_to_its_backend(lb: LBCluster, raw: RawConnection) -> None:
    _, data = encode_command({"hello": 1, "loadBalanced": True}, "admin")
    raw.send(data)
    header, body, _ = raw.read()
    reply = decode_message(header, body).document
    conn = lb.proxy.connection_for(raw.port)
    assert conn is not None and not conn.closed
    assert conn.service_id == reply["serviceId"]
    assert lb.proxy.backend_for(raw.port) is conn.backend
    assert lb.proxy.backend_with(reply["serviceId"]) is conn.backend
    assert conn.load_balanced is True
    # The server sees the proxy's side of the connection as its client.
    _, data = encode_command({"whatsmyuri": 1}, "admin")
    raw.send(data)
    header, body, _ = raw.read()
    assert decode_message(header, body).document["you"] == f"127.0.0.1:{conn.upstream_port}"


def test_the_hello_reply_is_reframed(lb: LBCluster, raw: RawConnection) -> None:
    request_id, data = encode_command({"hello": 1, "loadBalanced": True}, "admin")
    raw.send(data)
    header, body, whole = raw.read()
    assert header.op_code == OP_MSG
    assert header.response_to == request_id
    assert header.length == len(whole)
    message = decode_message(header, body)
    assert message.flags == 0
    assert message.document["ok"] == 1
    assert message.document["serviceId"] in lb.service_ids
    assert "connectionId" in message.document  # the server's reply, amended


def test_a_legacy_hello_with_load_balanced_gets_a_service_id(
    lb: LBCluster, raw: RawConnection
) -> None:
    request_id, data = encode_query({"isMaster": 1, "loadBalanced": True}, "admin")
    raw.send(data)
    header, body, whole = raw.read()
    assert header.op_code == OP_REPLY and header.response_to == request_id
    assert header.length == len(whole)
    reply = decode_reply(header, body).command_reply()
    assert reply["ok"] == 1 and reply["serviceId"] in lb.service_ids


def test_only_the_first_hello_is_special(lb: LBCluster, links: list[Link]) -> None:
    link = lb_link(lb.proxy.address)
    links.append(link)
    assert "serviceId" not in link.command("admin", {"hello": 1, "loadBalanced": True})
    assert "serviceId" not in link.command("admin", {"hello": 1})  # not refused either


def test_the_single_backend_balancer(
    lb: LBCluster, lb_single_cluster: LBCluster, links: list[Link]
) -> None:
    for _ in range(3):
        link = lb_link(lb_single_cluster.proxy.address)
        links.append(link)
        assert link.service_id == lb.service_ids[0] == lb_single_cluster.service_ids[0]
    assert lb_single_cluster.backends[0].open >= 3


# -- a client that is not in load-balanced mode ----------------------------------------------


def test_a_non_lb_link_is_refused(lb: LBCluster) -> None:
    rejected = sum(backend.rejected for backend in lb.backends)
    with pytest.raises(OperationFailure) as caught:
        connect(lb.proxy.address, LinkOptions(connect_timeout=TIMEOUT, socket_timeout=TIMEOUT))
    assert caught.value.code == LB_MISMATCH_CODE
    assert caught.value.details is not None
    assert caught.value.details["codeName"] == "LoadBalancerSupportMismatch"
    assert caught.value.details["errmsg"] == LB_MISMATCH_MESSAGE
    assert sum(backend.rejected for backend in lb.backends) == rejected + 1


@pytest.mark.parametrize("name", ["hello", "isMaster", "ismaster"])
def test_an_op_msg_hello_without_load_balanced_is_answered_then_closed(
    lb: LBCluster, raw: RawConnection, name: str
) -> None:
    request_id, data = encode_command({name: 1, "loadBalanced": False}, "admin")
    raw.send(data)
    header, body, _ = raw.read()
    assert header.op_code == OP_MSG and header.response_to == request_id
    reply = decode_message(header, body).document
    assert reply == {
        "ok": 0.0,
        "errmsg": LB_MISMATCH_MESSAGE,
        "code": 354,
        "codeName": "LoadBalancerSupportMismatch",
    }
    assert raw.at_eof()
    conn = lb.proxy.connection_for(raw.port)
    assert conn is not None and conn.load_balanced is False
    gevent.sleep(0.05)
    assert conn.closed


def test_a_legacy_hello_without_load_balanced_gets_an_op_reply(
    lb: LBCluster, raw: RawConnection
) -> None:
    request_id, data = encode_query({"ismaster": 1, "helloOk": True}, "admin")
    raw.send(data)
    header, body, _ = raw.read()
    assert header.op_code == OP_REPLY and header.response_to == request_id
    reply = decode_reply(header, body).command_reply()
    assert reply["code"] == LB_MISMATCH_CODE and reply["ok"] == 0
    assert raw.at_eof()


def test_pymongo_without_load_balanced_is_refused(lb: LBCluster) -> None:
    uri = f"mongodb://127.0.0.1:{lb.proxy.port}/?directConnection=true"
    with (
        lb_client(uri, serverSelectionTimeoutMS=1000) as client,
        pytest.raises(ServerSelectionTimeoutError, match="load balancer"),
    ):
        client.admin.command("ping")


def test_commands_before_the_first_hello_pass_through(lb: LBCluster, raw: RawConnection) -> None:
    request_id, data = encode_command({"ping": 1}, "admin")
    raw.send(data)
    header, body, _ = raw.read()
    assert header.response_to == request_id and decode_message(header, body).document["ok"] == 1
    request_id, data = encode_command({"hello": 1, "loadBalanced": True}, "admin")
    raw.send(data)
    header, body, _ = raw.read()
    assert decode_message(header, body).document["serviceId"] in lb.service_ids


# -- compression is never negotiated ---------------------------------------------------------


def test_compression_is_taken_out_of_the_hello() -> None:
    request_id, data = encode_command(
        {"hello": 1, "loadBalanced": True, "compression": ["zlib"], "helloOk": True}, "admin"
    )
    hello = parse_hello(*read_message(_BytesSocket(data))[:2])
    assert hello is not None
    rewritten = without_compression(hello)
    assert rewritten is not None
    again = parse_hello(*read_message(_BytesSocket(rewritten))[:2])
    assert again is not None
    assert again.header.request_id == request_id
    assert again.command == {"hello": 1, "loadBalanced": True, "helloOk": True, "$db": "admin"}

    request_id, data = encode_query(
        {"isMaster": 1, "loadBalanced": True, "compression": ["zlib"]}, "admin"
    )
    hello = parse_hello(*read_message(_BytesSocket(data))[:2])
    assert hello is not None and hello.header.op_code == OP_QUERY
    rewritten = without_compression(hello)
    assert rewritten is not None
    again = parse_hello(*read_message(_BytesSocket(rewritten))[:2])
    assert again is not None and again.header.request_id == request_id
    assert again.command == {"isMaster": 1, "loadBalanced": True}
    assert again.namespace == "admin.$cmd"


def test_a_client_offering_compression_works_uncompressed(lb: LBCluster, lb_uri: str) -> None:
    with lb_client(lb_uri, compressors="zlib") as client:
        assert client.admin.command("ping")["ok"] == 1
    link = lb_link(lb.proxy.address, compressors=("zlib",))
    try:
        assert link.compressor is None
        assert link.command("admin", {"ping": 1})["ok"] == 1
    finally:
        link.close()


class _BytesSocket:
    """Enough of a socket for read_message() over bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)

    def recv_into(self, view: memoryview) -> int:
        count = min(len(view), len(self.data))
        view[:count] = self.data[:count]
        self.data = self.data[count:]
        return count


# -- cursors and fail points -----------------------------------------------------------------


@pytest.fixture
def collection() -> str:
    return f"lbproxy_{uuid.uuid4().hex[:8]}"


def test_pymongo_cursor_with_get_more(lb_uri: str, collection: str) -> None:
    # One connection: the insert and the cursor go to the same backend.
    with lb_client(lb_uri, maxPoolSize=1) as client:
        coll = client.test[collection]
        coll.insert_many([{"_id": i} for i in range(25)])
        try:
            assert [doc["_id"] for doc in coll.find(batch_size=4).sort("_id")] == list(range(25))
        finally:
            coll.drop()


def test_link_cursor_with_get_more(lb: LBCluster, links: list[Link], collection: str) -> None:
    link = lb_link(lb.proxy.address)
    links.append(link)
    link.command("test", {"insert": collection, "documents": [{"_id": i} for i in range(7)]})
    reply = link.command("test", {"find": collection, "batchSize": 3, "sort": {"_id": 1}})
    cursor = reply["cursor"]
    seen = [doc["_id"] for doc in cursor["firstBatch"]]
    while cursor["id"]:
        cursor = link.command(
            "test", {"getMore": cursor["id"], "collection": collection, "batchSize": 3}
        )["cursor"]
        seen += [doc["_id"] for doc in cursor["nextBatch"]]
    assert seen == list(range(7))
    link.command("test", {"drop": collection})


def test_exhaust_get_more_streams_through(
    lb: LBCluster, raw: RawConnection, collection: str
) -> None:
    def command(document: dict[str, Any]) -> dict[str, Any]:
        raw.send(encode_command(document, "test")[1])
        header, body, _ = raw.read()
        reply: dict[str, Any] = decode_message(header, body).document
        return reply

    command({"hello": 1, "loadBalanced": True})
    command({"insert": collection, "documents": [{"_id": i} for i in range(10)]})
    cursor_id = command({"find": collection, "batchSize": 2})["cursor"]["id"]
    request_id = 4242
    raw.send(
        encode_op_msg(
            {"getMore": cursor_id, "collection": collection, "batchSize": 2, "$db": "test"},
            request_id=request_id,
            response_to=0,
            flags=EXHAUST_ALLOWED,
        )
    )
    seen, replies = 0, 0
    while True:
        header, body, _ = raw.read()
        message = decode_message(header, body)
        replies += 1
        seen += len(message.document["cursor"]["nextBatch"])
        if not message.flags & MORE_TO_COME:
            assert message.document["cursor"]["id"] == 0
            break
    assert seen == 8 and replies >= 4
    command({"drop": collection})


def test_a_fail_point_on_a_backend_is_seen_through_the_proxy(
    lb: LBCluster, links: list[Link]
) -> None:
    on_0 = link_on(lb, 0, links)
    on_1 = link_on(lb, 1, links)
    with lb.fail_point(0, "alwaysOn", {"failCommands": ["ping"], "errorCode": 2}):
        with pytest.raises(OperationFailure) as caught:
            on_0.command("admin", {"ping": 1})
        assert caught.value.code == 2
        assert on_1.command("admin", {"ping": 1})["ok"] == 1
    assert on_0.command("admin", {"ping": 1})["ok"] == 1


def test_a_failed_hello_passes_through_without_service_id(lb: LBCluster, app_name: str) -> None:
    data = {"failCommands": ["hello"], "errorCode": 11600, "appName": app_name}
    with lb.fail_point(0, {"times": 1}, data), lb.fail_point(1, {"times": 1}, data):
        # 11600 (InterruptedAtShutdown) is a state change error: NotPrimaryError.
        with pytest.raises(NotPrimaryError) as caught:
            lb_link(lb.proxy.address, app_name)
        details = dict(caught.value.details or {})
        assert details["code"] == 11600 and "serviceId" not in details


# -- failure switches ----------------------------------------------------------------------------


def test_killing_a_backends_connections_breaks_in_flight_ops(
    lb: LBCluster, links: list[Link], app_name: str
) -> None:
    victim = link_on(lb, 0, links, app_name)
    survivor = link_on(lb, 1, links, app_name)
    blocking = {"failCommands": ["ping"], "blockConnection": True, "blockTimeMS": 3000}
    with lb.fail_point(0, "alwaysOn", {**blocking, "appName": app_name}):
        in_flight = gevent.spawn(victim.command, "admin", {"ping": 1})
        gevent.sleep(0.3)
        assert not in_flight.ready()
        assert lb.proxy.kill_connections(0) >= 1
        in_flight.join(2.0)
        assert in_flight.ready(), "the in-flight ping did not notice the kill"
        assert isinstance(in_flight.exception, AutoReconnect)
    assert lb.backends[0].open == 0
    assert survivor.command("admin", {"ping": 1})["ok"] == 1
    with pytest.raises(AutoReconnect):
        victim.command("admin", {"ping": 1})


def test_killing_breaks_a_pymongo_operation(lb: LBCluster, lb_uri: str, app_name: str) -> None:
    listener = ServiceIds()
    with lb_client(
        lb_uri, appname=app_name, maxPoolSize=1, retryReads=False, event_listeners=[listener]
    ) as client:
        client.admin.command("ping")
        backend = lb.proxy.backend_with(listener.service_ids[-1]).index
        data = {"failCommands": ["ping"], "blockConnection": True, "blockTimeMS": 3000}
        with lb.fail_point(backend, "alwaysOn", {**data, "appName": app_name}):
            in_flight = gevent.spawn(client.admin.command, "ping")
            gevent.sleep(0.3)
            lb.proxy.kill_connections(backend, reset=True)
            in_flight.join(2.0)
            assert in_flight.ready()
            assert isinstance(in_flight.exception, AutoReconnect)


def test_an_unreachable_backend_refuses_new_connections(lb: LBCluster, links: list[Link]) -> None:
    on_1 = link_on(lb, 1, links)
    with lb.proxy.unreachable(1):
        outcomes = []
        for _ in range(2):
            try:
                links.append(lb_link(lb.proxy.address))
                outcomes.append("ok")
            except AutoReconnect:
                outcomes.append("closed")
        assert sorted(outcomes) == ["closed", "ok"]
        assert links[-1].service_id == lb.backends[0].service_id
        # Connections made before are not affected.
        assert on_1.command("admin", {"ping": 1})["ok"] == 1
    assert lb.backends[1].mode == "up"
    link_on(lb, 1, links)


def test_a_black_holed_backend_times_out(lb: LBCluster, links: list[Link]) -> None:
    with lb.proxy.unreachable(0, "blackhole"):
        outcomes = []
        for _ in range(2):
            try:
                links.append(lb_link(lb.proxy.address, socket_timeout=0.5))
                outcomes.append("ok")
            except NetworkTimeout:
                outcomes.append("timeout")
        assert sorted(outcomes) == ["ok", "timeout"]


# -- close() ---------------------------------------------------------------------------------


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _live_greenlets() -> set[int]:
    # type(), not isinstance(): gc also lists weak proxies, whose __class__ may be gone.
    return {
        id(g) for g in gc.get_objects() if issubclass(type(g), greenlet.greenlet) and not g.dead
    }


def _children() -> set[str]:
    children: set[str] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as file:
            children.update(file.read().split())
    return children


def test_close_leaves_nothing_behind(lb_cluster: LBCluster) -> None:
    servers = [server.address for server in lb_cluster.servers]
    # Warm up what the first connection of a process creates (resolver, hub watchers).
    connect(servers[0], LinkOptions(connect_timeout=TIMEOUT, socket_timeout=TIMEOUT)).close()
    fds, greenlets, children = _open_fds(), _live_greenlets(), _children()

    proxy = LBProxy(servers).start()
    links = [lb_link(proxy.address) for _ in range(3)]
    half_sent = RawConnection(proxy.address)
    half_sent.send(encode_command({"ping": 1}, "admin")[1][:10])  # half a header
    proxy.set_mode(0, "blackhole")
    held = [RawConnection(proxy.address) for _ in range(2)]  # one is black-holed
    gevent.sleep(0.1)
    assert sum(backend.open for backend in proxy.backends) == 6
    assert proxy.greenlets
    port = proxy.port

    proxy.close()

    assert proxy.greenlets == []
    assert all(backend.open == 0 for backend in proxy.backends)
    assert half_sent.at_eof() and all(conn.at_eof() for conn in held)
    for link in links:
        with pytest.raises(AutoReconnect):
            link.command("admin", {"ping": 1})
    with pytest.raises(ConnectionRefusedError):
        gsocket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    for conn in [half_sent, *held]:
        conn.close()
    gevent.sleep(0.05)
    assert _open_fds() <= fds
    assert _live_greenlets() <= greenlets
    assert _children() == children


def test_bson_helpers_round_trip() -> None:
    # The proxy's OP_MSG encoder drops a checksum flag rather than send a wrong checksum.
    data = encode_op_msg({"ok": 1}, request_id=5, response_to=4, flags=1 | MORE_TO_COME)
    header, body, _ = read_message(_BytesSocket(data))
    message = decode_message(header, body)
    assert (message.request_id, message.response_to, message.flags) == (5, 4, MORE_TO_COME)
    assert message.document == bson.decode(bson.encode({"ok": 1}))
