"""The Client's topology: its servers, their description, and server selection.

Rules of this module: the topology's state (its description, one
:class:`~greenpool.client.topology.server.Server` per address), applying what checks and
errors tell of a server, SDAM's events, and selection's wait for a suitable
server. What an outcome does to the description is decided by
:mod:`~greenpool.client.topology.discovery`, what an error means by
:mod:`~greenpool.client.topology.sdam`, which servers suit an operation by
:mod:`~greenpool.client.topology.selection`; running operations lives in
:mod:`greenpool.client.operations.operations`.

Topologies are the SDAM spec's: Single (directConnection=true), ReplicaSetNoPrimary
and ReplicaSetWithPrimary, Sharded, LoadBalanced (loadBalanced=true: no monitor, per
the Load Balancer spec) and Unknown (where discovery starts without a replicaSet
name). Each server has its own CMAP pool and monitor greenlet: a server discovery
adds is opened and monitored, a server it removes has its monitor stopped and its
pool closed, and a clear touches that server's pool alone. Descriptions and events
are PyMongo's classes, delivered to PyMongo's ``TopologyListener``,
``ServerListener`` and ``ServerHeartbeatListener`` objects, so existing SDAM
listeners work.

A mongodb+srv:// name is polled (:mod:`greenpool.client.topology.srvpoll`) while the
topology is Unknown or Sharded: a poll's hosts replace those its records no
longer name, through the same opening and closing of servers
(:meth:`Topology.srv_hosts_changed`); the poller stops once discovery finds
another type.

Each outcome is applied whole before any event goes out (the description, the
servers, the pools made ready, the removed servers closed), so a listener that
yields sees a consistent topology. The events follow in the spec's order: the
server's description changed (and those of servers the outcome changed too),
the servers opened and closed, then the topology's description changed; the
monitors of the servers opened start last.

Server selection follows the Server Selection spec's loop: while no server
suits the operation, each round requests an immediate check of every server and
waits for the next check to complete (whatever its outcome), until a server
suits or the timeout passes; its error names what was looked for and what each
server was last seen as. Monitors run requested checks at most every
minHeartbeatFrequencyMS (500 ms), so a server that comes back (or a newly
elected primary) is used within about half a second of answering, however long
heartbeatFrequencyMS is. Primary reads and writes take a shortcut when exactly
one server can take them (a direct connection, a primary, a load balancer, the
one mongos): :attr:`Topology.primary_server`, kept with the description.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from bson.objectid import ObjectId
from bson.timestamp import Timestamp
from pymongo import monitoring as _m
from pymongo.errors import AutoReconnect, ServerSelectionTimeoutError
from pymongo.hello import Hello
from pymongo.read_preferences import _ServerMode
from pymongo.server_description import ServerDescription
from pymongo.server_type import SERVER_TYPE
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from greenpool.address import Address, format_address
from greenpool.client.config.readpref import PRIMARY, PRIMARY_ALONE, WRITE
from greenpool.client.topology import discovery
from greenpool.client.topology.monitor import Checker, streaming_enabled
from greenpool.client.topology.sdam import IGNORE, ErrorContext, Phase, Verdict, check_failed, judge
from greenpool.client.topology.selection import pick, select_servers
from greenpool.client.topology.server import Server
from greenpool.client.topology.srvpoll import SrvPoller
from greenpool.client.topology.topologylog import log_event
from greenpool.errors import ConfigurationError
from greenpool.pool.connection import Connection
from greenpool.pool.listeners import handler
from greenpool.pool.pool import Pool
from greenpool.pool.waitqueue import WaitQueue, WaitTimedOut
from greenpool.wire.connector import handshake_completed

__all__ = ["Topology"]

_LOG = logging.getLogger("greenpool")
# A pool is made ready after a check that finds one of these (SDAM's Connection
# Pool Management), or any known type in a Single topology.
_SELECTABLE = discovery.DATA_BEARING | {SERVER_TYPE.LoadBalancer}
# How many removals selection's error recalls.
_DEPARTED_KEPT = 8


class Topology:
    """The servers a Client talks to, as SDAM describes them; see the module's docstring.

    :param seeds: the connection string's hosts (or its SRV records').
    :param make_pool: the CMAP pool of a server, by address (paused until a check
        finds the server).
    """

    # What every command reads, kept with the description (_commit).
    #: The one server that primary reads and writes select now, when there is
    #: exactly one that suits them; None when selection must wait or choose.
    primary_server: Server | None
    #: The topology's logicalSessionTimeoutMinutes (None: no sessions).
    session_timeout_minutes: int | None
    #: The highest $clusterTime seen (Sessions spec), to send with commands.
    cluster_time: Mapping[str, Any] | None

    def __init__(self, seeds: Sequence[Address], make_pool: Callable[[Address], Pool[Any]], *,
                 load_balanced: bool = False, direct: bool = False,
                 replica_set: str | None = None, heartbeat_frequency: float = 10.0,
                 server_selection_timeout: float = 30.0, local_threshold: float = 0.015,
                 listeners: Iterable[object] = (),
                 server_selector: Callable[[list[ServerDescription]], list[ServerDescription]]
                 | None = None) -> None:
        self.load_balanced = load_balanced
        #: PyMongo's server_selector (see selection.select_servers), or None.
        self.server_selector = server_selector
        self.server_selection_timeout = server_selection_timeout
        #: localThresholdMS, in seconds.
        self.local_threshold = local_threshold
        self._heartbeat_frequency = heartbeat_frequency
        self._seeds = tuple(seeds)
        self._make_pool = make_pool
        self._make_checker: Callable[[Server], Checker] | None = None
        # serverMonitoringMode, for the monitors of the servers discovery adds.
        self._monitoring_mode = "auto"
        self._listeners = list(listeners)
        self._topology_id = ObjectId()
        self._initial = discovery.initial(
            self._seeds, direct=direct, replica_set=replica_set, load_balanced=load_balanced,
            heartbeat_frequency=heartbeat_frequency, local_threshold=local_threshold,
            topology_id=self._topology_id)
        self._servers: dict[Address, Server] = {}
        self._description = discovery.closed(self._initial)
        self.primary_server = None
        self.session_timeout_minutes = None
        self.cluster_time = None
        self._incompatible: str | None = None
        # Why servers left the topology, most recent last (for selection's error).
        self._departed: dict[Address, str] = {}
        # Selections waiting for the next check to complete (Server Selection spec).
        self._checks: WaitQueue[bool] = WaitQueue()
        # A mongodb+srv:// name's poller, while polling applies (poll_srv).
        self._srv_poller: SrvPoller | None = None
        self._closed = False
        # Opened with deferred=True and not started yet: no server is open.
        self._deferred = False

    @property
    def topology_id(self) -> ObjectId:
        return self._topology_id

    @property
    def heartbeat_frequency(self) -> float:
        """heartbeatFrequencyMS, in seconds (what the monitors read)."""
        return self._heartbeat_frequency

    @property
    def description(self) -> TopologyDescription:
        if self._deferred and not self._closed:
            return self._initial  # the seeds, Unknown, until start() (PyMongo's connect=False)
        return self._description

    @property
    def servers(self) -> Mapping[Address, Server]:
        """The servers of the topology now, by address (a copy)."""
        return dict(self._servers)

    @property
    def seeds(self) -> tuple[Address, ...]:
        """The hosts the client was given."""
        return self._seeds

    @property
    def direct(self) -> bool:
        """Whether the topology is a direct connection to one server (type Single)."""
        return self._description.topology_type == TOPOLOGY_TYPE.Single

    # -- opening and closing --------------------------------------------------------

    def open(self, make_checker: Callable[[Server], Checker] | None, *,
             monitoring_mode: str = "auto", deferred: bool = False) -> None:
        """Describe the seeds, open a server for each and start its monitor
        (``make_checker(server)`` makes its monitoring connections; None: no
        monitors; serverMonitoringMode ``monitoring_mode`` says whether they
        may stream, see :func:`~greenpool.client.topology.monitor.streaming_enabled`).
        In load-balanced mode describe the balancer and make its pool ready
        at once.

        ``deferred`` (PyMongo's ``connect=False``): nothing starts, no event
        is published and no greenlet spawned until :meth:`start`, which the
        first server selection calls (a process that forks after making its
        client, as a gunicorn app preloaded in the arbiter, starts it in each
        child)."""
        streaming_enabled(monitoring_mode)  # a bad mode is refused before anything opens
        self._make_checker = None if self.load_balanced else make_checker
        self._monitoring_mode = monitoring_mode
        if deferred:
            self._deferred = True
        else:
            self._start()

    @property
    def started(self) -> bool:
        """False from ``open(deferred=True)`` until :meth:`start`; else True."""
        return not self._deferred

    def start(self) -> None:
        """Open what :meth:`open` deferred: the servers, their monitors and
        the SRV poller. Once only; nothing after close."""
        if self._deferred and not self._closed:
            self._deferred = False
            self._start()

    def _start(self) -> None:
        monitoring_mode = self._monitoring_mode
        self.publish("opened", _m.TopologyOpenedEvent(self._topology_id))
        self._servers = {address: Server(self, address, self._make_pool(address))
                         for address in self._seeds}
        empty = self._description
        self._commit(self._initial)
        self.publish("description_changed", _m.TopologyDescriptionChangedEvent(
            empty, self._initial, self._topology_id))
        for server in list(self._servers.values()):
            self.publish("opened", _m.ServerOpeningEvent(server.address, self._topology_id))
            if not self._closed:
                server.start(self._make_checker, mode=monitoring_mode)
        if self.load_balanced:
            # The Load Balancer spec: no monitor, and the server is described
            # as a LoadBalancer from the start, with every field but its
            # address and type unset (a serviceId is how PyMongo's Hello
            # tells the type; the description does not keep it).
            for server in list(self._servers.values()):
                hello = Hello({"ok": 1, "serviceId": self._topology_id})
                self._apply(server, ServerDescription(server.address, hello))
        elif not self._seeds:
            _LOG.warning("greenpool: the topology has no servers: the client was given no "
                         "hosts")
        if self._srv_poller is not None:
            self._srv_poller.start()

    def close(self) -> None:
        """Stop the monitors, emit the closing events, close the pools."""
        if self._closed:
            return
        self._closed = True
        if self._deferred:
            return  # never started: nothing to stop, no event to close what none opened
        servers = list(self._servers.values())
        poller, self._srv_poller = self._srv_poller, None
        if poller is not None:
            poller.stop()
        for server in servers:
            if server.monitor is not None:
                server.monitor.stop()
        for server in servers:
            self.publish("closed", _m.ServerClosedEvent(server.address, self._topology_id))
        # The servers stay (closed), so their pools' statistics can still be read.
        old, self._description = self._description, discovery.closed(self._description)
        self.primary_server = None
        self.publish("description_changed", _m.TopologyDescriptionChangedEvent(
            old, self._description, self._topology_id))
        self.publish("closed", _m.TopologyClosedEvent(self._topology_id))
        self._checks.fail_all(lambda: ServerSelectionTimeoutError("the client was closed"))
        for server in servers:
            server.pool.close()

    # -- server selection -------------------------------------------------------------

    def select(self, preference: _ServerMode = PRIMARY, timeout: float | None = None) -> Server:
        """A server that suits a read with ``preference`` (primary, the default:
        also any write), waiting at most the server selection timeout
        (``timeout`` instead, if given).

        :raises pymongo.errors.ServerSelectionTimeoutError: none within the
            limit; the message names what was looked for and each server's state.
        :raises greenpool.ConfigurationError: a server's wire versions do not
            overlap greenpool's.
        """
        server = self.primary_server
        if server is not None and (preference is PRIMARY or preference is WRITE):
            return server
        return self._wait_for_server(
            preference, self.server_selection_timeout if timeout is None else timeout)

    def select_address(self, address: Address) -> Server:
        """The server at ``address``, whatever its state (a cursor's getMore
        goes to the server that opened it, a transaction to its pinned mongos).

        :raises pymongo.errors.AutoReconnect: it is no longer in the topology
            (the operation's server is gone), or the client is closed.
        """
        server = None if self._closed else self._servers.get(address)
        if server is None:
            why = ("the client was closed" if self._closed
                   else self._departed.get(address, "it is not in the topology"))
            raise AutoReconnect(f"{format_address(address)}: the operation's server is "
                                f"gone: {why}")
        return server

    def server_of(self, conn: Connection[Any]) -> Server | None:
        """The server ``conn`` belongs to, or None if that server has left the topology."""
        server = self._servers.get(conn.address)
        return server if server is not None and server.pool is conn.pool else None

    def _wait_for_server(self, preference: _ServerMode, limit: float) -> Server:
        """The Server Selection spec's loop: look for a suitable server; if none,
        request an immediate check of every server, wait until a check
        completes, look again; a failed check wakes the waiters too, so each
        round asks for the next checks (the monitors space them by
        minHeartbeatFrequencyMS)."""
        if self._deferred:
            self.start()
        expires = time.monotonic() + limit
        while True:
            if self._closed:  # also closed while this waiter was being woken
                raise ServerSelectionTimeoutError("the client was closed")
            if self._incompatible is not None:
                raise ConfigurationError(self._incompatible)
            server = self._choose(preference)
            if server is not None:
                return server
            for each in list(self._servers.values()):
                if each.monitor is not None:
                    each.monitor.request_check()
            try:
                self._checks.join().wait(expires - time.monotonic())
            except WaitTimedOut:
                raise ServerSelectionTimeoutError(
                    self._no_server(preference, limit)) from None

    def _choose(self, preference: _ServerMode) -> Server | None:
        candidates = select_servers(
            self._description, preference, local_threshold=self.local_threshold,
            heartbeat_frequency=self._heartbeat_frequency, custom=self.server_selector)
        if not candidates:
            return None
        return self._servers[pick(candidates, self._operation_count).address]

    def _operation_count(self, address: Address) -> int:
        return self._servers[address].operation_count()

    def _no_server(self, preference: _ServerMode, limit: float) -> str:
        """Selection's error: what it looked for, and what it saw."""
        wanted = ("a primary read or a write" if preference.mode == PRIMARY.mode
                  else f"a read with read preference {preference.document}")
        description = self._description
        kind = description.topology_type_name
        if description.replica_set_name is not None:
            kind += f" (replica set {description.replica_set_name!r})"
        seen = "; ".join(_seen(server) for server in description.server_descriptions().values())
        departed = "".join(f"; {why}" for why in self._departed.values())
        return (f"no server suitable for {wanted} within {limit:g} s; topology {kind}: "
                f"{seen or 'no servers'}{departed}")

    # -- what checks and errors tell us ---------------------------------------------------

    def check_succeeded(self, server: Server, description: ServerDescription) -> None:
        """A monitor's check of ``server`` succeeded (``description`` is its
        reply, parsed): describe it, resume its pool if it suits operations."""
        if self._closed:
            return
        self.advance_cluster_time(description.cluster_time)
        self._apply(server, description)
        self._checks.deliver_all(True)

    def check_failed(self, server: Server, error: Exception) -> None:
        """A monitor's check of ``server`` failed: Unknown, and its pool cleared
        (and in-use connections interrupted if the check timed out)."""
        if self._closed:
            return
        self._act(server, check_failed(error), error, service_id=None)
        self._checks.deliver_all(False)

    def handle_error(self, error: Exception, phase: Phase, conn: Connection[Any]) -> Verdict:
        """Apply SDAM's rules to an application error on ``conn``, for the
        server it came from (nothing if that server left the topology)."""
        server = self.server_of(conn)
        if server is None:
            return IGNORE
        link = conn.transport
        # The connection's own wire version: after a first error the
        # description is Unknown, whose wire version (0) says nothing.
        return self.server_error(
            server, error, phase, stale=server.pool.is_stale(conn),
            max_wire_version=(link.max_wire_version
                              if link is not None and link.hello is not None else None),
            service_id=conn.service_id)

    def server_error(self, server: Server, error: Exception, phase: Phase, *, stale: bool,
                     max_wire_version: int | None,
                     service_id: ObjectId | None = None) -> Verdict:
        """Apply SDAM's rules to an application error on a connection of
        ``server`` (``stale``: of an older generation than its pool's)."""
        context = ErrorContext(
            error, phase, stale=stale, load_balanced=self.load_balanced,
            max_wire_version=max_wire_version,
            topology_version=server.description.topology_version)
        verdict = judge(context)
        self._act(server, verdict, error, service_id)
        return verdict

    def handle_establish_error(self, error: Exception, conn: Connection[Any]) -> None:
        """A pool's ``on_establish_error`` handler: SDAM's rules for an error
        while establishing ``conn``. Errors up to and including the hello are
        the CONNECT phase (the Load Balancer spec ignores them); errors after
        it (authentication) are the AUTHENTICATE phase."""
        phase = Phase.AUTHENTICATE if handshake_completed(error) else Phase.CONNECT
        self.handle_error(error, phase, conn)

    def advance_cluster_time(self, cluster_time: Any) -> bool:
        """A reply's ``$clusterTime``: kept if later than the highest seen.
        Whether it is a well-formed one (a document whose ``clusterTime`` is a
        Timestamp): anything a server sends can be wrong, and a malformed one
        is never kept nor sent."""
        try:
            stamp = cluster_time["clusterTime"]
        except (KeyError, TypeError, IndexError):
            return False
        if not isinstance(stamp, Timestamp):
            return False
        current = self.cluster_time
        if current is None or stamp > current["clusterTime"]:
            if not isinstance(cluster_time, Mapping):
                return False
            self.cluster_time = cluster_time
        return True

    def _act(self, server: Server, verdict: Verdict, error: Exception,
             service_id: ObjectId | None) -> None:
        if self._closed or self._servers.get(server.address) is not server:
            return  # closed, or it left the topology meanwhile
        if verdict.mark_unknown and not self.load_balanced:
            self._apply(server, ServerDescription(server.address, error=error))
        if verdict.clear:
            if self.load_balanced:
                if service_id is not None:
                    server.pool.clear(service_id=service_id, error=error)
            else:
                server.pool.clear(interrupt_in_use_connections=verdict.interrupt, error=error)
        if server.monitor is not None:
            if verdict.request_check:
                server.monitor.request_check()
            elif verdict.mark_unknown:
                # SDAM: after a network error, cancel the check in progress and
                # close the monitoring connection; the next check reconnects.
                server.monitor.cancel_check()

    # -- descriptions and events ------------------------------------------------------------

    @property
    def srv_poller(self) -> SrvPoller | None:
        """The mongodb+srv:// name's poller while polling applies, else None."""
        return self._srv_poller

    def poll_srv(self, poller: SrvPoller) -> None:
        """Poll a mongodb+srv:// name with ``poller`` (its ``on_hosts`` calls
        :meth:`srv_hosts_changed`) while the topology is Unknown or Sharded: the
        topology stops it once discovery finds another type, and at close."""
        if self.polls_srv:
            self._srv_poller = poller
            if not self._deferred:
                poller.start()  # else start() starts it

    def srv_hosts_changed(self, hosts: Sequence[Address], srv_max_hosts: int = 0) -> None:
        """An SRV poll found ``hosts`` (the poller's ``on_hosts``): in an
        Unknown or Sharded topology, servers no longer listed are closed and new
        ones opened and monitored (see :func:`greenpool.client.topology.discovery.srv_update`)."""
        if self._closed:
            return
        old = self._description
        change = discovery.srv_update(old, hosts, srv_max_hosts=srv_max_hosts)
        if change.description is not old:
            self._enact(old, change)
            self._checks.deliver_all(True)

    @property
    def polls_srv(self) -> bool:
        """Whether an SRV poll may change the topology now (type Unknown or Sharded)."""
        return not self._closed and self._description.topology_type in discovery.SRV_POLLING

    def _apply(self, server: Server, new: ServerDescription) -> None:
        """``new`` describes ``server`` now: update the topology as discovery
        says, then emit the events."""
        if self._closed or self._servers.get(server.address) is not server:
            return  # a check of a server removed meanwhile: ignored (SDAM's "remove")
        old = self._description
        change = discovery.update(old, new, seed_count=len(self._seeds))
        if change.description is not old:  # else stale by topologyVersion
            self._enact(old, change, server, new)

    def _enact(self, old: TopologyDescription, change: discovery.Update,
               server: Server | None = None, new: ServerDescription | None = None) -> None:
        """Make ``change`` the topology (it follows ``new``, the outcome for
        ``server``, if given): its servers opened and closed, the server's pool
        made ready if it suits operations, then the events."""
        before = old.server_descriptions()
        added = [Server(self, address, self._make_pool(address)) for address in change.added]
        removed = [self._servers.pop(address) for address in change.removed]
        self._servers.update((each.address, each) for each in added)
        self._commit(change.description)
        now = change.description.server_descriptions()
        mine = now.get(server.address) if server is not None else None
        if server is not None and mine is not None and (
                mine.server_type in _SELECTABLE or (mine.is_server_type_known and self.direct)):
            server.pool.ready()
        for each in removed:
            each.close()
        try:
            if server is not None and new is not None:
                self._publish_changes(server.address, before, now, new)
            for each in added:
                self.publish("opened", _m.ServerOpeningEvent(each.address, self._topology_id))
            for each in removed:
                self._removed(each, change.removed[each.address])
            if not discovery.equivalent(old, change.description):
                self.publish("description_changed", _m.TopologyDescriptionChangedEvent(
                    old, change.description, self._topology_id))
        finally:
            # Monitors start after their ServerOpening event, whatever a
            # listener raised or a kill interrupted: a server without one
            # would never be checked.
            if not self._closed:
                for each in added:
                    each.start(self._make_checker, mode=self._monitoring_mode)
        for address in change.check:
            checked = self._servers.get(address)
            if checked is not None and checked.monitor is not None:
                checked.monitor.request_check()

    def _publish_changes(self, address: Address, before: Mapping[Address, ServerDescription],
                         now: Mapping[Address, ServerDescription],
                         new: ServerDescription) -> None:
        """ServerDescriptionChanged for the server described (as the rules left
        it; as reported if they removed it), then for any other the rules
        changed (an old primary marked Unknown)."""
        previous, current = before[address], now.get(address, new)
        if previous != current:
            self.publish("description_changed", _m.ServerDescriptionChangedEvent(
                previous, current, address, self._topology_id))
        for other, description in now.items():
            if other != address and other in before and before[other] != description:
                self.publish("description_changed", _m.ServerDescriptionChangedEvent(
                    before[other], description, other, self._topology_id))

    def _removed(self, server: Server, why: str) -> None:
        """``server`` (closed) left the topology: its event, and why."""
        self.publish("closed", _m.ServerClosedEvent(server.address, self._topology_id))
        self._departed.pop(server.address, None)
        self._departed[server.address] = why
        while len(self._departed) > _DEPARTED_KEPT:
            del self._departed[next(iter(self._departed))]
        if self._servers:
            _LOG.info("greenpool: %s", why)
        else:
            _LOG.warning("greenpool: %s; the topology has no servers left", why)

    def _commit(self, new: TopologyDescription) -> None:
        """Make ``new`` the description, and work out here, once per
        description, what every command would otherwise read of it."""
        self._description = new
        descriptions = new.server_descriptions()
        direct = new.topology_type == TOPOLOGY_TYPE.Single
        for address, server in self._servers.items():
            described = descriptions[address]
            server.description = described
            server.plain_primary_reads = not direct or described.server_type in PRIMARY_ALONE
        self._incompatible = discovery.compatibility_error(new)
        self.session_timeout_minutes = discovery.session_timeout_minutes(new)
        if self._srv_poller is not None and new.topology_type not in discovery.SRV_POLLING:
            # The polling spec: never rescan for a replica set or a direct connection.
            poller, self._srv_poller = self._srv_poller, None
            poller.stop()
        if self._incompatible is not None or self.server_selector is not None:
            # No shortcut: a user's server_selector decides every selection.
            self.primary_server = None
            return
        suitable = select_servers(new, PRIMARY, local_threshold=self.local_threshold,
                                  heartbeat_frequency=self._heartbeat_frequency)
        self.primary_server = (self._servers[suitable[0].address] if len(suitable) == 1
                               else None)

    def publish(self, method: str, event: object, *, driver_connection_id: int | None = None,
                server_connection_id: int | None = None) -> None:
        log_event(self._topology_id, event, driver_connection_id=driver_connection_id,
                  server_connection_id=server_connection_id)
        kind = _LISTENER_KINDS[type(event)]
        for listener in self._listeners:
            if isinstance(listener, kind):
                try:
                    call = handler(listener, method)  # PyMongo's rule, per object
                    if call is not None:
                        call(event)
                except Exception:
                    _LOG.exception("greenpool: listener %r raised in %s", listener, method)


def _seen(server: ServerDescription) -> str:
    """How selection's error shows one server: its address, type, last error."""
    text = f"{format_address(server.address)} {server.server_type_name}"
    if server.error is not None:
        text += f" (last error: {server.error!r})"
    return text


_LISTENER_KINDS: dict[type, type] = {
    _m.TopologyOpenedEvent: _m.TopologyListener,
    _m.TopologyDescriptionChangedEvent: _m.TopologyListener,
    _m.TopologyClosedEvent: _m.TopologyListener,
    _m.ServerOpeningEvent: _m.ServerListener,
    _m.ServerDescriptionChangedEvent: _m.ServerListener,
    _m.ServerClosedEvent: _m.ServerListener,
    _m.ServerHeartbeatStartedEvent: _m.ServerHeartbeatListener,
    _m.ServerHeartbeatSucceededEvent: _m.ServerHeartbeatListener,
    _m.ServerHeartbeatFailedEvent: _m.ServerHeartbeatListener,
}
