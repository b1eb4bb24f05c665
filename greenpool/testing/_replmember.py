"""One member of the replica set emulator (see :mod:`greenpool.testing.replset`), as a process.

Rules of this module: the member process (asyncio: the relay, the local commands, the
control channel); what the member says is :mod:`greenpool.testing._replhello`'s. Standard
library and ``bson`` only, and nothing imports it but the controller's bootstrap, which
runs :func:`main` without the greenpool package (its import costs gevent and PyMongo).

The member listens on 127.0.0.1 and presents one member of a replica set in front of one
shared SecantusDB, the *backend*:

- it answers ``hello`` / ``isMaster`` / ``ismaster`` itself, as a mongod member does,
  awaitable hello (``topologyVersion`` + ``maxAwaitTimeMS``) and the exhaust stream
  (``exhaustAllowed``: replies flagged ``moreToCome``, each after a change or
  ``maxAwaitTimeMS``) included;
- it refuses what a member in its state refuses (writes off the primary with
  NotWritablePrimary, reads without secondaryOk with NotPrimaryNoSecondaryOk), and answers
  the ``replSet*`` commands and ``shutdown`` itself;
- it relays every other message, as raw bytes, over one backend connection per client
  connection, opened at the first message to relay; it reads a message's header and its
  command name (and, off the primary, whether a read may run there). Replies come back
  as an unparsed byte stream, so cursors, exhaust cursors and fire-and-forget writes pass
  untouched.

The control channel is the process's stdin and stdout, one JSON object a line. The
member writes ``{"port": P}`` once it listens (or ``{"error": ...}``). The controller
writes ``{"seq": N, "view": {...}}`` (see :mod:`~greenpool.testing._replhello`) or ``{"seq":
N, "partition": true|false}``, and the member answers ``{"ack": N}`` once it applied it;
it serves clients from its first view on. For a control command that came over the wire
(``replSetStepDown``...) the member writes ``{"request": ID, "op": ...}``, and the
controller answers ``{"reply": ID, "error": null | {"code", "codeName", "errmsg"}}``
once the change is made.

End of file on stdin (the controller stopped it, exited or died, however) ends the
process at once: a member never outlives its controller.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import bson
from bson.objectid import ObjectId
from bson.raw_bson import RawBSONDocument

from greenpool.testing._replfailpoint import HelloFailPoint, split_fail_command
from greenpool.testing._replhello import (
    EXHAUST_ALLOWED,
    HELLO,
    INT32,
    LOCAL,
    MORE_TO_COME,
    OP_MSG,
    OP_QUERY,
    STATE_CHANGE_ERRORS,
    WRITES,
    CommandError,
    State,
    awaitable,
    body_span,
    command_name,
    config_document,
    error_document,
    error_labels,
    flags,
    hello_document,
    higher_counter,
    number,
    op_msg,
    op_reply,
    query_command,
    refusal,
    request_id,
    role_of,
    satisfiable,
    status_document,
    with_body,
)

HOST = "127.0.0.1"
#: Before the first view names the backend's limit.
DEFAULT_MAX_MESSAGE_SIZE = 48_000_000


def send_control(message: Mapping[str, Any]) -> None:
    # Small lines into a pipe the controller always reads: a blocking write is brief.
    os.write(1, json.dumps(message).encode() + b"\n")


class Member:
    """The member's state, the connections it serves, and its side of the control channel."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.process_id = ObjectId()
        self.state: State | None = None
        self.partitioned = False
        self.connections: set[ClientConnection] = set()
        self._connection_ids = itertools.count(1)
        # Resolved with the new State at each topologyVersion bump, then replaced.
        self._changed: asyncio.Future[State] = loop.create_future()
        self._reachable = asyncio.Event()  # set while not partitioned
        self._reachable.set()
        self._requests: dict[int, asyncio.Future[Mapping[str, Any] | None]] = {}
        self._request_ids = itertools.count(1)
        #: The hello part of the failCommand fail point, which stays with the member.
        self.hello_fail_point: HelloFailPoint | None = None

    def next_connection_id(self) -> int:
        return next(self._connection_ids)

    # -- control -----------------------------------------------------------------------

    def apply(self, message: Mapping[str, Any]) -> None:
        """Apply one line from the controller."""
        if "reply" in message:
            future = self._requests.pop(message["reply"], None)
            if future is not None and not future.done():
                future.set_result(message.get("error"))
            return
        if "view" in message:
            self._apply_view(message["view"])
        elif "partition" in message:
            self._set_partitioned(bool(message["partition"]))
        send_control({"ack": message["seq"]})

    def _apply_view(self, view: Mapping[str, Any]) -> None:
        role = role_of(view)
        if self.state is None:
            self.state = State(0, view, role)
            return
        if self.state.role == "PRIMARY" and role != "PRIMARY":
            # mongod steps down in two changes: writes stop, then it is a secondary.
            self._bump(replace(self.state, role="STEPPING_DOWN"))
        current = self.state
        new = State(current.counter, view, role)
        if new.fingerprint() != current.fingerprint():
            self._bump(new)
        else:
            self.state = new

    def _bump(self, state: State) -> None:
        assert self.state is not None
        self.state = replace(state, counter=self.state.counter + 1)
        changed, self._changed = self._changed, self.loop.create_future()
        changed.set_result(self.state)

    def _set_partitioned(self, partitioned: bool) -> None:
        if partitioned == self.partitioned:
            return
        self.partitioned = partitioned
        if partitioned:
            self._reachable.clear()
        else:
            self._reachable.set()
        for connection in list(self.connections):
            connection.set_partitioned(partitioned)

    async def request(self, op: str, **arguments: Any) -> Mapping[str, Any] | None:
        """Ask the controller for a change; None once it is made, else the error."""
        number = next(self._request_ids)
        future: asyncio.Future[Mapping[str, Any] | None] = self.loop.create_future()
        self._requests[number] = future
        send_control({"request": number, "op": op, **arguments})
        return await future

    # -- awaitable hello ---------------------------------------------------------------

    async def wait_for_change(self, process_id: ObjectId, counter: int,
                              seconds: float) -> State:
        """The state to answer an awaitable hello with: the current one at once if the
        client's topologyVersion is stale, else the next one, or after ``seconds``."""
        state = self.state
        assert state is not None
        if process_id != self.process_id or counter < state.counter:
            return state
        if counter > state.counter:
            raise higher_counter()
        done, _ = await asyncio.wait({self._changed}, timeout=seconds)
        return next(iter(done)).result() if done else state

    async def reachable(self) -> bool:
        """Wait until the member is not partitioned; whether it was."""
        if not self.partitioned:
            return False
        await self._reachable.wait()
        return True


