"""A file written only by holders of a job's lease, fenced by proofs: the
recipe for a plain file system, and the shape of it for an object store.

    python fenced_file.py --server 127.0.0.1:50051 --job reports --ttl 10 report.json < new-report.json

Storage that leasehold does not own cannot ask whether a token is live, and
must not take a client's word for a token: a client that claims token 2^63
would lock every real leader out. So beside the file ``NAME`` lives
``NAME.proof``, the proof (``Lease.proof``, docs/proofs.md) of the token
that last wrote it, and a writer:

1. verifies its own proof with the server's keys (``client.signing_keys()``),
   for the job;
2. reads the stored proof, verifies it too, and refuses unless its own token
   is at least the stored one (a stale leader, paused while its lease passed
   on, is refused once a newer one has written);
3. writes the data to a temporary file beside ``NAME`` and fsyncs it,
   writes its proof to another and fsyncs it, then renames the proof into
   place and then the data, and fsyncs the directory.

Why the proof first: a crash between the two renames then leaves the new
proof beside the old data, which the new writer (or its successor) simply
writes again, and which a stale writer is refused by. The other order could
leave new data beside the old proof, and let a stale writer (a token
between the two) overwrite it. The proof says who may write, not what was
written: a reader who needs the data and proof to agree keeps the token in
the data too.

**The race this does not close**: two writers both pass step 2 before
either renames (token 6 and token 7 both read stored token 5); if 7 renames
first, 6 then overwrites it. Leases make it rare (6 must be a stale leader
running in the same moment as its successor), not impossible. To close it,
make the check and the rename one step:

- on a local file system, hold a lock file for steps 2 and 3: created with
  ``O_CREAT | O_EXCL`` (``write_fenced(..., lock=True)`` does: a second
  writer gets :class:`Busy`), removed after the rename. A writer that
  crashes holding it leaves it behind: remove it by hand once no writer
  runs (it says which holder and token made it). ``fcntl.flock`` on a lock
  file is released by a crash, but is not honoured by every network file
  system;
- on an object store, a conditional put: read ``NAME.proof`` and its ETag
  (or generation), and put the new proof with ``If-Match: <etag>`` (or
  ``If-None-Match: *`` when there is none). The store refuses it if another
  writer put one since: read again, and check again. Then put the data.

Prints ``wrote token=N`` (exit 0), ``stale token=N stored=M`` (exit 1),
``busy`` (exit 3) or ``refused KIND: why`` for a proof that does not verify
(exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional, Tuple, Union

import leasehold
from leasehold import proof as lh_proof

PathLike = Union[str, "os.PathLike[str]"]


class Stale(Exception):
    """The writer's token is below the one that last wrote the file: a
    newer holder exists. Nothing was written."""

    def __init__(self, token: int, stored: int) -> None:
        super().__init__(f"token {token} is below the stored token {stored}")
        self.token = token
        self.stored = stored


class Busy(Exception):
    """Another writer holds the lock file (``lock=True``). Nothing was
    written."""


def proof_path(path: PathLike) -> Path:
    """Where the proof of ``path`` is kept: ``NAME.proof`` beside it."""
    p = Path(path)
    return p.with_name(p.name + ".proof")


def lock_path(path: PathLike) -> Path:
    p = Path(path)
    return p.with_name(p.name + ".lock")


def stored_claims(path: PathLike, keys: lh_proof.Keys, job: str) -> Optional[lh_proof.ProofClaims]:
    """The verified claims of the proof kept beside ``path``, or ``None``
    when there is none (never written). Raises :class:`leasehold.ProofError`
    when it does not verify: tampered with, or signed by a key no longer
    listed (keep a key listed while files it signed may be written)."""
    try:
        stored = proof_path(path).read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    return lh_proof.verify(stored.strip(), keys, job=job)


def read_fenced(path: PathLike, keys: lh_proof.Keys, job: str) -> Tuple[bytes, Optional[lh_proof.ProofClaims]]:
    """The file's data and the verified claims of the proof beside it
    (``None`` if it has none)."""
    return Path(path).read_bytes(), stored_claims(path, keys, job)


def _write_temp(directory: Path, prefix: str, data: bytes) -> str:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fenced(
    path: PathLike, data: bytes, proof: str, keys: lh_proof.Keys, job: str, *, lock: bool = False
) -> lh_proof.ProofClaims:
    """Writes ``data`` to ``path`` with ``proof`` beside it, if ``proof``
    verifies for ``job`` and its token is at least the stored one. Returns
    the proof's claims.

    Raises :class:`leasehold.ProofError` when ``proof`` or the stored one
    does not verify, :class:`Stale` when its token is below the stored one,
    :class:`Busy` when ``lock`` and another writer holds the lock file;
    nothing was written then. With ``lock=True`` the check and the renames
    hold ``NAME.lock`` (made with ``O_EXCL``), which closes the race between
    two writers (this module's documentation)."""
    mine = lh_proof.verify(proof, keys, job=job)
    target = Path(path)
    directory = target.parent
    held = None
    if lock:
        try:
            fd = os.open(lock_path(target), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise Busy(f"{lock_path(target)} exists: another writer is at work (or crashed holding it)") from None
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"holder": mine.holder, "token": str(mine.token), "pid": os.getpid()}) + "\n")
        held = lock_path(target)
    try:
        stored = stored_claims(target, keys, job)
        if stored is not None and mine.token < stored.token:
            raise Stale(mine.token, stored.token)
        tmp_data = _write_temp(directory, f".{target.name}.", data)
        try:
            tmp_proof = _write_temp(directory, f".{target.name}.proof.", (proof + "\n").encode("ascii"))
        except BaseException:
            os.unlink(tmp_data)
            raise
        # The proof first: see the module's documentation.
        os.replace(tmp_proof, proof_path(target))
        os.replace(tmp_data, target)
        _fsync_dir(directory)
        return mine
    finally:
        if held is not None:
            os.unlink(held)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", help="the file to write; its proof is kept in PATH.proof")
    p.add_argument("--server", default="127.0.0.1:50051", help="leasehold server (default %(default)s)")
    p.add_argument("--job", required=True, help="the job whose lease fences the file")
    p.add_argument("--name", default="file-writer", help="holder name; @uuid is added (default %(default)s)")
    p.add_argument("--ttl", type=float, default=10.0, help="lease TTL in seconds (default %(default)s)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the lease (default %(default)s)")
    p.add_argument("--lock", action="store_true", help="hold PATH.lock (O_EXCL) for the check and the rename")
    args = p.parse_args()
    data = sys.stdin.buffer.read()

    with leasehold.Client(args.server) as client:
        keys = client.signing_keys()
        with client.lock(args.job, ttl=args.ttl, timeout=args.timeout, name=args.name) as held:
            try:
                claims = write_fenced(args.path, data, held.proof, keys, args.job, lock=args.lock)
            except Stale as e:
                print(f"stale token={e.token} stored={e.stored}", flush=True)
                return 1
            except leasehold.ProofError as e:
                print(f"refused {e.kind.value}: {e}", flush=True)
                return 2
            except Busy:
                print("busy", flush=True)
                return 3
            print(f"wrote token={claims.token}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
