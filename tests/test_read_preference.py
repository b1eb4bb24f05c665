"""Read preference: from the URI and per call, sent as ``$readPreference`` where the
Server Selection spec says ("Passing read preference to mongos and load balancers",
"Topology type: Single" and "Topology type: LoadBalanced").

The URI Options spec's read-preference-options.json runs in tests/test_uri_options.py;
the Load Balancer spec's server-selection.json case in tests/test_load_balancers.py.
"""

from __future__ import annotations

import doctest
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import ReadPreference
from pymongo import monitoring as _m
from pymongo.errors import InvalidOperation
from pymongo.read_preferences import Nearest, SecondaryPreferred

import greenpool.client.config.readpref
from greenpool import Client, ConfigurationError
from greenpool.client.config.readpref import SERVER_TYPE, coerce, command_field, make
from greenpool.client.config.uri import parse_uri
from tests.events import AllEvents
from tests.lb_proxy import LBCluster
from tests.servers import with_options

pytestmark = pytest.mark.timeout(60)


def sent(events: AllEvents, name: str) -> list[dict[str, Any]]:
    """The documents of the ``name`` commands the Client sent, in order."""
    return [e.command for e in events.of(_m.CommandStartedEvent) if e.command_name == name]


# -- the spec's table -----------------------------------------------------------------------

MODES = ["primary", "primaryPreferred", "secondary", "secondaryPreferred", "nearest"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("load_balanced", "server_type"), [
    (True, SERVER_TYPE.LoadBalancer), (False, SERVER_TYPE.Mongos)])
def test_mongos_and_load_balancer_get_every_mode_but_primary(
        mode: str, load_balanced: bool, server_type: int) -> None:
    field = command_field(make(mode), load_balanced=load_balanced, server_type=server_type,
                          direct=False, in_transaction=False)
    # OP_MSG: "For mode 'primary', drivers MUST NOT set $readPreference"; every other mode
    # is set, secondaryPreferred without tags included (that exception is OP_QUERY's).
    assert field == (None if mode == "primary" else {"mode": mode})


def test_the_document_carries_tags_and_max_staleness() -> None:
    preference = make("nearest", [{"dc": "ny", "rack": "1"}, {}], 120)
    assert command_field(preference, load_balanced=True, server_type=SERVER_TYPE.LoadBalancer,
                         direct=False, in_transaction=False) == {
        "mode": "nearest", "tags": [{"dc": "ny", "rack": "1"}, {}], "maxStalenessSeconds": 120}


@pytest.mark.parametrize("mode", MODES)
def test_a_standalone_never_gets_one(mode: str) -> None:
    assert command_field(make(mode), load_balanced=False, server_type=SERVER_TYPE.Standalone,
                         direct=True, in_transaction=False) is None


@pytest.mark.parametrize("server_type", [
    SERVER_TYPE.RSPrimary, SERVER_TYPE.RSSecondary, SERVER_TYPE.RSArbiter,
    SERVER_TYPE.RSOther, SERVER_TYPE.RSGhost])
def test_a_replica_set_member_of_a_direct_connection(server_type: int) -> None:
    def field(mode: str, in_transaction: bool = False) -> Any:
        return command_field(make(mode), load_balanced=False, server_type=server_type,
                             direct=True, in_transaction=in_transaction)

    # "If no read preference is configured by the application, or if the application read
    # preference is Primary, then $readPreference MUST be set to primaryPreferred".
    assert field("primary") == {"mode": "primaryPreferred"}
    assert field("secondary") == {"mode": "secondary"}
    assert field("primary", in_transaction=True) is None


@pytest.mark.parametrize("server_type", [SERVER_TYPE.RSPrimary, SERVER_TYPE.RSSecondary])
@pytest.mark.parametrize("mode", MODES)
def test_a_replica_set_member_found_by_discovery(server_type: int, mode: str) -> None:
    # "If the read preference mode is 'primary', clients MUST NOT set ... $readPreference";
    # every other mode is sent as it is.
    field = command_field(make(mode), load_balanced=False, server_type=server_type,
                          direct=False, in_transaction=False)
    assert field == (None if mode == "primary" else {"mode": mode})


