"""A worker that does its job only while it leads: start two, one leads.

    python worker.py --server 127.0.0.1:50051 demo

It runs a leasehold Elector for the job. While it leads it reads a counter
from the job's fenced store, then every 200 ms adds one and writes it back
with a CheckedWrite fenced by its token. It prints what it does:

    started holder=worker@9f1c...
    leader token=1 counter=0
    wrote token=1 counter=1 version=1
    ...
    lost token=1            (the lease ran out, or went to another worker)
    fenced token=1 current=2  (a write refused: a newer leader exists)
    resigned

SIGTERM or SIGINT (Ctrl-C) resigns, releasing the lease so that the other
worker takes over at once with the next token, and exits 0.
"""

import argparse
import signal
import sys
import threading

import leasehold

KEY = b"counter"


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("job", help="the job to lead, e.g. demo")
    p.add_argument("--server", default="127.0.0.1:50051", help="leasehold server (default %(default)s)")
    p.add_argument("--name", default="worker", help="holder name; the elector adds @uuid (default %(default)s)")
    p.add_argument("--ttl", type=float, default=3.0, help="lease TTL in seconds (default %(default)s)")
    p.add_argument("--every", type=float, default=0.2, help="seconds between writes (default %(default)s)")
    args = p.parse_args()

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    with leasehold.Client(args.server) as client:
        with leasehold.Elector(client, args.job, args.name, args.ttl) as elector:
            say(f"started holder={elector.holder}")
            led = None  # the token we lead with, as this loop knows it
            counter = 0
            while not stop.is_set():
                try:
                    elector.wait_elected(timeout=args.every)
                except leasehold.LeaseholdError as e:  # refused: wrong TTL, no permission...
                    say(f"error {type(e).__name__}: {e}")
                    return 1
                # token checks the elector's own deadline too: None once it
                # has passed, even if this process was paused meanwhile.
                token = elector.token
                if led is not None and token != led:
                    say(f"lost token={led}")
                    led = None
                if token is None:
                    continue
                try:
                    if token != led:
                        # Newly elected: carry on from what the last leader wrote.
                        v = client.read(args.job, KEY)
                        counter = int(v.value) if v.found else 0
                        led = token
                        say(f"leader token={token} counter={counter}")
                    version = client.checked_write(args.job, token, KEY, str(counter + 1).encode())
                    counter += 1
                    say(f"wrote token={token} counter={counter} version={version}")
                except leasehold.Fenced as e:
                    # A newer leader exists: this one must stop writing.
                    say(f"fenced token={token} current={e.current_token}")
                    elector.wait_lost(args.ttl)
                except leasehold.Unavailable as e:
                    say(f"unavailable {e}")
                stop.wait(args.every)
        # Leaving the Elector's block resigned: the lease is released.
        say("resigned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
