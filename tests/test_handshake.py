"""greenpool.wire.handshake: client metadata, its 512-byte trimming, the hello command,
and the checks on the hello reply."""

from __future__ import annotations

import platform
from typing import Any

import bson
import gevent
import pytest
from bson.objectid import ObjectId
from pymongo import common
from pymongo.errors import ConfigurationError as PyMongoConfigurationError

import greenpool
from greenpool.errors import ConfigurationError
from greenpool.wire import handshake

ADDRESS = ("db.example.com", 27017)


def size(document: dict[str, Any]) -> int:
    return len(bson.encode(document))


# -- client metadata -----------------------------------------------------------------------


def test_metadata_shape() -> None:
    metadata = handshake.client_metadata("billing")
    assert list(metadata) == ["application", "driver", "os", "platform"]
    assert metadata["application"] == {"name": "billing"}
    assert metadata["driver"] == {"name": "greenpool", "version": greenpool.__version__}
    assert list(metadata["os"]) == ["type", "name", "architecture", "version"]
    assert metadata["os"]["type"] == platform.system()
    assert metadata["os"]["architecture"] == platform.machine()
    assert metadata["os"]["version"] == platform.release()
    assert metadata["platform"] == (
        f"{platform.python_implementation()} {platform.python_version()}; "
        f"gevent {gevent.__version__}"
    )
    assert size(metadata) <= handshake.MAX_METADATA_SIZE


def test_metadata_without_an_application_name() -> None:
    assert "application" not in handshake.client_metadata()


def test_metadata_with_the_longest_application_name_fits() -> None:
    name = "é" * 64  # 128 bytes in UTF-8
    metadata = handshake.client_metadata(name)
    assert metadata["application"] == {"name": name}
    assert size(metadata) <= handshake.MAX_METADATA_SIZE


@pytest.mark.parametrize("name", ["x" * 129, "é" * 65])
def test_application_name_over_128_bytes_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="limit is 128"):
        handshake.client_metadata(name)


def test_application_name_must_be_a_string() -> None:
    with pytest.raises(ConfigurationError, match="must be a string"):
        handshake.check_app_name(b"bytes")  # type: ignore[arg-type]


def test_metadata_that_fits_is_not_trimmed() -> None:
    metadata = {"driver": {"name": "d", "version": "1"}, "os": {"type": "Linux", "name": "x"},
                "platform": "p", "env": {"name": "aws.lambda", "region": "eu"}}
    assert handshake.trim_metadata(metadata) == metadata


def big_metadata() -> dict[str, Any]:
    return {
        "application": {"name": "a" * 128},
        "driver": {"name": "greenpool", "version": "1.0"},
        "os": {"type": "Linux", "name": "n" * 60, "architecture": "x86_64", "version": "v" * 60},
        "platform": "CPython 3.12.1; " + "p" * 40,
        "env": {"name": "aws.lambda", "region": "r" * 40, "memory_mb": 1024},
    }


def test_trimming_first_drops_env_fields_but_its_name() -> None:
    metadata = big_metadata()
    metadata["os"]["name"] = "n" * 10
    metadata["env"]["region"] = "r" * 100
    trimmed = handshake.trim_metadata(metadata)
    assert trimmed["env"] == {"name": "aws.lambda"}
    assert trimmed["os"] == metadata["os"]
    assert trimmed["platform"] == metadata["platform"]
    assert size(trimmed) <= handshake.MAX_METADATA_SIZE
    assert metadata["env"]["region"] == "r" * 100  # the input is not changed


def test_trimming_then_drops_os_fields_but_its_type() -> None:
    metadata = big_metadata()
    metadata["os"]["name"] = "n" * 150
    trimmed = handshake.trim_metadata(metadata)
    assert trimmed["env"] == {"name": "aws.lambda"}
    assert trimmed["os"] == {"type": "Linux"}
    assert trimmed["platform"] == metadata["platform"]
    assert size(trimmed) <= handshake.MAX_METADATA_SIZE


def test_trimming_then_drops_env() -> None:
    metadata = big_metadata()
    metadata["os"]["name"] = "n" * 150
    metadata["env"]["name"] = "e" * 250
    trimmed = handshake.trim_metadata(metadata)
    assert "env" not in trimmed
    assert trimmed["os"] == {"type": "Linux"}
    assert trimmed["platform"] == metadata["platform"]
    assert size(trimmed) <= handshake.MAX_METADATA_SIZE


