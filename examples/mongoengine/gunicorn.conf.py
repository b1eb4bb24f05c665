"""gunicorn settings for app.py: gevent workers.

Patch before anything imports socket, ssl or threading: greenpool.pymongo
refuses to build its pools without gevent's monkey-patching.
"""

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402

bind = f"127.0.0.1:{os.environ.get('PORT', '8000')}"
worker_class = "gevent"
workers = int(os.environ.get("WORKERS", "2"))
worker_connections = 1000
# The app (and its client, connect=False) is imported once in the master; PyMongo's
# after-fork hook gives each worker a fresh topology and greenpool pools of its own.
preload_app = True
graceful_timeout = 5
timeout = 30
# gunicorn 27+: no control socket in ~/.gunicorn (older versions ignore this).
control_socket_disable = True
