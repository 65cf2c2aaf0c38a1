// `npm run build`: the package's two builds, both by tsc from src/, into
// dist/cjs (CommonJS, tsconfig.build.json) and dist/esm (ES modules,
// tsconfig.esm.json), then finish-build.mjs. What `npm pack` ships
// ("files" in package.json); no install script builds anything.
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = createRequire(join(root, "package.json")).resolve("typescript/bin/tsc");
for (const out of ["cjs", "esm"]) rmSync(join(root, "dist", out), { recursive: true, force: true });
for (const config of ["tsconfig.build.json", "tsconfig.esm.json"]) {
  execFileSync(process.execPath, [tsc, "-p", join(root, config)], { stdio: "inherit" });
}
await import("./finish-build.mjs");
