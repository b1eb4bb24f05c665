"""Command log messages (greenpool/client/operations/commandlog.py) beyond the spec's
files, which tests/test_driver_specs.py runs: nothing is built while the logger is off,
the document length comes from MONGODB_LOG_MAX_DOCUMENT_LENGTH, a bad length is an error
naming it, and a sensitive command's reply is never logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

import greenpool
from greenpool.client.operations import commandlog


class Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.fields: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.fields.append(record.structured)  # type: ignore[attr-defined]


@pytest.fixture
def messages() -> Iterator[Messages]:
    handler = Messages()
    commandlog.LOGGER.addHandler(handler)
    commandlog.LOGGER.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        commandlog.LOGGER.removeHandler(handler)
        commandlog.LOGGER.setLevel(logging.NOTSET)


def test_with_the_logger_off_no_message_is_built(mongodb_uri: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("a command message was built with the logger off")

    monkeypatch.setattr(commandlog, "Where", refuse)
    assert not commandlog.enabled()
    with greenpool.Client(mongodb_uri) as client:
        client.command("admin", {"ping": 1})


def test_a_command_is_logged_started_then_succeeded(mongodb_uri: str,
                                                    messages: Messages) -> None:
    with greenpool.Client(mongodb_uri) as client:
        client.command("admin", {"ping": 1})
        ident = client.topology.topology_id
    ours = [fields for fields in messages.fields
            if fields["clientId"] == ident and fields["commandName"] == "ping"]
    assert [f["message"] for f in ours] == ["Command started", "Command succeeded"]
    started, succeeded = ours
    command = json.loads(str(started["command"]))
    assert (command["ping"], command["$db"]) == (1, "admin")
    assert started["requestId"] == succeeded["requestId"]
    assert json.loads(str(succeeded["reply"]))["ok"] == 1


def test_documents_are_cut_to_the_configured_length(mongodb_uri: str, messages: Messages,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGODB_LOG_MAX_DOCUMENT_LENGTH", "20")
    with greenpool.Client(mongodb_uri) as client:
        client.command("admin", {"ping": 1, "comment": "x" * 100})
    started = next(f for f in messages.fields if f["message"] == "Command started")
    assert started["command"] == '{"ping": 1, "comment...'  # 20 characters, then ...


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_document_length_is_an_error_naming_it(value: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGODB_LOG_MAX_DOCUMENT_LENGTH", value)
    with pytest.raises(ValueError, match=f"MONGODB_LOG_MAX_DOCUMENT_LENGTH.*{value!r}"):
        commandlog.max_document_length()


def test_a_sensitive_commands_reply_is_not_logged(mongodb_uri: str, messages: Messages) -> None:
    with greenpool.Client(mongodb_uri) as client:
        client.command("admin", {"hello": 1, "speculativeAuthenticate": {"db": "admin"}})
    logged = [f for f in messages.fields if f["commandName"] == "hello"]
    assert [(f["message"], f.get("command", f.get("reply"))) for f in logged] == [
        ("Command started", "{}"), ("Command succeeded", "{}")]
