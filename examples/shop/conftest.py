"""The shop's tests run as the app does under gunicorn's gevent workers: monkey-patched
(stock PyMongo needs it to cooperate; greenpool.Client cooperates either way)."""

from gevent import monkey

monkey.patch_all()
