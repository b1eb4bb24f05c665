"""Connection pool options: the CMAP spec's names, defaults and rules.

Rules of this module: the pool's options: names, defaults, types and the bounds the CMAP
spec sets; a bad value is refused here, naming it. Nothing here knows connection strings
(:mod:`greenpool.client.config.uri` maps them to these names) or sockets.

Options can be given with Python names (``max_pool_size=10``) or with the
spec's (and URI's) names (``{"maxPoolSize": 10}``, case-insensitive, as in a
connection string). A bad name, type or value raises
:class:`~greenpool.ConfigurationError` naming the option and the value.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from greenpool.errors import ConfigurationError

__all__ = ["PoolOptions"]

# Python name -> spec name. The order is the order of the spec's log message.
SPEC_NAMES = {
    "max_idle_time_ms": "maxIdleTimeMS",
    "min_pool_size": "minPoolSize",
    "max_pool_size": "maxPoolSize",
    "max_connecting": "maxConnecting",
    "wait_queue_timeout_ms": "waitQueueTimeoutMS",
    "load_balanced": "loadBalanced",
    "background_interval_ms": "backgroundThreadIntervalMS",
}
_BY_LOWER_SPEC_NAME = {spec.lower(): py for py, spec in SPEC_NAMES.items()}

# The spec says these MUST NOT be implemented by drivers that do not have them.
_REFUSED = {
    "waitqueuesize": "waitQueueSize",
    "waitqueuemultiple": "waitQueueMultiple",
    "wait_queue_size": "waitQueueSize",
    "wait_queue_multiple": "waitQueueMultiple",
}

# Options that describe the pool to users (events, logs), as opposed to
# internal switches and test hooks.
CMAP_OPTIONS = ("max_idle_time_ms", "min_pool_size", "max_pool_size", "max_connecting",
                "wait_queue_timeout_ms")


@dataclass(frozen=True, init=False)
class PoolOptions:
    """Options of one connection pool.

    >>> PoolOptions(max_pool_size=10).max_pool_size
    10
    >>> PoolOptions({"maxPoolSize": 10, "minPoolSize": 2}).min_pool_size
    2
    >>> PoolOptions(max_connecting=0)
    Traceback (most recent call last):
    ...
    greenpool.ConfigurationError: maxConnecting must be an integer > 0, not 0
    """

    #: Most connections (pending, available, in use) at once; 0 = no limit.
    max_pool_size: int = 100
    #: Connections the pool keeps open (filled in the background while ready).
    min_pool_size: int = 0
    #: An available connection idle longer than this is closed; 0 = never.
    max_idle_time_ms: float = 0
    #: Most connections being established at once.
    max_connecting: int = 2
    #: Longest wait for a connection in checkout; 0 = no limit.
    wait_queue_timeout_ms: float = 0
    #: Load-balanced mode: per-serviceId generations, clears never pause.
    load_balanced: bool = False
    #: Pause between background runs (the spec tests' backgroundThreadIntervalMS);
    #: a negative value means never run.
    background_interval_ms: float = 1000

    def __init__(self, options: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        given: dict[str, Any] = {}
        for source in (options or {}), kwargs:
            if not isinstance(source, Mapping):
                raise ConfigurationError(f"pool options must be a mapping, not {source!r}")
            for name, value in source.items():
                given[_python_name(name, value)] = value
        for field in fields(self):
            object.__setattr__(self, field.name, given.get(field.name, field.default))
        # Which options the user gave (not a field: options given and
        # defaulted to the same values are equal).
        object.__setattr__(self, "_given", frozenset(given))
        self._validate()

    def non_default(self) -> dict[str, Any]:
        """The CMAP options that differ from their defaults, by spec name."""
        defaults = PoolOptions()
        return {
            SPEC_NAMES[name]: getattr(self, name)
            for name in CMAP_OPTIONS
            if getattr(self, name) != getattr(defaults, name)
        }

    def reported(self) -> dict[str, Any]:
        """The CMAP options the user gave, even at their default value, and
        any that differ from it, by spec name, in the spec's order.

        This is what PoolCreatedEvent.options and the "Connection pool
        created" log message report (CMAP: "the options the user specified").

        >>> PoolOptions({"maxPoolSize": 100, "minPoolSize": 1}).reported()
        {'minPoolSize': 1, 'maxPoolSize': 100}
        """
        given: frozenset[str] = getattr(self, "_given", frozenset())
        defaults = PoolOptions()
        return {
            SPEC_NAMES[name]: getattr(self, name)
            for name in CMAP_OPTIONS
            if name in given or getattr(self, name) != getattr(defaults, name)
        }

    @property
    def wait_queue_timeout(self) -> float | None:
        """waitQueueTimeoutMS in seconds, None when there is no limit."""
        return self.wait_queue_timeout_ms / 1000 if self.wait_queue_timeout_ms else None

    @property
    def max_idle_time(self) -> float | None:
        """maxIdleTimeMS in seconds, None when connections never go idle."""
        return self.max_idle_time_ms / 1000 if self.max_idle_time_ms else None

    @property
    def background_interval(self) -> float | None:
        """Seconds between background runs, None when they never run."""
        if self.background_interval_ms < 0:
            return None
        return self.background_interval_ms / 1000

    def _validate(self) -> None:
        _check_int(self, "max_pool_size", minimum=0)
        _check_int(self, "min_pool_size", minimum=0)
        _check_int(self, "max_connecting", minimum=1)
        _check_number(self, "max_idle_time_ms")
        _check_number(self, "wait_queue_timeout_ms")
        _check_bool(self, "load_balanced")
        interval = self.background_interval_ms
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval == 0:
            _fail("background_interval_ms", interval, "must be a number > 0, or < 0 for never")
        if 0 < self.max_pool_size < self.min_pool_size:
            raise ConfigurationError(
                f"minPoolSize ({self.min_pool_size}) must not be greater than "
                f"maxPoolSize ({self.max_pool_size})"
            )


def _python_name(name: object, value: object) -> str:
    if not isinstance(name, str):
        raise ConfigurationError(f"pool option names must be strings, not {name!r}")
    if name in SPEC_NAMES:
        return name
    by_spec = _BY_LOWER_SPEC_NAME.get(name.lower())
    if by_spec is not None:
        return by_spec
    refused = _REFUSED.get(name.lower())
    if refused is not None:
        raise ConfigurationError(
            f"{refused}={value!r} is not supported: the CMAP specification deprecates it; "
            "limit concurrency in the application instead (e.g. with a gevent Pool of workers)"
        )
    known = [*SPEC_NAMES, *SPEC_NAMES.values()]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigurationError(f"unknown pool option {name!r} = {value!r}{hint}")


def _check_int(options: PoolOptions, name: str, *, minimum: int) -> None:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(name, value, f"must be an integer >= {minimum}" if minimum == 0 else
              f"must be an integer > {minimum - 1}")


def _check_number(options: PoolOptions, name: str) -> None:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        _fail(name, value, "must be a number >= 0")


def _check_bool(options: PoolOptions, name: str) -> None:
    value = getattr(options, name)
    if not isinstance(value, bool):
        _fail(name, value, "must be true or false")


def _fail(name: str, value: object, rule: str) -> NoReturn:
    raise ConfigurationError(f"{SPEC_NAMES[name]} {rule}, not {value!r}")
