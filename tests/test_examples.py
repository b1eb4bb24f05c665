"""The demo and the examples run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


def run(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``python ARGS``, where any DeprecationWarning is an error: neither the demo nor an
    example may trip greenpool's own (or anyone's)."""
    result = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=100, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_demo_with_an_embedded_server() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    out = run("-m", "greenpool.cli.demo", "--greenlets", "200", "--operations", "5", env=env)
    assert "starting an embedded SecantusDB on 127.0.0.1" in out
    assert "operations               1000" in out
    assert "ConnectionCheckedOutEvent" in out and "PoolReadyEvent" in out
    assert "wait_p99_ms" in out
    # What "Reading the numbers" says of the checkouts holds: 3 per find, 1 per other
    # operation, 3 around the run.
    finds = int(re.search(r"^  finds +(\d+)$", out, re.MULTILINE)[1])  # type: ignore[index]
    checkouts = int(re.search(r"ConnectionCheckedOutEvent +(\d+)", out)[1])  # type: ignore[index]
    assert finds > 0 and checkouts == 1000 + 2 * finds + 3, out
    assert f"{checkouts} checkouts for 1000 operations" in out
    assert re.search(r"wait_max_ms is [\d.]+x fifo_ideal_max_wait_ms", out), out


def test_demo_with_a_uri(mongodb_uri: str) -> None:
    out = run("-m", "greenpool.cli.demo", "--uri", mongodb_uri, "--greenlets", "20",
              "--operations", "3", "--pool-size", "2")
    assert "embedded" not in out
    assert "maxPoolSize=2" in out and "operations               60" in out


def test_demo_refuses_bad_sizes() -> None:
    result = subprocess.run([sys.executable, "-m", "greenpool.cli.demo", "--greenlets", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--greenlets must be at least 1, not 0" in result.stderr


@pytest.mark.parametrize(("script", "expected"), [
    ("gevent_script.py", "page 3 documents: 14"),
    ("log_messages.py", '"message": "Connection checked out"'),
])
def test_example(script: str, expected: str, mongodb_uri: str) -> None:
    assert expected in run(str(ROOT / "examples" / script), mongodb_uri)


@pytest.mark.parametrize("client", ["pymongo", "greenpool"])
def test_shop_app_tests_pass_on(client: str, mongodb_uri: str) -> None:
    """examples/shop's own tests, on one client: the app is the same on both, only the
    factory its tests give it differs (SHOP_CLIENT)."""
    env = {**os.environ, "SHOP_CLIENT": client, "MONGODB_URI": mongodb_uri}
    out = run("-m", "pytest", str(ROOT / "examples" / "shop" / "test_app.py"), "-q",
              "-p", "no:cacheprovider", env=env)
    assert re.search(r"^8 passed", out, re.MULTILINE), out


def test_wsgi_server_example(mongodb_uri: str) -> None:
    """examples/wsgi_server.py serves concurrent requests through a small pool."""
    import json
    import urllib.request

    import gevent

    server = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "wsgi_server.py"), mongodb_uri, "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:"), line + server.stderr.read()
        url = line.split()[-1]

        def get() -> dict[str, object]:
            with urllib.request.urlopen(url, timeout=30) as response:
                return json.loads(response.read())  # type: ignore[no-any-return]

        requests = [gevent.spawn(get) for _ in range(40)]
        gevent.joinall(requests, timeout=60, raise_error=True)
        answers = [g.value for g in requests]
        assert len(answers) == 40
        assert all(a["pool"]["total"] <= 4 for a in answers)  # type: ignore[index]
        assert max(a["visits"] for a in answers) >= 40  # type: ignore[type-var]
    finally:
        server.terminate()
        server.wait(10)


def test_listener_example_serves_the_pool_metrics_to_prometheus(mongodb_uri: str) -> None:
    """examples/listener.py: 50 pings, then one scrape of its /metrics endpoint."""
    out = run(str(ROOT / "examples" / "listener.py"), mongodb_uri)
    host_port = mongodb_uri.split("//", 1)[1].split("/", 1)[0].split("?", 1)[0]
    pool = f'db_client_connection_pool_name="{host_port}"'
    lines = set(out.splitlines())
    assert f"db_client_connection_wait_time_seconds_count{{{pool}}} 50" in lines, out
    assert f"db_client_connection_use_time_seconds_count{{{pool}}} 50" in lines, out
    assert f'db_client_connection_count{{{pool},db_client_connection_state="used"}} 0' in lines
    assert f"db_client_connection_max{{{pool}}} 4" in lines
    assert f"db_client_connection_timeouts_total{{{pool}}} 0" in lines
    assert "# TYPE db_client_connection_wait_time_seconds histogram" in lines
    assert f'db_client_connection_wait_time_seconds_bucket{{{pool},le="+Inf"}} 50' in lines
