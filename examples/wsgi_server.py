"""A WSGI app under gevent's own WSGIServer, one greenpool.Client for all requests.

    .venv/bin/python examples/wsgi_server.py [MONGODB_URI] [PORT]

(From a clone, after ``python3 devtools/dev.py demo`` or ``test`` made ``.venv``.)

Without a URI it starts an embedded SecantusDB on 127.0.0.1; the port
defaults to 8080 (0 picks a free one); Ctrl-C stops it quietly. ``GET /visits`` records a visit and
answers the count and the pool's counters as JSON. Every request runs in its
own greenlet and borrows a pooled connection for the length of each command,
so a few connections serve many concurrent requests, in arrival order.
"""

import json
import signal
import sys
from typing import Any

import gevent
from gevent.pywsgi import WSGIServer

import greenpool
from greenpool.testing import EmbeddedServer


def make_app(client: greenpool.Client) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"] != "/visits":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"try /visits\n"]
        client.command("example", {"insert": "wsgi_visits", "documents": [{"path": "/visits"}]})
        count = client.command("example", {"count": "wsgi_visits"})["n"]
        stats = client.stats()
        body = json.dumps({"visits": count, "pool": {
            "total": stats.total, "in_use": stats.in_use, "waiting": stats.waiting}}).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body)))])
        return [body]

    return app


def serve(uri: str, port: int) -> None:
    with greenpool.Client(uri + "?maxPoolSize=4") as client:
        server = WSGIServer(("127.0.0.1", port), make_app(client), log=None)
        server.start()
        # Ctrl-C stops the server from a greenlet of its own. Left to Python, it
        # would raise KeyboardInterrupt in whatever code runs when it comes, a
        # hub callback included, and gevent prints those as failures.
        interrupt = gevent.signal_handler(signal.SIGINT, server.stop)
        print(f"serving on http://127.0.0.1:{server.server_port}/visits", flush=True)
        try:
            server.serve_forever()
        finally:
            interrupt.cancel()
            server.stop()


if __name__ == "__main__":
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8080
    try:
        if len(sys.argv) > 1 and sys.argv[1]:
            serve(sys.argv[1], port)
        else:
            with EmbeddedServer() as embedded:
                serve(embedded.uri, port)
    except KeyboardInterrupt:  # Ctrl-C before serving began: the with blocks closed everything
        pass
