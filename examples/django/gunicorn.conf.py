"""gunicorn settings for the Django project: gevent workers forked from a preloaded app.

    MONGODB_URI=mongodb://127.0.0.1:27017/shop PORT=8000 \
        gunicorn -c gunicorn.conf.py visits.wsgi:application

Patch before anything imports socket, ssl or threading: the master imports the project
(preload_app) before gunicorn's gevent worker would patch.
"""

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402

bind = f"127.0.0.1:{os.environ.get('PORT', '8000')}"
worker_class = "gevent"
workers = int(os.environ.get("WORKERS", "2"))
worker_connections = 1000
# The project (and its client, connect=False: no monitor, no socket) is imported once in
# the master; each worker's client connects on first use, with pools of its own.
preload_app = True
graceful_timeout = 5
timeout = 30
# gunicorn 27+: no control socket in ~/.gunicorn (older versions ignore this).
control_socket_disable = True
