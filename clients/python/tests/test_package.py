"""The package as it is shipped: the wheel and the sdist that ``python -m
build`` makes from a clean copy of this directory both carry the LICENSE
(PEP 639: the wheel in ``.dist-info/licenses/``, the sdist at its top); a
fresh virtual environment, made in a temporary directory, installs the
wheel, and a script run from another temporary directory imports
``leasehold``, checks ``__version__`` and acquires a lease from the real
server; then the sdist installs into the same environment and does the
same.

The dependencies (grpcio, protobuf, googleapis-common-protos, and
setuptools to build the sdist) are installed into the fresh environment
once, at the versions of this test environment, from pip's cache when it
has them; the package itself goes in with ``--no-deps``."""

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1]
LICENSE = (PACKAGE_DIR / "LICENSE").read_bytes()

SCRIPT = r"""
import sys
import leasehold

venv, target, job, version = sys.argv[1:5]
assert leasehold.__version__ == version, (leasehold.__version__, version)
assert leasehold.__file__.startswith(venv), ("not the installed package", leasehold.__file__)
with leasehold.Client(target) as c:
    a = c.acquire(job, leasehold.process_holder("package-test"), ttl=30)
    assert a.acquired, a
    c.release(job, a.lease.holder, a.lease.token)
print(f"ok {leasehold.__version__} token={a.lease.token}")
"""


def _pyproject_version():
    from test_version import PYPROJECT, _toml

    return _toml(PYPROJECT)["project"]["version"]


def run(argv, cwd, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{argv} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.mark.timeout(900)
def test_wheel_and_sdist_ship_the_license_and_install_in_a_fresh_venv(server, tmp_path, job):
    version = _pyproject_version()
    # A clean copy: no build/, *.egg-info or caches from a checkout, and
    # nothing the build writes lands in the repository.
    src = tmp_path / "src"
    shutil.copytree(
        PACKAGE_DIR, src,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"),
    )
    dist = tmp_path / "dist"
    # --no-isolation: the backend is the pinned setuptools of this
    # environment (clients/tools/requirements.txt), not one fetched per build.
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)], cwd=tmp_path)
    wheels = list(dist.glob("leasehold-*.whl"))
    sdists = list(dist.glob("leasehold-*.tar.gz"))
    assert [w.name for w in wheels] == [f"leasehold-{version}-py3-none-any.whl"]
    assert [s.name for s in sdists] == [f"leasehold-{version}.tar.gz"]
    wheel, sdist = wheels[0], sdists[0]

    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert z.read(f"leasehold-{version}.dist-info/licenses/LICENSE") == LICENSE
        meta = z.read(f"leasehold-{version}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    for f in ("leasehold/__init__.py", "leasehold/py.typed", "leasehold/v1/leasehold_pb2.pyi",
              "leasehold/elector_set.py"):
        assert f in names, f
    with tarfile.open(sdist) as t:
        top = f"leasehold-{version}"
        assert t.extractfile(f"{top}/LICENSE").read() == LICENSE
        assert "License-Expression: Apache-2.0" in t.extractfile(f"{top}/PKG-INFO").read().decode()

    # A fresh environment, outside the repository.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    py = str(venv / "bin" / "python")
    pins = [f"{d}=={metadata.version(d)}" for d in ("grpcio", "protobuf", "googleapis-common-protos", "setuptools")]
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run(pip + pins, cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = work / "check.py"
    script.write_text(SCRIPT)

    run(pip + ["--no-deps", str(wheel)], cwd=work)
    out = run([py, str(script), str(venv), server.target, job + "-wheel", version], cwd=work)
    assert out.strip() == f"ok {version} token=1", out

    # The sdist, into the same environment (built by its setuptools).
    run(pip + ["--no-deps", "--no-build-isolation", "--force-reinstall", str(sdist)], cwd=work)
    out = run([py, str(script), str(venv), server.target, job + "-sdist", version], cwd=work)
    assert out.strip() == f"ok {version} token=1", out
    installed = run([py, "-m", "pip", "show", "-f", "leasehold"], cwd=work)
    assert "licenses/LICENSE" in installed, installed
