// The last step of `npm run build`, after tsc has compiled src/ twice: to
// dist/cjs (CommonJS) and dist/esm (ES modules). It marks each directory's
// module format with a package.json of its own, and gives every relative
// import in dist/esm (code and declarations) the file it names, as Node's
// ES module resolution needs ("./client" becomes "./client.js"); tsc keeps
// specifiers as written, and the generated code in src/gen is written
// without extensions. No dependencies: Node's standard library only.
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const dist = resolve(dirname(fileURLToPath(import.meta.url)), "..", "dist");

function* files(dir) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) yield* files(p);
    else yield p;
  }
}

/** The specifier with the file it names: "./x" -> "./x.js", "./dir" -> "./dir/index.js". */
function withExtension(file, spec) {
  if (!spec.startsWith("./") && !spec.startsWith("../")) return spec;
  if (/\.(m|c)?js$/.test(spec)) return spec;
  const target = resolve(dirname(file), spec);
  if (existsSync(target + ".js")) return spec + ".js";
  if (existsSync(join(target, "index.js"))) return spec + "/index.js";
  throw new Error(`${file}: cannot resolve ${spec}`);
}

// `from "..."`, `import("...")` and bare `import "..."`.
const SPECIFIER = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(["'])([^"'\n]+)\2/g;

let rewritten = 0;
for (const file of files(join(dist, "esm"))) {
  if (!file.endsWith(".js") && !file.endsWith(".d.ts")) continue;
  const before = readFileSync(file, "utf8");
  const after = before.replace(SPECIFIER, (_m, lead, q, spec) => `${lead}${q}${withExtension(file, spec)}${q}`);
  if (after !== before) {
    writeFileSync(file, after);
    rewritten++;
  }
}
writeFileSync(join(dist, "cjs", "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
writeFileSync(join(dist, "esm", "package.json"), JSON.stringify({ type: "module" }) + "\n");
console.log(`dist/cjs: CommonJS; dist/esm: ES modules (${rewritten} files given import extensions)`);
