"""benchmarks/bench_faults.py's faults on a replica set run end to end on every route,
with tiny durations: that the benchmark runs and reports, not what it measures (figures
belong to ``python3 devtools/dev.py faults`` on a quiet machine)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from greenpool.testing import EmbeddedServer

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]
# One worker with two greenlets; a grace long enough that nothing counts as hung on a
# loaded machine (it is waited only while an operation is in flight).
TINY = ["--workers", "1", "--greenlets", "2", "--warmup", "0.2", "--duration", "0.6",
        "--election-delay", "0.3", "--after", "1", "--grace", "30"]


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_faults", ROOT / "benchmarks" / "bench_faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


@pytest.fixture(scope="module")
def backend() -> Iterator[str]:
    """One SecantusDB that every case's set fronts: a case then starts only its members."""
    with EmbeddedServer(replica_set=True, test_commands=True) as server:
        yield f"127.0.0.1:{server.port}"


@pytest.mark.parametrize("kind, op", [("elect", "write"), ("primary-dies", "write"),
                                      ("secondary-dies", "secondary-read")])
@pytest.mark.parametrize("route", bench.ROUTES)
def test_a_set_fault_runs_end_to_end(backend: str, tmp_path: Path, route: str, kind: str,
                                     op: str) -> None:
    out = tmp_path / "faults"
    bench.main([*TINY, "--backend", backend, "--fault", kind, "--op", op, "--route", route,
                "--out", str(out)])
    result = json.loads(out.with_suffix(".json").read_text())[f"{kind}/{op}"][route]
    assert "failed" not in result, result["failed"]
    assert result["ops"] > 0 and result["hung"] == 0
    moments = result["timeline"]
    if kind == "secondary-dies":
        order = ["fault", "down", "restarted"]
        assert moments["back"] == moments["restarted"] and "elected" not in moments
        assert result["election_to_write"] == []
    else:
        order = ["fault", "down", "electing", "elected"]
        assert moments["back"] == moments["elected"]
        assert len(result["election_to_write"]) == 1  # one worker
    if kind == "primary-dies":
        order.append("restarted")
    assert [moments[name] for name in order] == sorted(moments[name] for name in order)
    # Connections were sampled at every member's port; the worker's pools were watched.
    assert len(result["conns_end"]) == len(result["conns_peak"]) == 3
    assert len(result["opened_since_fault"]) == len(result["most_held"]) == 3
    report = out.with_suffix(".md").read_text()
    assert f"\n{kind}, {op}: 3 members (" in report and f"\n| {route} | {result['ops']:,} |" in (
        report)


@pytest.mark.parametrize("argv, message", [
    (["--fault", "elect", "--op", "read"],
     "the elect fault runs write or secondary-read, not read"),
    (["--fault", "reset", "--op", "secondary-read"],
     "the reset fault runs read or write, not secondary-read"),
    (["--fault", "reset", "--fault", "elect", "--op", "read"],
     "the elect fault runs write or secondary-read, not read"),
    (["--election-delay", "-1"], "--election-delay must be >= 0, not -1.0"),
])
def test_the_command_line_refuses_a_fault_without_an_operation(
        capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    parser = bench.make_parser()
    with pytest.raises(SystemExit):
        bench.cases(parser, parser.parse_args(argv))
    assert message in capsys.readouterr().err


def test_each_fault_runs_its_operations_by_default() -> None:
    parser = bench.make_parser()
    assert bench.cases(parser, parser.parse_args([])) == [
        ("reset", "read"), ("reset", "write"), ("blackhole", "read"), ("blackhole", "write"),
        ("stepdown", "read"), ("stepdown", "write"), ("elect", "write"),
        ("elect", "secondary-read"), ("primary-dies", "write"),
        ("primary-dies", "secondary-read"), ("secondary-dies", "write"),
        ("secondary-dies", "secondary-read")]
    # An operation alone runs on the faults that take it.
    assert bench.cases(parser, parser.parse_args(["--op", "secondary-read"])) == [
        ("elect", "secondary-read"), ("primary-dies", "secondary-read"),
        ("secondary-dies", "secondary-read")]
