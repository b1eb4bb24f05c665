"""Tests run the way most greenpool users run: under gevent's monkey-patching."""

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_leftover_greenlets():
    """Fail a test that leaves the hub with greenlets still scheduled to run."""
    yield
    gevent.sleep(0)
