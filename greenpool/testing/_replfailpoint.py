"""The ``failCommand`` fail point of a replica set emulator member, for ``hello``.

Rules of this module: pure, no I/O; standard library and greenpool.testing._replhello only
(the member process loads it without the greenpool package).

mongod keeps one ``failCommand`` fail point per node, and the drivers' tests make a
node's ``hello`` fail with it (``closeConnection``, ``blockConnection``, ``errorCode``,
for one ``appName``). The backend behind the members never sees a hello, and is shared:
so a member splits each ``configureFailPoint: "failCommand"`` it relays. The hello part
(``hello``, ``isMaster``, ``ismaster`` in ``failCommands``) stays with the member, as a
:class:`HelloFailPoint`; the rest goes to the backend, which applies it to every member's
commands (or ``mode: "off"`` when nothing is left, as setting a fail point replaces the
one before).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from greenpool.testing._replhello import HELLO, CommandError, is_int, number

_HELLO_NAMES = frozenset(name.decode() for name in HELLO)


@dataclass
class HelloFailPoint:
    """The hello part of a ``failCommand`` fail point; :meth:`hit` counts its hits."""

    names: frozenset[str]
    app_name: str | None
    #: Hits left before it turns itself off; None: no end.
    times: int | None
    #: Matching hellos to let through before the first hit.
    skip: int
    block_seconds: float
    close_connection: bool
    error_code: int | None
    error_labels: tuple[str, ...]

    def hit(self, name: str, app_name: str | None) -> bool:
        """Whether the fail point acts on this invocation of ``name``; it counts one."""
        if name not in self.names or (self.app_name is not None and app_name != self.app_name):
            return False
        if self.skip:
            self.skip -= 1
            return False
        if self.times is not None:
            if not self.times:
                return False
            self.times -= 1
        return True

    @property
    def spent(self) -> bool:
        return self.times == 0


def split_fail_command(command: Mapping[str, Any]) -> tuple[
        HelloFailPoint | None, dict[str, Any]]:
    """A ``configureFailPoint: "failCommand"`` command as (the member's hello part, if any;
    the command for the backend). Raises :class:`CommandError` for what mongod refuses."""
    mode = command.get("mode")
    data = command.get("data", {})
    if not isinstance(data, Mapping):
        raise CommandError(9, "FailedToParse", "'data' must be an object")
    names = data.get("failCommands", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CommandError(9, "FailedToParse", "'failCommands' must be a list of names")
    hello_names = frozenset(names) & _HELLO_NAMES
    others = [name for name in names if name not in _HELLO_NAMES]
    backend = dict(command)
    if mode == "off" or not hello_names:
        return None, backend
    times, skip = _mode(mode)
    block, close, code, labels = _actions(data)
    point = HelloFailPoint(hello_names, _app_name(data), times, skip, block, close, code,
                           labels)
    if others:
        backend["data"] = dict(data, failCommands=others)
    else:
        del backend["data"]
        backend["mode"] = "off"
    return point, backend


def _mode(mode: object) -> tuple[int | None, int]:
    """(times, skip) of a mode mongod takes."""
    if mode == "alwaysOn":
        return None, 0
    if isinstance(mode, Mapping) and len(mode) == 1:
        (key, value), = mode.items()
        if key in ("times", "skip") and is_int(value) and value >= 0:
            return (value, 0) if key == "times" else (None, value)
    raise CommandError(9, "FailedToParse",
                       f"mode must be 'alwaysOn', 'off', {{times: n}} or {{skip: n}}, not {mode!r}")


def _app_name(data: Mapping[str, Any]) -> str | None:
    app_name = data.get("appName")
    if app_name is not None and not isinstance(app_name, str):
        raise CommandError(9, "FailedToParse", "'appName' must be a string")
    return app_name


def _actions(data: Mapping[str, Any]) -> tuple[float, bool, int | None, tuple[str, ...]]:
    """(block seconds, close the connection, error code, error labels)."""
    block = 0.0
    if data.get("blockConnection"):
        block_ms = number(data.get("blockTimeMS"))
        if block_ms is None or block_ms < 0:
            raise CommandError(9, "FailedToParse",
                               "'blockConnection' needs a 'blockTimeMS' of 0 or more")
        block = block_ms / 1000
    code = data.get("errorCode")
    if code is not None and not is_int(code):
        raise CommandError(9, "FailedToParse", "'errorCode' must be an integer")
    labels = data.get("errorLabels", [])
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise CommandError(9, "FailedToParse", "'errorLabels' must be a list of strings")
    return block, bool(data.get("closeConnection")), code, tuple(labels)
