"""``python -m greenpool check URI``: the report, and one clear line per class of failure."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from greenpool.cli.check import EXIT_CODES, main, redact_uri
from tests.servers import AuthServer, TLSServer, User, free_port

ROOT = Path(__file__).resolve().parents[1]
# Small bursts keep the tests quick; the defaults are exercised by the subprocess test.
FAST = ["--timeout", "2", "--pings", "3", "--greenlets", "10", "--operations", "40"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args, *FAST])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_failure(code: int, err: str, kind: str, *needles: str) -> None:
    assert code == EXIT_CODES[kind], err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"greenpool check: {kind} failure: "), err
    for needle in needles:
        assert needle in lines[0], err


def test_success_through_python_m(auth_server: AuthServer) -> None:
    user = auth_server.user
    uri = auth_server.uri_for(user)
    result = subprocess.run(
        [sys.executable, "-m", "greenpool", "check", uri], cwd=ROOT,
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert user.password not in out + result.stderr
    assert f"URI: mongodb://{user.name}:***@" in out
    assert "server version: " in out
    assert "maxWireVersion: " in out
    assert "connectionId: " in out
    # Each step that ran, with its time; no TLS here.
    assert re.search(r"^connected in [\d.]+ ms \(connect [\d.]+ ms, handshake [\d.]+ ms, "
                     r"authentication [\d.]+ ms\)$", out, re.MULTILINE), out
    assert "ping round trips (5): min " in out
    assert "burst: 200 pings from 50 greenlets" in out
    assert "pool: state ready" in out
    assert "ConnectionCheckedOut 206" in out  # 1 + 5 pings, then the burst
    assert "ConnectionCheckedIn 206" in out
    assert out.rstrip().endswith("OK")


def test_success_in_process(mongodb_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, mongodb_uri)
    assert code == 0, err
    assert err == ""
    assert "ping round trips (3)" in out
    assert "burst: 40 pings from 10 greenlets" in out
    assert "ConnectionCheckOutStarted 44" in out
    # Only the steps that ran: no TLS, no authentication.
    assert re.search(r"^connected in [\d.]+ ms \(connect [\d.]+ ms, handshake [\d.]+ ms\)$",
                     out, re.MULTILINE), out


def test_success_lists_resolve_and_tls(tls_server: TLSServer,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    uri = tls_server.uri.replace("127.0.0.1", "localhost")
    code, out, err = run(capsys, uri)
    assert code == 0, err
    assert re.search(r"^connected in [\d.]+ ms \(resolve and connect and TLS [\d.]+ ms, "
                     r"handshake [\d.]+ ms\)$", out, re.MULTILINE), out


def test_a_bad_integer_names_the_option_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "mongodb://127.0.0.1:27017/?maxPoolSize=many")
    assert_failure(code, err, "bad URI", "connection string option maxPoolSize='many' is "
                   "ignored: expected a whole number >= 0")
    assert err.lower().count("maxpoolsize") == 1, err


@pytest.mark.parametrize("uri, needle", [
    ("http://127.0.0.1:27017", "mongodb://"),
    ("mongodb://127.0.0.1:27017/?maxPoolSize=many", "maxPoolSize"),
    ("mongodb://127.0.0.1:1,127.0.0.1:2", "2 hosts"),
])
def test_bad_uri(uri: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, uri)
    assert_failure(code, err, "bad URI", needle)


def test_bad_uri_hides_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "mongodb://ann:hunter2-secret@127.0.0.1/?maxPoolSize=-1")
    assert_failure(code, err, "bad URI", "maxPoolSize")
    assert "hunter2-secret" not in out + err
    assert "URI: mongodb://ann:***@127.0.0.1/?maxPoolSize=-1" in out


def test_dns_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "mongodb://u:dns-secret@no-such-host.invalid:27017/")
    assert_failure(code, err, "DNS", "no-such-host.invalid")
    assert "dns-secret" not in err


def test_tls_wrong_ca(tls_server: TLSServer, capsys: pytest.CaptureFixture[str]) -> None:
    uri = (f"mongodb://u:tls-secret@{tls_server.host}:{tls_server.port}/"
           f"?tls=true&tlsCAFile={tls_server.files.wrong_ca_file}")
    code, out, err = run(capsys, uri)
    assert_failure(code, err, "TLS", "certificate verify failed", "tlsCAFile")
    assert "tls-secret" not in out + err


def test_wrong_password(auth_server: AuthServer, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = User(auth_server.user.name, "not-the-password-42")
    code, out, err = run(capsys, auth_server.uri_for(wrong))
    assert_failure(code, err, "authentication", "authentication of user 'greenpool'", "failed")
    assert "not-the-password-42" not in out + err
    assert auth_server.user.password not in out + err


def test_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code, out, err = run(capsys, f"mongodb://u:closed-secret@127.0.0.1:{port}/")
    assert_failure(code, err, "unreachable", f"127.0.0.1:{port}", "refused")
    assert "closed-secret" not in out + err


def test_redact_uri() -> None:
    assert redact_uri("mongodb://a:b@c@h1,h2/db?authSource=x") == "mongodb://a:***@h1,h2/db?authSource=x"
    assert redact_uri("mongodb://h/?w=1&tlsCertificateKeyFilePassword=pw") == (
        "mongodb://h/?w=1&tlsCertificateKeyFilePassword=***")
    assert redact_uri("mongodb://h:1") == "mongodb://h:1"
    assert redact_uri("no scheme at all") == "<not a mongodb:// URI>"


def test_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    from greenpool.__main__ import main as greenpool_main

    assert greenpool_main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_load_balanced(lb_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, lb_uri)
    assert code == 0, err
    assert "serviceId: " in out
    assert "pool: state ready" in out


def test_a_server_that_never_answers(capsys: pytest.CaptureFixture[str]) -> None:
    # The kernel completes the TCP handshake for a listening socket nobody
    # accepts from, so the hello is sent and no reply ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        code, _, err = run(capsys, f"mongodb://127.0.0.1:{port}/")
    assert time.monotonic() - started < 10
    assert_failure(code, err, "unreachable", f"127.0.0.1:{port}")