class Paused:
    """The reasons a transport's reading is paused; it reads again when none is left."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reasons: set[str] = set()

    def add(self, reason: str) -> None:
        if not self.reasons and self.transport is not None:
            self.transport.pause_reading()
        self.reasons.add(reason)

    def discard(self, reason: str) -> None:
        if reason not in self.reasons:
            return
        self.reasons.discard(reason)
        if not self.reasons and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def attach(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        if self.reasons:
            transport.pause_reading()


class BackendLink(asyncio.Protocol):
    """The backend connection of one client connection: replies go back unparsed.

    It opens with a hello that carries the client's metadata (its reply is dropped), so
    the backend knows the client's appName, which fail points may filter on.
    """

    def __init__(self, client: ClientConnection, handshake: bytes | None) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.pending = [handshake] if handshake else []  # written while connecting
        self.paused = Paused()
        # The handshake's reply, until it is whole; then None.
        self._handshake_reply = bytearray() if handshake else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.paused.attach(transport)
        if self.pending:
            transport.writelines(self.pending)
            self.pending.clear()

    def write(self, data: bytes) -> None:
        if self.transport is None:
            self.pending.append(data)
        else:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        if self._handshake_reply is not None:
            reply = self._handshake_reply
            reply += data
            if len(reply) < 16 or len(reply) < INT32.unpack_from(reply)[0]:
                return
            data = bytes(reply[INT32.unpack_from(reply)[0] :])
            self._handshake_reply = None
            if not data:
                return
        self.client.send(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()

    def pause_writing(self) -> None:
        self.client.paused.add("backend is full")

    def resume_writing(self) -> None:
        self.client.paused.discard("backend is full")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class ClientConnection(asyncio.Protocol):
    """One client connection: local commands answered here, the rest relayed."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.connection_id = member.next_connection_id()
        self.transport: asyncio.Transport | None = None
        self.backend: BackendLink | None = None
        self.paused = Paused()
        self._partial = bytearray()
        self._needed = 16  # the size _partial must reach before it is worth reading
        self._held: list[bytes] = []  # what is due to the client while partitioned
        self._queue: deque[bytes] = deque()  # messages behind a local command that waits
        self._task: asyncio.Task[None] | None = None
        #: The ``client`` document of the connection's first hello.
        self.client_metadata: Mapping[str, Any] | None = None

    @property
    def app_name(self) -> str | None:
        application = (self.client_metadata or {}).get("application")
        name = application.get("name") if isinstance(application, Mapping) else None
        return name if isinstance(name, str) else None

    # -- transport ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.member.connections.add(self)
        if self.member.partitioned:
            self.paused.add("partition")
        self.paused.attach(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.member.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        if self.backend is not None:
            self.backend.close()

    def pause_writing(self) -> None:
        if self.backend is not None:
            self.backend.paused.add("client is full")

    def resume_writing(self) -> None:
        if self.backend is not None:
            self.backend.paused.discard("client is full")

    def send(self, data: bytes) -> None:
        if self.member.partitioned:
            self._held.append(data)
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def set_partitioned(self, partitioned: bool) -> None:
        """No byte moves either way while partitioned; what was held goes on healing."""
        for paused in (self.paused, self.backend.paused if self.backend else None):
            if paused is not None:
                (paused.add if partitioned else paused.discard)("partition")
        if not partitioned and self._held and self.transport is not None:
            held, self._held = self._held, []
            self.transport.writelines(held)

    # -- framing -----------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._partial:
            self._partial += data
            if len(self._partial) < self._needed:
                return  # a large message arrives in pieces: copy it once, when whole
            data = bytes(self._partial)
            self._partial.clear()
        offset, size = 0, len(data)
        state = self.member.state
        limit = state.max_message_size if state else DEFAULT_MAX_MESSAGE_SIZE
        while size - offset >= 16:
            length = INT32.unpack_from(data, offset)[0]
            if not 16 <= length <= limit:
                self.close()  # not a message: the stream cannot be trusted
                return
            if size - offset < length:
                break
            whole = offset == 0 and length == size
            self._message(data if whole else data[offset : offset + length])
            offset += length
        if offset < size:
            self._partial += data[offset:] if offset else data
            partial = self._partial
            self._needed = INT32.unpack_from(partial)[0] if len(partial) >= 16 else 16

    def _message(self, message: bytes) -> None:
        if self._task is not None:
            # A local command is waiting (an awaitable hello, a control request): keep
            # the order, and read no more until it is done.
            self._queue.append(message)
            self.paused.add("busy")
            return
        op_code = INT32.unpack_from(message, 12)[0]
        try:
            if op_code == OP_MSG:
                self._op_msg(message)
            elif op_code == OP_QUERY:
                self._op_query(message)
            else:
                self._relay(message)
        except Exception as error:
            # A message the member cannot read (bad BSON where it must look) costs its
            # connection, as on mongod, and nothing else.
            print(f"replica set member: closing a connection: {error!r}", file=sys.stderr)
            self.close()

    def _relay(self, message: bytes) -> None:
        if self.backend is None:
            handshake = None
            if self.client_metadata is not None:
                hello = {"hello": 1, "client": self.client_metadata, "$db": "admin"}
                handshake = op_msg(hello, 0)[1]
            backend = self.backend = BackendLink(self, handshake)
            assert self.member.state is not None
            host, port = self.member.state.view["backend"]
            loop = self.member.loop
            task = loop.create_task(loop.create_connection(lambda: backend, host, port))
            task.add_done_callback(self._backend_connected)
        self.backend.write(message)

    def _backend_connected(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is not None:
            self.close()  # the backend is gone: the client sees a network error
        elif (self.transport is None or self.transport.is_closing()) and self.backend:
            self.backend.close()

    # -- the messages ------------------------------------------------------------------

    def _op_msg(self, message: bytes) -> None:
        start, end = body_span(message)
        name = command_name(message, start, end)
        if name in LOCAL or name.startswith(b"replSet"):
            self._local(message, bson.decode(message[start:end]), name, legacy=False)
            return
        if name == b"configureFailPoint":
            self._configure_fail_point(message, start, end)
            return
        state = self.member.state
        assert state is not None
        if state.role == "PRIMARY":
            if name in WRITES and message.find(b"writeConcern\x00", start, end) > 0:
                message = satisfiable(message, start, end, state.data_members)
            self._relay(message)
            return
        error = refusal(state, name, message, start, end)
        if error is None:
            self._relay(message)
        elif flags(message) & MORE_TO_COME:
            # mongod closes a connection whose fire-and-forget write it refused: the
            # driver can learn of it no other way.
            self.close()
        else:
            labels = error_labels(RawBSONDocument(message[start:end]), name)
            reply = error_document(error, state=state, process_id=self.member.process_id,
                                   labels=labels)
            self.send(op_msg(reply, request_id(message))[1])

    def _configure_fail_point(self, message: bytes, start: int, end: int) -> None:
        """Keep the hello part of a failCommand fail point; relay the rest."""
        command = RawBSONDocument(message[start:end])
        if command.get("configureFailPoint") != "failCommand":
            self._relay(message)
            return
        try:
            hello_part, backend_part = split_fail_command(
                bson.decode(message[start:end]))
        except CommandError as error:
            self.send(op_msg(error_document(error.error), request_id(message))[1])
            return
        self.member.hello_fail_point = hello_part
        self._relay(with_body(message, start, end, backend_part))

    def _op_query(self, message: bytes) -> None:
        # Some drivers' first hello; any other OP_QUERY is the backend's to refuse.
        command = query_command(message)
        name = next(iter(command), "").encode() if command else b""
        if command is not None and name in HELLO:
            self._local(message, command, name, legacy=True)
        else:
            self._relay(message)

    def _local(self, message: bytes, command: Mapping[str, Any], name: bytes,
               legacy: bool) -> None:
        if name == b"shutdown":
            os._exit(0)  # as mongod: the process ends, every connection with it
        if name in HELLO and self.client_metadata is None and isinstance(
                command.get("client"), Mapping):
            self.client_metadata = command["client"]
        handler = LocalCommand(self, message, command, name, legacy)
        if name in HELLO and not handler.waits() and self.member.hello_fail_point is None:
            handler.hello_now()
            return
        self._task = self.member.loop.create_task(handler.run())
        self._task.add_done_callback(self._local_done)

    def _local_done(self, task: asyncio.Task[None]) -> None:
        self._task = None
        if not task.cancelled() and task.exception() is not None:
            print(f"replica set member: {task.exception()!r}", file=sys.stderr)
            self.close()
            return
        while self._queue and self._task is None:
            self._message(self._queue.popleft())
        if self._task is None:
            self.paused.discard("busy")


class LocalCommand:
    """One command the member answers itself, on one connection."""

    def __init__(self, connection: ClientConnection, message: bytes,
                 command: Mapping[str, Any], name: bytes, legacy: bool) -> None:
        self.connection = connection
        self.member = connection.member
        self.command = command
        self.name = name.decode()
        self.legacy = legacy
        self.request_id = request_id(message)
        self.exhaust = not legacy and bool(flags(message) & EXHAUST_ALLOWED)

    def reply(self, document: Mapping[str, Any], *, more_to_come: bool = False) -> int:
        """Send ``document`` as the reply; returns its requestID."""
        if self.legacy:
            self.connection.send(op_reply(document, self.request_id))
            return 0
        reply_id, data = op_msg(document, self.request_id, MORE_TO_COME if more_to_come else 0)
        self.connection.send(data)
        return reply_id

    def waits(self) -> bool:
        return "topologyVersion" in self.command or "maxAwaitTimeMS" in self.command

    def hello_now(self) -> None:
        state = self.member.state
        assert state is not None
        self.reply(hello_document(state, self.member.process_id, self.name, self.command,
                                  self.connection.connection_id))

    async def run(self) -> None:
        if self.name in ("hello", "isMaster", "ismaster"):
            try:
                await self.hello()
            except CommandError as error:
                self.reply(error_document(error.error))
            return
        handler = REPL_SET_COMMANDS.get(self.name)
        if handler is None:
            self.reply(error_document(
                (115, "CommandNotSupported",
                 f"{self.name} is not supported by greenpool's replica set emulator")))
            return
        state = self.member.state
        assert state is not None
        self.reply(await handler(self, state))

    async def hello(self) -> None:
        """A hello the fail point applies to, or an awaitable one: wait for a change or
        maxAwaitTimeMS; with exhaustAllowed, again and again (each time a new invocation,
        which the fail point applies to, as on mongod)."""
        awaited = awaitable(self.command)
        if awaited is None:
            if not await self._failed():
                self.hello_now()
            return
        process_id, counter, seconds = awaited
        while not await self._failed():
            woken_to = await self.member.wait_for_change(process_id, counter, seconds)
            # What was true while partitioned is old news once healed.
            state = self.member.state if await self.member.reachable() else woken_to
            assert state is not None
            reply = hello_document(state, self.member.process_id, self.name, self.command,
                                   self.connection.connection_id)
            reply_id = self.reply(reply, more_to_come=self.exhaust)
            if not self.exhaust:
                return
            # The stream goes on as if the client had asked again with what it got.
            self.request_id, counter = reply_id, state.counter
            process_id = self.member.process_id

    async def _failed(self) -> bool:
        """Apply the member's hello fail point to this invocation; whether it answered."""
        point = self.member.hello_fail_point
        if point is None or not point.hit(self.name, self.connection.app_name):
            return False
        if point.spent:
            self.member.hello_fail_point = None
        if point.block_seconds:
            await asyncio.sleep(point.block_seconds)
        if point.close_connection:
            self.connection.close()
            return True
        if point.error_code is None:
            return False
        code = point.error_code
        state_change = code in STATE_CHANGE_ERRORS
        error = (code, STATE_CHANGE_ERRORS.get(code, f"Location{code}"),
                 "Failing command via 'failCommand' failpoint")
        self.reply(error_document(error, state=self.member.state if state_change else None,
                                  process_id=self.member.process_id,
                                  labels=point.error_labels))
        return True

    # -- replSet* ----------------------------------------------------------------------

    async def step_down(self, state: State) -> Mapping[str, Any]:
        if state.role != "PRIMARY":
            return error_document(
                (10107, "NotWritablePrimary", "not primary so can't step down"),
                state=state, process_id=self.member.process_id)
        seconds = number(self.command.get("replSetStepDown")) or 60.0
        catch_up = number(self.command.get("secondaryCatchUpPeriodSecs", 10))
        if catch_up is None or seconds < catch_up:
            return error_document((2, "BadValue", "stepdown period must be longer than "
                                   "secondaryCatchUpPeriodSecs"))
        return await self._ask("step_down", seconds=seconds)

    async def step_up(self, state: State) -> Mapping[str, Any]:
        if state.role == "PRIMARY":
            return {"ok": 1.0}
        return await self._ask("step_up")

    async def freeze(self, state: State) -> Mapping[str, Any]:
        seconds = number(self.command.get("replSetFreeze"))
        if seconds is None or seconds < 0:
            return error_document((2, "BadValue", "replSetFreeze needs a number of seconds"))
        if state.role == "PRIMARY":
            return error_document((95, "NotSecondary", "cannot freeze node when primary or "
                                   "running for election. state: Primary"))
        return await self._ask("freeze", seconds=seconds)

    async def get_status(self, state: State) -> Mapping[str, Any]:
        return status_document(state)

    async def get_config(self, state: State) -> Mapping[str, Any]:
        return config_document(state)

    async def _ask(self, op: str, **arguments: Any) -> Mapping[str, Any]:
        error = await self.member.request(op, **arguments)
        if error is not None:
            return error_document((error["code"], error["codeName"], error["errmsg"]))
        return {"ok": 1.0}


REPL_SET_COMMANDS: dict[str, Callable[[LocalCommand, State], Awaitable[Mapping[str, Any]]]] = {
    "replSetStepDown": LocalCommand.step_down,
    "replSetStepUp": LocalCommand.step_up,
    "replSetFreeze": LocalCommand.freeze,
    "replSetGetStatus": LocalCommand.get_status,
    "replSetGetConfig": LocalCommand.get_config,
}


# -- the process ---------------------------------------------------------------------------


def listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A restarted member takes its port back at once, old connections in TIME_WAIT or not.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(512)
    sock.setblocking(False)
    return sock


async def serve(port: int) -> None:
    """Listen, then apply the controller's lines until end of file (which ends the process)."""
    loop = asyncio.get_running_loop()
    try:
        sock = listen(port)
    except OSError as error:
        send_control({"error": f"cannot listen on {HOST}:{port}: {error.strerror}"})
        return
    send_control({"port": sock.getsockname()[1]})
    member = Member(loop)
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    server: asyncio.Server | None = None
    while line := await reader.readline():
        member.apply(json.loads(line))
        if server is None and member.state is not None:
            server = await loop.create_server(lambda: ClientConnection(member), sock=sock)
    # The controller stops us, or is gone. The kernel closes every socket, as when a
    # mongod process ends.
    os._exit(0)


def main(argv: list[str]) -> int:
    """``PORT`` (0: any free one): run one member until stdin ends."""
    asyncio.run(serve(int(argv[0])))
    return 1  # serve() returns only when it could not listen
