/**
 * The real `leasehold serve` as a child process, on 127.0.0.1 with ports
 * the OS picks: no sleep waits for start-up, the server prints one line
 * once both listeners are bound.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { get } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

/** The repository's root. */
export const ROOT = resolve(__dirname, "..", "..", "..", "..");

/**
 * Every child process a test file started and has not seen exit. They die
 * with the file's process, however it ends short of SIGKILL (the test
 * runner ends a file that overran its timeout with SIGTERM): a server left
 * behind would keep running, and one sharing the runner's stderr pipe kept
 * the runner waiting for ever. Their stderr is piped through this process
 * for the same reason.
 */
const children = new Set<ChildProcess>();
function killChildren(): void {
  for (const c of children) c.kill("SIGKILL");
}
process.on("exit", killChildren);
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
  process.once(sig, () => {
    killChildren();
    process.exit(1);
  });
}

/** Starts `cmd` as a child of this test file (see `children`); stdout piped, and stdin with `stdin: "pipe"`. */
export function spawnChild(
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; stdin?: "ignore" | "pipe" } = {},
): ChildProcess {
  const { stdin = "ignore", ...rest } = opts;
  const proc = spawn(cmd, args, { ...rest, stdio: [stdin, "pipe", "pipe"] });
  children.add(proc);
  proc.once("exit", () => children.delete(proc));
  proc.stderr!.pipe(process.stderr, { end: false });
  return proc;
}

export function serverBinary(): string {
  const p = process.env.LEASEHOLD_BIN || join(ROOT, "target", "debug", "leasehold");
  if (!existsSync(p)) throw new Error(`leasehold binary not found at ${p}; run cargo build --bin leasehold`);
  return p;
}

/**
 * Writes the test CA, certificates, tokens and policy into `dir` with
 * clients/tools/pki.sh (alice may lease, write and read every job; bob may
 * read jobs "bob/..." only); returns `dir`.
 */
export function makePki(dir: string): string {
  execFileSync("bash", [join(ROOT, "clients", "tools", "pki.sh"), dir], { stdio: ["ignore", "ignore", "inherit"] });
  return dir;
}

export interface ServerOptions {
  /** TLS, mutual TLS and the policy of clients/tools/pki.sh, whose files are then in `Server.pki`. */
  secure?: boolean;
  /** More `leasehold serve` arguments. */
  extra?: string[];
  /** The address to listen on; default 127.0.0.1:0. */
  listen?: string;
  /** The data dir; default a fresh temporary one. */
  dataDir?: string;
}

export class Server {
  private constructor(
    readonly proc: ChildProcess,
    readonly target: string,
    readonly admin: string,
    private readonly dataDir: string,
    /** With `secure`: the dir of ca.pem, alice.pem, alice-key.pem, alice.token, bob... */
    readonly pki: string | undefined,
  ) {}

