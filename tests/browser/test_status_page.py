"""The status page (admin port, ``GET /``) in a real browser: Debian's
chromium, headless, driven by Playwright, against a real ``leasehold
serve`` with real leases made through gRPC (the Python client).

    LEASEHOLD_BIN=target/debug/leasehold python -m pytest tests/browser

``SCREENSHOTS=DIR`` also writes the page, light and dark, desktop and
phone width, into DIR (docs/ holds the committed ones).
"""

from __future__ import annotations

import base64
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "conformance"))

import harness  # noqa: E402
import leasehold  # noqa: E402
from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
LONG = 60.0
# How long a test waits for a change to show on an open page, pushed by
# the page's event stream. Far above the time it takes (printed by the
# takeover test): a loaded machine makes the suite slower, never red.
LIVE_MS = 20_000


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture()
def server():
    s = harness.ServerProcess()
    yield s
    s.stop()


def seed(c: leasehold.Client) -> None:
    """A few jobs in every state the page shows."""
    c.acquire("billing/sync", "worker-a", LONG)
    c.acquire("bridge_health", "probe-1", 20.0)
    c.checked_write("bridge_health", 1, "status", b"ok")
    # Taken over after a release, then a stale write fenced.
    c.acquire("reconcile", "old", LONG)
    c.release("reconcile", "old", 1)
    c.acquire("reconcile", "new", LONG)
    with pytest.raises(leasehold.Fenced):
        c.checked_write("reconcile", 1, "status", b"stale")
    # Leaderless: released.
    c.acquire("symbols/sync", "gone", LONG)
    c.release("symbols/sync", "gone", 1)


def row(page: Page, job: str):
    return page.locator(f'#rows tr[data-job="{job}"]')


def seconds(text: str) -> float:
    value, unit = text.split()[:2]
    return float(value) / (1000 if unit == "ms" else 1)


def test_the_page_lists_jobs_counts_down_and_follows_a_takeover_live(browser, server):
    c = leasehold.Client(server.target)
    seed(c)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"http://{server.admin}/")
    expect(page.locator("#rows tr")).to_have_count(4)
    expect(page.locator("#live")).to_have_text("live")
    # Leaderless first, then the recent fenced write, then by name.
    order = page.locator("#rows tr").evaluate_all("rs => rs.map(r => r.dataset.job)")
    assert order == ["symbols/sync", "reconcile", "billing/sync", "bridge_health"], order
    expect(row(page, "symbols/sync")).to_contain_text("leaderless")
    expect(row(page, "reconcile")).to_contain_text("1 refused")
    expect(row(page, "billing/sync")).to_contain_text("worker-a")
    # The countdown moves, without a reload.
    page.evaluate("window.__loaded_once = true")
    left = row(page, "bridge_health").locator(".left")
    first = seconds(left.inner_text())
    time.sleep(1.2)
    second = seconds(left.inner_text())
    assert 0 < second < first, (first, second)
    # A takeover through gRPC shows on the open page, without a reload.
    c.release("billing/sync", "worker-a", 1)
    c.acquire("billing/sync", "worker-b", LONG)
    t = time.monotonic()
    expect(row(page, "billing/sync")).to_contain_text("worker-b", timeout=LIVE_MS)
    expect(row(page, "billing/sync").locator("td").nth(2)).to_have_text("2", timeout=LIVE_MS)
    took = time.monotonic() - t
    assert page.evaluate("window.__loaded_once") is True, "the page was reloaded"
    print(f"takeover shown {took * 1000:.0f} ms after the grant returned")
    # The filter narrows by prefix.
    page.fill("#filter", "b")
    expect(page.locator("#rows tr")).to_have_count(2)
    page.fill("#filter", "")
    expect(page.locator("#rows tr")).to_have_count(4)


