"""The connection string as written: its secrets, hiding them, and quoting its options.

What lives here: :class:`WrittenURI`, the string as the user wrote it, for
messages only (the secrets in it, the option a PyMongo message is about);
:func:`hide_secrets`, the redaction behind
:func:`greenpool.client.uri.redact_uri`; and the rules for what is secret
(:func:`looks_secret`, :func:`secret_property`).

What must not: parsing or validating. Nothing here interprets a value or
builds settings (that is :mod:`greenpool.client.uri`); it only finds text and
replaces it. It imports nothing of greenpool, so every module that shows a
connection string can use it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote_plus

from pymongo import common as _pymongo_common

__all__ = ["KNOWN_OPTIONS", "WrittenURI", "hide_secrets", "looks_secret", "secret_property"]

#: The option names PyMongo knows, in lower case (its lookup is case-insensitive).
KNOWN_OPTIONS: frozenset[str] = frozenset(_pymongo_common.URI_OPTIONS_VALIDATOR_MAP)

# authMechanismProperties whose values may be shown (PyMongo's repr shows
# these); every other one (AWS_SESSION_TOKEN, anything unknown) is hidden.
_SHOWN_MECHANISM_PROPERTIES = frozenset({
    "ALLOWED_HOSTS", "CANONICALIZE_HOST_NAME", "ENVIRONMENT", "SERVICE_HOST", "SERVICE_NAME",
    "SERVICE_REALM", "TOKEN_RESOURCE",
})


@dataclass(frozen=True)
class WrittenURI:
    """The connection string as written, for messages only.

    PyMongo does the parsing; this finds the option a PyMongo message is
    about, and the secrets that no message may show.
    """

    options: tuple[tuple[str, str], ...]
    secrets: tuple[str, ...]

    @classmethod
    def of(cls, uri: str) -> WrittenURI:
        raw = tuple(_raw_options(uri))
        decoded = tuple((unquote_plus(name), unquote_plus(value)) for name, value in raw)
        candidates = {*_password_pieces(uri), *_secret_values(raw), *_secret_values(decoded)}
        # Longest first, so that a secret containing another is hidden whole.
        secrets = sorted((s for s in candidates if s), key=len, reverse=True)
        return cls(decoded, tuple(secrets))

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self.secrets:
            if secret not in text:
                continue  # the common case, and much cheaper than the search
            # Whole words only: hiding "pass" inside "password" would tell
            # the reader what the password is.
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
        return text

    def describe(self, message: str) -> str:
        """A PyMongo message about the options, naming the option it is about once,
        quoted as written (``name='value'``)."""
        option = self._option_in(message)
        if option is not None:
            name, value = option
            # PyMongo names the option lower-cased ("maxpoolsize must be ..."): quote it
            # there, as written, rather than a second time at the end.
            quoted = f"{name}={value!r}"
            named = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", lambda _: quoted, message,
                           count=1, flags=re.IGNORECASE)
            if named == message:  # not named, or spelled out: say which option it is
                named = f"{message} (connection string option {quoted})"
            message = named
        return self.redact(message)

    @functools.cached_property
    def _known_options(self) -> dict[str, tuple[str, str]]:
        # The options PyMongo's messages can be about (it never sees the
        # unknown ones), by lower-case name; PyMongo keeps the last of
        # repeated options, so does this.
        return {name.lower(): (name, value) for name, value in self.options
                if name.lower() in KNOWN_OPTIONS}

    def option_holding(self, value: str) -> str | None:
        """The name of the option whose value is ``value``."""
        return next((name for name, given in self.options if given == value), None)

    def _option_in(self, message: str) -> tuple[str, str] | None:
        # PyMongo's messages name the option ("maxidletimems must be ..."),
        # or spell it out ("Malformed auth mechanism properties"), or name
        # only the value ("bogus is not a valid read preference"). The
        # earliest mention wins, then the longest, then a name over a value.
        lowered = message.lower()
        squeezed = re.sub(r"[\s_]", "", lowered)
        hits: list[tuple[int, int, int, tuple[str, str]]] = []
        for key, (name, value) in self._known_options.items():
            hits.append((_find_word(lowered, key), -len(key), 0, (name, value)))
            if len(key) > 3:  # a short name ("w") would be found in any squeezed text
                hits.append((squeezed.find(key), -len(key), 0, (name, value)))
            hits.extend((_find_word(message, needle), -len(needle), 1, (name, value))
                        for needle in _value_needles(value))
        found = [hit for hit in hits if hit[0] >= 0]
        return min(found)[-1] if found else None


def _value_needles(value: str) -> set[str]:
    # A list ("zstd,snappy") or key:value pairs ("SERVICE_NAME:x") is quoted
    # by its parts.
    items = value.split(",")
    return {value, *items, *(item.partition(":")[0] for item in items)} - {""}


def _raw_options(uri: str) -> Iterable[tuple[str, str]]:
    for item in re.split("[&;]", uri.partition("?")[2]):
        name, _, value = item.partition("=")
        if name:
            yield name, value


def _password_pieces(uri: str) -> list[str]:
    # Everything between the user name and the last '@' may be password. An
    # unescaped '/' or '?' in it makes PyMongo cut the URI inside the password
    # and quote a piece of it in an error, so the pieces are secret too.
    userinfo, at, _ = uri.partition("://")[2].rpartition("@")
    password = userinfo.partition(":")[2] if at else ""
    return [password, unquote_plus(password), *re.split("[/?#]", password)]


def _secret_values(options: Iterable[tuple[str, str]]) -> Iterable[str]:
    for name, value in options:
        if looks_secret(name):
            yield value
        elif name.lower() == "authmechanismproperties":
            for item in value.split(","):
                key, _, secret = item.partition(":")
                if secret_property(key):
                    yield secret


def secret_property(key: str) -> bool:
    """Whether the authMechanismProperties value under ``key`` is secret:
    all but the ones PyMongo shows (AWS_SESSION_TOKEN is secret)."""
    return looks_secret(key) or unquote_plus(key).upper() not in _SHOWN_MECHANISM_PROPERTIES


def looks_secret(name: str) -> bool:
    """Whether an option named ``name`` holds a secret: by its name, so that a
    misspelt password option is hidden too."""
    lowered = name.lower()
    return any(word in lowered for word in ("pass", "pasw", "pwd", "secret", "token"))


def hide_secrets(uri: str) -> str:
    """``uri`` with the password, and the values of every secret
    :meth:`WrittenURI.of` finds, replaced by ``***``."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return "<not a mongodb:// URI>"  # it could be anything, a password included
    at = _userinfo_end(rest)
    if at != -1:
        user, colon, _ = rest[:at].partition(":")
        if colon:
            rest = f"{user}:***{rest[at:]}"
    head, question, query = rest.partition("?")
    if question:
        query = "".join(_redact_option(item) for item in re.split("([&;])", query))
    # Then the secrets as words wherever they are, should the string be
    # malformed enough to hide one from the structure above.
    return WrittenURI.of(uri).redact(f"{scheme}://{head}{question}{query}")


def _userinfo_end(rest: str) -> int:
    """Where the user information of ``rest`` (the URI after ``://``) ends: its last '@'."""
    authority_end = len(rest)
    for mark in "/?":
        index = rest.find(mark)
        if index != -1:
            authority_end = min(authority_end, index)
    at = rest.rfind("@", 0, authority_end)
    if at != -1:
        return at
    # An unescaped '/' or '?' in the password ends the authority inside it:
    # then the user information may reach as far as the last '@'.
    return rest.rfind("@")


def _redact_option(item: str) -> str:
    name, equals, value = item.partition("=")
    if not equals:
        return item
    if looks_secret(unquote_plus(name)):
        return f"{name}=***"
    if unquote_plus(name).lower() != "authmechanismproperties":
        return item
    shown = []
    for part in value.split(","):
        key, colon, _ = part.partition(":")
        shown.append(f"{key}:***" if colon and secret_property(key) else
                     part if colon else "***")
    return f"{name}={','.join(shown)}"


def _find_word(text: str, word: str) -> int:
    match = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) if word else None
    return match.start() if match else -1
