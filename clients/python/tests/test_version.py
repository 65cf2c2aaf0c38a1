"""The package's version and metadata agree with pyproject.toml."""

import re
from importlib import metadata
from pathlib import Path

import leasehold

HERE = Path(__file__).resolve().parent
PYPROJECT = HERE.parent / "pyproject.toml"
CARGO_TOML = HERE.parents[2] / "Cargo.toml"


def _toml(path):
    try:
        import tomllib
    except ImportError:  # Python 3.10: no tomllib; the few fields read here are simple
        tomllib = None
    text = path.read_text()
    if tomllib is not None:
        return tomllib.loads(text)
    out = {}
    section = out
    for line in text.splitlines():
        m = re.match(r"^\[([\w.-]+)\]$", line)
        if m:
            section = out.setdefault(m.group(1), {})
            continue
        m = re.match(r'^([\w-]+)\s*=\s*"([^"]*)"', line)
        if m:
            section[m.group(1)] = m.group(2)
    return out


def test_version_is_the_one_in_pyproject():
    want = _toml(PYPROJECT)["project"]["version"]
    assert leasehold.__version__ == want
    assert metadata.version("leasehold") == want, "the installed package is stale: pip install it again"
    assert re.fullmatch(r"0\.\d+\.\d+", want), want


def test_license_is_the_projects_spdx_expression():
    project = _toml(PYPROJECT)["project"]
    want = _toml(CARGO_TOML)["package"]["license"]
    assert project["license"] == want
    assert metadata.metadata("leasehold")["License-Expression"] == want


def _lowest(spec):
    m = re.fullmatch(r">=\s*3\.(\d+)", spec.strip())
    assert m, spec
    return int(m.group(1))


def test_requires_python_is_what_grpcio_and_protobuf_need():
    ours = _lowest(metadata.metadata("leasehold")["Requires-Python"])
    assert ours == 10
    for dist in ("grpcio", "protobuf"):
        theirs = metadata.metadata(dist)["Requires-Python"]
        assert ours >= _lowest(theirs), (dist, theirs)
    classifiers = metadata.metadata("leasehold").get_all("Classifier")
    minors = sorted(
        int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert minors and minors[0] == ours, minors
    assert minors == list(range(minors[0], minors[-1] + 1)), minors
