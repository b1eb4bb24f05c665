"""greenpool.wire.auth: credentials, SCRAM-SHA-1/256, negotiation, speculative authentication.

Full conversations run against tests/fake_scram.py, an in-memory server side.
Every test that fails an authentication uses PASSWORD, and checks that it
appears nowhere in the error.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pymongo.errors import NotPrimaryError, OperationFailure

from greenpool.errors import AuthenticationError, ConfigurationError
from greenpool.wire import auth
from greenpool.wire.auth import SCRAM_SHA_1, SCRAM_SHA_256, Credentials, ScramConversation

from .fake_scram import FakeScramServer

PASSWORD = "Tr0ub4dor&3-greenpool-DISTINCTIVE"


def assert_password_hidden(error: BaseException, password: str = PASSWORD) -> None:
    texts = [str(error), repr(error), repr(getattr(error, "details", None))]
    for text in texts:
        assert password not in text
        assert password.lower() not in text.lower()


@pytest.fixture
def server() -> FakeScramServer:
    server = FakeScramServer()
    server.create_user("alice", PASSWORD)
    return server


def credentials(mechanism: str | None = None, password: str = PASSWORD) -> Credentials:
    return Credentials("alice", password, mechanism=mechanism)


def fail(creds: Credentials, server: FakeScramServer, **kwargs: Any) -> AuthenticationError:
    with pytest.raises(AuthenticationError) as caught:
        auth.authenticate(creds, server.run_command, **kwargs)
    assert_password_hidden(caught.value, creds.password)
    return caught.value


# -- credentials -------------------------------------------------------------------------


def test_credentials_never_show_the_password() -> None:
    creds = Credentials("alice", PASSWORD, source="app", mechanism=SCRAM_SHA_256)
    for text in (repr(creds), str(creds), f"{creds}", f"{creds!r}", repr([creds])):
        assert PASSWORD not in text
        assert "alice" in text
    assert creds.password == PASSWORD


def test_credentials_are_frozen_comparable_and_hashable() -> None:
    creds = credentials()
    assert creds == credentials() and creds != credentials(password="other")
    assert len({creds, credentials()}) == 1
    with pytest.raises(AttributeError):
        creds.password = "x"  # type: ignore[misc]


def test_default_mechanism_means_negotiate() -> None:
    assert Credentials("alice", PASSWORD, mechanism="DEFAULT").mechanism is None


@pytest.mark.parametrize("mechanism", ["PLAIN", "GSSAPI", "MONGODB-X509", "scram-sha-256"])
def test_unsupported_mechanism_is_named(mechanism: str) -> None:
    with pytest.raises(ConfigurationError, match=f"mechanism '{mechanism}' is not supported"):
        Credentials("alice", PASSWORD, mechanism=mechanism)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"username": ""}, "needs a username"),
        ({"password": None}, "needs a password"),
        ({"source": ""}, "authSource must not be empty"),
        ({"mechanism_properties": {"SERVICE_NAME": PASSWORD}}, "no mechanism properties"),
    ],
)
def test_invalid_credentials(kwargs: dict[str, Any], match: str) -> None:
    values = {"username": "alice", "password": PASSWORD, **kwargs}
    with pytest.raises(ConfigurationError, match=match) as caught:
        Credentials(**values)
    assert_password_hidden(caught.value)


def test_conversation_refuses_an_unknown_mechanism() -> None:
    with pytest.raises(ConfigurationError, match="'PLAIN' is not supported"):
        ScramConversation(credentials(), "PLAIN")


# -- mechanism negotiation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["SCRAM-SHA-1", "SCRAM-SHA-256"], SCRAM_SHA_256),
        (["SCRAM-SHA-256"], SCRAM_SHA_256),
        (["SCRAM-SHA-1"], SCRAM_SHA_1),
        (["PLAIN", "SOMETHING-NEW"], SCRAM_SHA_1),
        ([], SCRAM_SHA_1),
        (None, SCRAM_SHA_1),
    ],
)
def test_negotiated_mechanism(offered: list[str] | None, chosen: str) -> None:
    assert auth.choose_mechanism(credentials(), offered) == chosen


def test_explicit_mechanism_wins() -> None:
    offered = ["SCRAM-SHA-256"]
    assert auth.choose_mechanism(credentials(SCRAM_SHA_1), offered) == SCRAM_SHA_1


# -- known answers -----------------------------------------------------------------------


def run_known_answer(
    mechanism: str, nonce: str, server_first: bytes, client_final: bytes, server_final: bytes
) -> None:
    conversation = ScramConversation(
        Credentials("user", "pencil", mechanism=mechanism), mechanism, client_nonce=nonce
    )
    assert conversation.start() == {
        "saslStart": 1,
        "mechanism": mechanism,
        "payload": f"n,,n=user,r={nonce}".encode(),
        "options": {"skipEmptyExchange": True},
    }
    command = conversation.step({"conversationId": 1, "done": False, "payload": server_first})
    assert command == {"saslContinue": 1, "conversationId": 1, "payload": client_final}
    assert conversation.step({"conversationId": 1, "done": True, "payload": server_final}) is None


def test_rfc_7677_scram_sha_256_vector() -> None:
    run_known_answer(
        SCRAM_SHA_256,
        "rOprNGfwEbeRWgbNEkqO",
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    )


def test_mongodb_scram_sha_1_vector() -> None:
    """RFC 5802's exchange with MongoDB's password digest (the auth spec's example)."""
    run_known_answer(
        SCRAM_SHA_1,
        "fyko+d2lbbFgONRv9qkxdawL",
        b"r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,s=rQ9ZY3MntBeuP3E1TDVC4w==,i=10000",
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawLHo+Vgk7qvUOKUwuWLIWg4l/9SraGMHEE,"
        b"p=MC2T8BvbmWRckDw8oWl5IVghwCY=",
        b"v=UMWeI25JD1yNYZRMpZ4VHvhZ9e0=",
    )


def test_client_nonces_are_fresh() -> None:
    first = ScramConversation(credentials(), SCRAM_SHA_256).start()["payload"]
    second = ScramConversation(credentials(), SCRAM_SHA_256).start()["payload"]
    assert first != second
    nonce = first.decode().rpartition(",r=")[2]
    assert len(nonce) >= 24 and "," not in nonce


# -- full conversations ------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_1])
def test_explicit_mechanism_conversation(server: FakeScramServer, mechanism: str) -> None:
    auth.authenticate(credentials(mechanism), server.run_command)
    assert server.authenticated == "alice"
    assert [next(iter(c)) for c in server.commands] == ["saslStart", "saslContinue"]
    assert server.commands[0]["mechanism"] == mechanism


@pytest.mark.parametrize(
    ("stored", "expected"),
    [((SCRAM_SHA_1, SCRAM_SHA_256), SCRAM_SHA_256), ((SCRAM_SHA_1,), SCRAM_SHA_1)],
)
def test_negotiated_conversation(stored: tuple[str, ...], expected: str) -> None:
    server = FakeScramServer(speculative=False)
    server.create_user("alice", PASSWORD, stored)
    fields, speculative = auth.handshake_fields(credentials())
    hello_reply = server.hello({"hello": 1, **fields})
    auth.authenticate(
        credentials(), server.run_command, hello_reply=hello_reply, speculative=speculative
    )
    assert server.authenticated == "alice"
    assert server.commands[1]["mechanism"] == expected


def test_no_hello_reply_means_scram_sha_1(server: FakeScramServer) -> None:
    auth.authenticate(credentials(), server.run_command)
    assert server.commands[0]["mechanism"] == SCRAM_SHA_1


def test_older_server_wants_the_empty_exchange(server: FakeScramServer) -> None:
    server.ignore_skip_empty_exchange = True
    auth.authenticate(credentials(SCRAM_SHA_256), server.run_command)
    assert server.authenticated == "alice"
    last = server.commands[-1]
    assert len(server.commands) == 3
    assert last["saslContinue"] == 1 and last["payload"] == b""
    assert last["conversationId"] == server.commands[1]["conversationId"]


def test_server_that_never_says_done(server: FakeScramServer) -> None:
    server.never_done = True
    error = fail(credentials(SCRAM_SHA_256), server)
    assert "did not end the conversation" in str(error)
    assert error.code == 18


def test_usernames_are_escaped_not_prepped() -> None:
    server = FakeScramServer()
    server.create_user("a=b,c\u2168", PASSWORD)
    auth.authenticate(Credentials("a=b,c\u2168", PASSWORD), server.run_command)
    assert server.authenticated == "a=b,c\u2168"
    assert server.commands[0]["payload"].startswith("n,,n=a=3Db=2Cc\u2168,r=".encode())


@pytest.mark.parametrize(
    ("user", "stored", "given"),
    [
        ("IX", "IX", "IX"),
        ("IX", "IX", "I\u00adX"),
        ("\u2168", "\u2163", "IV"),
        ("\u2168", "\u2163", "I\u00adV"),
    ],
)
def test_sasl_prep_of_scram_sha_256_passwords(user: str, stored: str, given: str) -> None:
    """The auth spec's SASLprep test users."""
    server = FakeScramServer()
    server.create_user(user, stored, (SCRAM_SHA_256,))
    auth.authenticate(Credentials(user, given, mechanism=SCRAM_SHA_256), server.run_command)
    assert server.authenticated == user


def test_password_that_fails_sasl_prep() -> None:
    password = PASSWORD + "\u0007"
    with pytest.raises(ConfigurationError, match="cannot be used with SCRAM-SHA-256") as caught:
        ScramConversation(Credentials("alice", password), SCRAM_SHA_256)
    assert_password_hidden(caught.value, password)


def test_password_that_fails_sasl_prep_can_still_negotiate_scram_sha_1() -> None:
    password = PASSWORD + "\u0007"
    server = FakeScramServer()
    server.create_user("alice", password, (SCRAM_SHA_1,))
    fields, speculative = auth.handshake_fields(credentials(password=password))
    assert speculative is None and "speculativeAuthenticate" not in fields
    hello_reply = server.hello({"hello": 1, **fields})
    auth.authenticate(credentials(password=password), server.run_command, hello_reply=hello_reply)
    assert server.authenticated == "alice"


def test_password_that_fails_sasl_prep_with_explicit_scram_sha_256() -> None:
    password = PASSWORD + "\u0007"
    with pytest.raises(ConfigurationError, match="SASLprep") as caught:
        auth.handshake_fields(credentials(SCRAM_SHA_256, password))
    assert_password_hidden(caught.value, password)


def test_scram_sha_1_does_not_sasl_prep() -> None:
    server = FakeScramServer()
    server.create_user("alice", PASSWORD + "\u0007", (SCRAM_SHA_1,))
    auth.authenticate(credentials(SCRAM_SHA_1, PASSWORD + "\u0007"), server.run_command)
    assert server.authenticated == "alice"


def test_derived_keys_are_cached(server: FakeScramServer, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = hashlib.pbkdf2_hmac

    def counting(*args: Any) -> bytes:
        calls.append(args[0])
        return real(*args)

    auth._KEY_CACHE.clear()
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)
    for _ in range(3):
        auth.authenticate(credentials(SCRAM_SHA_256), server.run_command)
    auth.authenticate(credentials(SCRAM_SHA_1), server.run_command)
    assert calls == ["sha256", "sha1"]


# -- speculative authentication ----------------------------------------------------------


def test_handshake_fields_when_negotiating() -> None:
    fields, conversation = auth.handshake_fields(credentials())
    assert conversation is not None
    assert fields["saslSupportedMechs"] == "admin.alice"
    speculative = fields["speculativeAuthenticate"]
    assert speculative == {**conversation.start(), "db": "admin"}
    assert speculative["mechanism"] == SCRAM_SHA_256
    assert speculative["options"] == {"skipEmptyExchange": True}


def test_handshake_fields_with_an_explicit_mechanism() -> None:
    creds = Credentials("alice", PASSWORD, source="app", mechanism=SCRAM_SHA_1)
    fields, conversation = auth.handshake_fields(creds)
    assert "saslSupportedMechs" not in fields
    assert fields["speculativeAuthenticate"]["mechanism"] == SCRAM_SHA_1
    assert fields["speculativeAuthenticate"]["db"] == "app"
    assert conversation is not None and conversation.mechanism == SCRAM_SHA_1


@pytest.mark.parametrize("mechanism", [None, SCRAM_SHA_256, SCRAM_SHA_1])
def test_speculative_authentication_saves_a_round_trip(
    server: FakeScramServer, mechanism: str | None
) -> None:
    creds = credentials(mechanism)
    fields, speculative = auth.handshake_fields(creds)
    hello_reply = server.hello({"hello": 1, **fields})
    assert "speculativeAuthenticate" in hello_reply
    auth.authenticate(creds, server.run_command, hello_reply=hello_reply, speculative=speculative)
    assert server.authenticated == "alice"
    assert [next(iter(c)) for c in server.commands] == ["hello", "saslContinue"]


def test_speculative_attempt_ignored_by_the_server(server: FakeScramServer) -> None:
    server.speculative = False
    fields, speculative = auth.handshake_fields(credentials())
    hello_reply = server.hello({"hello": 1, **fields})
    auth.authenticate(
        credentials(), server.run_command, hello_reply=hello_reply, speculative=speculative
    )
    assert server.authenticated == "alice"
    assert [next(iter(c)) for c in server.commands] == ["hello", "saslStart", "saslContinue"]


def test_speculative_sha_256_for_a_sha_1_only_user_falls_back() -> None:
    server = FakeScramServer()
    server.create_user("alice", PASSWORD, (SCRAM_SHA_1,))
    fields, speculative = auth.handshake_fields(credentials())
    hello_reply = server.hello({"hello": 1, **fields})
    assert "speculativeAuthenticate" not in hello_reply
    auth.authenticate(
        credentials(), server.run_command, hello_reply=hello_reply, speculative=speculative
    )
    assert server.authenticated == "alice"
    assert server.commands[1]["mechanism"] == SCRAM_SHA_1


def test_speculative_attempt_with_a_wrong_password(server: FakeScramServer) -> None:
    creds = credentials(password="wrong-" + PASSWORD)
    fields, speculative = auth.handshake_fields(creds)
    hello_reply = server.hello({"hello": 1, **fields})
    error = fail(creds, server, hello_reply=hello_reply, speculative=speculative)
    assert error.code == 18


def test_speculative_reply_without_a_conversation_is_ignored(server: FakeScramServer) -> None:
    hello_reply = {"ok": 1, "speculativeAuthenticate": {"conversationId": 1, "payload": b"x"}}
    auth.authenticate(credentials(SCRAM_SHA_256), server.run_command, hello_reply=hello_reply)
    assert server.authenticated == "alice"


# -- failures ----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_1])
def test_wrong_password(server: FakeScramServer, mechanism: str) -> None:
    error = fail(credentials(mechanism, password="not-" + PASSWORD), server)
    assert isinstance(error, OperationFailure)
    assert error.code == 18
    assert error.details is not None and error.details["codeName"] == "AuthenticationFailed"
    assert "authentication of user 'alice' on 'admin' failed: Authentication failed." in str(error)
    assert server.authenticated is None


def test_unknown_user(server: FakeScramServer) -> None:
    error = fail(Credentials("bob", PASSWORD, mechanism=SCRAM_SHA_256), server)
    assert error.code == 18 and "'bob'" in str(error)


def test_forged_server_signature(server: FakeScramServer) -> None:
    server.forge_signature = True
    error = fail(credentials(SCRAM_SHA_256), server)
    assert "signature does not match" in str(error)
    assert error.code == 18 and error.details is None


def test_forged_signature_on_the_speculative_path(server: FakeScramServer) -> None:
    server.forge_signature = True
    fields, speculative = auth.handshake_fields(credentials())
    hello_reply = server.hello({"hello": 1, **fields})
    error = fail(credentials(), server, hello_reply=hello_reply, speculative=speculative)
    assert "signature does not match" in str(error)


@pytest.mark.parametrize("iterations", [1, 4095])
def test_too_few_iterations(iterations: int) -> None:
    server = FakeScramServer(iterations=iterations)
    server.create_user("alice", PASSWORD)
    error = fail(credentials(SCRAM_SHA_256), server)
    assert f"asks for {iterations} iterations; at least 4096" in str(error)
    assert len(server.commands) == 1  # the proof was never sent


def test_minimum_iterations_are_enough(server: FakeScramServer) -> None:
    assert server.iterations == auth.MIN_ITERATIONS
    auth.authenticate(credentials(SCRAM_SHA_256), server.run_command)
    assert server.authenticated == "alice"


def test_foreign_nonce(server: FakeScramServer) -> None:
    server.foreign_nonce = True
    error = fail(credentials(SCRAM_SHA_1), server)
    assert "nonce does not start with the client's" in str(error)
    assert len(server.commands) == 1


def test_server_refuses_with_e(server: FakeScramServer) -> None:
    server.refuse_with = "invalid-proof"
    error = fail(credentials(SCRAM_SHA_256), server)
    assert "refused the proof: invalid-proof" in str(error)


def test_server_done_before_proving_itself(server: FakeScramServer) -> None:
    server.done_too_early = True
    error = fail(credentials(SCRAM_SHA_256), server)
    assert "before proving itself" in str(error)


CHALLENGE = "r={nonce}abc,s=c2FsdA==,i=4096"


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        ({"done": False, "payload": b"r=x"}, "no conversationId"),
        ({"conversationId": 1, "done": False}, "no payload"),
        ({"conversationId": 1, "payload": "r=as-a-string"}, "no payload"),
        ({"conversationId": 1, "payload": b"\xff\xfe"}, "not UTF-8"),
        ({"conversationId": 1, "payload": b"garbage"}, "malformed near 'garbage'"),
        ({"conversationId": 1, "payload": b"r={nonce}abc,i=4096"}, "no 's' attribute"),
        ({"conversationId": 1, "payload": b"r={nonce}abc,s=c2FsdA=="}, "no 'i' attribute"),
        ({"conversationId": 1, "payload": b"s=c2FsdA==,i=4096"}, "no 'r' attribute"),
        ({"conversationId": 1, "payload": b"r={nonce}abc,s=!!!,i=4096"}, "salt is not valid"),
        ({"conversationId": 1, "payload": b"r={nonce}abc,s=c2FsdA==,i=4k"}, "'4k' is not a"),
        ({"conversationId": 1, "payload": b"r={nonce}abc,s=c2FsdA==,i=-5000"}, "not a number"),
        ({"conversationId": 1, "payload": b"m=ext,r={nonce}abc,s=c2FsdA==,i=4096"}, "extension"),
    ],
)
def test_malformed_server_first_message(reply: dict[str, Any], match: str) -> None:
    conversation = ScramConversation(credentials(), SCRAM_SHA_256, client_nonce="NONCE")
    if isinstance(reply.get("payload"), bytes):
        reply = {**reply, "payload": reply["payload"].replace(b"{nonce}", b"NONCE")}
    with pytest.raises(AuthenticationError, match=match) as caught:
        conversation.step(reply)
    assert_password_hidden(caught.value)


