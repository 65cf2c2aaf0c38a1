"""Test harness shared by the conformance driver and the Python tests:
the real ``leasehold serve`` as a child process, and line-oriented child
processes read with timeouts. Standard library only.

Nothing here sleeps to wait for start-up: the server prints one line once
both of its listeners are bound, and :class:`ServerProcess` reads it.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]

PKI_SCRIPT = ROOT / "clients" / "tools" / "pki.sh"

_LISTENING = re.compile(r"^leasehold listening on (\S+) admin (\S+)$")


def server_binary() -> Path:
    """The ``leasehold`` binary: $LEASEHOLD_BIN, else target/debug/leasehold."""
    p = Path(os.environ.get("LEASEHOLD_BIN") or ROOT / "target" / "debug" / "leasehold")
    if not p.exists():
        raise RuntimeError(f"leasehold binary not found at {p}: run `cargo build --bin leasehold` or set LEASEHOLD_BIN")
    return p


class Lines:
    """Reads a pipe's lines on a thread, so that they can be awaited with a
    timeout. ``None`` marks the end of output."""

    def __init__(self, pipe, name: str) -> None:
        self.name = name
        self.q: "queue.Queue[Tuple[float, Optional[str]]]" = queue.Queue()
        self.seen: List[str] = []
        self.ended = False
        self._t = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._t.start()

    def _read(self, pipe) -> None:
        for raw in iter(pipe.readline, ""):
            self.q.put((time.monotonic(), raw.rstrip("\n")))
        self.q.put((time.monotonic(), None))

    def next(self, timeout: float) -> Tuple[float, Optional[str]]:
        """(arrival time, line) of the next line; raises TimeoutError."""
        try:
            at, line = self.q.get(timeout=max(timeout, 0))
        except queue.Empty:
            raise TimeoutError(f"{self.name}: no line within {timeout:.1f}s; so far {self.seen}") from None
        if line is None:
            self.ended = True
        else:
            self.seen.append(line)
        return at, line

    def expect(self, pred: Callable[[str], bool], timeout: float, what: str = "") -> Tuple[float, str]:
        """Skips lines until one satisfies ``pred``; (arrival time, line)."""
        deadline = time.monotonic() + timeout
        while True:
            at, line = self.next(deadline - time.monotonic())
            if line is None:
                raise AssertionError(f"{self.name}: output ended while waiting for {what or 'a line'}; lines {self.seen}")
            if pred(line):
                return at, line


def make_pki(directory: str) -> Path:
    """Writes the test CA, certificates, tokens and policy into ``directory``
    (see clients/tools/pki.sh) and returns it."""
    subprocess.run(["bash", str(PKI_SCRIPT), directory], check=True)
    return Path(directory)


class ServerProcess:
    """``leasehold serve`` on 127.0.0.1 with ports the OS picks and a
    temporary data dir (removed on :meth:`stop` unless given).

    With ``secure=True`` the server uses TLS, mutual TLS and the policy
    made by clients/tools/pki.sh, whose files are in :attr:`pki`
    (``ca.pem``, ``alice.pem``, ``alice.token``...)."""

    def __init__(
        self,
        data_dir: Optional[str] = None,
        extra: Sequence[str] = (),
        timeout: float = 30.0,
        secure: bool = False,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="leasehold-test-")
        self.pki: Optional[Path] = None
        if secure:
            self.pki = make_pki(os.path.join(self.data_dir, "pki"))
            extra = [
                "--tls-cert", str(self.pki / "server.pem"), "--tls-key", str(self.pki / "server-key.pem"),
                "--tls-client-ca", str(self.pki / "ca.pem"), "--policy", str(self.pki / "policy.toml"),
                *extra,
            ]
        self._data = os.path.join(self.data_dir, "data") if secure else self.data_dir
        self._extra = list(extra)
        self._timeout = timeout
        self._spawn("127.0.0.1:0")

    def _spawn(self, listen: str) -> None:
        env = dict(os.environ, RUST_LOG=os.environ.get("LEASEHOLD_TEST_LOG", "warn"))
        self.proc = subprocess.Popen(
            [str(server_binary()), "serve", "--listen", listen, "--admin-listen", "127.0.0.1:0",
             "--data-dir", self._data, *self._extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None, text=True, env=env,
        )
        self.lines = Lines(self.proc.stdout, "server")
        try:
            _, line = self.lines.expect(lambda l: bool(_LISTENING.match(l)), self._timeout, "the listening line")
        except BaseException:
            self.kill()
            raise
        m = _LISTENING.match(line)
        assert m
        self.addr, self.admin = m.group(1), m.group(2)

    def restart(self) -> None:
        """Starts the server again, on the same port and data dir, after
        ``kill(keep_data=True)``."""
        assert self.proc.poll() is not None, "kill it first"
        self._spawn(self.addr)

    @property
    def target(self) -> str:
        """``host:port``, as gRPC clients take it."""
        return self.addr

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)
        if sig == signal.SIGSTOP:
            self._wait_stopped()

    def _wait_stopped(self) -> None:
        """Returns once every thread of the server is stopped. A signal
        is delivered to each thread on its own, and a thread that is
        running may answer another call before it stops: a test that
        pauses the server means "no answer from now on"."""
        deadline = time.monotonic() + 30
        tasks = f"/proc/{self.proc.pid}/task"
        while True:
            states = []
            for t in os.listdir(tasks):
                try:
                    with open(f"{tasks}/{t}/stat") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except FileNotFoundError:
                    pass
            if states and all(s in ("T", "t") for s in states):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the server's threads did not stop within 30 s: {states}")
            time.sleep(0.005)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples on the admin endpoint's /metrics
        (0 when absent)."""
        with urllib.request.urlopen(f"http://{self.admin}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_waiters(self, n: int, timeout: float = 10.0) -> None:
        """Waits until at least ``n`` Acquires are queued on the server."""
        wait_until(lambda: self.metric("leasehold_waiting_acquires") >= n, timeout, f"{n} queued acquire(s)")

    def wait_waiters_at_most(self, n: int, timeout: float = 10.0) -> None:
        """Waits until at most ``n`` Acquires are queued on the server: a
        cancelled call leaves the line once the server has seen its
        cancellation, which may come after the caller has moved on."""
        wait_until(lambda: self.metric("leasehold_waiting_acquires") <= n, timeout, f"at most {n} queued acquire(s)")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (SIGCONT first, in case it is stopped); waits; removes
        the data dir if this made it. The exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()
        return self.proc.returncode

    def kill(self, keep_data: bool = False) -> None:
        """SIGKILL; waits; removes the data dir if this made it, unless
        ``keep_data`` (to :meth:`restart` it)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not keep_data:
            self._cleanup()

    def _cleanup(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LineProcess:
    """A child process driven over stdin and read line by line."""

    def __init__(self, argv: Sequence[str], name: str, cwd: Optional[str] = None, env: Optional[dict] = None) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True,
            cwd=cwd, env=env, bufsize=1,
        )
        self.lines = Lines(self.proc.stdout, name)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, pred: Callable[[str], bool], timeout: float, what: str = "") -> Tuple[float, str]:
        return self.lines.expect(pred, timeout, what)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def wait_until(pred: Callable[[], bool], timeout: float, what: str, every: float = 0.02) -> None:
    """Bounded polling for an external state change (never for start-up)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
