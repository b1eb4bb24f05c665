"""The URI Options spec tests: all of connection-pool-options.json and
read-preference-options.json, and the loadBalanced and timeoutMS cases of
connection-options.json and srv-options.json.

Test ids are the spec's descriptions. The mongodb+srv:// cases resolve their
hosts through the DNS stub (the seedlist README's zone), never real DNS.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from greenpool import ConfigurationError
from greenpool.client.uri import parse_uri
from tests.uri_dns import install_stub, seedlist_zone
from tests.uri_spec import MISSING, assert_options, query_options, uri_options_tests

POOL = uri_options_tests("connection-pool-options.json")
READ_PREFERENCE = uri_options_tests("read-preference-options.json")
LOAD_BALANCED = [
    test
    for file_name in ("connection-options.json", "srv-options.json")
    for test in uri_options_tests(file_name)
    if "loadbalanced" in test["uri"].lower()
]
# The cases that give timeoutMS (the CSOT spec's option).
TIMEOUT_MS = [
    test
    for test in uri_options_tests("connection-options.json")
    if any(name.lower() == "timeoutms" for name, _ in query_options(test["uri"]))
]


@pytest.fixture(autouse=True)
def _stub_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    install_stub(monkeypatch, seedlist_zone())


@pytest.mark.skipif(not POOL, reason=MISSING)
def test_spec_files_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert (len(POOL), len(READ_PREFERENCE), len(LOAD_BALANCED), len(TIMEOUT_MS)) == (7, 6, 10, 4)


@pytest.mark.parametrize("test", POOL, ids=[test["description"] for test in POOL])
def test_connection_pool_options(test: dict[str, Any]) -> None:
    run_case(test)


@pytest.mark.parametrize("test", READ_PREFERENCE,
                         ids=[test["description"] for test in READ_PREFERENCE])
def test_read_preference_options(test: dict[str, Any]) -> None:
    run_case(test)


@pytest.mark.parametrize("test", LOAD_BALANCED,
                         ids=[test["description"] for test in LOAD_BALANCED])
def test_load_balanced_options(test: dict[str, Any]) -> None:
    run_case(test)


@pytest.mark.parametrize("test", TIMEOUT_MS, ids=[test["description"] for test in TIMEOUT_MS])
def test_timeout_ms_options(test: dict[str, Any]) -> None:
    run_case(test)
    if test["warning"]:
        # Warned about, then ignored: no limit from it, not a default.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert parse_uri(test["uri"]).timeout is None


def run_case(test: dict[str, Any]) -> None:
    """The URI Options spec's rules for one case."""
    if not test["valid"]:
        with pytest.raises(ConfigurationError):
            parse_uri(test["uri"])
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings = parse_uri(test["uri"])
    messages = [str(warning.message) for warning in caught]
    if test["warning"]:
        # greenpool's promise on top of the spec's: the warning quotes the
        # offending option as written.
        quoted = [f"{name}={value!r}" for name, value in query_options(test["uri"])]
        assert any(q in m for q in quoted for m in messages), (quoted, messages)
    else:
        assert not messages
    if test["options"]:
        assert_options(settings, test["options"])
