"""The regression guard's comparison (``python3 devtools/dev.py perf``,
``benchmarks/instructions.py --guard``), on figures fed to it: no valgrind needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import instructions

RECORDED = {"pool, 1 greenlet": 1000.0, "greenpool find_one, 1 greenlet": 200_000.0}


def test_a_growth_over_5_percent_fails_naming_the_figure() -> None:
    now = {"pool, 1 greenlet": 1051.0, "greenpool find_one, 1 greenlet": 200_000.0}
    rows, failures = instructions.compare(RECORDED, now)
    assert failures == ["pool, 1 greenlet grew 5.1% (1,000 -> 1,051 instructions per op; "
                        "at most 5%)"]
    assert "| pool, 1 greenlet | 1,000 | 1,051 | 1.051 GREW |" in rows
    assert "| greenpool find_one, 1 greenlet | 200,000 | 200,000 | 1.000 |" in rows


def test_a_growth_under_5_percent_and_a_fall_pass() -> None:
    now = {"pool, 1 greenlet": 1049.0, "greenpool find_one, 1 greenlet": 150_000.0}
    rows, failures = instructions.compare(RECORDED, now)
    assert failures == []
    assert rows[:2] == ["| figure | recorded | now | ratio |", "|---|---|---|---|"]
    assert "| pool, 1 greenlet | 1,000 | 1,049 | 1.049 |" in rows
    assert "| greenpool find_one, 1 greenlet | 200,000 | 150,000 | 0.750 |" in rows


def test_a_new_figure_and_a_missing_one_are_reported() -> None:
    now = {"pool, 1 greenlet": 1000.0, "greenpool find100, 1 greenlet": 500_000.0}
    rows, failures = instructions.compare(RECORDED, now)
    assert failures == ["greenpool find_one, 1 greenlet: in the record, no longer counted",
                        "greenpool find100, 1 greenlet: new, not in the record"]
    assert "| greenpool find_one, 1 greenlet | 200,000 | - | |" in rows
    assert "| greenpool find100, 1 greenlet | - | 500,000 | |" in rows


def test_other_versions_are_named() -> None:
    here = {"machine": "x86_64, a CPU", "versions": {"python": "3.11.7", "gevent": "26.9.0",
                                                      "pymongo": "4.20.1"}}
    assert instructions.mismatches(here, here) == []
    other = {"machine": "x86_64, another CPU",
             "versions": {"python": "3.11.7", "gevent": "26.8.0", "pymongo": "4.20.1"}}
    assert instructions.mismatches(other, here) == [
        "gevent 26.8.0 recorded, 26.9.0 here",
        "recorded on x86_64, another CPU, running on x86_64, a CPU"]


def test_the_guard_fails_on_growth_and_warns_of_other_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    here: dict[str, Any] = {
        "machine": "m", "valgrind": "valgrind-3.19.0", "commit": "abc", "date": "2026-12-07",
        "versions": {"python": "3.11.7", "greenlet": "3.2.4", "gevent": "26.9.0",
                     "pymongo": "4.20.1"}}
    record = tmp_path / "instructions.json"
    monkeypatch.setattr(instructions, "RECORDED", record)
    monkeypatch.setattr(instructions, "circumstances", lambda: here)
    counted: dict[str, float] = dict(RECORDED)

    def per_op(chosen: Any, jobs: int) -> dict[str, float]:
        return dict(counted)
    monkeypatch.setattr(instructions, "per_op", per_op)
    monkeypatch.setattr(instructions, "guard", lambda: [])

    assert instructions.run_guard(record=False, jobs=2) == 1
    assert "no record to compare with" in capsys.readouterr().out
    assert instructions.run_guard(record=True, jobs=2) == 0
    written = json.loads(record.read_text())
    assert written["figures"] == RECORDED and written["versions"] == here["versions"]
    assert written["date"] == "2026-12-07" and written["machine"] == "m"

    assert instructions.run_guard(record=False, jobs=2) == 0
    out = capsys.readouterr().out
    assert "perf: passed" in out and "WARNING" not in out

    counted["pool, 1 greenlet"] = 1100.0
    here["versions"] = dict(here["versions"], gevent="26.8.0")
    assert instructions.run_guard(record=False, jobs=2) == 1
    out = capsys.readouterr().out
    assert "WARNING: gevent 26.9.0 recorded, 26.8.0 here" in out
    assert "perf: FAILED, 1 of 2 figures:\n  pool, 1 greenlet grew 10.0%" in out


def test_perf_without_valgrind_says_so_and_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devtools import dev

    monkeypatch.setenv("PATH", str(tmp_path))  # no valgrind
    with pytest.raises(SystemExit) as exited:
        dev.perf([])
    assert str(exited.value) == ("perf: cannot count instructions, as valgrind is not on PATH "
                                 "(Debian: apt install valgrind); nothing was compared")
    with pytest.raises(SystemExit) as exited:
        dev.perf(["--ops", "5"])
    assert "usage: python3 devtools/dev.py perf [--record]" in str(exited.value)


def test_the_slow_job_says_not_tested_without_valgrind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from devtools import dev

    ran: list[tuple[Any, ...]] = []
    monkeypatch.setattr(dev, "run", lambda *args, **kwargs: ran.append(args))
    monkeypatch.setenv("PATH", str(tmp_path))
    dev.slow([])
    assert [args[5:] for args in ran] == [("no:cacheprovider", "--slow", "-m", "slow")]
    assert capsys.readouterr().out == ("+ NOT TESTED: perf, the instruction counts against "
                                       "the record, as valgrind is not on PATH (Debian: apt "
                                       "install valgrind)\n")
    monkeypatch.setattr(dev, "cannot_count", lambda: None)
    dev.slow([])
    assert ran[-1][1:] == ("benchmarks/instructions.py", "--guard")
