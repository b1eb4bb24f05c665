"""A replica set on one machine, for tests, demos and benchmarks: member processes in
front of one shared SecantusDB.

Rules of this module: the controller (starting, driving and stopping the emulated set; it
holds the truth: each member's state, the term, setVersion) and ``python -m greenpool
server --replset N``. What a member answers is :mod:`greenpool.testing._replhello`'s, how it
serves is :mod:`greenpool.testing._replmember`'s. No MongoDB protocol code of its own.

:class:`ReplicaSet` starts one SecantusDB (an :class:`~greenpool.testing.embedded.EmbeddedServer`,
in memory) and one process per member, each on its own port of 127.0.0.1::

    with ReplicaSet(3) as rs:
        client = MongoClient(rs.uri)      # mongodb://127.0.0.1:P1,.../?replicaSet=rs0
        rs.step_down()                    # the primary steps down; another is elected
        rs.stop_member(rs.primary)        # its process ends; another is elected
        rs.start_member(0)                # again, same port, new processId

Each member answers hello as a mongod member does (awaitable and streaming included) and
relays everything else to the shared SecantusDB; a member that is not primary refuses
writes and primary-only reads as mongod does. There is no replication: every member sees
every write at once (a secondary's lag is only what its hello reports), nothing is ever
rolled back, and fail points set through one member apply to all.

The controller talks to each member over the member's stdin and stdout (one JSON line a
message; see :mod:`greenpool.testing._replmember`) and waits until every member has applied a
change before a control returns. Nothing outlives the program that started the set: a
member ends at end of file on its stdin, and the SecantusDB has the embedded server's
watchdog.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

from greenpool.address import Address, format_address, parse_address
from greenpool.errors import ConfigurationError
from greenpool.testing.embedded import HOST, EmbeddedServer
from greenpool.wire.connector import connect
from greenpool.wire.link import LinkOptions

__all__ = ["MemberConfig", "MemberRef", "MemberStatus", "ReplicaSet"]

PRIMARY = "PRIMARY"
SECONDARY = "SECONDARY"
ARBITER = "ARBITER"
DOWN = "DOWN"

MemberRef: TypeAlias = int | str
"""A member: its index in the set, or its address ``"127.0.0.1:PORT"``."""

# Runs a member without importing the greenpool package or greenpool.testing's public
# names (gevent and PyMongo: half a second of a member's start): the member's modules load
# from bare package objects.
_BOOTSTRAP = (
    "import sys, types\n"
    "for name, path in (('greenpool', sys.argv.pop(1)), ('greenpool.testing', sys.argv.pop(1))):\n"
    "    package = sys.modules[name] = types.ModuleType(name)\n"
    "    package.__path__ = [path]\n"
    "from greenpool.testing._replmember import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
_TESTING = Path(__file__).resolve().parent
_LIMITS = ("maxBsonObjectSize", "maxMessageSizeBytes", "maxWriteBatchSize",
           "logicalSessionTimeoutMinutes", "minWireVersion", "maxWireVersion")


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 0):
        raise ConfigurationError(f"{what} must be a number of seconds >= 0, not {value!r}")
    return float(value)


def _tags(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigurationError(f"tags must map strings to strings, not {value!r}")
    return dict(value)


@dataclass(frozen=True)
class MemberConfig:
    """One member's configuration (part of mongod's replica set config).

    ``priority`` 0 makes a passive member (never elected); hidden members and arbiters
    have priority 0 (the default for them). ``lag`` is how many seconds behind the
    primary the member's hello says it is (its ``lastWrite``), for maxStalenessSeconds.
    """

    priority: float | None = None
    hidden: bool = False
    arbiter_only: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    lag: float = 0.0

    def __post_init__(self) -> None:
        if self.priority is not None:
            priority = self.priority
            if isinstance(priority, bool) or not isinstance(priority, int | float) or not (
                    0 <= priority <= 1000):
                raise ConfigurationError(f"priority must be 0 to 1000, not {priority!r}")
            if priority > 0 and (self.hidden or self.arbiter_only):
                kind = "an arbiter" if self.arbiter_only else "a hidden member"
                raise ConfigurationError(f"{kind} must have priority 0, not {priority!r}")
        if self.hidden and self.arbiter_only:
            raise ConfigurationError("a member cannot be both hidden and an arbiter")
        object.__setattr__(self, "tags", _tags(self.tags))
        object.__setattr__(self, "lag", _seconds(self.lag, "lag"))

    @property
    def effective_priority(self) -> float:
        if self.priority is not None:
            return float(self.priority)
        return 0.0 if self.hidden or self.arbiter_only else 1.0


@dataclass(frozen=True)
class MemberStatus:
    """One member, as the controller knows it at one moment."""

    index: int
    address: str
    #: "PRIMARY", "SECONDARY", "ARBITER" or "DOWN" (its process is stopped).
    state: str
    #: The member process's pid while it runs.
    pid: int | None
    partitioned: bool
    config: MemberConfig


class _Process:
    """One member process, from its start to its exit, and what it said on its stdout."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.port: int | None = None
        self.error: str | None = None
        self.listening = threading.Event()  # set once it said its port (or could not)
        self.acked = 0  # the last change it applied; guarded by ReplicaSet._acks
        self.exited = False  # guarded by ReplicaSet._acks
        self._write = threading.Lock()

    def send(self, message: Mapping[str, Any]) -> bool:
        """Write one control line; False if the process is gone."""
        assert self.popen.stdin is not None
        with self._write:
            try:
                self.popen.stdin.write(json.dumps(message).encode() + b"\n")
                self.popen.stdin.flush()
            except (OSError, ValueError):
                return False
        return True

    def end(self) -> None:
        """SIGKILL the process (its connections drop with it) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()
        with contextlib.suppress(OSError, ValueError):
            assert self.popen.stdin is not None
            self.popen.stdin.close()


class _Member:
    """The controller's record of one member."""

    def __init__(self, index: int, config: MemberConfig, port: int) -> None:
        self.index = index
        self.config = config
        self.port = port  # 0 until the first start picks one
        self.state = DOWN
        self.partitioned = False
        self.unelectable_until = 0.0  # time.monotonic(): replSetStepDown / replSetFreeze
        self.process: _Process | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def entry(self) -> dict[str, Any]:
        """This member in a view's ``members``."""
        config = self.config
        return {"_id": self.index, "host": self.address,
                "priority": config.effective_priority, "hidden": config.hidden,
                "arbiterOnly": config.arbiter_only, "tags": dict(config.tags),
                "state": self.state}


