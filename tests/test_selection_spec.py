"""The Server Selection and Max Staleness spec tests, file by file, on
greenpool.client.topology.selection: no server, no greenlet, no clock.

- ``server-selection/tests/server_selection/``: the suitable servers and those in
  the latency window, for every topology type, reads and writes, deprioritized
  servers included;
- ``server-selection/tests/in_window/``: the two-random-choices rule, ``iterations``
  picks with a seeded random source, each server's share within the file's tolerance
  (exactly, where it expects 0 or 1);
- ``server-selection/tests/rtt/``: the round-trip time's moving average;
- ``max-staleness/tests/``: staleness estimates, and the errors for a
  maxStalenessSeconds a replica set cannot honour.

``server-selection/tests/logging/`` is not here: those are unified tests of a
client's selection loop (its log messages as it waits and fails), not of these rules.
"""

from __future__ import annotations

import doctest
import random
from collections import Counter
from typing import Any

import pytest
from pymongo import ReadPreference
from pymongo.read_preferences import Nearest, Secondary, SecondaryPreferred

import greenpool.client.topology.selection
from greenpool import ConfigurationError
from greenpool.address import parse_address
from greenpool.client.topology.selection import (
    average_round_trip_time,
    check_max_staleness,
    in_latency_window,
    pick,
    select_servers,
    suitable_servers,
)
from tests.spec_descriptions import (
    DEFAULT_HEARTBEAT,
    LOCAL_THRESHOLD,
    MISSING,
    SELECTION_DIR,
    STALENESS_DIR,
    addresses,
    read_preference,
    server_description,
    spec_files,
    topology_description,
)

SELECTION = spec_files(SELECTION_DIR / "server_selection")
IN_WINDOW = spec_files(SELECTION_DIR / "in_window")
RTT = spec_files(SELECTION_DIR / "rtt")
STALENESS = spec_files(STALENESS_DIR)


@pytest.mark.skipif(not (SELECTION and STALENESS), reason=MISSING)
def test_spec_files_are_present() -> None:
    """One visible skip when the spec files are missing; never a silent pass."""
    assert (len(SELECTION), len(IN_WINDOW), len(RTT), len(STALENESS)) == (88, 8, 7, 32)


def run_selection(test: dict[str, Any], heartbeat: float) -> None:
    description = topology_description(test["topology_description"])
    is_write = test.get("operation", "read") == "write"
    deprioritized = addresses(test.get("deprioritized_servers", ()))

    def select() -> tuple[list[Any], list[Any]]:
        preference = read_preference(test["read_preference"])
        options = {"heartbeat_frequency": heartbeat, "is_write": is_write,
                   "deprioritized": deprioritized}
        return (suitable_servers(description, preference, **options),
                select_servers(description, preference, local_threshold=LOCAL_THRESHOLD,
                               **options))

    if test.get("error"):
        with pytest.raises(ConfigurationError, match="maxStalenessSeconds"):
            select()
        return
    suitable, window = select()
    assert addresses(suitable) == addresses(test["suitable_servers"])
    assert addresses(window) == addresses(test["in_latency_window"])


@pytest.mark.parametrize(("name", "test"), SELECTION, ids=[name for name, _ in SELECTION])
def test_server_selection(name: str, test: dict[str, Any]) -> None:
    run_selection(test, DEFAULT_HEARTBEAT)


@pytest.mark.parametrize(("name", "test"), STALENESS, ids=[name for name, _ in STALENESS])
def test_max_staleness(name: str, test: dict[str, Any]) -> None:
    run_selection(test, test.get("heartbeatFrequencyMS", DEFAULT_HEARTBEAT * 1000) / 1000)


@pytest.mark.parametrize(("name", "test"), IN_WINDOW, ids=[name for name, _ in IN_WINDOW])
def test_in_window(name: str, test: dict[str, Any]) -> None:
    description = topology_description(test["topology_description"])
    counts = {parse_address(state["address"]): state["operation_count"]
              for state in test["mocked_topology_state"]}
    window = select_servers(description, ReadPreference.NEAREST,
                            local_threshold=LOCAL_THRESHOLD, heartbeat_frequency=DEFAULT_HEARTBEAT)
    rng = random.Random(f"in_window/{name}")
    iterations = test["iterations"]
    chosen = Counter(pick(window, counts.__getitem__, rng=rng).address
                     for _ in range(iterations))
    outcome = test["outcome"]
    for address, expected in outcome["expected_frequencies"].items():
        share = chosen[parse_address(address)] / iterations
        if expected in (0, 1):
            assert share == expected, (address, share)
        else:
            assert abs(share - expected) <= outcome["tolerance"], (address, share, expected)


@pytest.mark.parametrize(("name", "test"), RTT, ids=[name for name, _ in RTT])
def test_round_trip_time_average(name: str, test: dict[str, Any]) -> None:
    previous = None if test["avg_rtt_ms"] == "NULL" else test["avg_rtt_ms"] / 1000
    average = average_round_trip_time(previous, test["new_rtt_ms"] / 1000)
    assert average * 1000 == pytest.approx(test["new_avg_rtt"])


# -- beyond the files --------------------------------------------------------------------


def servers(*specs: dict[str, Any]) -> dict[str, Any]:
    return {"type": "ReplicaSetWithPrimary", "servers": list(specs)}


