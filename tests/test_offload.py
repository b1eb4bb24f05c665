"""greenpool.wire.offload, and the work greenpool hands to it.

offload() runs a function in gevent's threadpool: its result and its errors come back
to the caller, a kill or a timeout ends the wait, and the hub runs other greenlets
meanwhile. What goes there is each caller's choice: large (de)compression
(tests/test_fake_server_link.py), DNS lookups (tests/test_dns.py), SCRAM key
derivation, and the TLS context's files (here).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest
from gevent.monkey import get_original

from greenpool.client.config import tlscontext
from greenpool.client.config.tlscontext import tls_context
from greenpool.errors import ConfigurationError
from greenpool.wire.offload import offload
from tests.uri_tls import CLIENT_KEY_PASSWORD, Pki, make_pki

# The real time.sleep and thread id: a worker thread's, even under monkey-patching.
blocking_sleep: Callable[[float], None] = get_original("time", "sleep")
thread_id: Callable[[], int] = get_original("threading", "get_ident")


def test_the_result_comes_back_from_another_thread() -> None:
    total, worker = offload(lambda a, b: (a + b, thread_id()), 2, 3)
    assert total == 5
    assert worker != thread_id()


def test_an_error_is_raised_in_the_caller(capsys: pytest.CaptureFixture[str]) -> None:
    def fail() -> None:
        raise ValueError("bad input 42")

    with pytest.raises(ValueError, match="bad input 42"):
        offload(fail)
    assert "bad input 42" not in capsys.readouterr().err  # not printed as a hub error


def test_other_greenlets_run_meanwhile() -> None:
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        while True:
            gevent.sleep(0.01)
            ticks += 1

    ticker = gevent.spawn(tick)
    try:
        offload(blocking_sleep, 0.3)
    finally:
        ticker.kill()
    assert ticks >= 10


def test_a_timeout_ends_the_wait_and_the_work_finishes_alone() -> None:
    finished = get_original("threading", "Event")()

    def work() -> None:
        blocking_sleep(0.3)
        finished.set()

    with pytest.raises(gevent.Timeout), gevent.Timeout(0.05):
        offload(work)
    assert not finished.is_set()  # the wait ended before the work (0.3 s)
    gevent.sleep(0.5)
    assert finished.is_set()


# -- the TLS context's files ----------------------------------------------------------------


@pytest.fixture
def offloaded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What tlscontext hands to the threadpool, by the name of the function."""
    calls: list[str] = []

    def spy(function: Any, *args: Any) -> Any:
        calls.append(getattr(function, "__name__", repr(function)))
        return offload(function, *args)

    monkeypatch.setattr(tlscontext, "offload", spy)
    return calls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def context(**files: Any) -> Any:
    options = {"ca_file": None, "crl_file": None, "certificate_key_file": None,
               "certificate_key_file_password": None}
    options.update(files)
    return tls_context(**options, allow_invalid_hostnames=False,
                       allow_invalid_certificates=False)


def test_the_system_ca_store_loads_in_the_threadpool(offloaded: list[str]) -> None:
    loaded = context()
    assert offloaded == ["load_default_certs"]
    assert loaded.cert_store_stats()["x509_ca"] > 0 or not Path("/etc/ssl/certs").exists()


def test_the_files_load_in_the_threadpool(offloaded: list[str], pki: Pki) -> None:
    loaded = context(ca_file=str(pki.ca_file), crl_file=str(pki.crl_file),
                     certificate_key_file=str(pki.client_file),
                     certificate_key_file_password=CLIENT_KEY_PASSWORD)
    assert len(offloaded) == 3
    assert loaded.cert_store_stats()["x509_ca"] == 1
    assert loaded.cert_store_stats()["crl"] == 1


def test_a_bad_file_still_names_the_option(offloaded: list[str], tmp_path: Path,
                                           pki: Pki) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigurationError, match=f"tlsCAFile '{missing}' does not exist"):
        context(ca_file=str(missing))
    with pytest.raises(ConfigurationError, match="give its passphrase as "
                                                 "tlsCertificateKeyFilePassword"):
        context(certificate_key_file=str(pki.client_file))  # the callback raised in a thread
    assert offloaded == ["<lambda>", "load_default_certs", "<lambda>"]