def test_a_jobs_page_shows_each_tenure_and_its_keys(browser, server):
    c = leasehold.Client(server.target)
    for n, who in enumerate(["a", "b", "c"], start=1):
        c.acquire("timeline", who, LONG)
        c.checked_write("timeline", n, "state", f"by {who}".encode())
        time.sleep(0.1)
        if n < 3:
            c.release("timeline", who, n)
            time.sleep(0.1)  # a gap between tenures
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"http://{server.admin}/#/job/timeline")
    expect(page.locator(".tenure-bar")).to_have_count(3)
    expect(page.locator("tr.tenure")).to_have_count(3)
    tokens = page.locator(".tenure-bar").evaluate_all("bs => bs.map(b => +b.dataset.token)")
    assert tokens == [1, 2, 3]
    # Bars in time order, with gaps between them.
    xs = page.locator(".tenure-bar").evaluate_all(
        "bs => bs.map(b => [+b.getAttribute('x'), +b.getAttribute('x') + +b.getAttribute('width')])"
    )
    assert xs[0][1] < xs[1][0] and xs[1][1] < xs[2][0], xs
    expect(page.locator("tr.tenure").first).to_contain_text("leads")
    expect(page.locator("tr.tenure").nth(1)).to_contain_text("released")
    keys = page.locator("table").nth(1)
    expect(keys).to_contain_text("state")
    expect(keys.locator("tbody tr").first.locator("td").nth(1)).to_have_text("3")  # version
    expect(keys.locator("tbody tr").first.locator("td").nth(2)).to_have_text("3")  # token
    # A takeover shows on the job's page too, live.
    c.release("timeline", "c", 3)
    c.acquire("timeline", "d", LONG)
    expect(page.locator(".tenure-bar")).to_have_count(4, timeout=LIVE_MS)


def test_a_jobs_page_shows_the_leaders_value_and_its_candidates(browser, server):
    import threading

    c = leasehold.Client(server.target)
    c.acquire("routed", "leader", LONG, value="10.0.0.7:8080")

    def wait(holder: str, preferred: bool) -> None:
        try:
            c.acquire("routed", holder, LONG, 30.0, preferred=preferred)
        except leasehold.LeaseholdError:
            pass  # the server stops at the end of the test

    for holder, preferred in [("second", False), ("first", True)]:
        threading.Thread(target=wait, args=(holder, preferred), daemon=True).start()
        time.sleep(0.3)  # in this order
    deadline = time.monotonic() + 20
    while c.list_waiters("routed").waiting < 2:
        assert time.monotonic() < deadline, "two waiters in line"
        time.sleep(0.05)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"http://{server.admin}/#/job/routed")
    expect(page.locator("#jobvalue")).to_contain_text("10.0.0.7:8080")
    expect(page.locator("li.candidate")).to_have_count(2)
    # In line order: the preferred candidate first, though it came later.
    expect(page.locator("li.candidate").first).to_contain_text("first")
    expect(page.locator("li.candidate").first).to_contain_text("preferred")
    expect(page.locator("li.candidate").nth(1)).to_contain_text("second")
    expect(page.locator("tr.tenure").first).to_contain_text("value 10.0.0.7:8080")


def test_a_counted_jobs_page_shows_its_slots_and_a_slots_page_its_job(browser, server):
    c = leasehold.Client(server.target)
    first = c.acquire("batch", "a", LONG, slots=2)
    c.acquire("batch", "b", LONG, slots=2)
    assert (first.lease.job, first.lease.slot, first.lease.slots) == ("batch#0", 0, 2)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"http://{server.admin}/#/job/batch")
    expect(page.locator("#jobslots")).to_contain_text("2 (a counted lease)")
    expect(page.locator("#jobslots a.slot")).to_have_count(2)
    page.locator("#jobslots a.slot").nth(1).click()
    expect(page.locator("#jobname")).to_have_text("batch#1")
    expect(page.locator("#jobslot")).to_contain_text("1 of 2 of batch")
    expect(page.locator("#jobleader")).to_contain_text("b")


def test_a_groups_page_lists_its_members_and_owners_and_a_shards_page_its_group(browser, server):
    c = leasehold.Client(server.target)
    members = [c.join_shards("orders", name, 4, ttl=LONG) for name in ("a", "b")]
    for m in members:
        m.start()
    try:
        deadline = time.monotonic() + 30
        while sorted(len(m.shards) for m in c.get_group("orders").members) != [2, 2]:
            assert time.monotonic() < deadline, c.get_group("orders")
            time.sleep(0.05)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"http://{server.admin}/#/job/orders")
        expect(page.locator("#jobgroup")).to_contain_text("4 shards over 2 members, 0 unowned")
        expect(page.locator("#members tr.member")).to_have_count(2)
        expect(page.locator("#owners tr.owner")).to_have_count(4)
        expect(page.locator("#members")).to_contain_text(members[0].member)
        page.locator("#members a.shard").first.click()
        expect(page.locator("#jobname")).to_have_text(re.compile(r"^orders/[0-3]$"))
        expect(page.locator("#jobshard")).to_contain_text("of 4 of the group orders (2 members")
    finally:
        for m in members:
            m.leave()


