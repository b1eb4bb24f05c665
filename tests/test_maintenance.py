"""The maintenance greenlet: runs, wakes, ends, and never holds the hub."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gevent

from greenpool import Pool
from tests.cmap_runner import Recorder
from tests.mock import MockConnector

ROOT = Path(__file__).resolve().parents[1]


def run_script(source: str, timeout: float = 60) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_hub_join_returns_with_a_live_pool() -> None:
    output = run_script("""
        import gevent
        from greenpool import Pool
        from tests.mock import MockConnector
        pool = Pool(("db.test", 27017), {"minPoolSize": 2, "maxIdleTimeMS": 50},
                    connector=MockConnector(delay=0.001))
        pool.ready()
        pool.checkin(pool.checkout())
        gevent.sleep(0.05)
        assert pool._maintenance.greenlet is not None and not pool._maintenance.greenlet.dead
        assert gevent.get_hub().join(timeout=30), "Hub.join() did not return"
        print("joined", pool.stats().total)
    """)
    assert output.split()[0] == "joined"


def test_an_abandoned_pool_is_collected_and_its_greenlet_ends() -> None:
    pool: Pool[Any] = Pool(("db.test", 27017), {"backgroundThreadIntervalMS": 5},
                           connector=MockConnector())
    pool.ready()
    maintainer = pool._maintenance.greenlet
    assert maintainer is not None
    gevent.sleep(0.02)
    del pool
    gc.collect()
    maintainer.join(timeout=5)
    assert maintainer.dead


def test_close_stops_the_background_greenlets() -> None:
    pool: Pool[Any] = Pool(("db.test", 27017), {"minPoolSize": 3},
                           connector=MockConnector(delay=5))
    pool.ready()
    gevent.sleep(0.01)
    greenlets = [pool._maintenance.greenlet, *pool._maintenance.fillers]
    assert len(greenlets) == 3  # the maintainer and maxConnecting (2) fillers
    pool.close()
    gevent.joinall(greenlets, timeout=5)
    assert all(g is not None and g.dead for g in greenlets)
    assert pool.stats().total == 0


def test_clear_wakes_the_background_run_at_once() -> None:
    recorder = Recorder()
    pool: Pool[Any] = Pool(("db.test", 27017), {"backgroundThreadIntervalMS": 60_000},
                           connector=MockConnector(), listeners=[recorder])
    pool.ready()
    pool.checkin(pool.checkout())
    pool.clear()
    recorder.wait_for("ConnectionClosed", 1, timeout=2)  # not 60 s
    assert recorder.events[-1].reason == "stale"


def test_negative_interval_means_no_background_runs() -> None:
    pool: Pool[Any] = Pool(("db.test", 27017), {"minPoolSize": 2,
                                                "backgroundThreadIntervalMS": -1},
                           connector=MockConnector())
    pool.ready()
    gevent.sleep(0.05)
    assert pool._maintenance.greenlet is None and pool.stats().total == 0
