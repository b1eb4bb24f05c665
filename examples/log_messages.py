"""Reading greenpool's log messages (the CMAP spec's structured log messages).

    .venv/bin/python examples/log_messages.py [MONGODB_URI]

(From a clone, after ``python3 devtools/dev.py demo`` or ``test`` made ``.venv``.)

greenpool logs each pool event at DEBUG on the ``greenpool.connection``
logger. The message is readable text; ``record.structured`` holds the
spec's fields as a dict (for JSON logging).
"""

import json
import logging
import sys

import greenpool
from greenpool.testing import EmbeddedServer


class JSONLines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "structured", {})
        print(json.dumps({"logger": record.name, **fields}, default=str))


def main(uri: str) -> None:
    logger = logging.getLogger("greenpool.connection")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(JSONLines())
    with greenpool.Client(uri) as client:
        client.command("admin", {"ping": 1})


if __name__ == "__main__":
    try:
        if len(sys.argv) > 1:
            main(sys.argv[1])
        else:
            with EmbeddedServer() as server:
                main(server.uri)
    except KeyboardInterrupt:  # Ctrl-C: the with blocks have closed everything
        sys.exit(130)
