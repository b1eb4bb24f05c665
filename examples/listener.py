"""Pool metrics on a Prometheus endpoint, through OpenTelemetry.

    .venv/bin/python examples/listener.py [MONGODB_URI] [--serve PORT]

:class:`greenpool.otel.ConnectionMetrics` is a PyMongo pool listener that
records the OpenTelemetry semantic conventions' DB client connection metrics
(``pip install 'greenpool[otel]' opentelemetry-sdk``). Here the SDK keeps
them and a small WSGI app under gevent serves them in Prometheus' text format
at ``http://127.0.0.1:PORT/metrics``. The same listener works for
``greenpool.pymongo.MongoClient``.

Without ``--serve`` it runs 50 pings, scrapes its own endpoint once, prints
what Prometheus would read and exits.
"""

import argparse
import math
from collections.abc import Callable, Iterable
from typing import Any

import gevent
from gevent import socket
from gevent.pywsgi import WSGIServer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader, Sum

import greenpool
from greenpool.otel import ConnectionMetrics
from greenpool.testing import EmbeddedServer

# Prometheus spells OpenTelemetry units as name suffixes; "{connection}" and
# the like are annotations and add nothing.
UNIT_SUFFIXES = {"s": "_seconds"}


def prometheus_name(name: str, unit: str) -> str:
    return name.replace(".", "_") + UNIT_SUFFIXES.get(unit, "")


def labels(attributes: Any, **extra: str) -> str:
    pairs = {key.replace(".", "_"): str(value) for key, value in attributes.items()}
    pairs.update(extra)
    quoted = (value.replace("\\", "\\\\").replace('"', '\\"') for value in pairs.values())
    quoted_pairs = zip(pairs, quoted, strict=True)
    return "{" + ",".join(f'{key}="{value}"' for key, value in quoted_pairs) + "}"


def exposition(reader: InMemoryMetricReader) -> str:
    """The reader's metrics in Prometheus' text format (version 0.0.4)."""
    lines: list[str] = []
    data = reader.get_metrics_data()
    metrics = [metric for resource in (data.resource_metrics if data else ())
               for scope in resource.scope_metrics for metric in scope.metrics]
    for metric in metrics:
        name = prometheus_name(metric.name, metric.unit)
        points: Iterable[Any] = metric.data.data_points
        if isinstance(metric.data, Histogram):
            lines += [f"# HELP {name} {metric.description}", f"# TYPE {name} histogram"]
            for point in points:
                running = 0
                for bound, count in zip([*point.explicit_bounds, math.inf], point.bucket_counts,
                                        strict=True):
                    running += count
                    le = "+Inf" if bound == math.inf else repr(float(bound))
                    lines.append(f"{name}_bucket{labels(point.attributes, le=le)} {running}")
                lines.append(f"{name}_sum{labels(point.attributes)} {point.sum}")
                lines.append(f"{name}_count{labels(point.attributes)} {point.count}")
            continue
        counter = isinstance(metric.data, Sum) and metric.data.is_monotonic
        if counter:
            name += "_total"
        lines += [f"# HELP {name} {metric.description}",
                  f"# TYPE {name} {'counter' if counter else 'gauge'}"]
        lines += [f"{name}{labels(point.attributes)} {point.value}" for point in points]
    return "\n".join(lines) + "\n"


def metrics_app(reader: InMemoryMetricReader) -> Callable[..., list[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ["PATH_INFO"] != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"see /metrics\n"]
        body = exposition(reader).encode()
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4")])
        return [body]
    return app


def scrape(port: int) -> str:
    """GET /metrics as Prometheus would (over gevent's socket: this script
    does not monkey-patch)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        reply = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, body = reply.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") and not head.startswith(b"HTTP/1.0 200"):
        raise RuntimeError(f"/metrics answered {head.splitlines()[0]!r}")
    return body.decode()


def main(uri: str, serve: int | None) -> None:
    reader = InMemoryMetricReader()
    metrics = ConnectionMetrics(MeterProvider(metric_readers=[reader]))
    endpoint = WSGIServer(("127.0.0.1", serve or 0), metrics_app(reader), log=None)
    endpoint.start()
    with greenpool.Client(uri + "?maxPoolSize=4", event_listeners=[metrics]) as client:
        gevent.joinall([gevent.spawn(client.command, "admin", {"ping": 1}) for _ in range(50)],
                       raise_error=True)
        if serve is None:
            print(scrape(endpoint.server_port), end="")
            endpoint.stop()
            return
        print(f"serving http://127.0.0.1:{endpoint.server_port}/metrics; Ctrl-C stops",
              flush=True)
        endpoint.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri", nargs="?", help="a MongoDB URI (default: an embedded server)")
    parser.add_argument("--serve", type=int, metavar="PORT",
                        help="keep serving /metrics on 127.0.0.1:PORT")
    args = parser.parse_args()
    if args.uri:
        main(args.uri, args.serve)
    else:
        with EmbeddedServer() as server:
            main(server.uri, args.serve)
