"""TLS, mutual TLS, bearer tokens and the policy, against the real server
started with the certificates and policy of clients/tools/pki.sh (alice
may lease, write and read every job; bob may only read jobs "bob/...")."""

import asyncio

import pytest

import harness
import leasehold
from leasehold.aio import AsyncClient, AsyncElector


@pytest.fixture(scope="module")
def secure():
    s = harness.ServerProcess(secure=True)
    yield s
    s.stop()


def token(server, who):
    return (server.pki / f"{who}.token").read_text()


def alice(server, **kw):
    return leasehold.Client(server.target, ca=server.pki / "ca.pem", token=token(server, "alice"), **kw)


def test_tls_with_a_token_acquires_renews_writes_and_reads(secure, job):
    with alice(secure) as c:
        a = c.acquire(job, "w", ttl=30)
        assert a.acquired and a.lease.principal == "alice"
        assert c.renew(job, "w", a.lease.token, ttl=30).token == a.lease.token
        assert c.checked_write(job, a.lease.token, b"k", b"v") == 1
        assert c.read(job, b"k").value == b"v"
        lease = c.get_lease(job)
        assert (lease.holder, lease.principal) == ("w", "alice")
        with c.write_stream() as s:
            out = s.write([leasehold.StreamWrite.put(job, a.lease.token, b"s", b"1")])
            assert out[0].kind == leasehold.WriteOutcomeKind.WRITTEN
        c.release(job, "w", a.lease.token)


def test_the_ca_may_be_given_as_bytes(secure, job):
    ca = (secure.pki / "ca.pem").read_bytes()
    with leasehold.Client(secure.target, ca=ca, token=token(secure, "alice")) as c:
        assert c.acquire(job, "w", ttl=30).acquired


def test_no_token_is_unauthenticated(secure, job):
    with leasehold.Client(secure.target, ca=str(secure.pki / "ca.pem")) as c:
        with pytest.raises(leasehold.Unauthenticated) as e:
            c.acquire(job, "w", ttl=30)
        assert e.value.reason == "UNAUTHENTICATED" and not e.value.retryable


def test_a_wrong_token_is_unauthenticated_and_not_shown(secure, job):
    with leasehold.Client(secure.target, ca=secure.pki / "ca.pem", token="not-a-secret-of-anyone") as c:
        with pytest.raises(leasehold.Unauthenticated) as e:
            c.read(job, b"k")
        assert "not-a-secret-of-anyone" not in str(e.value)
        with pytest.raises(leasehold.Unauthenticated):
            list(c.watch(job, timeout=5))


def test_a_principal_without_the_grant_is_denied_naming_action_and_job(secure, job):
    with leasehold.Client(secure.target, ca=secure.pki / "ca.pem", token=token(secure, "bob")) as c:
        with pytest.raises(leasehold.PermissionDenied) as e:
            c.acquire(job, "w", ttl=30)
        assert (e.value.action, e.value.job) == ("lease", job)
        assert e.value.reason == "PERMISSION_DENIED" and not e.value.retryable
        # bob may read his own jobs.
        assert not c.read("bob/" + job, b"k").found


def test_mutual_tls_with_a_client_certificate(secure, job):
    with leasehold.Client(
        secure.target, ca=secure.pki / "ca.pem", cert=secure.pki / "alice.pem", key=secure.pki / "alice-key.pem"
    ) as c:
        a = c.acquire(job, "w", ttl=30)
        assert a.acquired and a.lease.principal == "alice"
    with leasehold.Client(
        secure.target, ca=secure.pki / "ca.pem", cert=secure.pki / "bob.pem", key=secure.pki / "bob-key.pem"
    ) as c:
        with pytest.raises(leasehold.PermissionDenied) as e:
            c.checked_write(job, 1, b"k", b"v")
        assert (e.value.action, e.value.job) == ("write", job)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        leasehold.Client("127.0.0.1:1", ca=b"x", cert=b"y")
    with pytest.raises(ValueError):
        leasehold.Client("127.0.0.1:1", token="two words")
    with pytest.raises(ValueError):
        leasehold.Client(channel=object(), token="secret")  # type: ignore[arg-type]
    assert "secret" not in repr(leasehold.client._BearerToken("secret"))


def test_an_https_target_is_tls(secure, job):
    # Without the test CA the system's roots cannot verify the server: the
    # channel is TLS (the handshake fails), never plaintext.
    with leasehold.Client("https://" + secure.target, token=token(secure, "alice"), timeout=5) as c:
        with pytest.raises(leasehold.Unavailable):
            c.get_lease(job)
    with leasehold.Client("https://" + secure.target, ca=secure.pki / "ca.pem", token=token(secure, "alice")) as c:
        assert c.get_lease(job).holder is None


def test_the_elector_leads_over_tls_with_a_token(secure, job):
    with alice(secure) as c:
        with leasehold.Elector(c, job, "e", ttl=5) as el:
            token_ = el.wait_elected(10)
            assert token_ is not None
            assert c.checked_write(job, token_, b"k", b"v") == 1


def test_an_elector_refused_by_the_policy_stops_and_says_why(secure, job):
    with leasehold.Client(secure.target, ca=secure.pki / "ca.pem", token=token(secure, "bob")) as c:
        el = leasehold.Elector(c, job, "e", ttl=5).start()
        with pytest.raises(leasehold.PermissionDenied):
            el.wait_elected(10)
        assert isinstance(el.error, leasehold.PermissionDenied)
        el.resign(5)


def test_the_async_client_and_elector_over_tls(secure, job):
    async def main():
        async with AsyncClient(
            secure.target, ca=secure.pki / "ca.pem", cert=secure.pki / "alice.pem", key=secure.pki / "alice-key.pem",
            token=token(secure, "alice"),
        ) as c:
            async with AsyncElector(c, job, "e", ttl=5) as el:
                t = await el.wait_elected(10)
                assert t is not None
                assert await c.checked_write(job, t, b"k", b"v") == 1
                async with c.write_stream() as s:
                    out = await s.write([leasehold.StreamWrite.put(job, t, b"s", b"1")])
                    assert out[0].kind == leasehold.WriteOutcomeKind.WRITTEN
        async with AsyncClient(secure.target, ca=secure.pki / "ca.pem") as c:
            with pytest.raises(leasehold.Unauthenticated):
                await c.get_lease(job)
        async with AsyncClient(secure.target, ca=secure.pki / "ca.pem", token=token(secure, "bob")) as c:
            el = AsyncElector(c, job, "e", ttl=5).start()
            with pytest.raises(leasehold.PermissionDenied) as e:
                await el.wait_elected(10)
            assert e.value.action == "lease"
            await el.resign()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_token_without_tls_goes_to_a_loopback_server(job, tmp_path):
    # A policy without TLS (loopback): the token travels in plaintext.
    pki = harness.make_pki(str(tmp_path / "pki"))
    s = harness.ServerProcess(extra=["--policy", str(pki / "policy.toml")])
    try:
        with leasehold.Client(s.url, token=(pki / "alice.token").read_text()) as c:
            assert c.acquire(job, "w", ttl=30).lease.principal == "alice"
        with leasehold.Client(s.target) as c:
            with pytest.raises(leasehold.Unauthenticated):
                c.get_lease(job)

        async def main():
            async with AsyncClient(s.target, token=(pki / "alice.token").read_text()) as c:
                assert (await c.get_lease(job)).principal == "alice"

        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        s.stop()
