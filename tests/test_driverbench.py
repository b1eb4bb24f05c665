"""benchmarks/driverbench.py: the spec's percentiles and scores, its argument errors, and
one short run end to end (its own server on 127.0.0.1)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "driverbench.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("driverbench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["driverbench"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


driverbench = load()


def test_percentiles_are_the_specs_nearest_rank() -> None:
    times = [float(n) for n in range(10, 0, -1)]  # 10 .. 1, unsorted
    # i = int(N * p / 100) - 1 on the sorted times
    assert driverbench.percentile(times, 50) == 5.0
    assert driverbench.percentile(times, 10) == 1.0
    assert driverbench.percentile(times, 99) == 9.0
    assert driverbench.percentile([3.0], 10) == 3.0  # i would be -1: the least


def test_the_composites_are_the_specs_averages() -> None:
    def scores(**by_name: float) -> dict[str, dict[str, dict[str, float]]]:
        return {name: {"greenpool": {"mb_s": value}} for name, value in by_name.items()}

    results = scores(**{"Run command": 100.0, "Find one by ID": 4.0,
                        "Small doc insertOne": 2.0, "GridFS download": 8.0})
    found = driverbench.composites(results, "greenpool")
    assert found["SingleBench"] == 3.0  # without Run command
    assert found["ReadBench"] == 6.0 and found["WriteBench"] == 2.0
    assert found["MultiBench"] == 8.0 and found["DriverBench"] == 4.0


def test_every_spec_size_is_the_specs() -> None:
    sizes = {b.name: b.size for b in driverbench.BENCHMARKS}
    assert sizes["Run command"] == 130_000
    assert sizes["Find one by ID"] == 16_220_000
    assert sizes["Small doc insertOne"] == 2_750_000
    assert sizes["Large doc insertOne"] == 27_310_890
    assert sizes["Small doc Client BulkWrite Mixed Operations"] == 5_500_000
    assert sizes["GridFS upload"] == 52_428_800


@pytest.mark.parametrize(("arguments", "message"), [
    (["--contenders", "mongo"], "--contenders 'mongo': expected some of greenpool, "
                                "greenpool.pymongo, pymongo"),
    (["--only", "nothing-like-it"], "--only nothing-like-it: no benchmark's name contains"),
    (["--min-seconds", "10", "--max-seconds", "5"], "--min-seconds 10 must be from 0 to "
                                                     "--max-seconds 5"),
    (["--max-iterations", "0"], "--max-iterations must be at least 1, not 0"),
])
def test_bad_arguments_say_which(arguments: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.skipif(not driverbench.DATA.exists(), reason=f"no dataset at {driverbench.DATA}")
def test_a_short_run_writes_the_json_the_issue_names(tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "Find one by ID", "--contenders",
         "greenpool,pymongo", "--min-seconds", "0", "--max-iterations", "1",
         "--json", str(output)],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert "[1/2] Find one by ID: greenpool" in done.stdout
    assert "[2/2] Find one by ID @100: greenpool" in done.stdout
    results = json.loads(output.read_text())
    for name in ("Find one by ID", "Find one by ID @100"):
        for contender in ("greenpool", "pymongo"):
            figures = results[name][contender]
            assert figures["mb_s"] > 0 and figures["cpu_s_per_op"] > 0
            assert figures["iterations"] == 1
    assert results["SingleBench"]["greenpool"]["mb_s"] == results["Find one by ID"][
        "greenpool"]["mb_s"]
