"""A worker that keeps its state in PostgreSQL, fenced by leasehold tokens:
the Python Elector plus leasehold_pg. Driven over stdin like the
conformance worker (tests/test_fencing.py replays the paused-leader story
with it):

    python example_worker.py --server 127.0.0.1:50051 --dsn "host=... dbname=..." --job j --name w1 --ttl-ms 1000

stdout: `holder ID`; `elected token=N` once leading AND the take-over is
done (ready for work); `lost token=N`; `put ok` / `put fenced` for
`put KEY VALUE` (with the token it last led with); `bye` on quit/EOF/SIGTERM.
"""

import argparse
import os
import signal
import sys
import threading

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import leasehold  # noqa: E402
import leasehold_pg  # noqa: E402

_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Shutdown(Exception):
    pass


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--ttl-ms", type=int, default=1000)
    args = p.parse_args()

    client = leasehold.Client(args.server)
    conn = psycopg.connect(args.dsn, autocommit=True)
    db = threading.Lock()  # one connection, used from two threads
    last_token = [None]

    def elected(token: int) -> None:
        # Before any work: raise the fence on the job and its rows.
        with db:
            ok = leasehold_pg.take_over(conn, args.job, token, "bridge_status")
        if not ok:
            say(f"stale token={token}")
            return
        last_token[0] = token
        say(f"elected token={token}")

    elector = leasehold.Elector(
        client, args.job, args.name, args.ttl_ms / 1000,
        on_elected=elected, on_lost=lambda t: say(f"lost token={t}"),
    )
    say(f"holder {elector.holder}")

    def on_term(signum, frame):
        raise Shutdown()

    signal.signal(signal.SIGTERM, on_term)
    elector.start()
    try:
        for line in sys.stdin:
            cmd, _, rest = line.strip().partition(" ")
            if cmd == "quit":
                break
            if cmd == "put":
                key, _, value = rest.partition(" ")
                token = last_token[0]
                if token is None:
                    say("put error never-led")
                    continue
                with db:
                    ok = leasehold_pg.put(conn, args.job, key, value, token)
                say("put ok" if ok else "put fenced")
            elif cmd:
                say(f"error unknown command {cmd!r}")
    except Shutdown:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elector.resign()
    say("bye")
    conn.close()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
