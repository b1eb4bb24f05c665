"""The distributions: ``python -m build`` makes a wheel and an sdist that install and run.

The wheel goes into a fresh virtual environment (with its ``demo`` extra, from the package
index pip is configured with), where greenpool imports, reports the version kept in
``greenpool/_version.py``, and runs its demo against an embedded SecantusDB.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from greenpool._version import __version__

ROOT = Path(__file__).resolve().parents[1]
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "_build", "*.egg-info", "__pycache__", ".*_cache")


def _run(*args: str | Path, cwd: Path, timeout: float = 120) -> str:
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    out = work / "dist"
    _run(sys.executable, "-m", "build", "--outdir", out, source, cwd=work, timeout=180)
    wheels = list(out.glob("*.whl"))
    sdists = list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return wheels[0], sdists[0]


def test_one_version_everywhere(dists: tuple[Path, Path]) -> None:
    wheel, sdist = dists
    assert wheel.name == f"greenpool-{__version__}-py3-none-any.whl"
    assert sdist.name == f"greenpool-{__version__}.tar.gz"
    release = __version__.split(".dev")[0]
    assert f"\n{release} (" in (ROOT / "CHANGELOG.rst").read_text(), "no CHANGELOG entry"


def test_sdist_contents(dists: tuple[Path, Path]) -> None:
    _, sdist = dists
    top = f"greenpool-{__version__}"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    for name in ("README.rst", "CHANGELOG.rst", "setup.cfg", "pyproject.toml",
                 "greenpool/__init__.py", "greenpool/_version.py", "greenpool/py.typed",
                 "greenpool/cli/check.py", "docs/conf.py", "docs/index.rst"):
        assert f"{top}/{name}" in names, name


def test_wheel_contents(dists: tuple[Path, Path]) -> None:
    wheel, _ = dists
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"greenpool-{__version__}.dist-info/METADATA").decode()
    assert {"greenpool/__init__.py", "greenpool/py.typed", "greenpool/__main__.py"} <= names
    assert not any(name.startswith(("tests/", "docs/")) for name in names)
    assert "Requires-Dist: gevent" in metadata
    assert "Provides-Extra: demo" in metadata


# A pip install from the package index, then the demo: minutes on a busy machine.
@pytest.mark.timeout(600)
def test_wheel_installs_and_runs(dists: tuple[Path, Path],
                                 tmp_path: Path) -> None:
    wheel, _ = dists
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    # This environment's pip installs into the fresh one (faster than bootstrapping pip there).
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
         f"{wheel}[demo]", cwd=tmp_path, timeout=180)
    # Run from tmp_path so that the source tree is not on sys.path.
    out = _run(python, "-c", "import greenpool; print(greenpool.__version__, greenpool.__file__)",
               cwd=tmp_path)
    version, location = out.split()
    assert version == __version__
    assert location.startswith(str(env))
    out = _run(python, "-m", "greenpool.cli.demo", "--greenlets", "20", "--operations", "2",
               cwd=tmp_path)
    assert "ConnectionCheckedOutEvent" in out
    out = _run(python, "-m", "greenpool", "--help", cwd=tmp_path)
    assert "python -m greenpool check URI" in out


def test_the_gevent_floor_is_the_oldest_release_the_gevent_matrix_runs() -> None:
    # devtools/dev.py gevent-matrix runs greenpool's tests on every gevent minor release
    # from the floor setup.cfg requires to the newest (the lock's).
    from devtools import dev

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    (floor,) = [req for req in config["options"]["install_requires"].split()
                if req.startswith("gevent")]
    releases = [tuple(int(part) for part in version.split(".")) for version in dev.GEVENT_MATRIX]
    assert releases == sorted(releases), "GEVENT_MATRIX in release order"
    minors = [release[:2] for release in releases]
    assert len(set(minors)) == len(minors), "one release per minor"
    assert floor == "gevent>={}.{}".format(*minors[0]), floor
    locked = [line.split("==")[1] for line in (ROOT / "constraints.txt").read_text().split()
              if line.startswith("gevent==")]
    assert locked == [list(dev.GEVENT_MATRIX)[-1]], "the matrix reaches the locked gevent"


def test_the_python_matrix_is_what_setup_cfg_names() -> None:
    # The test command runs on one of them, devtools/dev.py python-matrix on the others.
    from devtools import dev

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    named = [line.rsplit(":: ", 1)[1] for line in config["metadata"]["classifiers"].splitlines()
             if line.startswith("Programming Language :: Python :: 3.")]
    assert tuple(named) == dev.PYTHON_MATRIX
    assert config["options"]["python_requires"] == f">={dev.PYTHON_MATRIX[0]}"


def test_ci_runs_the_gevent_floor_and_releases_of_the_matrix() -> None:
    from devtools import dev

    assert set(dev.GEVENT_CI) <= set(dev.GEVENT_MATRIX)
    assert dev.GEVENT_CI[0] == next(iter(dev.GEVENT_MATRIX)), "the floor"
    assert list(dev.GEVENT_MATRIX)[-1] not in dev.GEVENT_CI, "the test command's own"


def test_the_python_matrix_names_a_missing_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devtools import dev

    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    (tmp_path / "versions").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path))  # no pyenv, no python3.99
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        dev.find_python("3.99")
    message = str(exited.value)
    assert "no Python 3.99 here" in message and f"{tmp_path}/versions/3.99.*" in message
    assert "python3.99 on PATH" in message and "pyenv install 3.99" in message


def test_the_python_matrix_takes_the_newest_patch_from_pyenv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devtools import dev

    for version in ("3.99.2", "3.99.10", "3.99.3t", "3.98.20"):
        python = tmp_path / "versions" / version / "bin" / f"python{version[:4]}"
        python.parent.mkdir(parents=True)
        python.touch()
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert dev.find_python("3.99") == tmp_path / "versions" / "3.99.10" / "bin" / "python3.99"


def test_a_matrix_run_is_summed_up_by_pytests_closing_line() -> None:
    from devtools import dev

    noise = ["Exception ignored in: <function _removeHandlerRef at 0x7f>",
             "RuntimeError: greenlet is being finalized"]
    assert dev.summary_line(["....", "291 passed in 132.77s (0:02:12)", *noise]) == \
        "291 passed in 132.77s (0:02:12)"
    closing = "= 1 failed, 3565 passed, 282 skipped, 1 xfailed in 859.66s (0:14:19) ="
    assert dev.summary_line([closing]) == closing
    assert dev.summary_line(["no pytest here", "ERROR: could not install"]) == \
        "ERROR: could not install"
    assert dev.summary_line([]) == ""
