"""greenpool.Client takes its arguments as PyMongo's MongoClient does.

Each case is given to both, and the outcome compared: the same hosts, read
preference, write concern, codec options and credentials, or an error of the
same class (a TypeError for a wrong type, a ValueError for a bad value, a
ConfigurationError for an unknown name or a conflict), whose message, ours,
names the option. What a keyword does on the wire (the driver's metadata,
the Stable API's fields, connect=False, a server selector) is checked below
against a fake server or SecantusDB.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import gevent
import pymongo
import pytest
from pymongo import ReadPreference, monitoring
from pymongo.driver_info import DriverInfo
from pymongo.errors import ConfigurationError as PyMongoConfigurationError
from pymongo.errors import ServerSelectionTimeoutError
from pymongo.read_preferences import Nearest
from pymongo.server_api import ServerApi

import greenpool
from greenpool.client.config import arguments
from tests.fake_server import OP_MSG, FakeServer

#: (args, keywords, what a good message names), for both clients.
CASES: list[tuple[tuple[Any, ...], dict[str, Any], str]] = [
    ((), {}, ""),
    (("db1",), {}, ""),
    (("db1:27018",), {"port": 27019}, ""),
    (("db1",), {"port": 27019}, ""),
    (("db1,db2:5",), {}, ""),
    ((["db1", "db2:27018"],), {}, ""),
    ((["mongodb://db1:1/", "db2"],), {"port": 2}, ""),
    (("mongodb://db1,db2/shop",), {"port": 27030}, ""),
    (("[::1]:27020",), {}, ""),
    ((), {"host": "mongodb://ann:pw@db1/?authSource=users", "username": "bob"}, ""),
    ((), {"username": "ann", "password": "secret"}, ""),
    ((), {"read_preference": ReadPreference.SECONDARY_PREFERRED}, ""),
    ((), {"read_preference": Nearest(tag_sets=[{"dc": "ny"}, {}],
                                     max_staleness=120)}, ""),
    ((), {"readPreference": "secondary", "readPreferenceTags": ["dc:ny", ""]}, ""),
    ((), {"MAXPOOLSIZE": 7, "w": "majority", "wTimeoutMS": 100}, ""),
    ((), {"fsync": True}, ""),
    ((), {"journal": True, "w": 1}, ""),
    ((), {"tz_aware": True, "uuidRepresentation": "standard"}, ""),
    ((None, None, dict, True), {}, ""),
    ((), {"max_adaptive_retries": 3, "enable_overload_retargeting": False}, ""),
    ((), {"driver": DriverInfo("MongoEngine", "0.29.3")}, ""),
    ((), {"server_api": ServerApi("1", strict=True)}, ""),
    ((), {"event_listeners": [monitoring.CommandListener()]}, ""),
    ((), {"server_selector": lambda servers: servers}, ""),
    ((), {"appname": "shop", "retrywrites": False, "sockettimeoutms": 2500}, ""),
    # Wrong types
    ((), {"port": "27017"}, "port"),
    ((5,), {}, "host"),
    ((), {"maxPoolSize": 2.5}, "maxPoolSize"),
    ((), {"appName": 7}, "appName"),
    ((), {"retryWrites": 1}, "retryWrites"),
    ((), {"username": 5}, "username"),
    ((), {"read_preference": "secondary"}, "read_preference"),
    ((), {"server_api": "1"}, "server_api"),
    ((), {"driver": "MongoEngine"}, "driver"),
    ((), {"event_listeners": [object()]}, "event_listeners"),
    ((), {"server_selector": 5}, "server_selector"),
    # Bad values
    ((), {"maxPoolSize": -1}, "maxPoolSize"),
    ((), {"maxPoolSize": "many"}, "maxPoolSize"),
    ((), {"retryWrites": "yes"}, "retryWrites"),
    ((), {"readPreference": "fastest"}, "readPreference"),
    ((), {"connect": "soon"}, "connect"),
    ((), {"fsync": "sure"}, "fsync"),
    ((), {"socketTimeoutMS": -1}, "socketTimeoutMS"),
    # Unknown names and conflicts
    ((), {"maxPoolSzie": 3}, "maxPoolSzie"),
    ((["mongodb://a/", "mongodb://b/"],), {}, "connection strings"),
    ((), {"heartbeatFrequencyMS": 10}, "heartbeatFrequencyMS"),
    ((), {"w": 0, "journal": True}, "journal"),
    ((), {"fsync": True, "journal": True}, "fsync"),
]


def outcome(make: Any, args: tuple[Any, ...], keywords: dict[str, Any]) -> Any:
    """What the client made of the arguments, in PyMongo's public terms, or
    the error it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client = make(*args, **{"connect": False, **keywords})
    except Exception as error:  # compared below, class by class
        return error
    try:
        seeds = set(client.topology_description.server_descriptions())
        return (seeds, client.read_preference, client.write_concern, client.codec_options)
    finally:
        client.close()


