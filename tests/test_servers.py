"""Smoke tests of the test-server infrastructure (tests/servers.py and its fixtures)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

from tests import servers
from tests.servers import REPLICA_SET_NAME, AuthServer, ServerProcess, TLSServer, User

# Each test needs a few seconds at most; the bound turns a hung server into a failure.
pytestmark = pytest.mark.timeout(60)

# How long a client that must fail waits for a server: the failures are immediate.
FAIL_FAST = 300


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def connect(uri: str, **options: Any) -> MongoClient[dict[str, Any]]:
    options.setdefault("serverSelectionTimeoutMS", 5000)
    return MongoClient(uri, **options)


def ping(uri: str, **options: Any) -> dict[str, Any]:
    with connect(uri, **options) as client:
        reply: dict[str, Any] = client.admin.command("ping")
        return reply


def test_stop_leaves_no_process_and_close_no_files() -> None:
    server = ServerProcess().start()
    try:
        pid = server.pid
        assert pid_alive(pid)
        assert ping(server.uri)["ok"] == 1
        directory = server.directory
        server.stop()
        assert not pid_alive(pid)
        assert not server.running
    finally:
        server.close()
    assert not directory.exists()


def test_kill_then_restart_on_the_same_port() -> None:
    with ServerProcess(persistent=True) as server:
        port, pid = server.port, server.pid
        with server.client() as client:
            # j: SecantusDB loses writes acknowledged without it up to ~0.5 s before a SIGKILL.
            journaled = client.test.get_collection("journaled", write_concern=WriteConcern(j=True))
            journaled.insert_one({"_id": 1})
        server.kill()
        assert not pid_alive(pid)
        with pytest.raises(ServerSelectionTimeoutError):
            ping(server.uri, serverSelectionTimeoutMS=FAIL_FAST)

        server.restart()
        assert server.port == port
        assert server.pid != pid
        with server.client() as client:
            assert client.test.journaled.find_one() == {"_id": 1}


def test_mongodb_uri_is_a_standalone_server(mongodb_uri: str) -> None:
    with connect(mongodb_uri) as client:
        hello = client.admin.command("hello")
    assert hello["isWritablePrimary"]
    if not os.environ.get(servers.TEST_URI_VARIABLE):
        assert "setName" not in hello


def test_the_test_uri_variable_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_start(self: ServerProcess) -> ServerProcess:
        raise AssertionError("a server was started despite GREENPOOL_TEST_URI")

    monkeypatch.setattr(ServerProcess, "start", must_not_start)
    monkeypatch.setenv(servers.TEST_URI_VARIABLE, "mongodb://db.example.invalid:27017/")
    with servers.standalone_uri() as uri:
        assert uri == "mongodb://db.example.invalid:27017/"


def test_replset_uri_presents_a_replica_set_with_transactions(replset_uri: str) -> None:
    with connect(replset_uri) as client:
        assert client.admin.command("hello")["setName"] == REPLICA_SET_NAME
        collection = client.test.transactions
        collection.drop()
        with client.start_session() as session, session.start_transaction():
            collection.insert_one({"_id": 1}, session=session)
            assert collection.find_one({"_id": 1}) is None  # not committed yet
        assert collection.find_one({"_id": 1}) == {"_id": 1}


@pytest.mark.parametrize("who", ["admin", "user", "sha1_user"])
def test_auth_with_the_right_password(auth_server: AuthServer, who: str) -> None:
    user: User = getattr(auth_server, who)
    assert user.name in auth_server.usernames
    with connect(auth_server.uri_for(user)) as client:
        assert client.test.command("ping")["ok"] == 1
        client.test.auth_smoke.insert_one({})


def test_auth_fails_with_a_wrong_password(auth_server: AuthServer) -> None:
    wrong = User(auth_server.user.name, auth_server.user.password + "x")
    with pytest.raises(OperationFailure) as failure:
        ping(auth_server.uri_for(wrong))
    assert failure.value.code == 18  # AuthenticationFailed


def test_auth_is_required(auth_server: AuthServer) -> None:
    with (
        connect(auth_server.uri) as client,
        pytest.raises(OperationFailure) as failure,
    ):
        client.test.auth_smoke.find_one()
    assert failure.value.code == 13  # Unauthorized


def test_tls_with_the_right_ca(tls_server: TLSServer) -> None:
    assert ping(tls_server.uri)["ok"] == 1
    assert ping(tls_server.uri, tlsCertificateKeyFile=str(tls_server.files.client_cert_key_file))


def test_tls_fails_with_the_wrong_ca(tls_server: TLSServer) -> None:
    with pytest.raises(ServerSelectionTimeoutError, match="CERTIFICATE_VERIFY_FAILED"):
        ping(
            tls_server.uri,
            tlsCAFile=str(tls_server.files.wrong_ca_file),
            serverSelectionTimeoutMS=FAIL_FAST,
        )


def test_tls_refuses_a_client_certificate_from_the_wrong_ca(tls_server: TLSServer) -> None:
    with pytest.raises(ServerSelectionTimeoutError):
        ping(
            tls_server.uri,
            tlsCertificateKeyFile=str(tls_server.files.wrong_client_cert_key_file),
            serverSelectionTimeoutMS=FAIL_FAST,
        )


def test_startup_failure_shows_the_log(tmp_path: Path) -> None:
    missing = servers.TLSFiles(*(tmp_path / name for name in "abcdef"))
    with (
        pytest.raises(servers.ServerStartError, match=r"(?s)exited with .*No such file"),
        ServerProcess(tls=missing),
    ):
        pass
