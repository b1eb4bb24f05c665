"""``client.options``: what a Client was configured with, by the names of PyMongo's
:class:`pymongo.client_options.ClientOptions`.

Code written against PyMongo reads ``client.options.read_preference``,
``client.options.pool_options.max_pool_size`` or ``client.options.replica_set_name``;
these classes answer the same names from the Client's settings. They are
views: nothing here changes what the Client does.

Rules. Pure: built from the parsed settings and the Client's checked arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bson.codec_options import CodecOptions
from pymongo.driver_info import DriverInfo
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import _ServerMode
from pymongo.server_api import ServerApi
from pymongo.write_concern import WriteConcern

from greenpool.client.config.settings import ClientSettings

__all__ = ["ClientOptions", "PoolOptionsView"]


class PoolOptionsView:
    """``client.options.pool_options``: PyMongo's ``PoolOptions`` names for
    each server's pool and connections (times in seconds; None: no limit)."""

    def __init__(self, settings: ClientSettings, driver: DriverInfo | None,
                 server_api: ServerApi | None) -> None:
        pool = settings.pool
        self.max_pool_size: int = pool.max_pool_size
        self.min_pool_size: int = pool.min_pool_size
        self.max_connecting: int = pool.max_connecting
        self.max_idle_time_seconds: float | None = pool.max_idle_time
        self.wait_queue_timeout: float | None = pool.wait_queue_timeout
        self.connect_timeout: float | None = settings.connect_timeout
        self.socket_timeout: float | None = settings.socket_timeout
        self.appname: str | None = settings.app_name
        self.driver = driver
        self.server_api = server_api
        self.load_balanced: bool = settings.load_balanced

    def __repr__(self) -> str:
        return (f"PoolOptionsView(max_pool_size={self.max_pool_size}, "
                f"min_pool_size={self.min_pool_size}, max_connecting={self.max_connecting})")


class ClientOptions:
    """``client.options``: the Client's configuration by PyMongo's names."""

    def __init__(self, settings: ClientSettings, *, codec_options: CodecOptions[Any],
                 read_preference: _ServerMode, write_concern: WriteConcern,
                 read_concern: ReadConcern, event_listeners: Sequence[object],
                 server_selector: Callable[[list[Any]], list[Any]] | None,
                 driver: DriverInfo | None, server_api: ServerApi | None,
                 connect: bool) -> None:
        self._settings = settings
        self.codec_options = codec_options
        self.read_preference = read_preference
        self.write_concern = write_concern
        self.read_concern = read_concern
        self.event_listeners = list(event_listeners)
        self.server_selector = server_selector
        self.connect = connect
        self.pool_options = PoolOptionsView(settings, driver, server_api)
        #: Client-side encryption is greenpool.pymongo's: never set here.
        self.auto_encryption_opts = None
        #: What greenpool does on a retry after an overload error (see uri.py).
        self.enable_overload_retargeting = False

    @property
    def replica_set_name(self) -> str | None:
        return self._settings.replica_set

    @property
    def direct_connection(self) -> bool:
        return self._settings.direct_connection

    @property
    def load_balanced(self) -> bool:
        return self._settings.load_balanced

    @property
    def heartbeat_frequency(self) -> float:
        """heartbeatFrequencyMS, in seconds."""
        return self._settings.heartbeat_frequency

    @property
    def local_threshold_ms(self) -> float:
        """localThresholdMS, in milliseconds (as PyMongo's)."""
        return round(self._settings.local_threshold * 1000, 6)

    @property
    def server_selection_timeout(self) -> float:
        """serverSelectionTimeoutMS, in seconds."""
        return self._settings.server_selection_timeout

    @property
    def server_monitoring_mode(self) -> str:
        return self._settings.server_monitoring_mode

    @property
    def retry_reads(self) -> bool:
        return self._settings.retry_reads

    @property
    def retry_writes(self) -> bool:
        return self._settings.retry_writes

    @property
    def max_adaptive_retries(self) -> int:
        return self._settings.max_adaptive_retries

    @property
    def timeout(self) -> float | None:
        """timeoutMS, in seconds (None: not set)."""
        return self._settings.timeout

    def __repr__(self) -> str:
        return f"ClientOptions({self._settings!r})"
