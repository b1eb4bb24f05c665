from django.apps import AppConfig


class VisitsConfig(AppConfig):
    name = "visits"

    def ready(self) -> None:
        # The client is made once, at django.setup(): in gunicorn's master with
        # preload_app, before the fork. connect=False opens nothing there.
        from visits import mongo  # noqa: F401
