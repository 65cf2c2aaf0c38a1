/**
 * The conformance worker for TypeScript (clients/conformance/README.md has
 * the protocol): one Elector for one job, driven over stdin, reporting on
 * stdout. Also a complete example of a worker: lead, write fenced by the
 * token, release on SIGTERM.
 *
 *   node dist/examples/conformance_worker.js --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000 [--bind] [--preferred] [--yield] [--value V] [--slots N] [--ca FILE] [--token SECRET]
 *
 * `--bind` builds its elector with `bindToStream`, `--preferred` with
 * `preferred`, `--yield` with `yieldToPreferred` and `--value V` with
 * `value` (V as UTF-8) (not the twins'). `set-value <v>` is its
 * `setValue`, `leader` its `leader()`, and `waiters <job>` the client's
 * `listWaiters`.
 * `--slots N` builds it with `slots`: it campaigns for a slot of a counted
 * lease with N slots, and its `elected token=<T>` line ends with
 * ` job=<slot job> slot=<k>` (`leaseJob()`, `slot()`); `write <value>`
 * writes with the job its last lease was on (the slot's job when
 * counted). `acquire-slots <job> <n>` is a one-shot counted Acquire (wait
 * 0, a fresh holder `<name>@<uuid>`, the worker's TTL, `slots` n), its
 * lease left to expire: `acquire-slots ok job=<lease job> slot=<k>
 * token=<T>`, `acquire-slots busy`, `acquire-slots invalid field=<f>` or
 * `acquire-slots error <msg>`.
 * `--ca` connects with TLS trusting that CA, `--token` sends a bearer
 * token on every call: both apply to the one `Client` every part uses.
 *
 * Beyond the elector: `lock`/`lock-write`/`unlock` (client.lock, writes
 * through a WriteStream), `follow <job> [<value>]`/`follow-stop` (an
 * Elector's "newLeader" beside client.observe, with the leases' values), `fleet`/`fleet-stop` (an ElectorSet), `history`
 * and `delete-job`.
 *
 * Shards, one member at a time: `shards <group> <n>` joins `<group>` of
 * `<n>` shards (client.joinShards, named `--name`, TTL `--ttl-ms`, revoke
 * timeout the TTL) and runs it with `member.run`, each shard's work
 * waiting until it is cancelled: `shards member <id>`, then `shards
 * assigned <k> token=<T>`, `shards revoked <k>` (once its work was
 * cancelled, just before the acknowledgement), `shards lost <k>
 * token=<T>`; a refused join prints `shards invalid field=<f>` or `shards
 * error <msg>`. `shards-write <k> <value>` writes key `status` of job
 * `<group>/<k>` with the token it last owned shard k with: `shards-write
 * ok version=<V>`, `shards-write fenced current=<T>`, `shards-write error
 * never-owned`, `shards-write error <msg>`. `shards-stop` leaves:
 * `shards-stop done`. `quit` and SIGTERM leave too.
 */
import { createInterface } from "node:readline";
import {
  Client,
  Elector,
  electorHolder,
  ElectorSet,
  Fenced,
  InvalidArgument,
  type Lease,
  JobInUse,
  LeaseholdError,
  LeaseLost,
  type Lock,
  NoSuccessor,
  NotLeader,
  type ShardMember,
  UnknownToken,
  type WriteStream,
} from "../src";

