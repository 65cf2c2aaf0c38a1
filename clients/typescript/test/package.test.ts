/**
 * The package as users get it: built (`npm run build`: CommonJS and ES
 * module builds by tsc), packed (`npm pack`) and installed from the
 * tarball with `--ignore-scripts` into a fresh project, then loaded by name
 * with `require()` and `import()`, type-checked from both, and used by the
 * two-workers example (examples/two-workers), built there as a user
 * builds it and run as two real processes against the real server.
 *
 * Installs are offline: the fresh project's node_modules starts with
 * copies of the packages this package's own install already holds, so npm
 * only unpacks the tarball.
 */
import assert from "node:assert/strict";
import { execFileSync, type ChildProcess } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { VERSION } from "../src";
import { Server, spawnChild, uniqueJob, waitUntil } from "./harness";

const PKG = resolve(__dirname, "..", "..");
const pkgJson = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8"));

test("VERSION is package.json's version", () => {
  assert.match(VERSION, /^0\.\d+\.\d+/);
  assert.equal(VERSION, pkgJson.version);
});

const npmEnv = { ...process.env, npm_config_update_notifier: "false", npm_config_fund: "false", npm_config_audit: "false" };

function run(cmd: string, args: string[], cwd: string): string {
  // tsc's --traceResolution output grows with the package's modules: past
  // execFileSync's default 1 MiB it would fail with ENOBUFS.
  return execFileSync(cmd, args, { cwd, env: npmEnv, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20 });
}

/** Copies `names` (paths under node_modules) from this package's node_modules into `dir`'s. */
function seed(dir: string, names: string[]): void {
  for (const name of names) cpSync(join(PKG, "node_modules", name), join(dir, "node_modules", name), { recursive: true });
}

/** The packages a user's install of this one needs (the lockfile's non-dev ones). */
function runtimePackages(): string[] {
  const lock = JSON.parse(readFileSync(join(PKG, "package-lock.json"), "utf8"));
  return Object.entries(lock.packages as Record<string, { dev?: boolean }>)
    .filter(([path, p]) => path.startsWith("node_modules/") && !p.dev)
    .map(([path]) => path.slice("node_modules/".length));
}

/** `npm install --ignore-scripts --offline` in `dir`, its node_modules seeded with `runtime` and `extra`. */
function install(dir: string, args: string[], extra: string[] = []): void {
  seed(dir, [...runtimePackages(), ...extra]);
  run("npm", ["install", "--ignore-scripts", "--offline", "--no-audit", "--no-fund", "--loglevel=error", ...args], dir);
}

/** Runs a script with node in `cwd`; its stdout. */
function node(cwd: string, args: string[]): string {
  return run(process.execPath, args, cwd).trim();
}

// Builds, packs and installs the package, and type-checks and builds a
// user's project twice: minutes of CPU on a loaded 2-core machine, where
// the runner's per-test timeout (2 minutes) was overrun once. The runner
// counts this whole file as one test too, so the test command runs it alone
// under a 15-minute --test-timeout.
const BUILDS = { timeout: 10 * 60_000 };

