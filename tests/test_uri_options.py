"""The URI Options spec tests: every case of connection-options.json,
connection-pool-options.json, read-preference-options.json and srv-options.json.

Test ids are the spec's descriptions. The mongodb+srv:// cases resolve their
hosts through the DNS stub (the seedlist README's zone), never real DNS.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from greenpool import ConfigurationError
from greenpool.client.config.uri import parse_uri
from tests.uri_dns import install_stub, seedlist_zone
from tests.uri_spec import MISSING, assert_options, query_options, uri_options_tests

FILES = ("connection-options.json", "connection-pool-options.json",
         "read-preference-options.json", "srv-options.json")
CASES = [test for file_name in FILES for test in uri_options_tests(file_name)]
# The cases that give timeoutMS (the CSOT spec's option).
TIMEOUT_MS = [
    test for test in CASES
    if any(name.lower() == "timeoutms" for name, _ in query_options(test["uri"]))
]


@pytest.fixture(autouse=True)
def _stub_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    install_stub(monkeypatch, seedlist_zone())


@pytest.mark.skipif(not CASES, reason=MISSING)
def test_spec_files_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert (len(CASES), len(TIMEOUT_MS)) == (51, 4)


@pytest.mark.parametrize("test", CASES, ids=[test["description"] for test in CASES])
def test_uri_options(test: dict[str, Any]) -> None:
    run_case(test)


@pytest.mark.parametrize("test", TIMEOUT_MS, ids=[test["description"] for test in TIMEOUT_MS])
def test_timeout_ms_options(test: dict[str, Any]) -> None:
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
    # UserWarnings: a ResourceWarning of a socket an earlier test left to the
    # garbage collector may be caught meanwhile.
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    if test["warning"]:
        # greenpool's promise on top of the spec's: the warning quotes the
        # offending option as written.
        quoted = [f"{name}={value!r}" for name, value in query_options(test["uri"])]
        assert any(q in m for q in quoted for m in messages), (quoted, messages)
    else:
        assert not messages
    if test["options"]:
        assert_options(settings, test["options"])