@pytest.mark.parametrize(("args", "keywords", "named"), CASES,
                         ids=[f"{i}-{sorted(k)}" for i, (_, k, _) in enumerate(CASES)])
def test_the_client_takes_what_pymongos_takes(args: tuple[Any, ...], keywords: dict[str, Any],
                                             named: str) -> None:
    theirs = outcome(pymongo.MongoClient, args, keywords)
    ours = outcome(greenpool.Client, args, keywords)
    if not isinstance(theirs, Exception):
        assert ours == theirs
        return
    assert isinstance(ours, Exception), f"PyMongo raised {theirs!r}; greenpool.Client did not"
    for kind in (TypeError, ValueError, PyMongoConfigurationError):
        if isinstance(theirs, kind):
            assert isinstance(ours, kind), (ours, theirs)
    assert named in str(ours)


def test_credentials_come_from_the_keywords_over_the_uri() -> None:
    client = greenpool.Client("mongodb://ann:pw@db1/?authSource=users", username="bob",
                              connect=False)
    credentials = client.settings.credentials
    assert credentials is not None
    assert (credentials.username, credentials.password, credentials.source) == (
        "bob", greenpool.Secret("pw"), "users")
    client.close()


def test_a_password_keyword_is_never_shown() -> None:
    with pytest.raises(greenpool.ConfigurationError) as failure:
        greenpool.Client(password="hunter2", authMechanism="MONGODB-X509", username="u",
                         connect=False)
    assert "hunter2" not in str(failure.value)


