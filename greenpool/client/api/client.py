"""greenpool's Client: a MongoDB deployment, a pool and a monitor per server, commands.

::

    import greenpool

    with greenpool.Client("mongodb://127.0.0.1:27017/?maxPoolSize=20") as client:
        client.command("shop", {"insert": "orders", "documents": [{"sku": 1}]})
        with client.find("shop", "orders", {"sku": 1}, batch_size=100) as cursor:
            for order in cursor:
                ...

The Client talks to any deployment: a standalone server, a replica set, a
sharded cluster (through one mongos or several), a load balancer
(``loadBalanced=true``), or one server of any kind directly
(``directConnection=true``). Given several hosts, or one host without
directConnection, it discovers the deployment as the Server Discovery and
Monitoring spec says, from any seed.

What it owns:

* a :class:`~greenpool.client.topology.topology.Topology`: one
  :class:`~greenpool.client.topology.server.Server` per address discovery finds, each
  with its :class:`~greenpool.Pool` of :class:`~greenpool.wire.link.Link`
  connections and its monitor greenlet, which watches the server on its own
  connection (streamed awaitable hellos where the server supports them, with
  an RTT monitor on another connection, else a ``hello`` every
  heartbeatFrequencyMS; see :mod:`greenpool.client.topology.monitor`), makes the pool
  ready after a successful check and clears it after a failed one
  (interrupting in-use connections if the check timed out). In
  load-balanced mode there is no monitor and the pool is ready at once;
* for a ``mongodb+srv://`` name, its SRV records polled while the topology
  is Unknown or Sharded (mongos discovery), the servers following them;
* server selection by read preference (writes and primary reads: the
  primary, a mongos, the one server of a direct connection), waiting
  serverSelectionTimeoutMS at most while no server suits;
* the SDAM rules for application errors (:mod:`greenpool.client.topology.sdam`), for
  the server the connection came from: a network error, or a "not primary" /
  "node is recovering" error, marks it Unknown and requests a check (a retry
  then selects afresh: after a stepdown, the new primary); a clear touches
  that server's pool only; errors on a stale connection change nothing;
* one :class:`~greenpool.client.operations.operations.Operations`, the machinery its
  commands, cursors and sessions share: leasing connections, sending,
  implicit server sessions, pinning.

Retries follow the Retryable Reads and Retryable Writes specs
(:mod:`greenpool.client.operations.retries`): a command is classified by its name, as
those specs list operations (``find``, ``aggregate``, ``distinct``, ``count``
and the ``list*`` commands are retryable reads; ``insert``, single-document
``update`` and ``delete``, and ``findAndModify`` are retryable writes, sent
with a transaction ID), and retried once after a retryable error (as often
as a timeoutMS deadline allows), unless retryReads or retryWrites is false.
Any other command is not retried unless the call says ``retry=True``.
Errors are PyMongo's classes (:class:`~pymongo.errors.AutoReconnect`,
:class:`~pymongo.errors.OperationFailure`...) or greenpool's subclasses of
them, so existing ``except`` clauses keep working.

With several servers, what is about one server asks which: :attr:`Client.address`
is PyMongo's (the server a write selects, waiting for it if needed; an
error while load-balancing among several mongoses), :attr:`Client.nodes`,
:attr:`Client.primary`, :attr:`Client.secondaries` and :attr:`Client.arbiters`
are PyMongo's too, and :attr:`Client.pools` gives each server's pool.
:attr:`Client.pool`, :meth:`Client.stats`, :meth:`Client.pool_report` and
:attr:`Client.min_round_trip` are about the one server of a topology that
has one (a direct connection, a load balancer, a standalone, a one-member
set, a single mongos), and raise :class:`~pymongo.errors.InvalidOperation`
naming the servers when it has several.

Rules. This module is the top of the client layer: it may import any other
module of :mod:`greenpool.client`, and none of them imports it. The Client
checks what users give it (arguments, sessions, read preferences), then runs
the operation through its Operations' public methods; the state of leases,
server sessions, pins and open cursors lives there, not here. It builds
cursors and sessions on the same Operations, never on itself, so they need
nothing of this module.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import gevent
from bson.codec_options import CodecOptions, TypeRegistry
from bson.timestamp import Timestamp
from pymongo import monitoring as _m
from pymongo.client_session import TransactionOptions  # type: ignore[attr-defined]
from pymongo.driver_info import DriverInfo
from pymongo.errors import InvalidOperation, NetworkTimeout
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import _ServerMode
from pymongo.results import ClientBulkWriteResult
from pymongo.server_api import ServerApi
from pymongo.server_type import SERVER_TYPE
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription
from pymongo.write_concern import WriteConcern

from greenpool.address import Address, format_address
from greenpool.client.api.changestream import ChangeStream
from greenpool.client.api.cursor import Cursor
from greenpool.client.api.database import CACHED_NAMES, Database, Defaults, command_preference
from greenpool.client.api.findcursor import CommandCursor
from greenpool.client.config import readpref
from greenpool.client.config.arguments import api_fields, read_arguments
from greenpool.client.config.clientoptions import ClientOptions
from greenpool.client.config.codecs import check_codec_options
from greenpool.client.config.inert import warn_inert_options
from greenpool.client.config.settings import ClientSettings
from greenpool.client.config.tracing import TracingOptions
from greenpool.client.operations import clientbulk
from greenpool.client.operations.commands import CommandPublisher
from greenpool.client.operations.concern import (
    check_read_concern,
    check_session,
    check_write_concern,
    timed,
    write_concern_field,
)
from greenpool.client.operations.operations import Operations
from greenpool.client.operations.retries import has_write_stage
from greenpool.client.operations.session import Session
from greenpool.client.operations.sessionopts import ClientDefaults
from greenpool.client.operations.timeouts import check_seconds, current
from greenpool.client.topology.checker import LinkChecker, monitor_link_options
from greenpool.client.topology.server import Server
from greenpool.client.topology.srvpoll import SrvPoller
from greenpool.client.topology.topology import Topology
from greenpool.errors import ConfigurationError
from greenpool.pool.connection import Connection, PoolStats
from greenpool.pool.holds import PoolReport
from greenpool.pool.pool import Pool
from greenpool.wire.auth import MECHANISMS as LINK_MECHANISMS
from greenpool.wire.auth import Credentials as LinkCredentials
from greenpool.wire.connector import connect as connect_link
from greenpool.wire.link import Link, LinkOptions
from greenpool.wire.messages import check_database_name

__all__ = ["Client", "ReadPreferenceLike", "link_options"]

#: A round trip's limit that stands for none (about 30 years): under
#: timeoutMS=0 socketTimeoutMS no longer applies.
_NO_ROUND_TRIP_LIMIT = 1e9

#: What a ``read_preference=`` argument takes: a PyMongo read preference
#: (``pymongo.ReadPreference.SECONDARY``), a mode name, or a document.
ReadPreferenceLike = _ServerMode | str | Mapping[str, Any]


class Client:
    """A client for a MongoDB deployment: a standalone server, a replica set, a
    sharded cluster or a load balancer.

    Its arguments are PyMongo's MongoClient's
    (:mod:`greenpool.client.config.arguments` checks them):

    :param host: a ``mongodb://`` or ``mongodb+srv://`` connection string,
        a host (``"db1"``, ``"db1:27018"``, ``"db1,db2"``), or a list of
        hosts with at most one connection string among them; None:
        ``localhost``. The seeds: discovery finds the rest (one host without
        ``directConnection=true`` is discovered like several).
        ``replicaSet``, ``loadBalanced=true``, pool options (maxPoolSize,
        minPoolSize, maxConnecting, maxIdleTimeMS, waitQueueTimeoutMS; per
        server), timeouts, TLS, credentials, appName, compressors,
        heartbeatFrequencyMS, serverMonitoringMode and localThresholdMS come
        from the string or from keyword arguments of the same names.
    :param port: the port of every host written without one (the
        connection string's too); None: 27017.
    :param document_class, tz_aware, type_registry: codec options, as
        PyMongo's (more are keywords: ``tzinfo``, ``uuidRepresentation``,
        ``datetime_conversion``, ``unicode_decode_error_handler``; see
        :mod:`greenpool.client.config.codecs`).
    :param connect: False (or ``connect=false`` in the connection string):
        start no monitor and no greenlet until the first operation, for a
        client made before the process forks (a gunicorn app preloaded in
        the arbiter). None or True: start monitoring at once.
    :param event_listeners: PyMongo listener objects: CommandListener,
        ConnectionPoolListener, ServerListener, ServerHeartbeatListener,
        TopologyListener.
    :param acquire_sites: record where each checkout came from (the first
        frame outside greenpool, gevent, PyMongo and the standard library), for
        :meth:`pool_report` and the holders a
        :class:`~greenpool.WaitQueueTimeoutError` names: about 0.6 µs per
        checkout (see :class:`greenpool.Pool`). None (the default): only with
        a ``long_hold_threshold``.
    :param long_hold_threshold: seconds (None: never): report a connection
        checked out for longer, once per checkout (see :class:`greenpool.Pool`).
        greenpool's own setting, never a connection string option.

    :param kwargs: connection string options, as PyMongo's MongoClient
        takes them (``maxPoolSize=20``, ``w="majority"``,
        ``retryWrites=False``; names in any case), checked as the URI's are
        and winning over them; and PyMongo's keyword-only options:
        ``username`` and ``password`` (winning over the URI's),
        ``read_preference`` (a PyMongo read preference object),
        ``server_api`` (a :class:`~pymongo.server_api.ServerApi`: the Stable
        API's fields go with every command, the handshake is ``hello`` over
        OP_MSG), ``driver`` (a :class:`~pymongo.driver_info.DriverInfo`,
        added to the handshake's metadata) and ``server_selector`` (as
        PyMongo's: given the suitable servers' descriptions, returns those
        allowed). A wrong type is a :class:`~greenpool.OptionTypeError` (a
        ``TypeError`` too), a bad value a :class:`~greenpool.ConfigurationError`
        (a ``ValueError`` too), an unknown name an ``OptionTypeError``; each
        names the option. What greenpool.Client cannot do
        (``auto_encryption_opts``: client-side encryption is
        greenpool.pymongo's) is refused, saying so
        (:data:`greenpool.client.config.arguments.REFUSED`).

    The collection API is PyMongo's: ``client["shop"]`` or ``client.shop`` is
    a :class:`~greenpool.client.api.database.Database`, whose collections have
    PyMongo's CRUD methods (:class:`~greenpool.client.api.collection.Collection`),
    with the URI's write concern (w, wTimeoutMS, journal), read concern
    (readConcernLevel) and readPreference.

    :raises greenpool.ConfigurationError: a bad URI, or one that asks for
        what this Client does not do (an authentication mechanism other than
        SCRAM).
    """

    def __init__(self, host: str | Sequence[str] | None = None, port: int | None = None,
                 document_class: type[Any] | None = None, tz_aware: bool | None = None,
                 connect: bool | None = None, type_registry: TypeRegistry | None = None, *,
                 acquire_sites: bool | None = None, long_hold_threshold: float | None = None,
                 **kwargs: Any) -> None:
        arguments = read_arguments(host, port, {
            "document_class": document_class, "tz_aware": tz_aware, "connect": connect,
            "type_registry": type_registry, **kwargs})
        settings = arguments.settings
        self.settings = settings
        self._defaults = Defaults(settings, arguments.codec_keywords)
        warn_inert_options(settings)
        listeners = list(arguments.event_listeners)
        defaults = self._defaults
        self._options_view = ClientOptions(
            settings, codec_options=defaults.codec_options,
            read_preference=defaults.read_preference, write_concern=defaults.write_concern,
            read_concern=defaults.read_concern, event_listeners=listeners,
            server_selector=arguments.server_selector, driver=arguments.driver,
            server_api=arguments.server_api, connect=arguments.connect)
        self._link_options = link_options(settings, driver=arguments.driver,
                                          server_api=arguments.server_api)
        pool_listeners = [x for x in listeners if isinstance(x, _m.ConnectionPoolListener)]
        self._default_read_preference = settings.read_preference_object()
        # New connections read the options each time: append_metadata() changes them.
        current = _CurrentOptions(self._link_options)
        self._current_options = current
        connector = _bounded_connector(
            lambda conn, round_trip: connect_link(conn.address, current.options,
                                                  connection=conn, round_trip=round_trip))

        def make_pool(address: Address) -> Pool[Link]:
            return Pool(address, settings.pool, connector=connector, listeners=pool_listeners,
                        on_establish_error=lambda error, conn: (
                            self.topology.handle_establish_error(error, conn)),
                        acquire_sites=acquire_sites, long_hold_threshold=long_hold_threshold)

        self.topology = Topology(
            settings.hosts, make_pool, load_balanced=settings.load_balanced,
            direct=settings.direct_connection, replica_set=settings.replica_set,
            heartbeat_frequency=settings.heartbeat_frequency,
            server_selection_timeout=settings.server_selection_timeout,
            local_threshold=settings.local_threshold, listeners=listeners,
            server_selector=arguments.server_selector)
        self._operations = _operations_class(arguments.tracing)(
            self.topology, CommandPublisher(listeners), timeout=settings.timeout,
            retry_reads=settings.retry_reads, retry_writes=settings.retry_writes,
            max_adaptive_retries=settings.max_adaptive_retries,
            server_api=dict(self._link_options.server_api))
        self.topology.open(lambda server: LinkChecker(server.address, current.monitor_options),
                           monitoring_mode=settings.server_monitoring_mode,
                           deferred=not arguments.connect)
        if settings.srv_host is not None and not settings.load_balanced:
            # SRV polling (mongos discovery): the poller applies srvMaxHosts.
            self.topology.poll_srv(SrvPoller.for_settings(
                settings, current_hosts=lambda: list(self.topology.servers),
                on_hosts=self.topology.srv_hosts_changed))

    #: The host and port of ``Client()`` without arguments, as PyMongo's.
    HOST = "localhost"
    PORT = 27017

    @property
    def options(self) -> ClientOptions:
        """What the client was configured with, by the names of PyMongo's
        ``ClientOptions`` (``client.options.pool_options.max_pool_size``...)."""
        return self._options_view

    @property
    def _options(self) -> ClientOptions:
        # PyMongo's private name of the same object, which ODMs' code and tests read
        # (client._options.replica_set_name).
        return self._options_view

    @property
    def load_balanced(self) -> bool:
        """Whether the URI says ``loadBalanced=true`` (no monitor; the pool is ready at once)."""
        return self.settings.load_balanced

    # -- the deployment, as PyMongo's MongoClient shows it ---------------------------------

    @property
    def topology_description(self) -> TopologyDescription:
        """The deployment as discovered so far (PyMongo's class; it is replaced,
        never changed, as checks come in: read this property again for news)."""
        return self.topology.description

    @property
    def address(self) -> Address:
        """``(host, port)`` of the server writes go to: the one host of a direct
        connection or a load balancer (at once), else the standalone, primary or
        mongos that server selection finds (waiting for it, at most
        serverSelectionTimeoutMS), as PyMongo's ``MongoClient.address``.

        :raises pymongo.errors.InvalidOperation: the client spreads operations
            over several mongoses (use :attr:`nodes`).
        :raises pymongo.errors.ServerSelectionTimeoutError: no such server in time.
        """
        topology = self.topology
        if topology.direct or self.load_balanced:
            return topology.seeds[0]
        description = topology.description
        if (description.topology_type == TOPOLOGY_TYPE.Sharded
                and len(description.server_descriptions()) > 1):
            raise InvalidOperation(
                f"client.address has no single answer: the client spreads operations over "
                f"{len(description.server_descriptions())} mongoses "
                f"({_listing(description.server_descriptions())}); use client.nodes")
        self._operations.check_open()
        return topology.select().address

    @property
    def is_primary(self) -> bool:
        """Whether the server writes go to accepts writes (PyMongo's
        ``MongoClient.is_primary``): selects it as :attr:`address` does."""
        return bool(self._write_server().description.is_writable)

    @property
    def is_mongos(self) -> bool:
        """Whether the server writes go to is a mongos (PyMongo's
        ``MongoClient.is_mongos``): selects it as :attr:`address` does."""
        return self._write_server().description.server_type == SERVER_TYPE.Mongos

    def server_info(self, session: Session | None = None) -> dict[str, Any]:
        """The server's ``buildInfo`` reply (version, versionArray...), from the primary."""
        return dict(self["admin"].command("buildinfo", session=session))

    def eq_props(self) -> tuple[tuple[Address, ...], str | None, str | None, str]:
        """What two clients are equal by, as PyMongo's: the seeds, the replica
        set's name, the mongodb+srv:// host and its service name."""
        settings = self.settings
        seeds = tuple(sorted(self.topology.seeds, key=lambda a: (a[0], a[1] or 0)))
        return (seeds, settings.replica_set, settings.srv_host, settings.srv_service_name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Client):
            return self.eq_props() == other.eq_props()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.eq_props())

    def __iter__(self) -> Client:
        return self

    def __next__(self) -> Any:
        """Raise TypeError, as PyMongo's: a Client is not a cursor (``for x in
        client`` is a mistake for ``find()``)."""
        raise TypeError("'Client' object is not iterable")

    next = __next__

    @property
    def nodes(self) -> frozenset[Address]:
        """The servers known now (checked, of a known type), as PyMongo's
        ``MongoClient.nodes``; empty before the first check."""
        return frozenset(s.address for s in self.topology.description.known_servers)

    @property
    def primary(self) -> Address | None:
        """The replica set's primary now, or None (no primary known, or not a
        replica set), as PyMongo's ``MongoClient.primary``; never waits."""
        return next(iter(self._members(SERVER_TYPE.RSPrimary)), None)

    @property
    def secondaries(self) -> set[Address]:
        """The replica set's secondaries known now (PyMongo's ``MongoClient.secondaries``)."""
        return self._members(SERVER_TYPE.RSSecondary)

    @property
    def arbiters(self) -> set[Address]:
        """The replica set's arbiters known now (PyMongo's ``MongoClient.arbiters``)."""
        return self._members(SERVER_TYPE.RSArbiter)

    @property
    def pools(self) -> dict[Address, Pool[Link]]:
        """Each server's pool, by address, now (servers come and go as
        discovery finds and drops them)."""
        self.topology.start()  # connect=False: the servers open now
        return {address: server.pool for address, server in self.topology.servers.items()}

    @property
    def pool(self) -> Pool[Link]:
        """The pool of the topology's one server (a direct connection, a load
        balancer, a standalone, a one-member set, a single mongos).

        :raises pymongo.errors.InvalidOperation: the topology has several
            servers (use :attr:`pools`).
        """
        return self._only_server("client.pool").pool

    @property
    def min_round_trip(self) -> float:
        """The one server's minimum round-trip time in seconds (SDAM's
        minRoundTripTime over the monitor's last checks; 0 behind a load
        balancer, which has no monitor). One server only, as :attr:`pool`."""
        return self._only_server("client.min_round_trip").min_round_trip.value

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._operations.closed

    @property
    def timeout(self) -> float | None:
        """timeoutMS (seconds; None: not set, 0: no limit)."""
        return self._operations.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._operations.timeout = value

    def stats(self) -> PoolStats:
        """The pool's counters (see :meth:`greenpool.Pool.stats`); one server
        only, as :attr:`pool`."""
        return self.pool.stats()

    def get_stats(self) -> dict[str, int]:
        """The pool's always-on counters and gauges (see :meth:`greenpool.Pool.get_stats`)."""
        return self.pool.get_stats()

    def pop_stats(self) -> dict[str, int]:
        """:meth:`get_stats`, resetting the counters (see :meth:`greenpool.Pool.pop_stats`)."""
        return self.pool.pop_stats()

    def pool_report(self) -> PoolReport:
        """Who holds the pool's connections and who waits, now (see
        :meth:`greenpool.Pool.report`); ``print(client.pool_report())``. One
        server only, as :attr:`pool`."""
        return self.pool.report()

    # -- operations -----------------------------------------------------------------------

    def command(self, dbname: str, command: Mapping[str, Any], *,
                session: Session | None = None, timeout: float | None = None,
                read_preference: ReadPreferenceLike | None = None,
                retry: bool | None = None) -> dict[str, Any]:
        """Run ``command`` (a document whose first key is the command's name)
        on database ``dbname`` and return the server's reply.

        ``timeout`` (seconds, 0 for none) bounds the whole operation in place
        of the client's timeoutMS, within any enclosing
        :func:`greenpool.timeout` block (see :mod:`greenpool.client.operations.timeouts`). With
        a limit, ``maxTimeMS`` is added to the command (time left minus the
        server's minimum round trip), and running out of time raises an error
        whose ``timeout`` is true: ``ServerSelectionTimeoutError``,
        ``WaitQueueTimeoutError``, ``NetworkTimeout`` (the connection is
        discarded) or ``ExecutionTimeout``.

        ``read_preference`` (a PyMongo read preference, a mode name or a
        ``{"mode", "tags", "maxStalenessSeconds"}`` document) is sent as
        ``$readPreference`` where the Server Selection spec says
        (:mod:`greenpool.client.config.readpref`). As that spec requires of a generic
        command method, the URI's readPreference does not apply here: the
        default is primary. Inside a transaction it must be primary
        (:class:`~pymongo.errors.InvalidOperation` otherwise).

        ``retry``: None (the default) retries by the command's name, as the
        Retryable Reads and Writes specs list operations: a retryable read
        (``find``, ``aggregate`` without ``$out``/``$merge``, ``distinct``,
        ``count``, ``listCollections``, ``listIndexes``, ``listDatabases``)
        once after a network error, a cleared pool or a "not primary"-like
        code, unless retryReads=false; a retryable write (``insert``,
        ``update`` and ``delete`` of one document per statement,
        ``findAndModify``, acknowledged) on a server that supports them
        (a replica set member, mongos, a load balancer) with ``lsid`` and a
        new ``txnNumber``, once after an error labelled
        ``RetryableWriteError``, unless retryWrites=false. Under a time limit
        retries go on while time is left. ``True`` retries any command so
        (say it only for a command that is safe to run twice); ``False``
        never retries. Nothing is retried inside a transaction.

        :raises pymongo.errors.OperationFailure: the server refused it
            (``code``, ``details``, error labels).
        :raises pymongo.errors.AutoReconnect: a network error (the pool was
            cleared if the error called for it).
        :raises greenpool.PoolClearedError: the pool was cleared while waiting.
        :raises greenpool.WaitQueueTimeoutError: no connection within
            waitQueueTimeoutMS.
        :raises pymongo.errors.ServerSelectionTimeoutError: the server was
            not reachable within serverSelectionTimeoutMS.
        """
        if retry is not None:
            _check_retry(retry)
        ops = self._operations
        # The deadline first: a refused timeout leaves the session untouched.
        deadline = ops.deadline(timeout, session)
        preference = (readpref.PRIMARY if read_preference is None and session is None
                      else command_preference(read_preference, session))
        document = self._prepare(dbname, command, session)
        return ops.run_command(dbname, document, session, deadline, preference, retry)

    def cursor(self, dbname: str, command: Mapping[str, Any], *, batch_size: int | None = None,
               session: Session | None = None, timeout: float | None = None,
               timeout_mode: str | None = None,
               read_preference: ReadPreferenceLike | None = None,
               retry: bool | None = None, max_await_time_ms: int | None = None) -> Cursor:
        """Run a cursor-opening command (``find``, ``aggregate``,
        ``listCollections``...) and return a :class:`~greenpool.client.api.cursor.Cursor`
        over its documents, fetching further batches with ``getMore``.

        Close it (or use it as a context manager) when done early: that sends
        ``killCursors``. ``batch_size`` sets each getMore's batchSize; set the
        first batch's size in the command itself.

        ``timeout`` is as for :meth:`command`; ``timeout_mode`` says what it
        bounds (the CSOT spec's timeoutMode): ``"cursorLifetime"`` (the
        default; the opening command and every getMore, together) or
        ``"iteration"`` (the opening command, then each ``next()`` call on
        its own; the default for tailable cursors). ``close()`` gets the full
        limit afresh for its killCursors.

        ``read_preference`` is as for :meth:`command`. Without one, ``find``
        and an ``aggregate`` without ``$out`` or ``$merge`` (the Server
        Selection spec's "may-use-secondary" commands) follow the URI's
        readPreference; other commands read from the primary.

        ``retry`` is as for :meth:`command`, for the opening command only:
        a ``getMore`` is never retried (the cursor may have moved on).

        ``max_await_time_ms``, for a tailable awaitData cursor (``tailable``
        and ``awaitData`` in the command): how long each getMore waits for new
        data (its maxTimeMS, within the time left under a limit); it must be
        less than the limit (the CSOT spec).
        """
        _check_batch_size(batch_size)
        if retry is not None:
            _check_retry(retry)
        self._check_session(session)
        document = self._prepare(dbname, command, None)
        default = (self._default_read_preference if _may_use_secondary(document)
                   else readpref.PRIMARY)
        preference = command_preference(read_preference, session, default)
        return Cursor(self._operations, dbname, document, batch_size=batch_size,
                      session=session, timeout=timeout, timeout_mode=timeout_mode,
                      read_preference=preference, retry=retry,
                      max_await_time_ms=max_await_time_ms)

    def find(self, dbname: str, collection: str, filter: Mapping[str, Any] | None = None,
             *, batch_size: int | None = None, session: Session | None = None,
             timeout: float | None = None, timeout_mode: str | None = None,
             read_preference: ReadPreferenceLike | None = None, retry: bool | None = None,
             **options: Any) -> Cursor:
        """``find`` on ``dbname.collection`` as a :class:`~greenpool.client.api.cursor.Cursor`.

        ``batch_size`` applies to every batch, the first included. Other
        keywords are find's own fields (``sort``, ``projection``, ``limit``...).
        ``timeout``, ``timeout_mode`` and ``retry`` are as for :meth:`cursor`.
        ``read_preference`` is as for :meth:`command`; the default is the URI's
        readPreference, readPreferenceTags and maxStalenessSeconds.
        """
        _check_batch_size(batch_size)
        command: dict[str, Any] = {"find": collection, "filter": dict(filter or {})}
        if batch_size is not None:
            command["batchSize"] = batch_size
        command.update(options)
        return self.cursor(dbname, command, batch_size=batch_size, session=session,
                           timeout=timeout, timeout_mode=timeout_mode,
                           read_preference=read_preference, retry=retry)

    def start_session(self, causal_consistency: bool | None = None,
                      default_transaction_options: TransactionOptions | None = None,
                      snapshot: bool | None = False, *,
                      default_timeout: float | None = None) -> Session:
        """A new session; end it, or use it as a context manager. As
        PyMongo's: causally consistent unless ``causal_consistency=False`` or
        ``snapshot=True`` (its reads see one snapshot of the data);
        ``default_transaction_options`` (PyMongo's
        :class:`~pymongo.client_session.TransactionOptions`) are its
        transactions' options where ``start_transaction`` gives none, else
        the client's read and write concern and read preference apply.

        ``default_timeout`` (seconds, 0 for none; the CSOT spec's
        defaultTimeoutMS) bounds its commit, abort and ``with_transaction``
        instead of the client's timeoutMS.
        """
        ops = self._operations
        ops.check_open()
        defaults = self._defaults
        session = Session(ops, default_timeout=check_seconds("default_timeout", default_timeout),
                          client=ClientDefaults(defaults.read_concern, defaults.write_concern,
                                                defaults.read_preference),
                          causal_consistency=causal_consistency,
                          default_transaction_options=default_transaction_options,
                          snapshot=snapshot)
        ops.session_started(session)
        return session

    # -- the collection API (PyMongo's) -----------------------------------------------------

    @property
    def codec_options(self) -> CodecOptions[Any]:
        """The codec options the client's databases inherit."""
        return self._defaults.codec_options

    @property
    def read_preference(self) -> _ServerMode:
        """The read preference the client's databases inherit (the URI's)."""
        return self._defaults.read_preference

    @property
    def write_concern(self) -> WriteConcern:
        """The write concern the client's databases inherit (the URI's)."""
        return self._defaults.write_concern

    @property
    def read_concern(self) -> ReadConcern:
        """The read concern the client's databases inherit (the URI's)."""
        return self._defaults.read_concern

    def get_database(self, name: str | None = None,
                     codec_options: CodecOptions[Any] | None = None,
                     read_preference: ReadPreferenceLike | None = None,
                     write_concern: WriteConcern | None = None,
                     read_concern: ReadConcern | None = None) -> Database:
        """The database ``name`` (the URI's database when None), with the
        client's options unless given."""
        if name is None:
            name = self.settings.database
            if name is None:
                raise ConfigurationError("no database name given, and the connection string "
                                         "names none (mongodb://host/DATABASE)")
        defaults = self._defaults
        return Database(self, name, self._operations,
                        codec_options=check_codec_options(codec_options,
                                                          default=defaults.codec_options),
                        read_preference=(defaults.read_preference if read_preference is None
                                         else readpref.coerce(read_preference)),
                        write_concern=check_write_concern(write_concern,
                                                          default=defaults.write_concern),
                        read_concern=check_read_concern(read_concern,
                                                        default=defaults.read_concern))

    def get_default_database(self, default: str | None = None,
                             codec_options: CodecOptions[Any] | None = None,
                             read_preference: ReadPreferenceLike | None = None,
                             write_concern: WriteConcern | None = None,
                             read_concern: ReadConcern | None = None) -> Database:
        """The URI's database, else ``default``, with the client's options unless given."""
        return self.get_database(self.settings.database or default, codec_options,
                                 read_preference, write_concern, read_concern)

    def __getitem__(self, name: str) -> Database:
        cached = self._defaults.databases
        database = cached.get(name)
        if database is None:
            database = self.get_database(name)
            if len(cached) < CACHED_NAMES:
                cached[name] = database
        return database

    def __getattr__(self, name: str) -> Database:
        if name.startswith("_"):
            raise AttributeError(
                f"Client has no attribute {name!r}; for the database {name!r} use "
                f"client[{name!r}]")
        return self[name]

    def list_database_names(self, session: Session | None = None,
                            comment: Any = None) -> list[str]:
        """The names of the server's databases."""
        command: dict[str, Any] = {"listDatabases": 1, "nameOnly": True}
        if comment is not None:
            command["comment"] = comment
        reply = self.command("admin", command, session=session)
        return [each["name"] for each in reply["databases"]]

    def list_databases(self, session: Session | None = None, comment: Any = None,
                       **kwargs: Any) -> CommandCursor:
        """A cursor over the server's database descriptions (listDatabases's
        fields, such as ``nameOnly`` or ``filter``, as keywords)."""
        command: dict[str, Any] = {"listDatabases": 1, **kwargs}
        if comment is not None:
            command["comment"] = comment
        reply = self.command("admin", command, session=session)
        return CommandCursor(None, iter(reply["databases"]))

    def watch(self, pipeline: list[Mapping[str, Any]] | None = None,
              full_document: str | None = None, resume_after: Mapping[str, Any] | None = None,
              max_await_time_ms: int | None = None, batch_size: int | None = None,
              collation: Any = None, start_at_operation_time: Timestamp | None = None,
              session: Session | None = None, start_after: Mapping[str, Any] | None = None,
              comment: Any = None, full_document_before_change: str | None = None,
              show_expanded_events: bool | None = None) -> ChangeStream:
        """A change stream of every change in the deployment but in the ``admin``,
        ``local`` and ``config`` databases (PyMongo's ``MongoClient.watch``), with
        ``pipeline``'s stages after ``$changeStream``; the arguments are
        :meth:`Collection.watch <greenpool.client.api.collection.Collection.watch>`'s."""
        return self.get_database("admin")._watch(
            pipeline, full_document, resume_after, max_await_time_ms, batch_size, collation,
            start_at_operation_time, session, start_after, comment,
            full_document_before_change, show_expanded_events, cluster=True)

    def bulk_write(self, models: Sequence[Any], session: Session | None = None,
                   ordered: bool = True, verbose_results: bool = False,
                   bypass_document_validation: bool | None = None, comment: Any = None,
                   let: Mapping[str, Any] | None = None,
                   write_concern: WriteConcern | None = None) -> ClientBulkWriteResult:
        """Run writes across collections and databases in the server's
        ``bulkWrite`` command (MongoDB 8.0 and later), as PyMongo's
        ``MongoClient.bulk_write`` does: ``models`` are PyMongo's InsertOne,
        UpdateOne, UpdateMany, ReplaceOne, DeleteOne and DeleteMany, each
        with its ``namespace=``; the result is PyMongo's
        :class:`~pymongo.results.ClientBulkWriteResult`, the error its
        :class:`~pymongo.errors.ClientBulkWriteException` (see
        :mod:`greenpool.client.operations.clientbulk`)::

            from pymongo import DeleteOne, InsertOne

            result = client.bulk_write([
                InsertOne({"sku": 1}, namespace="shop.orders"),
                DeleteOne({"sku": 1}, namespace="shop.carts"),
            ])
            result.inserted_count, result.deleted_count

        The write concern is ``write_concern``, else the client's; inside a
        transaction, the transaction's (giving one is an error then)."""
        if not isinstance(models, list):
            raise TypeError(f"models must be a list of write operations, not {models!r}")
        for name, value in (("ordered", ordered), ("verbose_results", verbose_results)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, not {value!r}")
        if bypass_document_validation is not None and not isinstance(
                bypass_document_validation, bool):
            raise TypeError(f"bypass_document_validation must be True, False or None, "
                            f"not {bypass_document_validation!r}")
        if let is not None and not isinstance(let, Mapping):
            raise TypeError(f"let must be a document (a dict or another mapping), not {let!r}")
        self._operations.check_open()
        if session is not None:
            if not isinstance(session, Session):
                raise TypeError(f"session must be a greenpool Session (client.start_session()), "
                                f"not {session!r}")
            self._check_session(session)
        in_transaction = session is not None and session.in_transaction
        if in_transaction and write_concern is not None:
            raise InvalidOperation("Cannot set write concern after starting a transaction: "
                                   "the transaction's write concern applies")
        concern = check_write_concern(write_concern, default=self._defaults.write_concern)
        acknowledged = in_transaction or concern.acknowledged
        if not acknowledged:
            if verbose_results:
                raise InvalidOperation("Cannot request unacknowledged write concern and verbose "
                                       "results (verbose_results=True with w=0)")
            if ordered:
                raise InvalidOperation("Cannot request unacknowledged write concern and "
                                       "ordered writes (pass ordered=False with w=0)")
            check_session(session, concern)
        builder = clientbulk.Builder()
        builder.add_models(models)
        options: dict[str, Any] = {}
        if bypass_document_validation is not None:
            options["bypassDocumentValidation"] = bypass_document_validation
        if comment is not None:
            options["comment"] = comment
        if let is not None:
            options["let"] = let
        return clientbulk.execute(
            self._operations, builder, session=session, ordered=ordered,
            verbose=verbose_results, acknowledged=acknowledged,
            write_concern=write_concern_field(concern), options=options,
            codec_options=self._defaults.codec_options)

    def drop_database(self, name_or_database: str | Database,
                      session: Session | None = None, comment: Any = None) -> None:
        """Drop a database, with the client's write concern."""
        name = (name_or_database.name if isinstance(name_or_database, Database)
                else name_or_database)
        if not isinstance(name, str):
            raise TypeError(f"name_or_database must be a database name or a Database, "
                            f"not {name_or_database!r}")
        under_timeout = self._operations.deadline(None, session) is not None
        self.get_database(name).command(
            _with_write_concern({"dropDatabase": 1}, self._defaults.write_concern, session,
                                under_timeout),
            session=session, comment=comment, read_preference=readpref.WRITE)

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """End sessions (aborting their transactions), close cursors, stop the
        monitors, close the pools. Idempotent; operations afterwards raise
        :class:`~pymongo.errors.InvalidOperation`."""
        if self._operations.closing:
            return
        # The teardown always runs, whatever the goodbyes raise (a kill included).
        try:
            self._operations.close()
        finally:
            self.topology.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        seeds = ",".join(format_address(seed) for seed in self.topology.seeds)
        mode = ", load balanced" if self.load_balanced else ""
        state = "closed" if self._operations.closed else "open"
        return f"<greenpool.Client {seeds}{mode}, {state}>"

    # -- internals: the topology -------------------------------------------------------------

    def append_metadata(self, driver_info: DriverInfo) -> None:
        """Add a wrapping library's name, version and platform to the
        handshake's metadata of the connections made from now on (PyMongo's
        ``MongoClient.append_metadata``); a name already there is not added twice."""
        if not isinstance(driver_info, DriverInfo):
            raise TypeError(f"driver_info must be a pymongo.driver_info.DriverInfo, "
                            f"not {driver_info!r}")
        options = self._current_options.options
        joined = _joined_driver(options.driver, driver_info)
        if joined is not options.driver:
            self._current_options.replace(dataclasses.replace(options, driver=joined))
            self._link_options = self._current_options.options

    def _write_server(self) -> Server:
        self._operations.check_open()
        return self.topology.select(readpref.WRITE)

    def _members(self, server_type: int) -> set[Address]:
        return {s.address for s in self.topology.description.server_descriptions().values()
                if s.server_type == server_type}

    def _only_server(self, what: str) -> Server:
        self.topology.start()  # connect=False: the servers open now
        servers = self.topology.servers
        if len(servers) != 1:
            raise InvalidOperation(
                f"{what} is about the one server of a topology that has one; this "
                f"{self.topology.description.topology_type_name} topology has "
                f"{len(servers)} ({_listing(servers) or 'none'}): use client.pools[address]")
        (server,) = servers.values()
        return server

    # -- internals: commands --------------------------------------------------------------

    def _prepare(self, dbname: str, command: Mapping[str, Any],
                 session: Session | None) -> dict[str, Any]:
        self._operations.check_open()
        check_database_name(dbname)
        # A dict first: isinstance against the Mapping ABC costs two more calls.
        if not (type(command) is dict or isinstance(command, Mapping)) or not command:
            raise InvalidOperation(
                f"command must be a non-empty document whose first key is the command's "
                f"name, not {command!r}")
        document = dict(command)
        if session is not None:
            self._check_session(session)
            session.decorate(document)
        return document

    def _check_session(self, session: Session | None) -> None:
        if session is not None and session.operations is not self._operations:
            raise InvalidOperation("the session was started by another client")


# -- settings -----------------------------------------------------------------------------


class _CurrentOptions:
    """The options new pooled and monitoring connections are made with, now."""

    __slots__ = ("monitor_options", "options")

    def __init__(self, options: LinkOptions) -> None:
        self.replace(options)

    def replace(self, options: LinkOptions) -> None:
        self.options = options
        self.monitor_options = monitor_link_options(options)


_Driver = tuple[str | None, str | None, str | None]


def _joined_driver(current: _Driver | None, added: DriverInfo) -> _Driver | None:
    """``added`` after ``current``'s fields (``|`` between), unless its name is there."""
    if current is None:
        return added
    if added.name in (current[0] or "").split("|"):
        return current
    name, version, platform = (
        "|".join(part for part in (old, new) if part) or None
        for old, new in zip(current, added, strict=True))
    return (name, version, platform)


def _listing(addresses: Iterable[Address]) -> str:
    return ", ".join(format_address(address) for address in addresses)


def link_options(settings: ClientSettings, *, driver: DriverInfo | None = None,
                 server_api: ServerApi | None = None) -> LinkOptions:
    """The options of the Client's pooled connections, from its URI's
    settings (the check tool connects with them too), a wrapping library's
    ``driver`` information and the Stable API's ``server_api``."""
    return LinkOptions(
        driver=driver,
        server_api=() if server_api is None else api_fields(server_api),
        connect_timeout=settings.connect_timeout,
        socket_timeout=settings.socket_timeout,
        ssl_context=settings.ssl_context(),
        app_name=settings.app_name,
        compressors=settings.compressors,
        zlib_compression_level=settings.zlib_compression_level,
        credentials=_credentials(settings),
        load_balanced=settings.load_balanced,
    )


def _bounded_connector(connector: Callable[[Connection[Link], float | None], Link],
                       ) -> Callable[[Connection[Link]], Link]:
    """``connector`` bounded by the deadline of the operation that waits
    for the connection (timeoutMS), if any, on top of connectTimeoutMS; its
    hello and authentication round trips get the time left instead of
    socketTimeoutMS (``connector``'s second argument; None: socketTimeoutMS),
    as the CSOT spec says, and no limit of their own under timeoutMS=0.

    Running out of time raises a TimeoutError inside the establishment, at
    whatever socket wait it is in, so the link treats it as the socket
    timeout it stands for: the socket is closed and the error is a
    NetworkTimeout. Connections established in the background (minPoolSize)
    have no deadline and keep connectTimeoutMS alone, as the spec says."""

    def bounded(conn: Connection[Link]) -> Link:
        deadline = current()
        if deadline is None:
            return connector(conn, None)
        if not deadline.bounded:
            return connector(conn, _NO_ROUND_TRIP_LIMIT)
        left = deadline.remaining()
        expired = TimeoutError(
            f"establishing a connection exceeded the operation's time limit of "
            f"{deadline.limit * 1000:g} ms")
        if left <= 0:
            raise NetworkTimeout(f"{format_address(conn.address)}: {expired}")
        with gevent.Timeout(left, expired):
            return connector(conn, left)

    return bounded


def _credentials(settings: ClientSettings) -> LinkCredentials | None:
    given = settings.credentials
    if given is None:
        return None
    if given.mechanism not in (None, *LINK_MECHANISMS) or given.username is None:
        raise ConfigurationError(
            f"authentication mechanism {given.mechanism!r} is not supported by "
            f"greenpool.Client, which speaks SCRAM-SHA-256 and SCRAM-SHA-1")
    if given.password is None:
        raise ConfigurationError(
            f"a password is required: the connection string names the user "
            f"{given.username!r} but no password (mongodb://user:password@host/; "
            f"SCRAM-SHA-256 and SCRAM-SHA-1 need one)")
    return LinkCredentials(given.username, given.password.reveal(), given.source,
                           given.mechanism, given.mechanism_properties)


def _may_use_secondary(command: Mapping[str, Any]) -> bool:
    name = next(iter(command))
    return name == "find" or (name == "aggregate" and not has_write_stage(command))


def _with_write_concern(command: dict[str, Any], write_concern: WriteConcern,
                        session: Session | None, under_timeout: bool) -> dict[str, Any]:
    """``command`` with ``write_concern`` (none inside a transaction; no
    wtimeout ``under_timeout``, timeoutMS's)."""
    field = write_concern_field(write_concern)
    if under_timeout:
        field = timed(field)
    if field is not None and not (session is not None and session.in_transaction):
        command["writeConcern"] = field
    return command


def _check_retry(retry: object) -> None:
    if retry is not None and not isinstance(retry, bool):
        raise TypeError(f"retry must be None, True or False, not {retry!r}")


def _check_batch_size(batch_size: int | None) -> None:
    if batch_size is not None and (
            not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 0):
        raise ValueError(f"batch_size must be None or an int >= 0, not {batch_size!r}")


def _operations_class(tracing: TracingOptions) -> Callable[..., Operations]:
    """What runs the Client's operations: plain Operations unless it traces, so that a
    Client that does not trace runs not one instruction of tracing (the tracing module,
    and OpenTelemetry, are not even imported)."""
    if not tracing.enabled:
        return Operations
    from greenpool.client.operations.traced import TracedOperations

    return functools.partial(TracedOperations,
                             query_text_max_length=tracing.query_text_max_length)
