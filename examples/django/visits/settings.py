"""Django settings for the example: no SQL database, no ORM models; the views use
MongoDB through greenpool.Client (``visits/mongo.py``).

``MONGODB_URI`` names the deployment and the database (``/shop``); ``visits.mongo`` reads it
once, when the app is ready (``visits/apps.py``).
"""

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "an example's key: set your own")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = ["visits"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "visits.urls"
WSGI_APPLICATION = "visits.wsgi.application"
# Nothing of Django's ORM: the data is MongoDB's, through greenpool.Client.
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True

MONGODB_URI = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017/shop")
