"""Subscribing a listener: pool and command events, with PyMongo's interfaces.

    .venv/bin/python examples/listener.py [MONGODB_URI]

greenpool delivers its events to PyMongo's listener classes, so listeners
written for PyMongo work unchanged. This one counts CMAP events and command
durations and prints them in Prometheus' text format.
"""

import collections
import sys

import gevent
from pymongo import monitoring

import greenpool
from greenpool.embedded import EmbeddedServer


class Metrics(monitoring.ConnectionPoolListener, monitoring.CommandListener):
    def __init__(self) -> None:
        self.pool_events: collections.Counter[str] = collections.Counter()
        self.commands: collections.Counter[str] = collections.Counter()
        self.command_micros: collections.Counter[str] = collections.Counter()

    def _pool_event(self, event: object) -> None:
        self.pool_events[type(event).__name__] += 1

    pool_created = pool_ready = pool_cleared = pool_closed = _pool_event
    connection_created = connection_ready = connection_closed = _pool_event
    connection_check_out_started = connection_check_out_failed = _pool_event
    connection_checked_out = connection_checked_in = _pool_event

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.commands[event.command_name] += 1
        self.command_micros[event.command_name] += event.duration_micros

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.commands[event.command_name + "_failed"] += 1

    def prometheus(self, stats: greenpool.PoolStats) -> str:
        lines = [f'greenpool_pool_events_total{{event="{name}"}} {count}'
                 for name, count in sorted(self.pool_events.items())]
        lines += [f'greenpool_commands_total{{command="{name}"}} {count}'
                  for name, count in sorted(self.commands.items())]
        lines += [f'greenpool_command_seconds_total{{command="{name}"}} {micros / 1e6:.6f}'
                  for name, micros in sorted(self.command_micros.items())]
        lines += [f"greenpool_connections{{state=\"{state}\"}} {getattr(stats, state)}"
                  for state in ("available", "in_use", "pending")]
        return "\n".join(lines)


def main(uri: str) -> None:
    metrics = Metrics()
    with greenpool.Client(uri + "?maxPoolSize=4", event_listeners=[metrics]) as client:
        gevent.joinall([gevent.spawn(client.command, "admin", {"ping": 1}) for _ in range(50)],
                       raise_error=True)
        print(metrics.prometheus(client.stats()))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with EmbeddedServer() as server:
            main(server.uri)
