""""Nothing to patch", proven: greenpool.Client's whole feature set never holds the hub.

Each test runs tests/cooperative_run.py in a process of its own, against a slow DNS
server (tests/slow_dns.py) and a slow MongoDB-compatible server (SecantusDB behind
tests/slow_server.py's front, which adds TLS, compression and a delay to every reply),
both on loopback in this process. Beside the steps, a hub-block detector
(tests/hub_blocks.py) fails a test on any hub block over 50 ms and names the step and
the code that blocked.

- :func:`test_client_unpatched`: greenpool.Client in a process that is not
  monkey-patched (and greenpool.pymongo's refusal to run there);
- :func:`test_pymongo_patched`: greenpool.pymongo.MongoClient, monkey-patched.

The default run uses short delays (DNS answers 0.3 s, replies 0.1 s): every step
still takes far longer than the 50 ms limit, so any blocking wait shows. The full
slow run (DNS answers 1 s, replies 0.3 s) and its table of the longest block per
step are ``python3 devtools/dev.py cooperative``; ``GREENPOOL_COOPERATIVE_SLOW=1``
selects those delays here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gevent.server import StreamServer

from tests.servers import ADMIN, SHA1_USER, ServerProcess, TLSFiles, make_tls_files
from tests.slow_dns import SlowDNSServer, make_zone
from tests.slow_server import SlowFront

ROOT = Path(__file__).resolve().parents[1]
SLOW = os.environ.get("GREENPOOL_COOPERATIVE_SLOW") == "1"
DNS_DELAY = 1.0 if SLOW else 0.3
SERVER_DELAY = 0.3 if SLOW else 0.1
LIMIT = 0.05
"""The longest hub block any step may cause, in seconds."""
RUN_TIMEOUT = 100
"""Seconds a whole run may take."""

DB_HOST = "db.greenpool.test"
CLIENT_SRV = "cluster.greenpool.test"
PYMONGO_SRV = "rs.greenpool.test"
CLIENT_TXT = "authSource=admin"
PYMONGO_TXT = "replicaSet=secantus&authSource=admin"

# The compressors of the three clients of a run (appName: compressors). PyMongo 4.20
# speaks zstd only through backports.zstd, which is not installed.
COMPRESSORS = {
    "client": {"main": "zstd,zlib,snappy", "sha1": "zlib", "other": "snappy"},
    "pymongo": {"main": "snappy,zlib", "sha1": "zlib", "other": "snappy"},
}

# The steps whose hub blocks are PyMongo's own code under greenpool.pymongo, and why:
# allowed (greenpool cannot move them off the hub), and shown in the table.
PYMONGO_BLOCKING = {
    "TLS with the system's CA certificates": "PyMongo loads the system's CA store in the "
                                              "calling greenlet: about 25 ms, far more on a "
                                              "busy machine",
    "compression": "PyMongo compresses and decompresses in the calling greenlet: zlib takes "
                   "about 100 ms for the 3 MB document",
}


@dataclass
class Deployment:
    """The slow servers, and the control address that takes the front down and up."""

    front: SlowFront
    dns: SlowDNSServer
    tls: TLSFiles
    control: tuple[str, int]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    files = make_tls_files(tmp_path_factory.mktemp("tls"), server_names=[DB_HOST])
    with (
        ServerProcess(replica_set=True, users=[ADMIN, SHA1_USER]) as server,
        SlowFront(server.address, delay=SERVER_DELAY, tls=files, host_name=DB_HOST) as front,
    ):
        zone = make_zone({
            f"_mongodb._tcp.{CLIENT_SRV}": [("SRV", f"0 0 {front.port} {DB_HOST}.")],
            CLIENT_SRV: [("TXT", f'"{CLIENT_TXT}"')],
            f"_mongodb._tcp.{PYMONGO_SRV}": [("SRV", f"0 0 {front.port} {DB_HOST}.")],
            PYMONGO_SRV: [("TXT", f'"{PYMONGO_TXT}"')],
            DB_HOST: [("A", "127.0.0.1")],
        })

        def control(sock: Any, _address: Any) -> None:
            with sock, sock.makefile("rb") as lines:
                order = lines.readline().strip()
                if order == b"down":
                    front.down()
                elif order == b"up":
                    front.up()
                else:
                    sock.sendall(b"unknown order\n")
                    return
                sock.sendall(b"ok\n")

        controller = StreamServer(("127.0.0.1", 0), control)
        controller.start()
        try:
            with SlowDNSServer(zone, delay=DNS_DELAY) as dns_server:
                yield Deployment(front, dns_server, files,
                                 ("127.0.0.1", controller.server_port))
        finally:
            controller.stop(timeout=1)


def run(deployment: Deployment, mode: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Run tests/cooperative_run.py in ``mode``; its report."""
    front = deployment.front
    front.up()
    ca = deployment.tls.ca_file
    common = f"tlsCAFile={ca}&heartbeatFrequencyMS=500&serverSelectionTimeoutMS=20000"
    host = f"{DB_HOST}:{front.port}"
    srv = CLIENT_SRV if mode == "client" else PYMONGO_SRV
    replica_set = "" if mode == "client" else "&replicaSet=secantus"
    admin = f"{ADMIN.name}:{ADMIN.password}"
    sha1 = f"{SHA1_USER.name}:{SHA1_USER.password}"
    compressors = {name: f"&appName={name}&compressors={listed}"
                   for name, listed in COMPRESSORS[mode].items()}
    config = {
        "mode": mode,
        "uris": {
            "main": f"mongodb+srv://{admin}@{srv}/?{common}{compressors['main']}",
            "sha1": f"mongodb://{sha1}@{host}/?tls=true&{common}&authSource=admin"
                    f"&authMechanism=SCRAM-SHA-1{compressors['sha1']}{replica_set}",
            "other": f"mongodb://{admin}@{host}/?tls=true&{common}&authSource=admin"
                     f"{compressors['other']}{replica_set}",
            "system_cas": f"mongodb://{host}/?tls=true&appName=system-cas{replica_set}",
        },
        "srv_name": f"_mongodb._tcp.{srv}",
        "txt": CLIENT_TXT if mode == "client" else PYMONGO_TXT,
        "db_host": DB_HOST,
        "port": front.port,
        "dns_port": deployment.dns.port,
        "control": deployment.control,
        "dns_delay": DNS_DELAY,
        "server_delay": SERVER_DELAY,
        "limit": LIMIT,
        "dump_after": RUN_TIMEOUT - 10,
        "report": str(tmp_path / "report.json"),
    }
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEVENT")}
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        try:
            code = subprocess.call(
                [sys.executable, "-m", "tests.cooperative_run", str(config_path)],
                cwd=ROOT, env=env, stdout=stderr, stderr=stderr, timeout=RUN_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            code = None
    assert code == 0, f"exit code {code}; its output:\n{log.read_text()[-5000:]}"
    steps: list[dict[str, Any]] = json.loads((tmp_path / "report.json").read_text())
    print(table(mode, steps))
    return steps


def table(mode: str, steps: list[dict[str, Any]]) -> str:
    lines = [f"\n{mode}: DNS answers {DNS_DELAY:g} s, replies {SERVER_DELAY:g} s late; "
             "longest hub block per step (ms), with that gap's run-queue wait and CPU time",
             f"  {'step':45} {'s':>6} {'block':>8} {'queued':>7} {'cpu':>7}"]
    for step in steps:
        longest = step["longest"]
        lines.append(f"  {step['name']:45} {step['seconds']:6.2f} {longest['block'] * 1e3:8.1f}"
                     f" {longest['queued'] * 1e3:7.1f} {longest['cpu'] * 1e3:7.1f}"
                     + (f"  ERROR {step['error']}" if step["error"] else ""))
    return "\n".join(lines)


def verdict(mode: str, steps: list[dict[str, Any]]) -> None:
    """Fail on any step error, and on any hub block over the limit, naming the step."""
    errors = [f"{step['name']}: {step['error']}" for step in steps if step["error"]]
    assert not errors, "steps failed:\n" + "\n".join(errors)
    allowed = PYMONGO_BLOCKING if mode == "pymongo" else {}
    blocked = [describe(step) for step in steps
               if step["blocks"] and step["name"] not in allowed]
    assert not blocked, "\n".join(blocked)


def describe(step: dict[str, Any]) -> str:
    """A step's longest block over the limit: how long, what the clocks said, the stack."""
    gap = max(step["blocks"], key=lambda gap: gap["block"])
    ms = {key: f"{gap[key] * 1e3:.1f} ms" for key in
          ("late", "queued", "cpu", "process_cpu", "watcher_late", "gc")}
    stack = gap["stack"] or "(none taken: the watcher thread did not run meanwhile)\n"
    return (f"step {step['name']!r} held the hub {gap['block'] * 1e3:.0f} ms (limit "
            f"{LIMIT * 1e3:.0f} ms; the ticker was late {ms['late']}, of which the hub's thread "
            f"waited for a CPU {ms['queued']} and ran {ms['cpu']}; the process ran "
            f"{ms['process_cpu']}, the garbage collector {ms['gc']}; the watcher was late "
            f"{ms['watcher_late']}); "
            f"the stack then:\n{stack}")


def check_traffic(deployment: Deployment, mode: str, tmp_path: Path) -> None:
    """Run ``mode`` and check its verdict, then what the servers saw: the SRV, TXT and A
    queries, and compressed requests from every client, zlib and snappy among them."""
    compressed = deployment.front.compressed.copy()
    queries = len(deployment.dns.queries)
    verdict(mode, run(deployment, mode, tmp_path))
    srv = CLIENT_SRV if mode == "client" else PYMONGO_SRV
    asked = {(name, kind) for name, kind, _ in deployment.dns.queries[queries:]}
    assert {(f"_mongodb._tcp.{srv}", "SRV"), (srv, "TXT"), (DB_HOST, "A")} <= asked, asked
    sent = deployment.front.compressed - compressed
    print(f"compressed requests, by appName and compressor: {dict(sent)}")
    assert {app for app, _ in sent} == set(COMPRESSORS[mode]), sent
    assert {"zlib", "snappy"} <= {compressor for _, compressor in sent}, sent


def test_client_unpatched(deployment: Deployment, tmp_path: Path) -> None:
    check_traffic(deployment, "client", tmp_path)


def test_pymongo_patched(deployment: Deployment, tmp_path: Path) -> None:
    check_traffic(deployment, "pymongo", tmp_path)
