"""gunicorn settings for app.py: gevent workers forked from a preloaded app.

Patch before anything imports socket, ssl or threading: the master imports
the app (and creates its greenpool Client) before it forks the workers.
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