PRIMARY = {"address": "a:27017", "type": "RSPrimary", "avg_rtt_ms": 5}
SECONDARY = {"address": "b:27017", "type": "RSSecondary", "avg_rtt_ms": 5}


@pytest.mark.parametrize(("max_staleness", "heartbeat", "minimum"), [
    (89, 10.0, "90"), (100, 95.0, "105"), (104, 94.5, "104.5"),
])
def test_a_too_small_max_staleness_names_the_value_and_the_minimum(
    max_staleness: int, heartbeat: float, minimum: str
) -> None:
    description = topology_description(servers(PRIMARY, SECONDARY))
    with pytest.raises(ConfigurationError) as failure:
        select_servers(description, Secondary(max_staleness=max_staleness),
                       local_threshold=LOCAL_THRESHOLD, heartbeat_frequency=heartbeat)
    assert str(failure.value).startswith(
        f"maxStalenessSeconds={max_staleness} is too small: a replica set needs at least "
        f"{minimum} seconds")


def test_max_staleness_at_the_minimum_is_accepted() -> None:
    check_max_staleness(90, 10.0)
    check_max_staleness(105, 95.0)


def test_a_write_ignores_the_read_preferences_max_staleness() -> None:
    description = topology_description(servers(PRIMARY, SECONDARY))
    chosen = select_servers(description, SecondaryPreferred(max_staleness=5), is_write=True,
                            local_threshold=LOCAL_THRESHOLD, heartbeat_frequency=10.0)
    assert addresses(chosen) == {("a", 27017)}


def test_a_secondary_without_a_last_write_date_is_never_fresh_enough() -> None:
    written = {"lastWrite": {"lastWriteDate": 1}, "lastUpdateTime": 0, "maxWireVersion": 21}
    description = topology_description(servers(
        {**PRIMARY, **written}, {**SECONDARY, "address": "c:27017"}, {**SECONDARY, **written}))
    chosen = suitable_servers(description, Secondary(max_staleness=120), heartbeat_frequency=10.0)
    assert addresses(chosen) == {("b", 27017)}
    # Without maxStalenessSeconds it is as good as any.
    chosen = suitable_servers(description, ReadPreference.SECONDARY, heartbeat_frequency=10.0)
    assert addresses(chosen) == {("b", 27017), ("c", 27017)}


@pytest.mark.parametrize(("low", "high", "verdict"), [(0, 6, "too old"), (40, 45, "too new")])
def test_a_server_of_other_wire_versions_fails_selection_naming_it(
    low: int, high: int, verdict: str
) -> None:
    description = topology_description(servers(PRIMARY, SECONDARY))
    bad = server_description({**SECONDARY, "address": "odd:1", "maxWireVersion": high})
    bad._min_wire_version = low
    described = description.server_descriptions() | {bad.address: bad}
    description = type(description)(description.topology_type, described, None, None, None, None)
    with pytest.raises(ConfigurationError) as failure:
        select_servers(description, ReadPreference.PRIMARY, local_threshold=LOCAL_THRESHOLD,
                       heartbeat_frequency=10.0)
    assert str(failure.value).startswith(f"odd:1 speaks wire versions {low} through {high}")
    assert verdict in str(failure.value)


def test_the_latency_window_keeps_the_fastest_and_those_within_the_threshold() -> None:
    rtts = {"a:1": 10, "b:1": 25, "c:1": 25.5, "d:1": 100}
    described = [server_description({"address": address, "type": "Mongos", "avg_rtt_ms": rtt})
                 for address, rtt in rtts.items()]
    assert addresses(in_latency_window(described, 0.015)) == {("a", 1), ("b", 1)}
    assert addresses(in_latency_window(described, 0)) == {("a", 1)}
    assert in_latency_window([], 0.015) == []


def test_pick_prefers_the_less_busy_of_two() -> None:
    described = [server_description({"address": f"{name}:1", "type": "Mongos", "avg_rtt_ms": 1})
                 for name in "abc"]
    counts = {("a", 1): 0, ("b", 1): 1, ("c", 1): 2}
    rng = random.Random(7)
    chosen = Counter(pick(described, counts.__getitem__, rng=rng).address for _ in range(3000))
    # a wins both pairs it is in (2/3), b the one it has against c (1/3), c never.
    assert chosen[("c", 1)] == 0
    assert abs(chosen[("a", 1)] / 3000 - 2 / 3) < 0.05
    assert pick(described[:1], counts.__getitem__) is described[0]
    with pytest.raises(ValueError, match="at least one candidate"):
        pick([], counts.__getitem__)


@pytest.mark.parametrize("sample", [-0.001, float("inf"), float("nan")])
def test_a_bad_round_trip_sample_is_refused(sample: float) -> None:
    with pytest.raises(ValueError, match="round-trip time"):
        average_round_trip_time(0.01, sample)


def test_primary_with_an_empty_tag_set_is_the_default() -> None:
    assert read_preference({"mode": "Primary", "tag_sets": [{}]}) == ReadPreference.PRIMARY
    with pytest.raises(ConfigurationError, match="mode primary takes no tags"):
        read_preference({"mode": "Primary", "tag_sets": [{"dc": "ny"}]})
    assert Nearest(tag_sets=[{}]).tag_sets == [{}]


def test_the_modules_examples() -> None:
    assert doctest.testmod(greenpool.client.topology.selection).failed == 0