@pytest.mark.parametrize(("value", "named"), [
    ("Secondary", "'Secondary'"),
    ("", "''"),
    (3, "3"),
    ({"mode": "nearest", "tags": "dc:ny"}, "'dc:ny'"),
    ({"mode": "nearest", "tags": [{"dc": 1}]}, "{'dc': 1}"),
    ({"mode": "nearest", "maxStalenessSeconds": 0}, "0"),
    ({"mode": "nearest", "maxStalenessSeconds": "90"}, "'90'"),
    ({"mode": "primary", "tags": [{"dc": "ny"}]}, "mode='primary'"),
    ({"mode": "primary", "maxStalenessSeconds": 120}, "maxStalenessSeconds=120"),
    ({"mode": "nearest", "hedge": {}}, "'hedge'"),
    ({"tags": [{"dc": "ny"}]}, "'tags'"),
])
def test_bad_values_are_refused_by_name(value: Any, named: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        coerce(value)
    assert named in str(caught.value)


def test_an_empty_tag_set_list_is_no_tags() -> None:
    assert make("primary", []) == make("primary")
    assert make("nearest", []).document == {"mode": "nearest"}


def test_accepted_forms() -> None:
    assert coerce(ReadPreference.SECONDARY) is ReadPreference.SECONDARY
    assert coerce("nearest").document == {"mode": "nearest"}
    assert coerce({"mode": "secondaryPreferred", "tags": [{"dc": "ny"}],
                   "maxStalenessSeconds": 90}) == SecondaryPreferred([{"dc": "ny"}], 90)


@pytest.mark.parametrize("query", [
    "readPreferenceTags=dc:ny", "maxStalenessSeconds=120",
    "readPreference=primary&readPreferenceTags=dc:ny"])
def test_the_uri_refuses_primary_with_tags_or_staleness(query: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^readPreference=primary takes no "
                       r"(readPreferenceTags|maxStalenessSeconds=120): a primary is chosen by "
                       r"its role alone; use primaryPreferred or another mode to pass them$"):
        parse_uri(f"mongodb://h/?{query}")


def test_the_uri_gives_the_default() -> None:
    settings = parse_uri("mongodb://h/?readPreference=nearest&readPreferenceTags=dc:ny,rack:1"
                         "&readPreferenceTags=&maxStalenessSeconds=100")
    assert settings.read_preference_object() == Nearest([{"dc": "ny", "rack": "1"}, {}], 100)
    assert parse_uri("mongodb://h/").read_preference_object() == ReadPreference.PRIMARY


# -- what the Client sends ------------------------------------------------------------------


@pytest.fixture
def collection() -> str:
    return f"rp_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def lb_client(lb: LBCluster) -> Iterator[tuple[Client, AllEvents]]:
    events = AllEvents()
    uri = with_options(lb.uri, readPreference="secondaryPreferred",
                       readPreferenceTags="dc:ny", maxStalenessSeconds=120)
    with Client(uri, event_listeners=[events]) as client:
        yield client, events


def test_load_balanced_find_sends_the_uri_read_preference(
        lb_client: tuple[Client, AllEvents], collection: str) -> None:
    client, events = lb_client
    client.command("test", {"insert": collection, "documents": [{"i": i} for i in range(5)]})
    with client.find("test", collection, {}, batch_size=2) as cursor:
        assert len(list(cursor)) == 5
    expected = {"mode": "secondaryPreferred", "tags": [{"dc": "ny"}], "maxStalenessSeconds": 120}
    assert [c.get("$readPreference") for c in sent(events, "find")] == [expected]
    # Only the opening command: getMore and killCursors carry none, nor does a write.
    assert sent(events, "getMore") and all(
        "$readPreference" not in c for c in sent(events, "getMore"))
    assert "$readPreference" not in sent(events, "insert")[0]


def test_load_balanced_per_call_read_preference(
        lb_client: tuple[Client, AllEvents], collection: str) -> None:
    client, events = lb_client
    # The generic command ignores the URI's default: primary, so nothing is sent...
    client.command("test", {"count": collection})
    # ...unless the call names one.
    client.command("test", {"count": collection}, read_preference="nearest")
    assert [c.get("$readPreference") for c in sent(events, "count")] == [
        None, {"mode": "nearest"}]
    # find and cursor take one per call over the URI's; primary sends nothing.
    list(client.find("test", collection, read_preference=ReadPreference.PRIMARY))
    list(client.cursor("test", {"aggregate": collection, "pipeline": [], "cursor": {}},
                       read_preference={"mode": "secondary", "tags": [{"dc": "sf"}]}))
    assert [c.get("$readPreference") for c in sent(events, "find")] == [None]
    assert [c.get("$readPreference") for c in sent(events, "aggregate")] == [
        {"mode": "secondary", "tags": [{"dc": "sf"}]}]


def test_cursor_follows_the_uri_only_for_may_use_secondary_commands(
        lb_client: tuple[Client, AllEvents], collection: str) -> None:
    client, events = lb_client
    client.command("test", {"insert": collection, "documents": [{"a": 1}]})
    list(client.cursor("test", {"aggregate": collection, "pipeline": [], "cursor": {}}))
    list(client.cursor("test", {"listCollections": 1, "filter": {"name": collection}}))
    out = f"{collection}_out"
    list(client.cursor("test", {"aggregate": collection, "pipeline": [{"$out": out}],
                                "cursor": {}}))
    assert [c.get("$readPreference") for c in sent(events, "aggregate")] == [
        {"mode": "secondaryPreferred", "tags": [{"dc": "ny"}], "maxStalenessSeconds": 120},
        None]
    assert "$readPreference" not in sent(events, "listCollections")[0]


def test_a_transaction_reads_from_the_primary(
        lb_client: tuple[Client, AllEvents], collection: str) -> None:
    client, events = lb_client
    client.command("test", {"create": collection})
    with client.start_session() as session:
        session.start_transaction()
        with pytest.raises(InvalidOperation, match="'mode': 'nearest'"):
            client.command("test", {"count": collection}, session=session,
                           read_preference="nearest")
        # The URI's secondaryPreferred is not primary either.
        with pytest.raises(InvalidOperation, match="must be primary"):
            client.find("test", collection, session=session)
        list(client.find("test", collection, session=session, read_preference="primary"))
        session.abort_transaction()
    assert [c.get("$readPreference") for c in sent(events, "find")] == [None]
    assert sent(events, "count") == []


def test_bad_per_call_values_fail_before_anything_is_sent(
        lb_client: tuple[Client, AllEvents]) -> None:
    client, events = lb_client
    with pytest.raises(ConfigurationError, match="'SECONDARY'"):
        client.command("admin", {"ping": 1}, read_preference="SECONDARY")
    with pytest.raises(ConfigurationError, match="'dc=ny'"):
        client.find("test", "c", read_preference={"mode": "nearest", "tags": ["dc=ny"]})
    assert events.of(_m.CommandStartedEvent) == []


def test_a_standalone_gets_no_read_preference(mongodb_uri: str, collection: str) -> None:
    events = AllEvents()
    with Client(with_options(mongodb_uri, readPreference="secondary"),
                event_listeners=[events]) as client:
        list(client.find("test", collection))
        client.command("test", {"count": collection}, read_preference="nearest")
    assert [c for c in events.of(_m.CommandStartedEvent) if "$readPreference" in c.command] == []


def test_a_replica_set_member_gets_primary_preferred(replset_uri: str, collection: str) -> None:
    events = AllEvents()
    with Client(with_options(replset_uri, directConnection="true"),
                event_listeners=[events]) as client:
        client.command("test", {"insert": collection, "documents": [{"a": 1}]})
        assert list(client.find("test", collection, {}, projection={"_id": 0})) == [{"a": 1}]
        list(client.find("test", collection, read_preference="secondaryPreferred"))
        with client.start_session() as session:
            session.start_transaction()
            list(client.find("test", collection, session=session))
            session.commit_transaction()
    assert [c.get("$readPreference") for c in sent(events, "find")] == [
        {"mode": "primaryPreferred"}, {"mode": "secondaryPreferred"}, None]
    assert sent(events, "insert")[0]["$readPreference"] == {"mode": "primaryPreferred"}


def test_the_module_examples() -> None:
    result = doctest.testmod(greenpool.client.config.readpref)
    assert (result.attempted > 0, result.failed) == (True, 0)


# -- one primary read preference --------------------------------------------------------------


@pytest.mark.parametrize("value", ["primary", {"mode": "primary"}, ReadPreference.PRIMARY,
                                   type(ReadPreference.PRIMARY)()])
def test_every_primary_read_preference_is_the_one_instance(value: object) -> None:
    # The hot paths (Operations, Topology.select) know a primary read by
    # identity and skip server selection for it.
    assert coerce(value) is greenpool.client.config.readpref.PRIMARY
    assert make("primary", [{}]) is greenpool.client.config.readpref.PRIMARY


def test_a_collection_reads_with_the_one_primary_instance(mongodb_uri: str) -> None:
    with Client(with_options(mongodb_uri, readPreference="primary")) as client:
        assert client.db.c.read_preference is greenpool.client.config.readpref.PRIMARY
        assert client.read_preference is greenpool.client.config.readpref.PRIMARY


def test_the_write_preference_keeps_its_identity() -> None:
    # A write's preference (no $readPreference on the wire) must survive coerce.
    assert coerce(greenpool.client.config.readpref.WRITE) is greenpool.client.config.readpref.WRITE