describe("the packed package, installed with --ignore-scripts", BUILDS, () => {
  let tmp: string;
  let tarball: string;
  let project: string;
  let server: Server;

  before(async () => {
    server = await Server.start();
    tmp = mkdtempSync(join(tmpdir(), "leasehold-ts-pack-"));
    run("npm", ["run", "build", "--silent"], PKG);
    const packed = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", tmp], PKG));
    tarball = join(tmp, packed[0].filename);
    project = join(tmp, "project");
    mkdirSync(project);
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "a-user", version: "1.0.0", private: true }));
    install(project, [tarball]);
  }, BUILDS);
  after(async () => {
    await server.stop();
    rmSync(tmp, { recursive: true, force: true });
  });

  test("the tarball holds both builds with their types, and no install script", () => {
    const files = run("tar", ["-tzf", tarball], tmp).split("\n");
    for (const f of ["cjs/index.js", "cjs/index.d.ts", "cjs/package.json", "esm/index.js", "esm/index.d.ts", "esm/package.json"]) {
      assert.ok(files.includes(`package/dist/${f}`), `dist/${f} is packed`);
    }
    assert.ok(!files.some((f) => f.startsWith("package/src/") || f.startsWith("package/dist/test/")));
    // The license ships with the code, and is the installed package's.
    assert.ok(files.includes("package/LICENSE"), "LICENSE is packed");
    const license = readFileSync(join(project, "node_modules", "@leasehold", "client", "LICENSE"), "utf8");
    assert.equal(license, readFileSync(join(PKG, "LICENSE"), "utf8"));
    assert.match(license, /Apache License\s+Version 2\.0/);
    const installed = JSON.parse(readFileSync(join(project, "node_modules", "@leasehold", "client", "package.json"), "utf8"));
    for (const script of ["preinstall", "install", "postinstall", "prepare"]) assert.equal(installed.scripts?.[script], undefined, script);
    assert.deepEqual(Object.keys(installed.exports["."]), ["import", "require"]);
    assert.equal(installed.license, "Apache-2.0");
  });

  test("the README says how to build the tarball and install from it", () => {
    const readme = readFileSync(join(PKG, "README.md"), "utf8");
    assert.match(readme, /npm run build && npm pack/);
    assert.ok(readme.includes(`npm install /path/to/${tarball.slice(tarball.lastIndexOf("/") + 1)}`), "installing the tarball, by its name");
    assert.match(readme, /--ignore-scripts/);
  });

  const use = (how: string) => `
    const lh = ${how};
    const client = new lh.Client(${JSON.stringify("")} + process.argv.at(-1));
    const lease = await client.getLease("package-test");
    client.close();
    console.log(JSON.stringify({ version: lh.VERSION, token: String(lease.token), fenced: new lh.Fenced("m", 9, "FENCED", {}) instanceof lh.LeaseholdError }));`;

  test("require() by name loads the CommonJS build and talks to the server", () => {
    assert.match(node(project, ["-p", 'require.resolve("@leasehold/client")']), /[/\\]dist[/\\]cjs[/\\]index\.js$/);
    const out = node(project, ["-e", `(async () => { ${use('require("@leasehold/client")')} })()`, server.target]);
    assert.deepEqual(JSON.parse(out), { version: VERSION, token: "0", fenced: true });
  });

  test("import() by name loads the ES module build and talks to the server", () => {
    const where = node(project, ["--input-type=module", "-e", 'console.log(import.meta.resolve("@leasehold/client"))']);
    assert.match(where, /\/dist\/esm\/index\.js$/);
    const out = node(project, ["--input-type=module", "-e", use('await import("@leasehold/client")'), server.target]);
    assert.deepEqual(JSON.parse(out), { version: VERSION, token: "0", fenced: true });
  });

  test("its types check from an ES module and from CommonJS (moduleResolution nodenext)", BUILDS, () => {
    writeFileSync(join(project, "esm.mts"), [
      'import { Client, Fenced, VERSION, type LeaseChange } from "@leasehold/client";',
      "export const version: string = VERSION;",
      "export async function first(c: Client): Promise<LeaseChange | undefined> {",
      '  for await (const lease of c.observe("j", { signal: AbortSignal.timeout(1000) })) return lease;',
      "  return undefined;",
      "}",
      "export const fenced = (e: unknown): boolean => e instanceof Fenced && e.currentToken !== undefined;",
      // `await using` on a Lock compiles against the packed types.
      "export async function locked(c: Client): Promise<bigint> {",
      '  await using lock = await c.lock("j", { ttlMs: 1000 });',
      "  return lock.token;",
      "}",
    ].join("\n"));
    writeFileSync(join(project, "cjs.cts"), [
      'import lh = require("@leasehold/client");',
      'export const client: lh.Client = new lh.Client("127.0.0.1:1");',
      "export const version: string = lh.VERSION;",
    ].join("\n"));
    const tsc = join(PKG, "node_modules", "typescript", "bin", "tsc");
    const trace = node(project, [tsc, "--noEmit", "--strict", "--target", "ES2022", "--module", "nodenext",
      "--moduleResolution", "nodenext", "--types", "node", "--traceResolution", "esm.mts", "cjs.cts"]);
    const resolved = [...trace.matchAll(/'@leasehold\/client' was successfully resolved to '([^']+)'/g)].map((m) => m[1]);
    assert.ok(resolved.some((p) => p.endsWith("/dist/esm/index.d.ts")), "the ESM types");
    assert.ok(resolved.some((p) => p.endsWith("/dist/cjs/index.d.ts")), "the CommonJS types");
  });

  test("the two-workers example: one leads, the other takes over with token + 1 when it resigns", BUILDS, async () => {
    // The example, built as a user builds it, on the installed tarball.
    const ex = join(tmp, "two-workers");
    const src = join(PKG, "examples", "two-workers");
    mkdirSync(ex);
    for (const f of ["package.json", "tsconfig.json", "worker.ts"]) cpSync(join(src, f), join(ex, f));
    const exJson = JSON.parse(readFileSync(join(ex, "package.json"), "utf8"));
    exJson.dependencies["@leasehold/client"] = `file:${tarball}`;
    writeFileSync(join(ex, "package.json"), JSON.stringify(exJson, null, 2));
    install(ex, [], ["typescript"]);
    node(ex, [join(ex, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"]);

    const job = uniqueJob("two-workers");
    const workers = [new Worker(ex, job, server.target, "w1"), new Worker(ex, job, server.target, "w2")];
    try {
      await waitUntil(() => workers.some((w) => w.has("leader token=1")), 10_000, "a leader");
      const [leader, other] = workers[0].has("leader token=1") ? workers : [workers[1], workers[0]];
      await waitUntil(() => leader.count(/^wrote version=\d+$/) >= 3, 5000, "the leader's writes");
      assert.ok(!other.lines.some((l) => l.startsWith("leader")), `one leader: ${other.lines}`);

      leader.proc.kill("SIGTERM");
      const stoppedAt = Date.now();
      await waitUntil(() => other.has("leader token=2"), 5000, "the other to lead with token 2");
      assert.ok(Date.now() - stoppedAt < 5000);
      assert.equal(await leader.exited, 0);
      assert.ok(leader.has("lost token=1") && leader.has("resigned"), `${leader.lines}`);

      // The new leader's writes go on from the old one's versions.
      const last = Math.max(...leader.lines.map((l) => Number(/^wrote version=(\d+)$/.exec(l)?.[1] ?? 0)));
      await waitUntil(() => other.count(/^wrote version=\d+$/) >= 2, 5000, "the new leader's writes");
      const next = Number(/^wrote version=(\d+)$/.exec(other.lines.find((l) => l.startsWith("wrote"))!)![1]);
      assert.ok(next > last, `version ${next} after ${last}`);

      other.proc.kill("SIGINT");
      assert.equal(await other.exited, 0);
    } finally {
      for (const w of workers) w.proc.kill("SIGKILL");
    }
  });
});

/** One worker process of the example; its stdout, line by line. */
class Worker {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  readonly exited: Promise<number | null>;

  constructor(dir: string, job: string, target: string, name: string) {
    this.proc = spawnChild(process.execPath, [join(dir, "dist", "worker.js"), job, target, name], { cwd: dir });
    createInterface({ input: this.proc.stdout! }).on("line", (l) => this.lines.push(l));
    this.exited = new Promise((r) => this.proc.once("exit", (code) => r(code)));
  }

  has(line: string): boolean {
    return this.lines.includes(line);
  }

  count(re: RegExp): number {
    return this.lines.filter((l) => re.test(l)).length;
  }
}
