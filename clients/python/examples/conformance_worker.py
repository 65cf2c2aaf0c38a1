"""The conformance worker for Python (clients/conformance/README.md has
the protocol): one Elector for one job, driven over stdin, reporting on
stdout. Also a complete example of a worker: lead, write fenced by the
token, release on SIGTERM.

    python conformance_worker.py --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000

``--bind`` builds the worker's elector with ``bind_to_stream=True``: if the
process dies, the server releases its lease at once. ``--preferred`` builds
it with ``preferred=True`` (it campaigns as a preferred candidate),
``--yield`` with ``yield_to_preferred=True`` (it hands over to a waiting
preferred candidate at its next renewal: ``lost token=N``, then campaigns
again).
"""

import argparse
import signal
import sys
import threading

import leasehold

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
    p.add_argument("--job", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--ttl-ms", type=int, default=1000)
    p.add_argument("--bind", action="store_true", help="bind the elector's grants to its connection")
    p.add_argument("--preferred", action="store_true", help="campaign as a preferred candidate")
    p.add_argument(
        "--yield",
        dest="yield_to_preferred",
        action="store_true",
        help="hand over to a waiting preferred candidate at the next renewal",
    )
    args = p.parse_args()

    # SIGTERM ends the command loop below, wherever it is: the handler
    # raises there, and what follows the loop resigns and says "bye". Until
    # the loop runs, SIGTERM is blocked (kept pending, not lost): it may
    # come as soon as the campaign reaches the server, before start() has
    # returned, and raised inside start() it would end the process with a
    # traceback, never resigning nor saying "bye". The threads started
    # meanwhile (gRPC's, the elector's) inherit the block, so it is
    # delivered to this one once unblocked.
    def on_term(signum, frame):
        raise Shutdown()

    signal.signal(signal.SIGTERM, on_term)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    client = leasehold.Client(args.server)
    last_token = [None]  # the token we last led with, kept after losing

    def elected(token: int) -> None:
        last_token[0] = token
        say(f"elected token={token}")

    def lost(token: int) -> None:
        say(f"lost token={token}")

    elector = leasehold.Elector(
        client,
        args.job,
        args.name,
        args.ttl_ms / 1000,
        on_elected=elected,
        on_lost=lost,
        bind_to_stream=args.bind,
        preferred=args.preferred,
        yield_to_preferred=args.yield_to_preferred,
    )
    say(f"holder {elector.holder}")
    elector.start()
    twins = []  # (elector, [last token]): two more electors, one name, one process
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "quit":
                break
            if cmd == "write":
                say(write(client, args.job, last_token[0], arg))
            elif cmd == "transfer":
                say(transfer(elector, None))
            elif cmd == "transfer-to":
                say(transfer(elector, arg))
            elif cmd == "bad":
                say(f"bad {arg} {bad(client, args.job, elector.holder, last_token[0], arg)}")
            elif cmd == "twin" and not twins:
                twins = start_twins(client, arg, args.name, args.ttl_ms / 1000)
            elif cmd == "twin-write":
                i, _, value = arg.partition(" ")
                e, last = twins[int(i)]
                say("twin-" + write(client, e.job, last[0], value))
            elif cmd == "twin-stop":
                twins[int(arg)][0].resign()
                say("twin-stop done")
            elif cmd:
                say(f"error unknown command {cmd!r}")
    except Shutdown:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for e, _ in twins:
        e.resign()
    elector.resign()  # releases the lease if held
    say("bye")
    client.close()
    return 0


def start_twins(client: leasehold.Client, job: str, name: str, ttl: float):
    """Two electors with the same name for ``job`` in this process: each is
    its own holder, so at most one leads."""
    twins = []
    for i in range(2):
        last = [None]

        def elected(token: int, i=i, last=last) -> None:
            last[0] = token
            say(f"twin elected {i} token={token}")

        def lost(token: int, i=i) -> None:
            say(f"twin lost {i} token={token}")

        twins.append((leasehold.Elector(client, job, name, ttl, on_elected=elected, on_lost=lost), last))
    for i, (e, _) in enumerate(twins):
        say(f"twin holder {i} {e.holder}")
    for e, _ in twins:
        e.start()
    return twins


def write(client: leasehold.Client, job: str, token, value: str) -> str:
    # No "am I still the leader?" check first: it could be stale by the
    # time the write lands. The token goes with the write; the server
    # decides.
    if token is None:
        return "write error never-led"
    try:
        version = client.checked_write(job, token, b"status", value.encode())
        return f"write ok version={version}"
    except leasehold.Fenced as e:
        return f"write fenced current={e.current_token}"
    except leasehold.LeaseholdError as e:
        return f"write error {type(e).__name__} {e}"


def transfer(elector: leasehold.Elector, to) -> str:
    """Hands the leadership to the first waiter (``to`` None) or to ``to``.
    The elector then reports the loss (``lost token=N``) and campaigns
    again behind the successor."""
    try:
        lease = elector.transfer(to)
        return f"transfer ok token={lease.token}"
    except leasehold.NoSuccessor:
        return "transfer no-successor"
    except leasehold.LeaseLost:
        return "transfer lost"
    except leasehold.NotLeader:
        return "transfer not-leader"
    except leasehold.LeaseholdError as e:
        return f"transfer error {type(e).__name__} {e}"


def bad(client: leasehold.Client, job: str, holder: str, token, case: str) -> str:
    try:
        if case == "job":
            client.acquire("", holder, ttl=1.0)
        elif case == "ttl":
            client.acquire(job, holder, ttl=0.001)
        elif case == "key":
            client.checked_write(job, token or 1, b"", b"x")
        elif case == "token":
            client.checked_write(job, 1 << 62, b"status", b"x")
        else:
            return "error unknown case"
        return "accepted"
    except leasehold.UnknownToken as e:
        return f"unknown-token current={e.current_token}"
    except leasehold.InvalidArgument as e:
        return f"invalid field={e.field}"
    except leasehold.LeaseholdError as e:
        return f"other {type(e).__name__} {e}"


if __name__ == "__main__":
    sys.exit(main())
