"""Fixtures: a real PostgreSQL (initdb + pg_ctl in a temporary directory,
on 127.0.0.1 and a free port, as the `postgres` user when run as root) and
a real `leasehold serve` (clients/conformance/harness.py)."""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "conformance"))

import harness  # noqa: E402

RECIPE = HERE.parent / "fencing.sql"


def _pg_bindir() -> Path:
    env = os.environ.get("PG_BINDIR")
    if env:
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        exe = shutil.which("initdb")
        if exe:
            return Path(exe).parent
        raise RuntimeError("PostgreSQL not found (install the postgresql package, or set PG_BINDIR)")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throwaway PostgreSQL cluster. Running the server as root is not
    allowed, so as root every command runs as the `postgres` user in a
    directory it owns."""

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.root = tempfile.mkdtemp(prefix="leasehold-pg-")
        self.data = os.path.join(self.root, "data")
        self.as_root = os.geteuid() == 0
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o700)
        self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        last = None
        for _ in range(3):  # the free port may be taken in between: try another
            self.port = _free_port()
            try:
                self._run(
                    "pg_ctl", "-D", self.data, "-l", os.path.join(self.root, "log"), "-w", "-t", "60",
                    "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start",
                )
                break
            except subprocess.CalledProcessError as e:
                last = e
        else:
            raise RuntimeError(f"PostgreSQL did not start: {last}; log: {self.log()}")
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, tool: str, *args: str) -> None:
        argv = [str(self.bindir / tool), *args]
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)

    def log(self) -> str:
        try:
            return Path(self.root, "log").read_text()[-2000:]
        except OSError:
            return ""

    def connect(self, **kw) -> psycopg.Connection:
        return psycopg.connect(self.dsn, **kw)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "60", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    pg = Postgres()
    yield pg
    pg.stop()


@pytest.fixture()
def db(postgres):
    """A fresh schema with the recipe loaded; autocommit connection."""
    with postgres.connect(autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bridge_status, leasehold_fence CASCADE")
        conn.execute(RECIPE.read_text())
        conn.execute(RECIPE.read_text())  # idempotent
        yield conn


@pytest.fixture()
def server():
    s = harness.ServerProcess()
    yield s
    s.stop()
