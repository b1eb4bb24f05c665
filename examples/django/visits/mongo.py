"""The process's one greenpool.Client, made when this module is first imported (by
``VisitsConfig.ready``, at ``django.setup()``).

``connect=False``: nothing is opened until the first operation, so a gunicorn master
that imports the app before forking (``preload_app``) holds no connection, and each
worker's client connects on first use, with pools of its own. Views share the client:
it is safe for any number of greenlets, and its pool bounds the connections
(``maxPoolSize``) however many requests a gevent worker serves at once.
"""

from django.conf import settings

import greenpool

client = greenpool.Client(settings.MONGODB_URI, connect=False, maxPoolSize=10,
                          appname="django-visits")
#: The URI's database (``mongodb://host/shop``), else ``shop``.
db = client.get_default_database("shop")
