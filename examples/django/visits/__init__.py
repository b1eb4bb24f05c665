"""A Django project whose views use greenpool.Client (see ``mongo.py``)."""
