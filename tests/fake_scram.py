"""The server side of MongoDB's SCRAM-SHA-1 and SCRAM-SHA-256, in memory, for tests.

It stores keys the way a server does (salt, iteration count, StoredKey,
ServerKey; never the password), answers ``hello`` (``saslSupportedMechs``,
``speculativeAuthenticate``), ``saslStart`` and ``saslContinue``, and has
knobs to misbehave: too few iterations, a nonce that is not the client's, a
forged signature, an ``e=`` refusal, the longer pre-4.4 conversation, or one
that never says done.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

from pymongo.saslprep import saslprep

HASHES = {"SCRAM-SHA-1": "sha1", "SCRAM-SHA-256": "sha256"}
AUTH_FAILED = {
    "ok": 0.0,
    "errmsg": "Authentication failed.",
    "code": 18,
    "codeName": "AuthenticationFailed",
}


@dataclass
class StoredKeys:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def derive_keys(mechanism: str, user: str, password: str, iterations: int) -> StoredKeys:
    """What createUser stores for ``mechanism``."""
    if mechanism == "SCRAM-SHA-1":
        secret = hashlib.md5(f"{user}:mongo:{password}".encode()).hexdigest().encode()
    else:
        secret = saslprep(password).encode()
    name = HASHES[mechanism]
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac(name, secret, salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    return StoredKeys(
        salt,
        iterations,
        hashlib.new(name, client_key).digest(),
        hmac.digest(salted, b"Server Key", name),
    )


@dataclass
class Conversation:
    mechanism: str
    user: str
    client_first_bare: str
    server_first: str
    nonce: str
    #: The client asked for the shorter conversation (saslStart options.skipEmptyExchange).
    skip_empty: bool
    proved: bool = False


@dataclass
class FakeScramServer:
    """One user database on one "server"; ``run_command`` is what a connection would send."""

    source: str = "admin"
    iterations: int = 4096
    #: Answer the proof with done: false and want an empty saslContinue (servers < 4.4).
    ignore_skip_empty_exchange: bool = False
    #: Never say done, even after the empty exchange.
    never_done: bool = False
    #: Say done already in the reply to saslStart.
    done_too_early: bool = False
    #: Replace the nonce in server-first with one that is not the client's.
    foreign_nonce: bool = False
    #: Flip a bit of the server signature.
    forge_signature: bool = False
    #: Answer a correct proof with "e=..." instead of "v=...".
    refuse_with: str | None = None
    #: Answer speculativeAuthenticate in hello.
    speculative: bool = True
    users: dict[str, dict[str, StoredKeys]] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)
    authenticated: str | None = None
    _conversations: dict[int, Conversation] = field(default_factory=dict)

    def create_user(
        self, user: str, password: str, mechanisms: tuple[str, ...] = tuple(HASHES)
    ) -> None:
        self.users[user] = {m: derive_keys(m, user, password, self.iterations) for m in mechanisms}

    # -- commands --------------------------------------------------------------------

    def hello(self, command: dict[str, Any]) -> dict[str, Any]:
        self.commands.append(command)
        reply: dict[str, Any] = {"isWritablePrimary": True, "maxWireVersion": 21, "ok": 1.0}
        if "saslSupportedMechs" in command:
            source, _, user = command["saslSupportedMechs"].partition(".")
            if source == self.source and user in self.users:
                reply["saslSupportedMechs"] = [*self.users[user], "PLAIN-ISH"]
        speculative = command.get("speculativeAuthenticate")
        if self.speculative and speculative and speculative.get("db") == self.source:
            answer = self._sasl_start(speculative)
            if answer.get("ok"):
                reply["speculativeAuthenticate"] = {k: v for k, v in answer.items() if k != "ok"}
        return reply

    def run_command(self, command: dict[str, Any]) -> dict[str, Any]:
        self.commands.append(command)
        if "saslStart" in command:
            return self._sasl_start(command)
        if "saslContinue" in command:
            return self._sasl_continue(command)
        return {"ok": 0.0, "errmsg": f"no such command {next(iter(command))!r}", "code": 59}

    # -- the conversation ----------------------------------------------------------------

    def _sasl_start(self, command: dict[str, Any]) -> dict[str, Any]:
        mechanism = command["mechanism"]
        text = bytes(command["payload"]).decode()
        if not text.startswith("n,,"):
            return {"ok": 0.0, "errmsg": "bad gs2 header", "code": 17}
        client_first_bare = text[3:]
        attributes = dict(part.split("=", 1) for part in client_first_bare.split(","))
        user = attributes["n"].replace("=2C", ",").replace("=3D", "=")
        keys = self.users.get(user, {}).get(mechanism)
        if keys is None:
            return dict(AUTH_FAILED)
        nonce = attributes["r"] + base64.b64encode(os.urandom(18)).decode()
        if self.foreign_nonce:
            nonce = "x" + nonce
        salt = base64.b64encode(keys.salt).decode()
        server_first = f"r={nonce},s={salt},i={keys.iterations}"
        conversation_id = len(self._conversations) + 1
        skip_empty = bool(command.get("options", {}).get("skipEmptyExchange"))
        self._conversations[conversation_id] = Conversation(
            mechanism, user, client_first_bare, server_first, nonce, skip_empty
        )
        return {
            "conversationId": conversation_id,
            "done": self.done_too_early,
            "payload": server_first.encode(),
            "ok": 1.0,
        }

    def _sasl_continue(self, command: dict[str, Any]) -> dict[str, Any]:
        conversation = self._conversations.get(command["conversationId"])
        if conversation is None:
            return {"ok": 0.0, "errmsg": "No SASL session state found", "code": 17}
        payload = bytes(command["payload"])
        if conversation.proved:
            return self._empty_exchange(command["conversationId"], conversation, payload)
        return self._check_proof(command["conversationId"], conversation, payload.decode())

    def _check_proof(
        self, cid: int, conversation: Conversation, client_final: str
    ) -> dict[str, Any]:
        without_proof, _, proof_attribute = client_final.rpartition(",p=")
        if without_proof != f"c=biws,r={conversation.nonce}":
            return dict(AUTH_FAILED)
        name = HASHES[conversation.mechanism]
        keys = self.users[conversation.user][conversation.mechanism]
        auth_message = (
            f"{conversation.client_first_bare},{conversation.server_first},{without_proof}".encode()
        )
        signature = hmac.digest(keys.stored_key, auth_message, name)
        proof = base64.b64decode(proof_attribute)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if hashlib.new(name, client_key).digest() != keys.stored_key:
            return dict(AUTH_FAILED)
        server_signature = hmac.digest(keys.server_key, auth_message, name)
        if self.forge_signature:
            server_signature = bytes([server_signature[0] ^ 1]) + server_signature[1:]
        final = f"v={base64.b64encode(server_signature).decode()}"
        if self.refuse_with is not None:
            final = f"e={self.refuse_with}"
        conversation.proved = True
        done = conversation.skip_empty and not self.ignore_skip_empty_exchange
        done = done and not self.never_done
        if done:
            self.authenticated = conversation.user
        return {"conversationId": cid, "done": done, "payload": final.encode(), "ok": 1.0}

    def _empty_exchange(
        self, cid: int, conversation: Conversation, payload: bytes
    ) -> dict[str, Any]:
        if payload:
            return {"ok": 0.0, "errmsg": "expected an empty payload", "code": 17}
        if self.never_done:
            return {"conversationId": cid, "done": False, "payload": b"", "ok": 1.0}
        self.authenticated = conversation.user
        return {"conversationId": cid, "done": True, "payload": b"", "ok": 1.0}
