"""What the test deployment is, asked of the runner's own PyMongo client (the format's
"Initializing the Test Runner"), and whether a ``runOnRequirements`` list holds for it.

SecantusDB reports server 8.2.11 and wire version 27; by default it is a one-node replica
set ``secantus``, with ``--standalone`` a standalone; no sharding, no authentication
unless started with users. Against ``GREENPOOL_TEST_URI`` the same questions go to that
server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymongo import MongoClient
from pymongo.errors import OperationFailure

from tests.unified_match import match


def version_tuple(text: str) -> tuple[int, int, int]:
    """A version string of the format (``major[.minor[.patch]]``, anything after dropped)."""
    major, minor, patch = ([int(part) for part in str(text).split("-")[0].split(".")[:3]]
                           + [0, 0, 0])[:3]
    return major, minor, patch


@dataclass
class Deployment:
    """The server the tests run against."""

    admin: MongoClient[dict[str, Any]]
    version: tuple[int, int, int]
    topology: str  # single, replicaset, sharded or load-balanced
    auth: bool
    _parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, admin: MongoClient[dict[str, Any]], *, auth: bool,
           load_balanced: bool = False) -> Deployment:
        info = admin.admin.command("buildInfo")
        hello = admin.admin.command("hello")
        if load_balanced:
            topology = "load-balanced"
        elif hello.get("msg") == "isdbgrid":
            topology = "sharded"
        elif "setName" in hello:
            topology = "replicaset"
        else:
            topology = "single"
        version = info.get("versionArray", [])[:3]
        return cls(admin, (version[0], version[1], version[2]) if len(version) >= 3
                   else version_tuple(info["version"]), topology, auth)

    def describe(self) -> str:
        return (f"server {'.'.join(map(str, self.version))}, {self.topology}, "
                f"{'with' if self.auth else 'without'} authentication")

    def unmet(self, requirements: Sequence[Mapping[str, Any]] | None) -> str | None:
        """None if one of ``requirements`` holds (or there are none); else why none does."""
        if not requirements:
            return None
        reasons = []
        for requirement in requirements:
            failed = [f"{key}={value!r}" for key, value in requirement.items()
                      if not self._met(key, value)]
            if not failed:
                return None
            reasons.append(", ".join(failed))
        return f"requires {' or '.join(reasons)}; the test server is {self.describe()}"

    def _met(self, key: str, value: Any) -> bool:
        if key == "minServerVersion":
            return self.version >= version_tuple(value)
        if key == "maxServerVersion":
            return self.version <= version_tuple(value)
        if key == "topologies":
            wanted = {"sharded" if name == "sharded-replicaset" else name for name in value}
            return self.topology in wanted
        if key == "serverless":
            return bool(value != "require")
        if key == "auth":
            return bool(value) is self.auth
        if key == "authMechanism":
            return self.auth and str(value).upper() in self._mechanisms()
        if key == "csfle":
            return value is False  # no libmongocrypt here
        if key == "serverParameters":
            return all(self._parameter_is(name, wanted) for name, wanted in value.items())
        raise AssertionError(f"runOnRequirements.{key} is not supported by this runner")

    def _parameter(self, name: str) -> Any:
        """A server parameter (None if the server has none of that name), asked once."""
        if name not in self._parameters:
            try:
                reply = self.admin.admin.command({"getParameter": 1, name: 1})
                self._parameters[name] = reply.get(name)
            except OperationFailure:
                self._parameters[name] = None
        return self._parameters[name]

    def _parameter_is(self, name: str, wanted: Any) -> bool:
        actual = self._parameter(name)
        if actual is None:
            return False  # the format: a parameter the server lacks is not equal
        try:
            match(wanted, actual, name, root=False)
        except AssertionError:
            return False
        return True

    def _mechanisms(self) -> set[str]:
        return {str(m).upper() for m in self._parameter("authenticationMechanisms") or []}
