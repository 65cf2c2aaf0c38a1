/**
 * TLS, mutual TLS, bearer tokens and the policy, against the real server
 * started with the certificates and policy of clients/tools/pki.sh (alice
 * may lease, write and read every job; bob may only read jobs "bob/...").
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Metadata, status as Code } from "@grpc/grpc-js";
import { Client, Elector, fromStatus, LeaseholdError, PermissionDenied, Unauthenticated } from "../src";
import { ErrorInfo } from "../src/gen/google/rpc/error_details";
import { Status } from "../src/gen/google/rpc/status";
import { makePki, Server, spawnChild, uniqueJob } from "./harness";

const quiet = { warn: () => {} };

describe("security against the real server with TLS and a policy", () => {
  let server: Server;
  let pki: string;
  const file = (name: string) => join(pki, name);
  const secret = (who: string) => readFileSync(file(`${who}.token`), "utf8");
  before(async () => {
    server = await Server.start(30_000, { secure: true });
    pki = server.pki!;
  });
  after(async () => {
    await server.stop();
  });

  test("TLS with a token: acquire, renew, write, read, stream", async () => {
    const job = uniqueJob("tls");
    const c = new Client(server.target, { caFile: file("ca.pem"), token: secret("alice") });
    try {
      const a = await c.acquire(job, "w", 30_000);
      assert.ok(a.acquired);
      assert.equal(a.lease.principal, "alice");
      const t = a.lease.token;
      assert.equal((await c.renew(job, "w", t, 30_000)).token, t);
      assert.equal(await c.checkedWrite(job, t, "k", "v"), 1n);
      assert.equal((await c.read(job, "k")).value.toString(), "v");
      const lease = await c.getLease(job);
      assert.deepEqual([lease.holder, lease.principal], ["w", "alice"]);
      const s = c.writeStream();
      const out = await s.write([{ job, token: t, key: "s", value: "1" }]);
      assert.equal(out[0].kind, "written");
      await s.close();
      await c.release(job, "w", t);
    } finally {
      c.close();
    }
  });

  test("TLS to an IP address: no RFC 6066 DeprecationWarning (child process), the certificate still checked", async () => {
    // A fresh process: Node prints the warning once per process, at the first TLS connection with an IP server name.
    const script = `
      const { Client } = require(${JSON.stringify(join(__dirname, "..", "src"))});
      const [target, ca, token] = process.argv.slice(1);
      (async () => {
        for (const [label, serverName] of [["ip", undefined], ["wrong-name", "wrong.example"]]) {
          const c = new Client(target, { caFile: ca, token, serverName, timeoutMs: 5000 });
          try { await c.getLease("tls-ip"); console.log(label + " ok"); }
          catch (e) { console.log(label + " " + e.name + " " + e.message.replace(/\s+/g, " ")); }
          c.close();
        }
      })();`;
    const proc = spawnChild(process.execPath, ["-e", script, server.target, file("ca.pem"), secret("alice")]);
    let stdout = "";
    let stderr = "";
    proc.stdout!.on("data", (d) => (stdout += d));
    proc.stderr!.on("data", (d) => (stderr += d));
    const code = await new Promise((r) => proc.once("exit", r));
    assert.equal(code, 0, stderr);
    const [ip, wrong] = stdout.trim().split("\n");
    assert.equal(ip, "ip ok", "connected over TLS to 127.0.0.1");
    assert.match(wrong, /^wrong-name Unavailable .*(ERR_TLS_CERT_ALTNAME_INVALID|does not match)/, "a wrong server name is refused");
    assert.doesNotMatch(stderr, /DeprecationWarning|DEP0123|RFC 6066/);
    assert.match(server.target, /^127\.0\.0\.1:\d+$/, "the target is an IP address");
  });

  test("serverName: the certificate is checked against it (localhost passes, another name is refused)", async () => {
    const good = new Client(server.target, { caFile: file("ca.pem"), token: secret("alice"), serverName: "localhost" });
    const bad = new Client(server.target, { caFile: file("ca.pem"), token: secret("alice"), serverName: "wrong.example", timeoutMs: 5000 });
    try {
      assert.equal((await good.getLease(uniqueJob("sni"))).token, 0n);
      await assert.rejects(bad.getLease(uniqueJob("sni")), (e: unknown) => e instanceof LeaseholdError && e.retryable);
    } finally {
      good.close();
      bad.close();
    }
  });

  test("the CA may be given as PEM", async () => {
    const c = new Client(server.target, { ca: readFileSync(file("ca.pem"), "utf8"), token: secret("alice") });
    try {
      assert.ok((await c.acquire(uniqueJob("pem"), "w", 30_000)).acquired);
    } finally {
      c.close();
    }
  });

  test("no token: Unauthenticated", async () => {
    const c = new Client(server.target, { caFile: file("ca.pem") });
    try {
      await assert.rejects(c.acquire(uniqueJob("none"), "w", 30_000), (e) => {
        assert.ok(e instanceof Unauthenticated, String(e));
        assert.equal(e.reason, "UNAUTHENTICATED");
        assert.equal(e.retryable, false);
        return true;
      });
    } finally {
      c.close();
    }
  });

  test("a wrong token: Unauthenticated, on calls and streams, and the token is not shown", async () => {
    const c = new Client(server.target, { caFile: file("ca.pem"), token: "not-a-secret-of-anyone" });
    try {
      await assert.rejects(c.read(uniqueJob("wrong"), "k"), (e) => {
        assert.ok(e instanceof Unauthenticated, String(e));
        assert.ok(!String(e.message).includes("not-a-secret-of-anyone"));
        return true;
      });
      const s = c.writeStream();
      await assert.rejects(s.write([{ job: uniqueJob("wrong"), token: 1n, key: "k", value: "v" }]), Unauthenticated);
      await s.close().catch(() => {});
    } finally {
      c.close();
    }
  });

  test("a principal without the grant: PermissionDenied naming action and job", async () => {
    const job = uniqueJob("denied");
    const c = new Client(server.target, { caFile: file("ca.pem"), token: secret("bob") });
    try {
      await assert.rejects(c.acquire(job, "w", 30_000), (e) => {
        assert.ok(e instanceof PermissionDenied, String(e));
        assert.deepEqual([e.action, e.job, e.retryable], ["lease", job, false]);
        return true;
      });
      assert.equal((await c.read(`bob/${job}`, "k")).found, false);
    } finally {
      c.close();
    }
  });

  test("mutual TLS with a client certificate", async () => {
    const job = uniqueJob("mtls");
    const a = new Client(server.target, { caFile: file("ca.pem"), certFile: file("alice.pem"), keyFile: file("alice-key.pem") });
    const b = new Client(server.target, {
      ca: readFileSync(file("ca.pem")),
      cert: readFileSync(file("bob.pem")),
      key: readFileSync(file("bob-key.pem")),
    });
    try {
      const r = await a.acquire(job, "w", 30_000);
      assert.ok(r.acquired);
      assert.equal(r.lease.principal, "alice");
      await assert.rejects(b.checkedWrite(job, r.lease.token, "k", "v"), (e) => {
        assert.ok(e instanceof PermissionDenied, String(e));
        assert.deepEqual([e.action, e.job], ["write", job]);
        return true;
      });
    } finally {
      a.close();
      b.close();
    }
  });

  test("an https:// target is TLS", async () => {
    // Without the test CA the system's roots cannot verify the server: the
    // channel is TLS (the handshake fails), never plaintext.
    const bare = new Client(`https://${server.target}`, { token: secret("alice"), timeoutMs: 5_000 });
    const good = new Client(`https://${server.target}`, { caFile: file("ca.pem"), token: secret("alice") });
    try {
      await assert.rejects(bare.getLease(uniqueJob("https")), (e) => e instanceof LeaseholdError && e.retryable);
      assert.equal((await good.getLease(uniqueJob("https"))).holder, undefined);
    } finally {
      bare.close();
      good.close();
    }
  });

  test("a certificate needs its key", () => {
    assert.throws(() => new Client("127.0.0.1:1", { ca: "x", cert: "y" }), TypeError);
    assert.throws(() => new Client("127.0.0.1:1", { token: "two words" }), TypeError);
  });

  test("the Elector leads over TLS with a token", async () => {
    const job = uniqueJob("elector");
    const c = new Client(server.target, { caFile: file("ca.pem"), token: secret("alice") });
    const e = new Elector(c, job, "e", 5_000, { logger: quiet }).start();
    try {
      const t = await e.elected();
      assert.ok(t !== undefined);
      assert.equal(await c.checkedWrite(job, t, "k", "v"), 1n);
    } finally {
      await e.resign();
      c.close();
    }
  });

  test("an Elector refused by the policy stops and says why", async () => {
    const job = uniqueJob("refused");
    const c = new Client(server.target, { caFile: file("ca.pem"), token: secret("bob") });
    const e = new Elector(c, job, "e", 5_000, { logger: quiet }).start();
    try {
      await assert.rejects(e.elected(), PermissionDenied);
      assert.ok(e.error instanceof PermissionDenied);
      await assert.rejects(e.elected(), PermissionDenied);
    } finally {
      await e.resign();
      c.close();
    }
  });
});

test("a token without TLS goes in plaintext to a server with a policy", async () => {
  const pki = makePki(mkdtempSync(join(tmpdir(), "leasehold-ts-pki-")));
  const server = await Server.start(30_000, { extra: ["--policy", join(pki, "policy.toml")] });
  const c = new Client(`http://${server.target}`, { token: readFileSync(join(pki, "alice.token"), "utf8") });
  const anon = new Client(server.target);
  try {
    const job = uniqueJob("plain");
    assert.equal((await c.acquire(job, "w", 30_000)).lease.principal, "alice");
    await assert.rejects(anon.getLease(job), Unauthenticated);
  } finally {
    c.close();
    anon.close();
    await server.stop();
    rmSync(pki, { recursive: true, force: true });
  }
});

test("UNAUTHENTICATED and PERMISSION_DENIED decode, with or without an ErrorInfo", () => {
  const md = (code: Code, reason: string, meta: Record<string, string>) => {
    const info = ErrorInfo.encode({ reason, domain: "leasehold", metadata: meta }).finish();
    const st = Status.encode({
      code,
      message: "m",
      details: [{ typeUrl: "type.googleapis.com/google.rpc.ErrorInfo", value: Buffer.from(info) }],
    }).finish();
    const m = new Metadata();
    m.set("grpc-status-details-bin", Buffer.from(st));
    return m;
  };
  const d = fromStatus(Code.PERMISSION_DENIED, "m", md(Code.PERMISSION_DENIED, "PERMISSION_DENIED", { action: "read", job: "j" }));
  assert.ok(d instanceof PermissionDenied);
  assert.deepEqual([d.action, d.job, d.retryable], ["read", "j", false]);
  assert.ok(fromStatus(Code.UNAUTHENTICATED, "m", md(Code.UNAUTHENTICATED, "UNAUTHENTICATED", {})) instanceof Unauthenticated);
  assert.ok(fromStatus(Code.PERMISSION_DENIED, "m") instanceof PermissionDenied);
  assert.ok(fromStatus(Code.UNAUTHENTICATED, "m") instanceof Unauthenticated);
  assert.ok(!(fromStatus(Code.FAILED_PRECONDITION, "m") instanceof PermissionDenied));
  assert.ok(fromStatus(Code.FAILED_PRECONDITION, "m") instanceof LeaseholdError);
});