  static start(timeoutMs = 30_000, opts: ServerOptions = {}): Promise<Server> {
    const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), "leasehold-ts-"));
    const pki = opts.secure ? makePki(join(dataDir, "pki")) : undefined;
    const tls = pki
      ? ["--tls-cert", join(pki, "server.pem"), "--tls-key", join(pki, "server-key.pem"),
         "--tls-client-ca", join(pki, "ca.pem"), "--policy", join(pki, "policy.toml")]
      : [];
    const proc = spawnChild(
      serverBinary(),
      ["serve", "--listen", opts.listen ?? "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
       "--data-dir", pki ? join(dataDir, "data") : dataDir, ...tls, ...(opts.extra ?? [])],
      { env: { ...process.env, RUST_LOG: "warn,rustls=error" } },
    );
    return new Promise((resolvePromise, reject) => {
      const timer = setTimeout(() => {
        proc.kill("SIGKILL");
        reject(new Error("server did not start in time"));
      }, timeoutMs);
      const lines = createInterface({ input: proc.stdout! });
      lines.on("line", (line) => {
        const m = /^leasehold listening on (\S+) admin (\S+)$/.exec(line);
        if (m) {
          clearTimeout(timer);
          resolvePromise(new Server(proc, m[1], m[2], dataDir, pki));
        }
      });
      proc.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`server exited with ${code} before listening`));
      });
    });
  }

  /** Sends `sig` to the server; SIGSTOP returns once it has stopped ({@link waitStopped}). */
  signal(sig: NodeJS.Signals): void {
    this.proc.kill(sig);
    if (sig === "SIGSTOP" && this.proc.pid !== undefined) {
      waitStopped(this.proc.pid);
    }
  }

  /** The sum of a metric's samples on /metrics. */
  metric(name: string): Promise<number> {
    return new Promise((resolvePromise, reject) => {
      get(`http://${this.admin}/metrics`, (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => {
          let total = 0;
          for (const line of body.split("\n")) {
            if (line.startsWith(name + " ") || line.startsWith(name + "{")) {
              total += Number(line.slice(line.lastIndexOf(" ") + 1));
            }
          }
          resolvePromise(total);
        });
      }).on("error", reject);
    });
  }

  /** The sum of the samples of `name` whose labels include `label` (such as `method="GetLease"`). */
  async metricWith(name: string, label: string): Promise<number> {
    return new Promise((resolvePromise, reject) => {
      get(`http://${this.admin}/metrics`, (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => {
          let total = 0;
          for (const line of body.split("\n")) {
            if (line.startsWith(name + "{") && line.slice(0, line.indexOf("}")).includes(label)) {
              total += Number(line.slice(line.lastIndexOf(" ") + 1));
            }
          }
          resolvePromise(total);
        });
      }).on("error", reject);
    });
  }

  /** Waits until the server has renewed at least `n` leases (all jobs). */
  async waitRenewals(n: number, timeoutMs = PATIENCE): Promise<void> {
    await waitUntil(async () => (await this.metric("leasehold_renewals_total")) >= n, timeoutMs, `${n} renewal(s)`);
  }

  /** Waits until at least `n` Acquires are queued on the server. */
  async waitWaiters(n: number, timeoutMs = PATIENCE): Promise<void> {
    await waitUntil(async () => (await this.metric("leasehold_waiting_acquires")) >= n, timeoutMs, `${n} waiter(s)`);
  }

  /** SIGKILL, keeping the data dir (for `restart`). */
  async kill(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGKILL");
      await exited;
    }
  }

  /** A server again on the same port and data dir, after `kill`. */
  restart(): Promise<Server> {
    return Server.start(30_000, { listen: this.target, dataDir: this.dataDir });
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGCONT");
      this.proc.kill("SIGTERM");
      const t = setTimeout(() => this.proc.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(t);
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/**
 * How long a test waits for a state it expects: far longer than a stall of
 * a loaded machine. Waiting costs only the time the state takes.
 */
export const PATIENCE = 30_000;

/** Bounded polling for an external state change (never for start-up). */
export async function waitUntil(pred: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let jobs = 0;
export function uniqueJob(prefix: string): string {
  return `${prefix}-${jobs++}`;
}

/**
 * Waits until every thread of process `pid` is stopped, as
 * /proc/PID/task/{@literal *}/stat says (state T), or the process is gone.
 * kill(2) returns once SIGSTOP is sent, not once it has taken effect: the
 * process stops when one of its threads takes the signal, and on a loaded
 * machine another of its threads may answer one more call first. A test
 * that pauses the server means "no answer from now on".
 */
export function waitStopped(pid: number): void {
  const tasks = `/proc/${pid}/task`;
  const deadline = Date.now() + 30_000;
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    let entries: string[];
    try {
      entries = readdirSync(tasks);
    } catch {
      return; // gone
    }
    const states: string[] = [];
    for (const t of entries) {
      try {
        const stat = readFileSync(`${tasks}/${t}/stat`, "utf8");
        const state = stat.slice(stat.lastIndexOf(")") + 1).trim().split(/\s+/)[0];
        if (state) states.push(state);
      } catch {
        // the thread ended
      }
    }
    if (states.every((s) => ["T", "t", "Z", "X"].includes(s))) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`process ${pid} did not stop within 30 s of SIGSTOP: its threads' states ${states.join(",")}`);
    }
    Atomics.wait(nap, 0, 0, 2);
  }
}
