"""Authentication without sockets: SCRAM-SHA-256 and SCRAM-SHA-1.

The conversation runs over a callable the caller provides,
``run_command(command) -> reply``, which sends one command to the
credentials' source database on the connection being authenticated. So this
module does no I/O, and a connection's handshake looks like::

    fields, speculative = handshake_fields(credentials)
    hello_reply = connection.command("admin", {"hello": 1, ..., **fields})
    authenticate(
        credentials,
        lambda command: connection.command(credentials.source, command),
        hello_reply=hello_reply,
        speculative=speculative,
    )

SCRAM is mutual: the client proves that it knows the password, and the server
proves that it knows the keys stored for it. :func:`authenticate` fails unless
the server's signature checks out, so a server that merely says "done" does
not get a connection authenticated.

Every failure is an :class:`~greenpool.errors.AuthenticationError` (an
``OperationFailure``), except a bad credential, which is a
:class:`~greenpool.errors.ConfigurationError`. No message, ``repr`` or error
ever contains the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pymongo.errors import InvalidName, OperationFailure
from pymongo.saslprep import saslprep

from greenpool.errors import AuthenticationError, ConfigurationError
from greenpool.wire.messages import check_database_name
from greenpool.wire.offload import offload
from greenpool.wire.replies import check_reply

__all__ = [
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "SCRAM_SHA_1",
    "SCRAM_SHA_256",
    "Credentials",
    "RunCommand",
    "ScramConversation",
    "authenticate",
    "choose_mechanism",
    "handshake_fields",
]

SCRAM_SHA_1 = "SCRAM-SHA-1"
SCRAM_SHA_256 = "SCRAM-SHA-256"
#: The mechanisms greenpool speaks.
MECHANISMS = frozenset({SCRAM_SHA_1, SCRAM_SHA_256})
#: The auth spec's floor: fewer iterations would be a downgrade attack.
MIN_ITERATIONS = 4096
#: The most iterations greenpool derives a key with. MongoDB's defaults are
#: 10,000 (SCRAM-SHA-1) and 15,000 (SCRAM-SHA-256); a count above this
#: ceiling is refused with AuthenticationError, since a hostile server could
#: otherwise ask for 2**31 - 1 and make each connection spend minutes of CPU.
MAX_ITERATIONS = 10_000_000

#: Sends one command to the source database and returns the server's reply
#: (checked or not: :func:`authenticate` checks it again).
RunCommand: TypeAlias = Callable[[dict[str, Any]], Mapping[str, Any]]

_HASH_NAMES = {SCRAM_SHA_1: "sha1", SCRAM_SHA_256: "sha256"}
# "n,,": no channel binding and no authorization identity. The spec forbids
# advertising channel binding; "biws" is this header in base64, as the
# client-final message must repeat it.
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = "biws"


@dataclass(frozen=True)
class Credentials:
    """A user's credentials: what a connection authenticates with.

    ``mechanism`` None (or ``"DEFAULT"``) negotiates SCRAM-SHA-256 or
    SCRAM-SHA-1 with the server. The password never appears in ``repr``
    or ``str``.

    >>> Credentials("app", "s3cret")
    Credentials(username='app', source='admin', mechanism=None, mechanism_properties={})
    """

    username: str
    password: str = field(repr=False)
    #: The database that holds the user (``authSource``).
    source: str = "admin"
    mechanism: str | None = None
    #: The auth spec's ``mechanism_properties``; SCRAM takes none.
    mechanism_properties: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.mechanism == "DEFAULT":
            object.__setattr__(self, "mechanism", None)
        if self.mechanism is not None and self.mechanism not in MECHANISMS:
            raise ConfigurationError(
                f"authentication mechanism {self.mechanism!r} is not supported: "
                f"greenpool speaks {SCRAM_SHA_256} and {SCRAM_SHA_1}"
            )
        if not isinstance(self.username, str) or not self.username:
            raise ConfigurationError("SCRAM authentication needs a username")
        if not isinstance(self.password, str):
            raise ConfigurationError("SCRAM authentication needs a password (a str)")
        if not self.source:
            raise ConfigurationError("authSource must not be empty")
        try:
            check_database_name(self.source)  # "$external" included
        except (InvalidName, TypeError) as exc:
            raise ConfigurationError(f"authSource: {exc}") from None
        if self.mechanism_properties:
            names = ", ".join(sorted(self.mechanism_properties))
            raise ConfigurationError(f"SCRAM takes no mechanism properties (got {names})")


def choose_mechanism(credentials: Credentials, sasl_supported_mechs: Sequence[str] | None) -> str:
    """The mechanism to authenticate with, as the auth spec decides it.

    An explicit mechanism in the credentials wins. Otherwise SCRAM-SHA-256 if
    the handshake's ``saslSupportedMechs`` offers it, else SCRAM-SHA-1 (also
    when the server sent no list). Unknown mechanisms in the list are ignored.
    """
    if credentials.mechanism is not None:
        return credentials.mechanism
    if sasl_supported_mechs and SCRAM_SHA_256 in sasl_supported_mechs:
        return SCRAM_SHA_256
    return SCRAM_SHA_1


def handshake_fields(
    credentials: Credentials,
) -> tuple[dict[str, Any], ScramConversation | None]:
    """The fields to add to a connection's handshake hello, and the conversation they start.

    The fields are ``speculativeAuthenticate`` (the first SCRAM message, so a
    4.4+ server can answer it in the hello reply and save a round trip) and,
    when the mechanism is negotiated, ``saslSupportedMechs``. Without an
    explicit mechanism the speculative attempt uses SCRAM-SHA-256, as the
    handshake spec requires. Pass the conversation to :func:`authenticate`
    with the hello reply; use it for that one connection only.

    The conversation is None (and there is no speculative attempt) when the
    mechanism is negotiated and the password fails SCRAM-SHA-256's SASLprep:
    the user may still have SCRAM-SHA-1 keys, which need no SASLprep.
    """
    fields: dict[str, Any] = {}
    if credentials.mechanism is None:
        # The username goes as given: the server looks up the raw form.
        fields["saslSupportedMechs"] = f"{credentials.source}.{credentials.username}"
    try:
        conversation = ScramConversation(credentials, credentials.mechanism or SCRAM_SHA_256)
    except ConfigurationError:
        if credentials.mechanism is not None:
            raise
        return fields, None
    fields["speculativeAuthenticate"] = {**conversation.start(), "db": credentials.source}
    return fields, conversation


def authenticate(
    credentials: Credentials,
    run_command: RunCommand,
    *,
    hello_reply: Mapping[str, Any] | None = None,
    speculative: ScramConversation | None = None,
) -> None:
    """Authenticate a connection, or raise :class:`~greenpool.errors.AuthenticationError`.

    ``hello_reply`` is the handshake's reply: its ``saslSupportedMechs``
    chooses the mechanism (:func:`choose_mechanism`) and, if ``speculative``
    (from :func:`handshake_fields`) is given, its ``speculativeAuthenticate``
    continues that conversation. Without a speculative answer a full
    conversation runs over ``run_command``.

    Errors other than a refused command, such as a network error or
    ``NotPrimaryError``, propagate unchanged.
    """
    speculative_reply = hello_reply.get("speculativeAuthenticate") if hello_reply else None
    if speculative is not None and speculative_reply:
        conversation, reply = speculative, speculative_reply
    else:
        offered = hello_reply.get("saslSupportedMechs") if hello_reply else None
        conversation = ScramConversation(credentials, choose_mechanism(credentials, offered))
        reply = conversation.send(run_command, conversation.start())
    command = conversation.step(reply)
    while command is not None:
        command = conversation.step(conversation.send(run_command, command))


class _Violation(Exception):
    """The server broke the SCRAM conversation; the message says how."""


class ScramConversation:
    """One SCRAM-SHA-1 or SCRAM-SHA-256 conversation, as a state machine without I/O.

    ::

        conversation = ScramConversation(credentials, SCRAM_SHA_256)
        command = conversation.start()
        while command is not None:
            command = conversation.step(run_command(command))

    (:func:`authenticate` does this, checking each reply.) ``client_nonce``
    is for known-answer tests only; by default each conversation draws a
    fresh one from :mod:`secrets`.
    """

    def __init__(
        self, credentials: Credentials, mechanism: str, *, client_nonce: str | None = None
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ConfigurationError(f"authentication mechanism {mechanism!r} is not supported")
        self.credentials = credentials
        self.mechanism = mechanism
        self._hash_name = _HASH_NAMES[mechanism]
        self._password = _prepare_password(credentials, mechanism)
        self._client_nonce = client_nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_sasl_name(credentials.username)},r={self._client_nonce}"
        self._conversation_id: Any = None
        self._server_signature = b""
        self._state: Callable[[Mapping[str, Any]], dict[str, Any] | None] = self._answer_challenge

    def __repr__(self) -> str:
        return f"<ScramConversation {self.mechanism} for {self.credentials.username!r}>"

    def start(self) -> dict[str, Any]:
        """The ``saslStart`` command that opens the conversation."""
        return {
            "saslStart": 1,
            "mechanism": self.mechanism,
            "payload": f"{_GS2_HEADER}{self._client_first_bare}".encode(),
            # Servers 4.4+ then finish in two round trips instead of three.
            "options": {"skipEmptyExchange": True},
        }

    def step(self, reply: Mapping[str, Any]) -> dict[str, Any] | None:
        """Take the server's reply to the last command; return the next command,
        or None once the server has proved itself and ended the conversation.

        Raises :class:`~greenpool.errors.AuthenticationError` if the server
        broke the protocol or failed to prove that it knows the password.
        """
        try:
            return self._state(reply)
        except _Violation as exc:
            raise AuthenticationError(self._failure(str(exc))) from None

    def send(self, run_command: RunCommand, command: dict[str, Any]) -> Mapping[str, Any]:
        """Run ``command`` and check its reply; a refusal becomes an AuthenticationError."""
        try:
            return check_reply(run_command(command))
        except OperationFailure as exc:
            details = dict(exc.details) if exc.details is not None else None
            reason = str(details.get("errmsg", exc)) if details else str(exc)
            raise AuthenticationError(self._failure(reason), exc.code, details) from exc

    def _failure(self, reason: str) -> str:
        user, source = self.credentials.username, self.credentials.source
        return f"{self.mechanism} authentication of user {user!r} on {source!r} failed: {reason}"

    def _answer_challenge(self, reply: Mapping[str, Any]) -> dict[str, Any]:
        if reply.get("done"):
            raise _Violation("the server ended the conversation before proving itself")
        if "conversationId" not in reply:
            raise _Violation("the server's reply has no conversationId")
        self._conversation_id = reply["conversationId"]
        server_first = _payload_text(reply)
        nonce, salt, iterations = _parse_challenge(server_first, self._client_nonce)
        client_key, server_key = _scram_keys(self._hash_name, self._password, salt, iterations)
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        stored_key = hashlib.new(self._hash_name, client_key).digest()
        client_signature = _hmac(self._hash_name, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = _hmac(self._hash_name, server_key, auth_message)
        self._state = self._verify_server
        return self._continue(f"{without_proof},p={_b64(proof)}".encode())

    def _verify_server(self, reply: Mapping[str, Any]) -> dict[str, Any] | None:
        attributes = _parse_attributes(_payload_text(reply))
        if "e" in attributes:
            raise _Violation(f"the server refused the proof: {attributes['e']}")
        signature = _b64decode(_required(attributes, "v"), "server signature")
        if not hmac.compare_digest(signature, self._server_signature):
            raise _Violation(
                "the server's signature does not match: it does not know this user's keys "
                "(is something impersonating the server?)"
            )
        if reply.get("done"):
            self._state = self._finished
            return None
        # An older server wants an empty exchange before it says done.
        self._state = self._await_done
        return self._continue(b"")

    def _await_done(self, reply: Mapping[str, Any]) -> None:
        if not reply.get("done"):
            raise _Violation("the server did not end the conversation after the empty exchange")
        self._state = self._finished

    def _finished(self, reply: Mapping[str, Any]) -> None:
        raise RuntimeError("this SCRAM conversation is already over")

    def _continue(self, payload: bytes) -> dict[str, Any]:
        return {"saslContinue": 1, "conversationId": self._conversation_id, "payload": payload}


def _prepare_password(credentials: Credentials, mechanism: str) -> bytes:
    if mechanism == SCRAM_SHA_1:
        # MongoDB's SCRAM-SHA-1 keys derive from its legacy digest of the
        # password, not from the password itself; no SASLprep.
        text = f"{credentials.username}:mongo:{credentials.password}"
        return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest().encode()
    try:
        # With PyMongo's settings, so a password that works there works here.
        return str(saslprep(credentials.password)).encode()
    except ValueError as exc:  # its messages name the rule, never the text
        raise ConfigurationError(f"the password cannot be used with {mechanism}: {exc}") from None


_KeyCacheKey: TypeAlias = tuple[str, bytes, bytes, int]
# The most recently used derived keys, most recent last.
_KEY_CACHE: OrderedDict[_KeyCacheKey, tuple[bytes, bytes]] = OrderedDict()
_KEY_CACHE_SIZE = 64


def _scram_keys(
    hash_name: str, password: bytes, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    """ClientKey and ServerKey, cached: PBKDF2 costs milliseconds per connection.

    Keyed by mechanism (hash), password, salt and iteration count, as the auth
    spec asks, so a changed password or a re-salted user misses the cache.
    A miss derives the keys in gevent's threadpool: PBKDF2 releases the GIL,
    so other greenlets keep running while it works (it would otherwise hold
    the hub for as long as the server's iteration count makes it take).
    """
    key = (hash_name, password, salt, iterations)
    keys = _KEY_CACHE.get(key)
    if keys is None:
        keys = offload(_derive_keys, *key)
        _KEY_CACHE[key] = keys
        while len(_KEY_CACHE) > _KEY_CACHE_SIZE:
            _KEY_CACHE.popitem(last=False)
    _KEY_CACHE.move_to_end(key)
    return keys


def _derive_keys(
    hash_name: str, password: bytes, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    salted_password = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    return (
        _hmac(hash_name, salted_password, b"Client Key"),
        _hmac(hash_name, salted_password, b"Server Key"),
    )


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, hash_name)


def _sasl_name(username: str) -> str:
    # RFC 5802's saslname: "=" and "," are escaped; the username is not
    # SASLprepped (the auth spec overrides the RFC here).
    return username.replace("=", "=3D").replace(",", "=2C")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise _Violation(f"the {what} is not valid base64") from None


def _payload_text(reply: Mapping[str, Any]) -> str:
    payload = reply.get("payload")
    if not isinstance(payload, bytes):
        raise _Violation("the server's reply has no payload")
    try:
        return payload.decode()
    except UnicodeDecodeError:
        raise _Violation("the server's payload is not UTF-8") from None


def _parse_attributes(message: str) -> dict[str, str]:
    attributes = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if len(name) != 1 or not sep:
            raise _Violation(f"the server's message is malformed near {part[:20]!r}")
        attributes[name] = value
    return attributes


def _required(attributes: Mapping[str, str], name: str) -> str:
    if name not in attributes:
        raise _Violation(f"the server's message has no {name!r} attribute")
    return attributes[name]


def _parse_challenge(server_first: str, client_nonce: str) -> tuple[str, bytes, int]:
    """The server-first message's nonce, salt and iteration count, each checked."""
    attributes = _parse_attributes(server_first)
    if "m" in attributes:
        raise _Violation("the server requires an extension greenpool does not know")
    nonce = _required(attributes, "r")
    if not nonce.startswith(client_nonce):
        raise _Violation("the server's nonce does not start with the client's")
    salt = _b64decode(_required(attributes, "s"), "salt")
    iterations_text = _required(attributes, "i")
    if not (iterations_text.isascii() and iterations_text.isdigit()):
        raise _Violation(f"the iteration count {iterations_text[:20]!r} is not a number")
    if len(iterations_text.lstrip("0")) > len(str(MAX_ITERATIONS)):
        # Not even converted: int() of a long enough digit string raises.
        shown = iterations_text if len(iterations_text) <= 20 else f"{iterations_text[:20]}..."
        raise _Violation(
            f"the server asks for {shown} iterations; at most {MAX_ITERATIONS} are allowed")
    iterations = int(iterations_text)
    if iterations < MIN_ITERATIONS:
        raise _Violation(
            f"the server asks for {iterations} iterations; at least {MIN_ITERATIONS} are required"
        )
    if iterations > MAX_ITERATIONS:
        raise _Violation(
            f"the server asks for {iterations} iterations; at most {MAX_ITERATIONS} are allowed"
        )
    return nonce, salt, iterations