def test_trimming_last_truncates_the_platform_to_fit_exactly() -> None:
    metadata = big_metadata()
    metadata["platform"] = "CPython 3.12.1; " + "é" * 300
    trimmed = handshake.trim_metadata(metadata)
    assert "env" not in trimmed and trimmed["os"] == {"type": "Linux"}
    assert metadata["platform"].startswith(trimmed["platform"])
    assert trimmed["platform"].startswith("CPython 3.12.1; é")
    # Cut on a character boundary, at most one byte short of the limit.
    assert handshake.MAX_METADATA_SIZE - 1 <= size(trimmed) <= handshake.MAX_METADATA_SIZE
    assert trimmed["application"] == metadata["application"]
    assert trimmed["driver"] == metadata["driver"]


# -- the hello command ---------------------------------------------------------------------


def test_legacy_hello_by_default() -> None:
    command = handshake.hello_command(app_name="billing")
    assert list(command)[:3] == ["isMaster", "helloOk", "client"]
    assert command["isMaster"] == 1 and command["helloOk"] is True
    assert command["client"]["application"] == {"name": "billing"}
    assert "compression" not in command and "loadBalanced" not in command


def test_load_balanced_hello() -> None:
    command = handshake.hello_command(load_balanced=True)
    assert next(iter(command)) == "hello"
    assert command["loadBalanced"] is True


def test_hello_offers_compressors_and_carries_auth_fields() -> None:
    fields = {"saslSupportedMechs": "admin.app", "speculativeAuthenticate": {"saslStart": 1}}
    command = handshake.hello_command(compressors=["zstd", "zlib"], auth_fields=fields)
    assert command["compression"] == ["zstd", "zlib"]
    assert command["saslSupportedMechs"] == "admin.app"
    assert command["speculativeAuthenticate"] == {"saslStart": 1}


# -- the reply -----------------------------------------------------------------------------


def test_greenpools_wire_versions_are_pymongos() -> None:
    assert handshake.MIN_WIRE_VERSION == common.MIN_SUPPORTED_WIRE_VERSION
    assert handshake.MAX_WIRE_VERSION == common.MAX_SUPPORTED_WIRE_VERSION


@pytest.mark.parametrize(
    ("low", "high"),
    [
        (0, handshake.MIN_WIRE_VERSION),
        (handshake.MAX_WIRE_VERSION, handshake.MAX_WIRE_VERSION + 5),
        (0, 99),
    ],
)
def test_overlapping_wire_versions_pass(low: int, high: int) -> None:
    handshake.check_hello_reply({"ok": 1, "minWireVersion": low, "maxWireVersion": high}, ADDRESS)


def test_server_too_old() -> None:
    with pytest.raises(PyMongoConfigurationError) as caught:
        handshake.check_hello_reply({"ok": 1, "minWireVersion": 0, "maxWireVersion": 6}, ADDRESS)
    message = str(caught.value)
    assert "db.example.com:27017 speaks wire versions 0 through 6" in message
    low, high = handshake.MIN_WIRE_VERSION, handshake.MAX_WIRE_VERSION
    assert f"speaks {low} through {high}" in message
    assert message.endswith("the server is too old")


def test_server_too_new() -> None:
    low = handshake.MAX_WIRE_VERSION + 1
    reply = {"ok": 1, "minWireVersion": low, "maxWireVersion": low + 3}
    with pytest.raises(PyMongoConfigurationError, match=f"{low} through {low + 3}.*too new"):
        handshake.check_hello_reply(reply, ADDRESS)


def test_reply_without_wire_versions_is_too_old() -> None:
    with pytest.raises(PyMongoConfigurationError, match="0 through 0"):
        handshake.check_hello_reply({"ok": 1}, ADDRESS)


def test_load_balanced_reply_needs_a_service_id() -> None:
    reply = {"ok": 1, "minWireVersion": 0, "maxWireVersion": 21}
    with pytest.raises(PyMongoConfigurationError) as caught:
        handshake.check_hello_reply(reply, ADDRESS, load_balanced=True)
    assert str(caught.value) == (
        "Driver attempted to initialize in load balancing mode, "
        "but the server does not support this mode."
    )
    handshake.check_hello_reply({**reply, "serviceId": ObjectId()}, ADDRESS, load_balanced=True)
