#!/usr/bin/env python3
"""What the status page costs, with 10,000 jobs (issue: "see it").

    python bench/status_page.py --leasehold-bin target/release/leasehold [--jobs 10000] [--secs 30] [--churn 10]

Starts ``leasehold serve``, grants JOBS leases through gRPC (the Python
client), then, in one run:

1. first paint: opens the page in Debian's chromium (headless, Playwright),
   ``--loads`` times, and reports the browser's first contentful paint and
   the time until the job table is drawn (navigation start to the first
   row in the DOM), median and slowest;
2. the server's CPU (user + system, from /proc) over ``--secs`` seconds,
   four ways: no page open and the page open, each with no change and
   with ``--churn`` takeovers a second (so the page has events to show).
   The page's cost is the difference with the page open, as a share of
   one core.

Needs what tests/browser needs: chromium, playwright, the Python client
(the venv of clients/tools.sh has all three).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "clients" / "conformance"))

import harness  # noqa: E402
import leasehold  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def measure(pid: int, secs: float) -> float:
    """The process's CPU over `secs`, as a share of one core."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(secs)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


class Churn:
    """`rate` takeovers a second, round-robin over the first 100 jobs."""

    def __init__(self, c: leasehold.Client, rate: float, tokens: dict) -> None:
        self.c, self.rate, self.tokens = c, rate, tokens
        self.stop = threading.Event()
        self.done = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            job = f"bench/job-{i % 100:05d}"
            holder, token = self.tokens[job]
            self.c.release(job, holder, token)
            new = f"h{i}"
            self.tokens[job] = (new, self.c.acquire(job, new, 600.0).lease.token)
            self.done += 1
            i += 1
            self.stop.wait(1 / self.rate)

    def __enter__(self) -> "Churn":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--leasehold-bin", required=True)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--secs", type=float, default=30.0)
    p.add_argument("--churn", type=float, default=10.0, help="takeovers a second")
    p.add_argument("--loads", type=int, default=5)
    p.add_argument("--chromium", default="/usr/bin/chromium")
    a = p.parse_args()
    os.environ["LEASEHOLD_BIN"] = a.leasehold_bin

    server = harness.ServerProcess()
    pid = server.proc.pid
    try:
        c = leasehold.Client(server.target)
        t = time.monotonic()
        tokens = {}

        def grant(i: int) -> None:
            job = f"bench/job-{i:05d}"
            tokens[job] = ("h", c.acquire(job, "h", 600.0).lease.token)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(grant, range(a.jobs)))
        print(f"{a.jobs} leases granted in {time.monotonic() - t:.1f} s", flush=True)

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            fcp, table = [], []
            for _ in range(a.loads):
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"http://{server.admin}/")
                page.wait_for_selector("#rows tr")
                drawn = page.evaluate("performance.now()")
                paint = page.evaluate(
                    "(performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null"
                )
                fcp.append(paint)
                table.append(drawn)
                page.close()
            print(
                f"first contentful paint: median {statistics.median(fcp):.0f} ms, slowest {max(fcp):.0f} ms; "
                f"the table drawn: median {statistics.median(table):.0f} ms, slowest {max(table):.0f} ms "
                f"({a.loads} loads, {a.jobs} jobs)",
                flush=True,
            )

            rows = []
            for churn in (0.0, a.churn):
                for open_page in (False, True):
                    page = None
                    if open_page:
                        page = browser.new_page(viewport={"width": 1280, "height": 800})
                        page.goto(f"http://{server.admin}/")
                        page.wait_for_selector("#rows tr")
                        time.sleep(1)
                    if churn:
                        with Churn(c, churn, tokens) as ch:
                            share = measure(pid, a.secs)
                        done = ch.done
                    else:
                        share = measure(pid, a.secs)
                        done = 0
                    if page:
                        page.close()
                    rows.append((churn, open_page, share, done))
                    print(
                        f"churn {churn:g}/s ({done} takeovers), page {'open' if open_page else 'closed'}: "
                        f"server CPU {share * 100:.2f}% of one core",
                        flush=True,
                    )
            browser.close()
        print()
        print("| changes | page closed | page open | the page's cost (open - closed) |")
        print("|---|---:|---:|---:|")
        for churn in (0.0, a.churn):
            closed = next(r[2] for r in rows if r[0] == churn and not r[1])
            opened = next(r[2] for r in rows if r[0] == churn and r[1])
            print(
                f"| {churn:g} takeovers/s | {closed * 100:.2f}% | {opened * 100:.2f}% | "
                f"{(opened - closed) * 100:+.2f}% of one core |"
            )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
