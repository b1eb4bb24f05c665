"""Whether a Client traces, and how much of each command it shows: the OpenTelemetry
spec's ``tracing`` client option and its environment variables.

Rules of this module: reading and checking the option and the environment, as pure
functions over what they are given; it imports nothing of OpenTelemetry (a Client that
does not trace never needs it) and creates no span.

The option beats the environment (the spec: the client level overrides the driver
level), key by key::

    Client(uri, tracing={"enabled": True, "query_text_max_length": 1000})

* ``enabled``: trace this client's operations and commands; when not given,
  ``OTEL_PYTHON_INSTRUMENTATION_MONGODB_ENABLED`` decides (``1``, ``true``, ``yes``:
  on; ``0``, ``false``, ``no`` or unset: off);
* ``query_text_max_length``: add each command as ``db.query.text``, cut to this many
  characters (0: leave it out); when not given,
  ``OTEL_PYTHON_INSTRUMENTATION_MONGODB_QUERY_TEXT_MAX_LENGTH``, else 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from greenpool.errors import ConfigurationError, OptionTypeError

__all__ = ["ENABLED_VARIABLE", "QUERY_TEXT_VARIABLE", "TracingOptions", "read_tracing"]

ENABLED_VARIABLE: Final = "OTEL_PYTHON_INSTRUMENTATION_MONGODB_ENABLED"
QUERY_TEXT_VARIABLE: Final = "OTEL_PYTHON_INSTRUMENTATION_MONGODB_QUERY_TEXT_MAX_LENGTH"
_TRUE: Final = frozenset({"1", "true", "yes"})
# The spec names only the values that enable; these (and unset) are the ones that
# plainly do not, and anything else is a typo worth an error rather than silence.
_FALSE: Final = frozenset({"", "0", "false", "no"})
_KEYS: Final = ("enabled", "query_text_max_length")


@dataclass(frozen=True)
class TracingOptions:
    """A Client's tracing, decided: on or off, and ``db.query.text``'s length (0: none)."""

    enabled: bool = False
    query_text_max_length: int = 0


#: Tracing off: what a Client has unless the option or the environment says otherwise.
OFF: Final = TracingOptions()


def read_tracing(option: object, environ: Mapping[str, str]) -> TracingOptions:
    """The tracing of a Client given ``tracing=option`` (None: not given) in a process
    with the environment ``environ``."""
    given = _checked_option(option)
    enabled = given.get("enabled")
    if enabled is None:
        enabled = _enabled_variable(environ.get(ENABLED_VARIABLE))
    if not enabled:
        return OFF  # the length variable matters to a tracing client only
    length = given.get("query_text_max_length")
    if length is None:
        length = _length_variable(environ.get(QUERY_TEXT_VARIABLE))
    return TracingOptions(True, length)


def _checked_option(option: object) -> dict[str, Any]:
    if option is None:
        return {}
    if not isinstance(option, Mapping):
        raise OptionTypeError(
            f"tracing must be a dict such as {{'enabled': True}}, not "
            f"{type(option).__name__}: {option!r}")
    unknown = [key for key in option if key not in _KEYS]
    if unknown:
        raise ConfigurationError(
            f"tracing has unknown key(s) {unknown!r}: the keys are {', '.join(_KEYS)}")
    enabled = option.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise OptionTypeError(
            f"tracing['enabled'] must be True or False, not {type(enabled).__name__}: "
            f"{enabled!r}")
    length = option.get("query_text_max_length")
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, int):
            raise OptionTypeError(
                f"tracing['query_text_max_length'] must be an int, not "
                f"{type(length).__name__}: {length!r}")
        if length < 0:
            raise ConfigurationError(
                f"tracing['query_text_max_length']={length}: expected 0 (no db.query.text) "
                f"or a positive number of characters")
    return dict(option)


def _enabled_variable(value: str | None) -> bool:
    if value is None:
        return False
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigurationError(
        f"{ENABLED_VARIABLE}={value!r}: expected 1, true or yes (on), or 0, false or no "
        f"(off)")


def _length_variable(value: str | None) -> int:
    if value is None or not value.strip():
        return 0
    try:
        length = int(value.strip())
    except ValueError:
        length = -1
    if length < 0:
        raise ConfigurationError(
            f"{QUERY_TEXT_VARIABLE}={value!r}: expected 0 (no db.query.text) or a positive "
            f"number of characters")
    return length