@pytest.mark.parametrize(
    ("payload", "match"),
    [(b"x=1", "no 'v' attribute"), (b"v=***", "server signature is not valid base64")],
)
def test_malformed_server_final_message(payload: bytes, match: str) -> None:
    conversation = ScramConversation(credentials(), SCRAM_SHA_256, client_nonce="NONCE")
    conversation.step({"conversationId": 1, "payload": b"r=NONCEabc,s=c2FsdA==,i=4096"})
    with pytest.raises(AuthenticationError, match=match) as caught:
        conversation.step({"conversationId": 1, "done": True, "payload": payload})
    assert_password_hidden(caught.value)


def test_step_after_the_end(server: FakeScramServer) -> None:
    conversation = ScramConversation(credentials(), SCRAM_SHA_256)
    command: dict[str, Any] | None = conversation.start()
    while command is not None:
        command = conversation.step(server.run_command(command))
    with pytest.raises(RuntimeError, match="already over"):
        conversation.step({"ok": 1})


def test_run_command_that_raises_operation_failure(server: FakeScramServer) -> None:
    def checked(command: dict[str, Any]) -> dict[str, Any]:
        reply = server.run_command(command)
        if not reply["ok"]:
            raise OperationFailure(reply["errmsg"], reply["code"], reply)
        return reply

    with pytest.raises(AuthenticationError) as caught:
        auth.authenticate(credentials(SCRAM_SHA_256, "bad-" + PASSWORD), checked)
    assert caught.value.code == 18
    assert isinstance(caught.value.__cause__, OperationFailure)
    assert_password_hidden(caught.value, "bad-" + PASSWORD)


def test_state_change_errors_are_not_authentication_errors() -> None:
    def stepped_down(command: dict[str, Any]) -> dict[str, Any]:
        return {"ok": 0, "errmsg": "not primary", "code": 10107}

    with pytest.raises(NotPrimaryError):
        auth.authenticate(credentials(SCRAM_SHA_256), stepped_down)


def test_conversation_repr_hides_the_password() -> None:
    conversation = ScramConversation(credentials(), SCRAM_SHA_256)
    assert PASSWORD not in repr(conversation)
    assert "SCRAM-SHA-256" in repr(conversation) and "alice" in repr(conversation)
