/**
 * Nothing of the client keeps Node alive once stopped: a program that
 * resigns its elector (or releases its lock, resigns its set, ends its
 * observation) and closes its client exits at once, not when a renewal's
 * sleep (ttl/3: 10 s at a 30 s TTL), a backoff or a stream would have
 * ended. Each case runs in a real child process (test/fixtures/exit_child.ts)
 * against a real server, with a 30 s TTL; the bound is functional (well
 * under the 10 s a leaked renewal timer would hold it), not a speed
 * measurement.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { Server, spawnChild } from "./harness";

const CHILD = join(__dirname, "fixtures", "exit_child.js");
/** How long after "closed" the child may take to exit. */
const EXIT_WITHIN_MS = 5000;

/** Runs the child in `mode`; resolves to how long it took to exit after printing "closed". */
function run(mode: string, target: string, admin: string): Promise<number> {
  const proc = spawnChild(process.execPath, [CHILD, mode, target, admin]);
  return new Promise((resolve, reject) => {
    let closedAt: number | undefined;
    const killer = setTimeout(() => proc.kill("SIGKILL"), 60_000);
    createInterface({ input: proc.stdout! }).on("line", (line) => {
      if (line === "closed") closedAt = performance.now();
    });
    proc.once("exit", (code, signal) => {
      clearTimeout(killer);
      if (code !== 0) return reject(new Error(`${mode}: exited with ${code ?? signal}`));
      if (closedAt === undefined) return reject(new Error(`${mode}: exited without printing "closed"`));
      resolve(performance.now() - closedAt);
    });
  });
}

describe("a stopped client lets Node exit", () => {
  let server: Server;
  before(async () => {
    server = await Server.start();
  });
  after(() => server.stop());

  for (const mode of [
    "elector-leader",
    "elector-follower",
    "elector-newleader",
    "lock",
    "lock-timeout",
    "set",
    "set-renewed",
    "observe",
  ]) {
    test(`${mode}: exits within ${EXIT_WITHIN_MS} ms of closing`, async () => {
      const ms = await run(mode, server.target, server.admin);
      assert.ok(ms < EXIT_WITHIN_MS, `${mode}: exited ${Math.round(ms)} ms after closing`);
    });
  }

  // Against a port nobody listens on: the retries' backoff timers.
  for (const mode of ["elector-backoff", "lock-backoff"]) {
    test(`${mode}: a campaign backing off exits within ${EXIT_WITHIN_MS} ms of closing`, async () => {
      const ms = await run(mode, "127.0.0.1:1", server.admin);
      assert.ok(ms < EXIT_WITHIN_MS, `${mode}: exited ${Math.round(ms)} ms after closing`);
    });
  }
});