/** The value of `--name`, or undefined when not given. */
function optional(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

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

/** ` value=<v>` for a lease's value (as UTF-8), or nothing when it is empty: the lines stay as before. */
const valueSuffix = (value: Buffer) => (value.length > 0 ? ` value=${value.toString("utf8")}` : "");

async function main(): Promise<void> {
  const job = flag("job");
  const name = flag("name");
  const ttlMs = Number(flag("ttl-ms", "1000"));
  const client = new Client(flag("server"), { caFile: optional("ca"), token: optional("token") });
  const extras = new Extras(client, name, ttlMs);
  const slots = Number(optional("slots") ?? 0);
  const elector = new Elector(client, job, name, ttlMs, {
    bindToStream: has("bind"),
    preferred: has("preferred"),
    yieldToPreferred: has("yield"),
    value: optional("value"),
    slots: slots,
  });
  let lastToken: bigint | undefined; // the token we last led with, kept after losing
  let lastJob = job; // the job that lease was on: a slot's job when counted

  elector.on("elected", (token, _proof, leaseJob) => {
    lastToken = token;
    lastJob = leaseJob;
    // Counted: which slot (lines without --slots stay as they were).
    say(`elected token=${token}${slots > 0 ? ` job=${leaseJob} slot=${elector.slot()}` : ""}`);
  });
  elector.on("lost", (token) => say(`lost token=${token}`));
  say(`holder ${elector.holder}`);
  elector.start();
  let twins: Twin[] = []; // two more electors, one name, one process

  let shuttingDown = false;
  const shutdown = async () => {
    if (shuttingDown) return;
    shuttingDown = true;
    await extras.stop(); // the lock, the follow elector and the fleet
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
      if (cmd === "write") say(await write(client, lastJob, lastToken, arg));
      else if (cmd === "bad") say(`bad ${arg} ${await bad(client, job, elector.holder, lastToken, arg)}`);
      else if (cmd === "transfer") say(await transfer(elector));
      else if (cmd === "set-value") {
        // The value goes with the elector's next renewal (or Acquire).
        try {
          elector.setValue(arg);
          say("set-value done");
        } catch (e) {
          say(`set-value error ${describe(e)}`);
        }
      } else if (cmd === "leader") say(await leader(elector));
      else if (cmd === "acquire-slots") say(await acquireSlots(client, name, ttlMs, rest[0] ?? "", Number(rest[1] ?? 0)));
      else if (cmd === "transfer-to") say(await transfer(elector, arg));
      else if (cmd === "twin") {
        if (twins.length === 0) twins = startTwins(client, arg, flag("name"), Number(flag("ttl-ms", "1000")));
      } else if (cmd === "twin-write") {
        const t = twins[Number(rest[0])];
        say(`twin-${await write(client, t.elector.job, t.last, rest.slice(1).join(" "))}`);
      } else if (cmd === "twin-stop") {
        await twins[Number(arg)].elector.resign();
        say("twin-stop done");
      } else if (cmd && (await extras.run(cmd, rest))) {
        // done
      } else if (cmd) say(`error unknown command ${JSON.stringify(cmd)}`);
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

/** The main elector's `leader()`: `leader holder=<h> token=<N> value=<v>`. */
async function leader(elector: Elector): Promise<string> {
  let lease: Lease;
  try {
    lease = await elector.leader();
  } catch (e) {
    return `leader error ${describe(e)}`;
  }
  const value = lease.value.length > 0 ? lease.value.toString("utf8") : "-";
  return `leader holder=${lease.holder ?? "-"} token=${lease.token} value=${value}`;
}

/**
 * One counted Acquire, wait 0, as a fresh holder: `acquire-slots ok
 * job=<lease job> slot=<k> token=<T>`, `busy`, `invalid field=<f>` or
 * `error <msg>`. The lease is left to expire.
 */
async function acquireSlots(client: Client, name: string, ttlMs: number, job: string, n: number): Promise<string> {
  try {
    const { acquired, lease } = await client.acquire(job, electorHolder(name), ttlMs, 0, { slots: n });
    if (!acquired) return "acquire-slots busy";
    return `acquire-slots ok job=${lease.job} slot=${lease.slot} token=${lease.token}`;
  } catch (e) {
    if (e instanceof InvalidArgument) return `acquire-slots invalid field=${e.field}`;
    return `acquire-slots error ${describe(e)}`;
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

/** One line of text: an error's name and message. */
function describe(e: unknown): string {
  const m = e instanceof Error ? `${e.name} ${e.message}` : String(e);
  return m.replace(/\s+/g, " ");
}

/**
 * The commands beyond the elector's: one lock, one follow and one fleet at
 * a time, each with the worker's name and TTL.
 */
class Extras {
  /** The lock held, once granted. */
  private lock: Lock | undefined;
  private lockJob: string | undefined;
  /** The token the last lock was granted, kept after the loss or unlock. */
  private lockToken: bigint | undefined;
  /** Aborts a lock still waiting. */
  private lockWait: AbortController | undefined;
  private locking: Promise<void> | undefined;
  private stream: WriteStream | undefined;
  private follow: { elector: Elector; stop: AbortController; observing: Promise<void> } | undefined;
  private fleet: ElectorSet | undefined;
  /** The shard member, once joined, and its run. */
  private shards: { member: ShardMember; running: Promise<void> } | undefined;
  private shardsJoining: Promise<void> | undefined;
  private shardsGroup = "";
  /** The token each shard was last owned with, kept after it moved. */
  private readonly shardTokens = new Map<number, bigint>();

  constructor(
    private readonly client: Client,
    private readonly name: string,
    private readonly ttlMs: number,
  ) {}

  /** Runs `cmd` if it is one of these; false if not. */
  async run(cmd: string, args: string[]): Promise<boolean> {
    // A missing job is sent empty: the server's InvalidArgument says so.
    const job = args[0] ?? "";
    switch (cmd) {
      case "lock":
        this.startLock(job);
        return true;
      case "lock-write":
        say(await this.lockWrite(args.join(" ")));
        return true;
      case "unlock":
        await this.unlock();
        say("unlock done");
        return true;
      case "follow":
        // The rest, if any, is the value the follow elector publishes.
        this.startFollow(job, args.length > 1 ? args.slice(1).join(" ") : undefined);
        return true;
      case "follow-stop":
        await this.stopFollow();
        say("follow-stop done");
        return true;
      case "fleet":
        this.startFleet(Number(args[0] ?? 0), args[1] ?? "");
        return true;
      case "fleet-stop":
        await this.fleet?.resign();
        this.fleet = undefined;
        say("fleet-stop done");
        return true;
      case "shards":
        await this.joinShards(job, Number(args[1] ?? 0));
        return true;
      case "shards-write":
        say(await this.shardsWrite(Number(args[0]), args.slice(1).join(" ")));
        return true;
      case "shards-stop":
        await this.stopShards();
        say("shards-stop done");
        return true;
      case "history":
        say(await this.history(job));
        return true;
      case "delete-job":
        say(await this.deleteJob(job));
        return true;
      case "waiters":
        say(await this.waiters(job));
        return true;
      default:
        return false;
    }
  }

  /** Releases the lock, resigns the follow elector and the fleet. */
  async stop(): Promise<void> {
    await Promise.all([this.unlock(), this.stopFollow(), this.fleet?.resign(), this.stopShards()]);
    this.stream?.cancel();
  }

  /**
   * Takes the lock in the background, so that commands (unlock, quit) go
   * on while it waits, as long as it takes.
   */
  private startLock(job: string): void {
    if (this.locking) {
      say("lock error a lock is already taken or waited for");
      return;
    }
    const wait = new AbortController();
    this.lockWait = wait;
    this.lockJob = job;
    this.locking = (async () => {
      try {
        const lock = await this.client.lock(job, { ttlMs: this.ttlMs, name: this.name, signal: wait.signal });
        this.lock = lock;
        this.lockToken = lock.token;
        this.lockJob = lock.leaseJob; // the job its token fences
        say(`lock held ${job} token=${lock.token} holder=${lock.holder}`);
        lock.signal.addEventListener("abort", () => {
          if (lock.lost) say(`lock lost ${job} token=${lock.token}`);
        }, { once: true });
      } catch (e) {
        if (!wait.signal.aborted) say(`lock error ${describe(e)}`);
      }
    })();
  }

  private async unlock(): Promise<void> {
    this.lockWait?.abort();
    await this.locking;
    await this.lock?.release();
    this.lock = undefined;
    this.locking = undefined;
    this.lockWait = undefined;
  }

  /** Writes `value` under "status" of the lock's job with its last token, through the WriteStream. */
  private async lockWrite(value: string): Promise<string> {
    if (this.lockJob === undefined || this.lockToken === undefined) return "lock-write error never-locked";
    this.stream ??= this.client.writeStream();
    try {
      const [o] = await this.stream.write([{ job: this.lockJob, token: this.lockToken, key: "status", value }]);
      if (o.kind === "written") return `lock-write ok version=${o.version}`;
      if (o.kind === "fenced") return `lock-write fenced current=${o.currentToken}`;
      return `lock-write error ${o.kind} ${o.message.replace(/\s+/g, " ")}`;
    } catch (e) {
      this.stream = undefined; // broken: the next write opens another
      return `lock-write error ${describe(e)}`;
    }
  }

  private startFollow(job: string, value: string | undefined): void {
    if (this.follow) {
      say("follow error already following");
      return;
    }
    let elector: Elector;
    try {
      elector = new Elector(this.client, job, this.name, this.ttlMs, { value });
    } catch (e) {
      say(`follow error ${describe(e)}`);
      return;
    }
    elector.on("newLeader", (holder, token, v) => say(`newleader ${job} holder=${holder} token=${token}${valueSuffix(v)}`));
    elector.on("elected", (token) => say(`follow elected ${job} token=${token}`));
    elector.on("lost", (token) => say(`follow lost ${job} token=${token}`));
    say(`follow holder ${elector.holder}`);
    const stop = new AbortController();
    const observing = (async () => {
      try {
        for await (const lease of this.client.observe(job, { signal: stop.signal })) {
          // Every change, VALUE_CHANGED included (same holder and token).
          say(`observe ${job} holder=${lease.holder ?? "-"} token=${lease.token}${valueSuffix(lease.value)}`);
        }
      } catch (e) {
        say(`follow error observe ${describe(e)}`);
      }
    })();
    this.follow = { elector, stop, observing };
    elector.start();
  }

  private async stopFollow(): Promise<void> {
    const f = this.follow;
    if (!f) return;
    this.follow = undefined;
    f.stop.abort();
    await Promise.all([f.elector.resign(), f.observing]);
  }

  private startFleet(n: number, prefix: string): void {
    if (this.fleet) {
      say("fleet error a fleet already runs");
      return;
    }
    const set = new ElectorSet(this.client, this.name, this.ttlMs);
    set.on("elected", (job, token) => say(`fleet elected ${job} token=${token}`));
    set.on("lost", (job, token) => say(`fleet lost ${job} token=${token}`));
    set.on("error", (job, e) => say(`fleet error ${job} ${describe(e)}`));
    say(`fleet holder ${set.holder}`);
    this.fleet = set;
    set.campaign(...Array.from({ length: n }, (_, i) => `${prefix}${i}`));
  }

  /**
   * Joins `group` of `n` shards and runs the member in the background:
   * each shard's work waits until it is cancelled. The join itself is
   * awaited, so that `shards member` (or the refusal) comes first.
   */
  private async joinShards(group: string, n: number): Promise<void> {
    if (this.shards || this.shardsJoining) {
      say("shards error a shard member already runs");
      return;
    }
    this.shardsGroup = group;
    let joined!: () => void;
    this.shardsJoining = new Promise<void>((r) => (joined = r));
    try {
      const member = await this.client.joinShards(group, this.name, n, { ttlMs: this.ttlMs, revokeTimeoutMs: this.ttlMs });
      say(`shards member ${member.member}`);
      const running = member
        .run((_shard, signal) => new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true })), {
          onEvent: (e) => {
            if (e.kind === "assigned") {
              this.shardTokens.set(e.shard, e.token);
              say(`shards assigned ${e.shard} token=${e.token}`);
            } else if (e.kind === "revoked") {
              say(`shards revoked ${e.shard}`); // its work has ended; the ack follows
            } else {
              say(`shards lost ${e.shard} token=${e.token}`);
            }
          },
        })
        .catch((e) => {
          say(`shards error ${describe(e)}`);
        });
      this.shards = { member, running };
    } catch (e) {
      if (e instanceof InvalidArgument) say(`shards invalid field=${e.field}`);
      else say(`shards error ${describe(e)}`);
    } finally {
      joined();
      this.shardsJoining = undefined;
    }
  }

  /** Writes `value` under "status" of shard k's job with the token it last owned it with. */
  private async shardsWrite(k: number, value: string): Promise<string> {
    const token = this.shardTokens.get(k);
    if (token === undefined) return "shards-write error never-owned";
    try {
      return `shards-write ok version=${await this.client.checkedWrite(`${this.shardsGroup}/${k}`, token, "status", value)}`;
    } catch (e) {
      if (e instanceof Fenced) return `shards-write fenced current=${e.currentToken}`;
      return `shards-write error ${describe(e)}`;
    }
  }

  /** Leaves the group, if a member runs: its works are cancelled first. */
  private async stopShards(): Promise<void> {
    await this.shardsJoining;
    const s = this.shards;
    if (!s) return;
    this.shards = undefined;
    await s.member.leave();
    await s.running;
  }

  private async history(job: string): Promise<string> {
    try {
      const page = await this.client.history(job);
      return `history ${job} tokens=${page.tenures.map((t) => t.token).join(",")}`;
    } catch (e) {
      return `history error ${describe(e)}`;
    }
  }

  /** `waiters n=<waiting> <holder>...`, in line order. */
  private async waiters(job: string): Promise<string> {
    try {
      const { waiters, waiting } = await this.client.listWaiters(job);
      return `waiters n=${waiting}${waiters.map((w) => ` ${w.holder}`).join("")}`;
    } catch (e) {
      return `waiters error ${describe(e)}`;
    }
  }

  private async deleteJob(job: string): Promise<string> {
    try {
      return (await this.client.deleteJob(job)) ? "delete-job deleted" : "delete-job absent";
    } catch (e) {
      if (e instanceof JobInUse) return "delete-job in-use";
      return `delete-job error ${describe(e)}`;
    }
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
