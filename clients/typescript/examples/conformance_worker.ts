/**
 * The conformance worker for TypeScript (clients/conformance/README.md has
 * the protocol): one Elector for one job, driven over stdin, reporting on
 * stdout. Also a complete example of a worker: lead, write fenced by the
 * token, release on SIGTERM.
 *
 *   node dist/examples/conformance_worker.js --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000 [--bind] [--preferred] [--yield]
 *
 * `--bind` builds its elector with `bindToStream`, `--preferred` with
 * `preferred` and `--yield` with `yieldToPreferred` (not the twins').
 */
import { createInterface } from "node:readline";
import {
  Client,
  Elector,
  Fenced,
  InvalidArgument,
  LeaseholdError,
  LeaseLost,
  NoSuccessor,
  NotLeader,
  UnknownToken,
} from "../src";

function flag(name: string, fallback?: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : fallback;
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

/** Whether the flag `--name` (one without a value) was given. */
function has(name: string): boolean {
  return process.argv.includes(`--${name}`);
}

const say = (line: string) => process.stdout.write(line + "\n");

async function main(): Promise<void> {
  const job = flag("job");
  const client = new Client(flag("server"));
  const elector = new Elector(client, job, flag("name"), Number(flag("ttl-ms", "1000")), {
    bindToStream: has("bind"),
    preferred: has("preferred"),
    yieldToPreferred: has("yield"),
  });
  let lastToken: bigint | undefined; // the token we last led with, kept after losing

  elector.on("elected", (token) => {
    lastToken = token;
    say(`elected token=${token}`);
  });
  elector.on("lost", (token) => say(`lost token=${token}`));
  say(`holder ${elector.holder}`);
  elector.start();
  let twins: Twin[] = []; // two more electors, one name, one process

  let shuttingDown = false;
  const shutdown = async () => {
    if (shuttingDown) return;
    shuttingDown = true;
    await Promise.all(twins.map((t) => t.elector.resign()));
    await elector.resign(); // releases the lease if held
    say("bye");
    client.close();
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown());

  const lines = createInterface({ input: process.stdin });
  lines.on("close", () => void shutdown());
  // One command at a time, in order.
  let queue = Promise.resolve();
  lines.on("line", (line) => {
    queue = queue.then(async () => {
      const [cmd, ...rest] = line.trim().split(" ");
      const arg = rest.join(" ");
      if (cmd === "quit") return shutdown();
      if (cmd === "write") say(await write(client, job, lastToken, arg));
      else if (cmd === "bad") say(`bad ${arg} ${await bad(client, job, elector.holder, lastToken, arg)}`);
      else if (cmd === "transfer") say(await transfer(elector));
      else if (cmd === "transfer-to") say(await transfer(elector, arg));
      else if (cmd === "twin") {
        if (twins.length === 0) twins = startTwins(client, arg, flag("name"), Number(flag("ttl-ms", "1000")));
      } else if (cmd === "twin-write") {
        const t = twins[Number(rest[0])];
        say(`twin-${await write(client, t.elector.job, t.last, rest.slice(1).join(" "))}`);
      } else if (cmd === "twin-stop") {
        await twins[Number(arg)].elector.resign();
        say("twin-stop done");
      }
      else if (cmd) say(`error unknown command ${JSON.stringify(cmd)}`);
    });
  });
}

/** One of two electors with the same name for one job in this process. */
interface Twin {
  elector: Elector;
  /** The token it last led with. */
  last: bigint | undefined;
}

/** Two electors with one name for `job`: each is its own holder, so at most one leads. */
function startTwins(client: Client, job: string, name: string, ttlMs: number): Twin[] {
  const twins = [0, 1].map((i) => {
    const t: Twin = { elector: new Elector(client, job, name, ttlMs), last: undefined };
    t.elector.on("elected", (token) => {
      t.last = token;
      say(`twin elected ${i} token=${token}`);
    });
    t.elector.on("lost", (token) => say(`twin lost ${i} token=${token}`));
    return t;
  });
  twins.forEach((t, i) => say(`twin holder ${i} ${t.elector.holder}`));
  twins.forEach((t) => t.elector.start());
  return twins;
}

async function write(client: Client, job: string, token: bigint | undefined, value: string): Promise<string> {
  // No "am I still the leader?" check first: it could be stale by the time
  // the write lands. The token goes with the write; the server decides.
  if (token === undefined) return "write error never-led";
  try {
    return `write ok version=${await client.checkedWrite(job, token, "status", value)}`;
  } catch (e) {
    if (e instanceof Fenced) return `write fenced current=${e.currentToken}`;
    if (e instanceof LeaseholdError) return `write error ${e.name} ${e.message}`;
    throw e;
  }
}

/** Hands the elector's leadership to the first waiter, or to `to`. */
async function transfer(elector: Elector, to?: string): Promise<string> {
  try {
    return `transfer ok token=${(await elector.transfer(to)).token}`;
  } catch (e) {
    if (e instanceof NoSuccessor) return "transfer no-successor";
    if (e instanceof LeaseLost) return "transfer lost";
    if (e instanceof NotLeader) return "transfer not-leader";
    const message = e instanceof LeaseholdError ? `${e.name} ${e.message}` : String(e);
    return `transfer error ${message.replace(/\s+/g, " ")}`;
  }
}

async function bad(client: Client, job: string, holder: string, token: bigint | undefined, c: string): Promise<string> {
  try {
    if (c === "job") await client.acquire("", holder, 1000);
    else if (c === "ttl") await client.acquire(job, holder, 1);
    else if (c === "key") await client.checkedWrite(job, token ?? 1n, "", "x");
    else if (c === "token") await client.checkedWrite(job, 1n << 62n, "status", "x");
    else return "error unknown case";
    return "accepted";
  } catch (e) {
    if (e instanceof UnknownToken) return `unknown-token current=${e.currentToken}`;
    if (e instanceof InvalidArgument) return `invalid field=${e.field}`;
    if (e instanceof LeaseholdError) return `other ${e.name} ${e.message}`;
    throw e;
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
