/**
 * A worker of the two-workers example: it campaigns for JOB with an
 * Elector and, while it leads, writes its state to the fenced store with
 * its token every 200 ms. Start two; one leads. Stop the leader (Ctrl-C or
 * SIGTERM: it resigns, releasing the lease) and the other takes over at
 * once with the next token; kill it (SIGKILL) and the other takes over
 * once the TTL has run out.
 *
 *   node dist/worker.js JOB [SERVER] [NAME]
 *
 * SERVER defaults to $LEASEHOLD_SERVER or 127.0.0.1:50051, NAME to
 * worker-<pid>. It prints one line per thing it does: `holder ...`,
 * `leader token=N`, `wrote version=V`, `fenced current=N`,
 * `lost token=N`, `resigned`.
 */
import { Client, Elector, Fenced, LeaseholdError } from "@leasehold/client";

const [job, server = process.env.LEASEHOLD_SERVER ?? "127.0.0.1:50051", name = `worker-${process.pid}`] =
  process.argv.slice(2);
if (!job) {
  console.error("usage: node dist/worker.js JOB [SERVER] [NAME]");
  process.exit(2);
}

const TTL_MS = 2000;
const WRITE_EVERY_MS = 200;
const say = (line: string) => process.stdout.write(line + "\n");
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const client = new Client(server);
const elector = new Elector(client, job, name, TTL_MS);
let stopping = false;

/** Writes our state, fenced by `token`, until we no longer lead with it. */
async function lead(token: bigint): Promise<void> {
  const before = await client.read(job, "state").catch(() => undefined);
  if (before?.found) say(`previous state (token ${before.token}): ${before.value.toString()}`);
  for (let n = 1; !stopping && elector.token === token; n++) {
    // No "am I still the leader?" check first: it could be stale by the
    // time the write lands. The token goes with the write; the server
    // refuses it if a newer leader exists.
    try {
      const state = JSON.stringify({ holder: elector.holder, token: String(token), n });
      const version = await client.checkedWrite(job, token, "state", state);
      say(`wrote version=${version}`);
    } catch (e) {
      if (e instanceof Fenced) {
        say(`fenced current=${e.currentToken}`);
        return; // a newer leader exists: stop working on this token
      }
      if (!(e instanceof LeaseholdError)) throw e;
      say(`write failed: ${e.name}: ${e.message}`);
    }
    await sleep(WRITE_EVERY_MS);
  }
}

elector.on("elected", (token) => {
  say(`leader token=${token}`);
  lead(token).catch((e) => {
    console.error(e);
    process.exit(1);
  });
});
elector.on("lost", (token) => say(`lost token=${token}`));
elector.on("error", (e) => {
  // The server refused the campaign (bad job name or TTL, credentials): retrying cannot help.
  say(`error ${e.name}: ${e.message}`);
  client.close();
  process.exit(1);
});

async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  say(`${signal}: resigning`);
  await elector.resign(); // releases the lease if held: the other worker takes over at once
  say("resigned");
  client.close();
  process.exit(0);
}
process.on("SIGTERM", () => void shutdown("SIGTERM"));
process.on("SIGINT", () => void shutdown("SIGINT"));

say(`holder ${elector.holder} job ${job} server ${server}`);
elector.start();