class _WireError(Exception):
    """A control command refused, as ``(code, codeName, errmsg)``."""

    def __init__(self, code: int, code_name: str, message: str) -> None:
        super().__init__(message)
        self.document = {"code": code, "codeName": code_name, "errmsg": message}


class ReplicaSet:
    """A replica set of member processes in front of one SecantusDB; a context manager.

    ``members`` is a number of members (all electable) or one :class:`MemberConfig`
    each. The first electable member starts as primary. ``election_delay`` is how long
    the set goes without a primary, once it lost one (a stepdown, a stopped or crashed
    primary), before it elects another; each control can say otherwise. ``ports`` gives
    each member's port (default: free ones). ``backend`` (``"host:port"``) puts the
    members in front of a SecantusDB that already runs (in its replica set mode, for
    transactions) instead of starting one: a test suite that starts many sets pays only
    for the members; the set never stops it.

    Members are named by index or address (:data:`MemberRef`). Every control returns
    once each running member has applied the change (and bumped its topologyVersion,
    waking awaitable hellos, where its hello changed).
    """

    #: Seconds a member gets to apply a change before a control gives up on it.
    CHANGE_TIMEOUT = 10.0

    def __init__(self, members: int | Sequence[MemberConfig] = 3, *, name: str = "rs0",
                 election_delay: float = 0.0, ports: Sequence[int] = (),
                 backend: str | None = None, startup_timeout: float = 30.0) -> None:
        if isinstance(members, bool) or not isinstance(members, int | Sequence):
            raise ConfigurationError(
                f"members must be a number or a list of MemberConfig, not {members!r}")
        configs = [MemberConfig() for _ in range(members)] if isinstance(
            members, int) else list(members)
        if not 1 <= len(configs) <= 50 or not all(isinstance(c, MemberConfig) for c in configs):
            raise ConfigurationError(
                f"a replica set has 1 to 50 members (MemberConfig), not {members!r}")
        if not name or not isinstance(name, str) or any(c in name for c in "/ ,?&=$"):
            raise ConfigurationError(f"not a replica set name: {name!r}")
        if ports and (len(ports) != len(configs) or not all(
                isinstance(p, int) and 0 <= p <= 65535 for p in ports)):
            raise ConfigurationError(
                f"ports must give one port (0 to 65535) per member, not {ports!r}")
        try:
            self._backend_address = None if backend is None else parse_address(backend)
        except ValueError:
            raise ConfigurationError(f"backend must be 'host:port', not {backend!r}") from None
        self.name = name
        self.election_delay = _seconds(election_delay, "election_delay")
        self.startup_timeout = startup_timeout
        self._members = [_Member(i, config, ports[i] if ports else 0)
                         for i, config in enumerate(configs)]
        # _lock serializes the controls and guards every member's state, the term,
        # setVersion and the pending election; _changed (on _lock) tells of a new primary.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # _acks guards each _Process's acked and exited.
        self._acks = threading.Condition()
        self._seq = itertools.count(1)
        self._term = 0
        self._set_version = 1
        self._election = 0  # a newer control cancels the election this one scheduled
        self._timer: threading.Timer | None = None
        self._backend: EmbeddedServer | None = None  # the one this set started
        self._limits: dict[str, Any] = {}
        self._serving = False

    # -- what it is --------------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The set's connection string: every member a hello lists, and ``replicaSet``."""
        self._check_ports()
        seeds = [m.address for m in self._members if not m.config.hidden]
        return f"mongodb://{','.join(seeds)}/?replicaSet={self.name}"

    def member_uri(self, member: MemberRef) -> str:
        """A connection string for one member alone (``directConnection=true``)."""
        self._check_ports()
        return f"mongodb://{self._member(member).address}/?directConnection=true"

    def _check_ports(self) -> None:
        if not all(m.port for m in self._members):
            raise RuntimeError(f"{self.name} has no ports yet: start it first")

    @property
    def backend_uri(self) -> str:
        """The shared SecantusDB's own connection string."""
        if self._backend_address is None:
            raise RuntimeError(f"{self.name} is not running")
        return f"mongodb://{format_address(self._backend_address)}/"

    @property
    def addresses(self) -> list[str]:
        """Every member's ``host:port``, by index."""
        return [m.address for m in self._members]

    @property
    def primary(self) -> str | None:
        """The primary's address; None while the set has none."""
        with self._lock:
            member = self._primary_member()
            return member.address if member else None

    @property
    def secondaries(self) -> list[str]:
        with self._lock:
            return [m.address for m in self._members if m.state == SECONDARY]

    @property
    def term(self) -> int:
        """The election term (the primary's electionId carries it)."""
        return self._term

    @property
    def set_version(self) -> int:
        return self._set_version

    def status(self) -> list[MemberStatus]:
        """Every member, by index."""
        with self._lock:
            return [MemberStatus(m.index, m.address, m.state,
                                 m.process.popen.pid if m.process else None,
                                 m.partitioned, m.config) for m in self._members]

    def wait_for_primary(self, timeout: float = 30.0) -> str:
        """The primary's address, once there is one (after a delayed election)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._primary_member() is not None,
                                          timeout):
                raise TimeoutError(f"no member of {self.name} was elected within {timeout:g} s")
            member = self._primary_member()
            assert member is not None
            return member.address

    # -- start and stop ----------------------------------------------------------------

    def start(self) -> ReplicaSet:
        """Start the backend and every member; returns ``self`` once the set serves."""
        if self._serving or any(m.process for m in self._members):
            raise RuntimeError(f"{self.name} is already running")
        try:
            # The members start while the backend does; they need it only once they serve.
            for member in self._members:
                self._spawn(member)
            if self._backend_address is None:
                self._backend = EmbeddedServer(self.startup_timeout, replica_set=True,
                                               test_commands=True).start()
                self._backend_address = (HOST, self._backend.port)
            self._limits = self._backend_limits(self._backend_address)
            deadline = time.monotonic() + self.startup_timeout
            for member in self._members:
                self._await_listening(member, deadline)
            with self._lock:
                for member in self._members:
                    member.state = ARBITER if member.config.arbiter_only else SECONDARY
                first = next((m for m in self._members if self._electable(m)), None)
                if first is not None:
                    first.state = PRIMARY
                    self._term = 1
                self._push()
                self._serving = True
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every member and the backend. Does nothing when the set is not running."""
        with self._lock:
            self._serving = False
            self._cancel_election()
            processes = [m.process for m in self._members if m.process is not None]
            for member in self._members:
                member.process = None
                member.state = DOWN
        for process in processes:
            process.end()
        backend, self._backend = self._backend, None
        if backend is not None:
            self._backend_address = None
            backend.stop()

    def __enter__(self) -> ReplicaSet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        states = ", ".join(f"{m.address} {m.state}" for m in self._members)
        return f"<ReplicaSet {self.name}: {states}>"

    # -- controls ----------------------------------------------------------------------

    def step_down(self, successor: MemberRef | None = None, *, elect: bool = True,
                  delay: float | None = None) -> str:
        """The primary steps down (its writes stop, then it is a secondary); returns its
        address.

        Unless ``elect`` is false, ``successor`` (by default the next electable member
        after the old primary, in index order) is elected ``delay`` seconds later (by
        default the set's ``election_delay``); meanwhile the set has no primary.
        """
        with self._lock:
            primary = self._primary_member()
            if primary is None:
                raise RuntimeError(f"{self.name} has no primary to step down")
            chosen = self._successor(successor)
            delay = None if delay is None else _seconds(delay, "delay")
            self._step_down(primary, chosen, elect, delay)
            return primary.address

    def elect(self, member: MemberRef) -> None:
        """Elect ``member`` now (a new term); the primary, if any, becomes a secondary.

        This ends a ``replSetFreeze`` or a ``replSetStepDown``'s wait on the member."""
        with self._lock:
            chosen = self._member(member)
            self._check_electable(chosen)
            self._cancel_election()
            chosen.unelectable_until = 0.0
            if chosen.state != PRIMARY:
                self._make_primary(chosen)

    def stop_member(self, member: MemberRef, *, elect: bool = True,
                    successor: MemberRef | None = None, delay: float | None = None) -> None:
        """End the member's process (SIGKILL: its connections drop). If it was primary,
        another is elected as :meth:`step_down` says."""
        with self._lock:
            stopped = self._member(member)
            process = self._running(stopped)
            chosen = self._successor(successor)
            delay = None if delay is None else _seconds(delay, "delay")
            self._take_down(stopped, process, elect=elect, successor=chosen, delay=delay)

    def start_member(self, member: MemberRef) -> None:
        """Start a stopped member again, on its port, as a secondary (a new processId)."""
        with self._lock:
            started = self._member(member)
            if started.process is not None:
                raise RuntimeError(f"member {started.address} is running")
            process = self._spawn(started)
            try:
                self._await_listening(started, time.monotonic() + self.startup_timeout)
            except BaseException:
                started.process = None
                process.end()
                raise
            started.state = ARBITER if started.config.arbiter_only else SECONDARY
            started.partitioned = False
            started.unelectable_until = 0.0
            self._push()

    def partition(self, member: MemberRef) -> None:
        """Cut the member off: it accepts connections but no byte moves, either way, on
        any of its connections, until :meth:`heal` (a hang, or a network partition)."""
        self._set_partitioned(member, True)

    def heal(self, member: MemberRef) -> None:
        """End a partition: what was held goes through, as TCP delivers it after one."""
        self._set_partitioned(member, False)

    def set_lag(self, member: MemberRef, seconds: float) -> None:
        """How far behind the primary the member's hello says it is (``lastWrite``)."""
        lag = _seconds(seconds, "lag")
        with self._lock:
            changed = self._member(member)
            changed.config = replace(changed.config, lag=lag)
            self._push()

    def set_tags(self, member: MemberRef, tags: Mapping[str, str]) -> None:
        """Give the member new tags: a reconfig (setVersion + 1)."""
        new_tags = _tags(tags)
        with self._lock:
            changed = self._member(member)
            changed.config = replace(changed.config, tags=new_tags)
            self._set_version += 1
            self._push()

    # -- members -----------------------------------------------------------------------

    def _member(self, ref: MemberRef) -> _Member:
        if isinstance(ref, int) and not isinstance(ref, bool) and (
                0 <= ref < len(self._members)):
            return self._members[ref]
        if isinstance(ref, str):
            for member in self._members:
                if member.address == ref and member.port:
                    return member
        raise ConfigurationError(
            f"no member {ref!r} in {self.name}: members are 0 to {len(self._members) - 1} "
            f"({', '.join(self.addresses)})")

    def _running(self, member: _Member) -> _Process:
        if member.process is None:
            raise RuntimeError(f"member {member.address} is stopped")
        return member.process

    def _primary_member(self) -> _Member | None:
        return next((m for m in self._members if m.state == PRIMARY), None)

    def _spawn(self, member: _Member) -> _Process:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOTSTRAP, str(_TESTING.parent), str(_TESTING),
             str(member.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            # Its own session: a Ctrl-C in the terminal reaches only this program, which
            # then stops the set in order.
            start_new_session=True)
        process = member.process = _Process(popen)
        threading.Thread(target=self._read, args=(member, process), daemon=True,
                         name=f"replica set member {member.index}").start()
        return process

    def _await_listening(self, member: _Member, deadline: float) -> None:
        process = self._running(member)
        if not process.listening.wait(max(0.0, deadline - time.monotonic())):
            raise ConfigurationError(
                f"replica set member {member.index} did not start within "
                f"{self.startup_timeout:g} s")
        if process.port is None:
            reason = process.error or f"its process exited with {process.popen.wait()}"
            raise ConfigurationError(f"replica set member {member.index}: {reason}")
        member.port = process.port

    @staticmethod
    def _backend_limits(backend: Address) -> dict[str, Any]:
        """The size limits and wire versions the backend reports, which members report."""
        link = connect(backend, LinkOptions(connect_timeout=10.0, socket_timeout=10.0))
        try:
            hello = link.hello or {}
        finally:
            link.close()
        missing = [key for key in _LIMITS if key not in hello]
        if missing:
            raise ConfigurationError(
                f"the backend {format_address(backend)} cannot be fronted: its hello has no "
                f"{', '.join(missing)}")
        return {key: hello[key] for key in _LIMITS}

    # -- the control channel -----------------------------------------------------------

    def _read(self, member: _Member, process: _Process) -> None:
        """A member's stdout, until it exits (a thread per member process)."""
        stdout = process.popen.stdout
        assert stdout is not None
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                print(f"replica set member {member.index}: {line!r}", file=sys.stderr)
                continue
            if "ack" in message:
                with self._acks:
                    process.acked = message["ack"]
                    self._acks.notify_all()
            elif "request" in message:
                threading.Thread(target=self._serve_request, args=(member, process, message),
                                 daemon=True).start()
            elif "port" in message:
                process.port = int(message["port"])
                process.listening.set()
            elif "error" in message:
                process.error = str(message["error"])
                process.listening.set()
        stdout.close()
        with self._acks:
            process.exited = True
            self._acks.notify_all()
        process.listening.set()
        if member.process is process:
            self._exited(member, process)

    def _exited(self, member: _Member, process: _Process) -> None:
        """A member process ended on its own (``shutdown``, a crash): it is down."""
        with self._lock:
            if member.process is not process or not self._serving:
                return
            self._take_down(member, process, elect=True, successor=None, delay=None)
        if process.popen.returncode:
            print(f"replica set member {member.address} exited with "
                  f"{process.popen.returncode}", file=sys.stderr)

    def _push(self) -> None:
        """Send every running member its view, and wait until each has applied it."""
        sent = []
        for member in self._members:
            process = member.process
            if process is None:
                continue
            seq = next(self._seq)
            if process.send({"seq": seq, "view": self._view(member)}):
                sent.append((member, process, seq))
        self._await_acks(sent)

    def _view(self, member: _Member) -> dict[str, Any]:
        assert self._backend_address is not None
        return {"set": self.name, "version": self._set_version, "term": self._term,
                "me": member.address, "lag": member.config.lag,
                "backend": list(self._backend_address), "limits": self._limits,
                "members": [m.entry() for m in self._members]}

    def _await_acks(self, sent: list[tuple[_Member, _Process, int]]) -> None:
        deadline = time.monotonic() + self.CHANGE_TIMEOUT
        with self._acks:
            for member, process, seq in sent:
                if not self._acks.wait_for(_applied(process, seq),
                                           deadline - time.monotonic()):
                    raise RuntimeError(
                        f"replica set member {member.address} did not apply a change "
                        f"within {self.CHANGE_TIMEOUT:g} s")

    def _set_partitioned(self, member: MemberRef, partitioned: bool) -> None:
        with self._lock:
            changed = self._member(member)
            process = self._running(changed)
            changed.partitioned = partitioned
            seq = next(self._seq)
            if process.send({"seq": seq, "partition": partitioned}):
                self._await_acks([(changed, process, seq)])

    def _serve_request(self, member: _Member, process: _Process,
                       message: Mapping[str, Any]) -> None:
        """A control command a member received over the wire (replSetStepDown...)."""
        error: dict[str, Any] | None = None
        try:
            with self._lock:
                if member.process is not process or not self._serving:
                    raise RuntimeError(f"{self.name} is stopping")
                self._wire_control(member, message)
        except _WireError as refused:
            error = refused.document
        except (ConfigurationError, RuntimeError) as failed:
            error = {"code": 125, "codeName": "CommandFailed", "errmsg": str(failed)}
        process.send({"reply": message["request"], "error": error})

    def _wire_control(self, member: _Member, message: Mapping[str, Any]) -> None:
        op = message.get("op")
        if op == "step_down":
            if member.state != PRIMARY:
                raise _WireError(10107, "NotWritablePrimary", "not primary so can't step down")
            # As mongod: the old primary seeks no election for stepDownSecs.
            member.unelectable_until = time.monotonic() + float(message["seconds"])
            self._step_down(member, None, True, None)
        elif op == "step_up":
            self.elect(member.index)
        elif op == "freeze":
            seconds = float(message["seconds"])
            member.unelectable_until = time.monotonic() + seconds if seconds else 0.0
        else:
            raise _WireError(59, "CommandNotFound", f"no such control: {op!r}")

    # -- elections ---------------------------------------------------------------------

    def _electable(self, member: _Member) -> bool:
        return self._unelectable(member) is None and (
            time.monotonic() >= member.unelectable_until)

    @staticmethod
    def _unelectable(member: _Member) -> str | None:
        """Why ``member`` cannot be elected, if it cannot."""
        if member.process is None:
            return "is stopped"
        if member.config.arbiter_only:
            return "is an arbiter"
        if member.config.effective_priority == 0:
            return "has priority 0"
        if member.partitioned:
            return "is partitioned"
        return None

    def _check_electable(self, member: _Member) -> None:
        reason = self._unelectable(member)
        if reason is not None:
            raise RuntimeError(f"member {member.address} cannot be elected: it {reason}")

    def _successor(self, ref: MemberRef | None) -> _Member | None:
        if ref is None:
            return None
        member = self._member(ref)
        self._check_electable(member)
        return member

    def _step_down(self, primary: _Member, successor: _Member | None, elect: bool,
                   delay: float | None) -> None:
        self._cancel_election()
        primary.state = SECONDARY
        self._push()
        if elect:
            self._schedule_election(successor, primary, delay)

    def _take_down(self, member: _Member, process: _Process, *, elect: bool,
                   successor: _Member | None, delay: float | None) -> None:
        """End the member's process: it is down, and a primary is replaced."""
        was_primary = member.state == PRIMARY
        # All before the kill, which may yield: its reader sees an intended end, and a
        # kill of this greenlet leaves the member's record consistent.
        member.process = None
        member.state = DOWN
        member.partitioned = False
        if was_primary:
            self._cancel_election()
        process.end()
        self._push()
        if was_primary and elect:
            self._schedule_election(successor, member, delay)

    def _cancel_election(self) -> None:
        self._election += 1
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _schedule_election(self, successor: _Member | None, previous: _Member,
                           delay: float | None) -> None:
        delay = self.election_delay if delay is None else delay
        if delay <= 0:
            self._elect_after(successor, previous)
            return
        self._timer = threading.Timer(delay, self._election_due,
                                      (self._election, successor, previous))
        self._timer.daemon = True
        self._timer.start()

    def _election_due(self, election: int, successor: _Member | None,
                      previous: _Member) -> None:
        with self._lock:
            if election == self._election and self._serving:
                self._timer = None
                self._elect_after(successor, previous)

    def _elect_after(self, successor: _Member | None, previous: _Member) -> None:
        """Elect ``successor`` if it still can be, or else (none named) the next
        electable member after ``previous``, by index."""
        if successor is not None:
            chosen = successor if self._electable(successor) else None
        else:
            count = len(self._members)
            order = [self._members[(previous.index + i) % count] for i in range(1, count + 1)]
            chosen = next((m for m in order if self._electable(m)), None)
        if chosen is not None:
            self._make_primary(chosen)
            return
        # As mongod: a member waiting out a stepdown or a freeze runs for election after.
        now = time.monotonic()
        candidates = self._members if successor is None else [successor]
        waits = [m.unelectable_until - now for m in candidates
                 if self._unelectable(m) is None and m.unelectable_until > now]
        if waits:
            self._schedule_election(successor, previous, min(waits))

    def _make_primary(self, member: _Member) -> None:
        for other in self._members:
            if other.state == PRIMARY:
                other.state = SECONDARY
        member.state = PRIMARY
        self._term += 1
        self._push()
        self._changed.notify_all()


def _applied(process: _Process, seq: int) -> Callable[[], bool]:
    return lambda: process.acked >= seq or process.exited


# -- python -m greenpool server --replset N --------------------------------------------------


def describe(replica_set: ReplicaSet) -> list[str]:
    """What ``python -m greenpool server --replset N`` prints once the set runs."""
    lines = [f"A replica set {replica_set.name!r} of {len(replica_set.addresses)} members on "
             f"{HOST}, in front of one SecantusDB (in memory); Ctrl-C or SIGTERM stops it."]
    for status in replica_set.status():
        lines.append(f"  {status.address}  {status.state:<9}  pid {status.pid}")
    lines += [
        f"URI: {replica_set.uri}",
        "Drive it from any driver, with a replica set's own commands:",
        "  {replSetStepDown: 60} on the primary: it steps down, another member is elected",
        "  {replSetStepUp: 1} on a secondary: it is elected",
        "  {replSetFreeze: N} on a secondary: it is not elected for N seconds",
        "  {shutdown: 1} on a member: its process ends (another is elected if it was primary)",
        "  {replSetGetStatus: 1} on any member: each member's state",
        "In another shell:",
    ]
    return lines