def test_the_signature_is_pymongos() -> None:
    theirs = list(inspect.signature(pymongo.MongoClient.__init__).parameters.values())
    ours = list(inspect.signature(greenpool.Client.__init__).parameters.values())
    positional = [p for p in ours if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert [(p.name, p.default) for p in positional] == [
        (p.name, p.default) for p in theirs if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert ours[-1].kind is inspect.Parameter.VAR_KEYWORD


@pytest.mark.parametrize("name", sorted(arguments.REFUSED))
def test_what_the_client_cannot_do_is_refused_saying_why(name: str) -> None:
    with pytest.raises(greenpool.ConfigurationError) as failure:
        greenpool.Client(connect=False, **{name: object()})
    assert str(failure.value).startswith(f"{name}: ")
    assert "greenpool.pymongo" in str(failure.value)


# -- what the keywords do -------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with FakeServer(handlers={"ping": lambda request: {"ok": 1}}) as server:
        yield server


def fake_uri(server: FakeServer) -> str:
    host, port = server.address
    return f"mongodb://{host}:{port}/?directConnection=true&heartbeatFrequencyMS=500"


def test_driver_info_joins_the_handshake_metadata(fake: FakeServer) -> None:
    with greenpool.Client(fake_uri(fake),
                          driver=DriverInfo("MongoEngine", "0.29.3", "CPython")) as client:
        client.command("admin", {"ping": 1})
    handshakes = [r.command["client"] for r in fake.requests if "client" in r.command]
    assert handshakes  # the monitor's and the pool's
    for metadata in handshakes:
        assert metadata["driver"]["name"] == "greenpool|MongoEngine"
        assert metadata["driver"]["version"].endswith("|0.29.3")
        assert metadata["platform"].endswith("|CPython")


def test_the_stable_api_goes_with_every_message_over_op_msg(fake: FakeServer) -> None:
    api = ServerApi("1", strict=False, deprecation_errors=True)
    with greenpool.Client(fake_uri(fake), server_api=api) as client:
        client.command("admin", {"ping": 1})
        gevent.sleep(0.6)  # a monitor's check after the handshake
    assert fake.names().count("hello") >= 2
    for request in fake.requests:
        assert request.inner_op_code == OP_MSG, request.name
        assert request.name != "isMaster"
        assert (request.command["apiVersion"], request.command["apiStrict"],
                request.command["apiDeprecationErrors"]) == ("1", False, True), request.name


def test_without_a_stable_api_no_api_field_is_sent(fake: FakeServer) -> None:
    with greenpool.Client(fake_uri(fake)) as client:
        client.command("admin", {"ping": 1})
    assert fake.requests
    assert not any(key.startswith("api") for r in fake.requests for key in r.command)


class Opened(monitoring.TopologyListener):
    def __init__(self) -> None:
        self.events: list[object] = []

    def opened(self, event: object) -> None:
        self.events.append(event)

    def description_changed(self, event: object) -> None:
        pass

    def closed(self, event: object) -> None:
        self.events.append(event)


def test_connect_false_starts_nothing_until_the_first_operation(fake: FakeServer) -> None:
    listener = Opened()
    client = greenpool.Client(fake_uri(fake), connect=False, event_listeners=[listener])
    gevent.sleep(0.05)
    assert (fake.requests, listener.events, client.topology.started) == ([], [], False)
    assert set(client.topology_description.server_descriptions()) == {fake.address}
    client.command("admin", {"ping": 1})
    assert client.topology.started
    assert listener.events and "ping" in fake.names()
    client.close()


def test_connect_false_then_close_publishes_nothing(fake: FakeServer) -> None:
    listener = Opened()
    greenpool.Client(fake_uri(fake), connect=False, event_listeners=[listener]).close()
    assert (listener.events, fake.requests) == ([], [])


def test_a_server_selector_decides_among_the_suitable_servers(mongodb_uri: str) -> None:
    seen: list[list[Any]] = []

    def nothing(servers: list[Any]) -> list[Any]:
        seen.append(list(servers))
        return []

    with (greenpool.Client(mongodb_uri, server_selector=nothing,
                           serverSelectionTimeoutMS=300) as client,
          pytest.raises(ServerSelectionTimeoutError)):
        client.command("admin", {"ping": 1})
    assert seen and all(s.address == seen[0][0].address for each in seen for s in each)

    with greenpool.Client(mongodb_uri, server_selector=lambda servers: servers) as client:
        assert client.command("admin", {"ping": 1})["ok"] == 1


def test_append_metadata_reaches_the_connections_made_after_it(fake: FakeServer) -> None:
    with greenpool.Client(fake_uri(fake), driver=DriverInfo("ODM", "1")) as client:
        client.command("admin", {"ping": 1})
        client.append_metadata(DriverInfo("Framework", "2", "web"))
        client.append_metadata(DriverInfo("Framework", "2", "web"))  # once only
        client.pool.clear()  # the next checkout makes a new connection
        client.pool.ready()
        client.command("admin", {"ping": 1})
        with pytest.raises(TypeError, match="DriverInfo"):
            client.append_metadata("Framework")  # type: ignore[arg-type]
    names = [r.command["client"]["driver"]["name"] for r in fake.requests
             if "client" in r.command]
    assert "greenpool|ODM" in names
    assert names[-1] == "greenpool|ODM|Framework"
    assert client.options.pool_options.driver == DriverInfo("ODM", "1")