def http(url: str, auth: str | None = None) -> tuple[int, str, dict]:
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", auth)
    # The admin port's certificate is the test CA's; what is tested here
    # is who may see what, not the certificate.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), {k.lower(): v for k, v in e.headers.items()}


def test_with_a_policy_the_page_needs_read_and_shows_only_what_the_caller_may_read(browser):
    server = harness.ServerProcess(secure=True)
    try:
        pki = server.pki
        assert pki is not None
        alice = (pki / "alice.token").read_text().strip()
        bob = (pki / "bob.token").read_text().strip()
        c = leasehold.Client(server.target, ca=pki / "ca.pem", token=alice, server_name="localhost")
        c.acquire("alice/job", "a", LONG)
        c.acquire("bob/job", "b", LONG)
        base = f"https://{server.admin}"
        # No credentials: 401, asking a browser for them.
        code, _, headers = http(base + "/")
        assert code == 401
        assert headers.get("www-authenticate", "").startswith("Basic"), headers
        code, _, _ = http(base + "/api/jobs")
        assert code == 401
        basic = lambda t: "Basic " + base64.b64encode(f"x:{t}".encode()).decode()  # noqa: E731
        code, _, _ = http(base + "/api/jobs", basic("wrong"))
        assert code == 401
        # bob reads bob/ only: the other job is neither listed nor shown.
        code, body, _ = http(base + "/api/jobs", basic(bob))
        assert code == 200 and "bob/job" in body and "alice/job" not in body, body
        code, _, _ = http(base + "/api/job?name=alice%2Fjob", basic(bob))
        assert code == 403
        # A bearer token works as on the gRPC port.
        code, body, _ = http(base + "/api/jobs", f"Bearer {alice}")
        assert code == 200 and "alice/job" in body and "bob/job" in body
        # In the browser, with bob's token as the Basic password.
        ctx = browser.new_context(http_credentials={"username": "bob", "password": bob}, ignore_https_errors=True)
        page = ctx.new_page()
        page.goto(base + "/")
        expect(page.locator("#rows tr")).to_have_count(1)
        expect(page.locator("#rows tr")).to_contain_text("bob/job")
        # The page lists the jobs first, then opens its event stream: a
        # change made before the stream is open is not sent to it.
        expect(page.locator("#live")).to_have_text("live", timeout=LIVE_MS)
        # A grant bob may not read sends bob nothing; one he may read does.
        c.release("alice/job", "a", 1)
        c.acquire("alice/job", "a2", LONG)
        c.release("bob/job", "b", 1)
        c.acquire("bob/job", "b2", LONG)
        expect(page.locator("#rows tr")).to_contain_text("b2", timeout=LIVE_MS)
        expect(page.locator("#rows tr")).to_have_count(1)
        ctx.close()
    finally:
        server.stop()


@pytest.mark.skipif(not os.environ.get("SCREENSHOTS"), reason="SCREENSHOTS=DIR writes the docs' screenshots")
def test_screenshots(browser, server):
    out = Path(os.environ["SCREENSHOTS"])
    out.mkdir(parents=True, exist_ok=True)
    c = leasehold.Client(server.target)
    seed(c)
    for n, who in enumerate(["deploy-1", "deploy-2"], start=1):
        c.acquire("deploy/rollout", who, LONG)
        c.checked_write("deploy/rollout", n, "step", f"{n}".encode())
        time.sleep(0.3)
        if n == 1:
            c.release("deploy/rollout", who, n)
            time.sleep(0.2)
    for scheme in ("light", "dark"):
        for name, size in (("desktop", (1280, 720)), ("phone", (390, 844))):
            ctx = browser.new_context(viewport={"width": size[0], "height": size[1]}, color_scheme=scheme)
            page = ctx.new_page()
            page.goto(f"http://{server.admin}/")
            expect(page.locator("#rows tr")).to_have_count(5)
            page.screenshot(path=str(out / f"status-{name}-{scheme}.png"))
            page.goto(f"http://{server.admin}/#/job/deploy%2Frollout")
            expect(page.locator(".tenure-bar")).to_have_count(2)
            page.screenshot(path=str(out / f"status-job-{name}-{scheme}.png"))
            ctx.close()
