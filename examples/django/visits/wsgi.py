"""The WSGI application, as Django's ``startproject`` writes it:
``gunicorn visits.wsgi:application``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "visits.settings")

application = get_wsgi_application()
