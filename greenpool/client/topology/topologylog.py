"""SDAM log messages on the ``greenpool.topology`` logger.

Rules of this module: turning SDAM events into the spec's log messages; no monitoring
logic, no I/O beyond the logger.

The SDAM Logging and Monitoring spec's messages, at DEBUG, one for each of
these SDAM events (the Client's :class:`~greenpool.client.topology.topology.Topology` emits
them): TopologyOpening ("Starting topology monitoring"), TopologyClosed
("Stopped topology monitoring"), ServerOpening ("Starting server
monitoring"), ServerClosed ("Stopped server monitoring"),
TopologyDescriptionChanged ("Topology description changed") and the three
heartbeat events ("Server heartbeat started", "... succeeded", "... failed").
ServerDescriptionChanged has none: the spec leaves it out as redundant.

As for the connection messages (:mod:`greenpool.pool.monitoring`), the record's
message is the spec's unstructured form and ``record.structured`` the
structured one: a dict with ``message``, ``topologyId`` and, for a server's
messages, ``serverHost`` and ``serverPort``; heartbeats add ``awaited``,
``driverConnectionId`` (the monitor's connection, counted from 1 per
topology), ``serverConnectionId`` (once the server told it),
``durationMS``, and ``reply`` (relaxed extended JSON) or ``failure``.
"""

from __future__ import annotations

import logging
from typing import Any

from bson import json_util
from bson.objectid import ObjectId
from pymongo import monitoring as _m

__all__ = ["LOGGER", "log_event"]

LOGGER = logging.getLogger("greenpool.topology")
_RELAXED = json_util.JSONOptions(json_mode=json_util.JSONMode.RELAXED)


def log_event(topology_id: ObjectId, event: object, *,
              driver_connection_id: int | None = None,
              server_connection_id: int | None = None) -> None:
    """Log the spec's message for an SDAM ``event`` (PyMongo's event
    classes), if ``greenpool.topology`` logs DEBUG. The connection ids
    apply to heartbeat events."""
    if not LOGGER.isEnabledFor(logging.DEBUG):
        return
    built = _build(topology_id, event, driver_connection_id, server_connection_id)
    if built is not None:
        text, fields = built
        LOGGER.debug(text, extra={"structured": fields})


def _build(topology_id: ObjectId, event: object, driver_id: int | None,
           server_id: int | None) -> tuple[str, dict[str, Any]] | None:
    fields: dict[str, Any] = {"topologyId": topology_id}
    if isinstance(event, _m.TopologyOpenedEvent):
        fields["message"] = "Starting topology monitoring"
        return f"Starting monitoring for topology with ID {topology_id}", fields
    if isinstance(event, _m.TopologyClosedEvent):
        fields["message"] = "Stopped topology monitoring"
        return f"Stopped monitoring for topology with ID {topology_id}", fields
    if isinstance(event, _m.TopologyDescriptionChangedEvent):
        previous, new = repr(event.previous_description), repr(event.new_description)
        fields.update(message="Topology description changed",
                      previousDescription=previous, newDescription=new)
        return (f"Description changed for topology with ID {topology_id}. Previous "
                f"description: {previous}. New description: {new}", fields)
    if isinstance(event, (_m.ServerOpeningEvent, _m.ServerClosedEvent)):
        opening = isinstance(event, _m.ServerOpeningEvent)
        fields["message"] = ("Starting server monitoring" if opening
                             else "Stopped server monitoring")
        where = _server(fields, event.server_address)
        verb = "Starting" if opening else "Stopped"
        return f"{verb} monitoring for server {where} in topology with ID {topology_id}", fields
    if isinstance(event, _m._ServerHeartbeatEvent):
        return _heartbeat(fields, topology_id, event, driver_id, server_id)
    return None  # ServerDescriptionChanged: no message (the spec omits it)


def _heartbeat(fields: dict[str, Any], topology_id: ObjectId, event: _m._ServerHeartbeatEvent,
               driver_id: int | None, server_id: int | None) -> tuple[str, dict[str, Any]]:
    where = _server(fields, event.connection_id)
    fields["awaited"] = event.awaited
    if driver_id is not None:
        fields["driverConnectionId"] = driver_id
    if server_id is not None:
        fields["serverConnectionId"] = server_id
    on = (f"{where} on connection with driver-generated ID {driver_id} and server-generated "
          f"ID {server_id} in topology with ID {topology_id}. Awaited: {event.awaited}")
    if isinstance(event, _m.ServerHeartbeatStartedEvent):
        fields["message"] = "Server heartbeat started"
        return f"Heartbeat started for {on}", fields
    assert isinstance(event, (_m.ServerHeartbeatSucceededEvent, _m.ServerHeartbeatFailedEvent))
    duration = event.duration * 1000
    fields["durationMS"] = duration
    if isinstance(event, _m.ServerHeartbeatSucceededEvent):
        reply = json_util.dumps(event.reply.document, json_options=_RELAXED)
        fields.update(message="Server heartbeat succeeded", reply=reply)
        return f"Heartbeat succeeded in {duration:g} ms for {on}. Reply: {reply}", fields
    failure = f"{type(event.reply).__name__}: {event.reply}"
    fields.update(message="Server heartbeat failed", failure=failure)
    return f"Heartbeat failed in {duration:g} ms for {on}. Failure: {failure}", fields


def _server(fields: dict[str, Any], address: tuple[str, int | None]) -> str:
    host, port = address
    fields["serverHost"] = host
    if port is None:  # a Unix domain socket
        return host
    fields["serverPort"] = port
    return f"{host}:{port}"
