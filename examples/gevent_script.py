"""A plain gevent program: many greenlets, one greenpool.Client.

    .venv/bin/python examples/gevent_script.py [MONGODB_URI]

(From a clone, after ``python3 devtools/dev.py demo`` or ``test`` made ``.venv``;
the system's python has no gevent.)

Without a URI it starts an embedded SecantusDB on 127.0.0.1 for the run.
No monkey-patching is needed: greenpool's sockets are gevent's own.
"""

import sys

import gevent

import greenpool
from greenpool.testing import EmbeddedServer


def main(uri: str) -> None:
    with greenpool.Client(uri + "?maxPoolSize=5") as client:
        client.command("example", {"insert": "visits",
                                   "documents": [{"page": n % 7} for n in range(100)]})

        def count_page(page: int) -> int:
            return client.command("example", {"count": "visits", "query": {"page": page}})["n"]

        jobs = [gevent.spawn(count_page, page) for page in range(7)]
        gevent.joinall(jobs, raise_error=True)
        print("visits per page:", [job.value for job in jobs])
        with client.find("example", "visits", {"page": 3}, batch_size=4) as cursor:
            print("page 3 documents:", sum(1 for _ in cursor))
        client.command("example", {"drop": "visits"})
        print("pool:", client.stats())


if __name__ == "__main__":
    try:
        if len(sys.argv) > 1:
            main(sys.argv[1])
        else:
            with EmbeddedServer() as server:
                main(server.uri)
    except KeyboardInterrupt:  # Ctrl-C: the with blocks have closed everything
        sys.exit(130)
