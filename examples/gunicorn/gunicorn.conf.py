"""gunicorn settings for app.py: gevent workers forked from a preloaded app.

Patch before anything imports socket, ssl or threading: the master imports
the app (and creates its greenpool Client) before it forks the workers.

Each worker logs who holds its pool's connections and who waits when it
receives SIGUSR2 (``kill -USR2 <worker pid>``; to the master, SIGUSR2 means
"upgrade gunicorn"). It is set up in ``post_worker_init``, once gunicorn has
reset the worker's signal handlers.
"""

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402

bind = f"127.0.0.1:{os.environ.get('PORT', '8000')}"
worker_class = "gevent"
workers = 4
worker_connections = 1000
preload_app = True
graceful_timeout = 5
timeout = 30
# gunicorn 27+: no control socket in ~/.gunicorn (older versions ignore this).
control_socket_disable = True


def post_worker_init(worker: object) -> None:
    import signal

    import greenpool

    greenpool.report_on_signal(signal.SIGUSR2)
