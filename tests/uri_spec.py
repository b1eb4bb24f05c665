"""The URI Options and Initial DNS Seedlist Discovery spec tests, and how the
option names they use map onto :class:`~greenpool.client.config.uri.ClientSettings`.

The files are read from the spec directory the CMAP tests use
(``GREENPOOL_SPEC_TESTS``, else ``../shared/spec-tests/source``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote_plus

from greenpool.address import format_address
from greenpool.client.config.uri import ClientSettings
from tests.cmap_runner import SPEC_DIR

URI_OPTIONS_DIR = SPEC_DIR / "uri-options" / "tests"
SEEDLIST_DIR = SPEC_DIR / "initial-dns-seedlist-discovery" / "tests"

MISSING = (f"spec tests not found in {SPEC_DIR} "
           "(set GREENPOOL_SPEC_TESTS to the spec-tests 'source' directory)")

# Spec option name (lower-case, as option names are case-insensitive) -> its value
# in ClientSettings, in the spec's units. A name missing here fails the test that
# uses it (KeyError), so a new option in the spec files gets noticed.
SETTING: dict[str, Callable[[ClientSettings], Any]] = {
    "maxpoolsize": lambda s: s.pool.max_pool_size,
    "minpoolsize": lambda s: s.pool.min_pool_size,
    "maxidletimems": lambda s: s.pool.max_idle_time_ms,
    "maxconnecting": lambda s: s.pool.max_connecting,
    "loadbalanced": lambda s: s.load_balanced,
    "directconnection": lambda s: s.direct_connection,
    "srvmaxhosts": lambda s: s.srv_max_hosts,
    "srvservicename": lambda s: s.srv_service_name,
    "ssl": lambda s: s.tls,
    "readpreference": lambda s: s.read_preference,
    "readpreferencetags": lambda s: [dict(tags) for tags in s.read_preference_tags],
    "maxstalenessseconds": lambda s: s.max_staleness_seconds,
}


def uri_options_tests(file_name: str) -> list[dict[str, Any]]:
    """The cases of one uri-options file; none if the spec directory is missing."""
    path = URI_OPTIONS_DIR / file_name
    if not path.exists():
        return []
    tests: list[dict[str, Any]] = json.loads(path.read_text())["tests"]
    return tests


def seedlist_tests(subdirectory: str) -> list[tuple[str, dict[str, Any]]]:
    """(file name, test) for each JSON file of one seedlist test directory."""
    return [(path.stem, json.loads(path.read_text()))
            for path in sorted((SEEDLIST_DIR / subdirectory).glob("*.json"))]


def assert_options(settings: ClientSettings, expected: Mapping[str, Any]) -> None:
    """Each option in ``expected`` (spec names) has that value in ``settings``."""
    for name, value in expected.items():
        assert SETTING[name.lower()](settings) == value, f"{name}: {settings}"


def host_strings(settings: ClientSettings) -> list[str]:
    """The hosts as the spec tests write them, sorted."""
    return sorted(format_address(address) for address in settings.hosts)


def query_options(uri: str) -> list[tuple[str, str]]:
    """(name, value) pairs of a test URI's query, decoded."""
    pairs = (item.partition("=") for item in uri.partition("?")[2].split("&") if item)
    return [(unquote_plus(name), unquote_plus(value)) for name, _, value in pairs]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


# timeoutMS, and the options the spec's timeoutMS cases give beside it.
SETTING.update({
    "timeoutms": lambda s: _ms(s.timeout),
    "appname": lambda s: s.app_name,
    "connecttimeoutms": lambda s: _ms(s.connect_timeout),
    "sockettimeoutms": lambda s: _ms(s.socket_timeout),
    "serverselectiontimeoutms": lambda s: _ms(s.server_selection_timeout),
    "heartbeatfrequencyms": lambda s: _ms(s.heartbeat_frequency),
    "localthresholdms": lambda s: _ms(s.local_threshold),
    "replicaset": lambda s: s.replica_set,
    # With no user, authSource stays with the options greenpool does not use.
    "authsource": lambda s: s.credentials.source if s.credentials else s.extra["authsource"],
    "retrywrites": lambda s: s.retry_writes,
})
