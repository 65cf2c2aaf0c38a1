#!/usr/bin/env bash
# The client tests: what scripts/test runs for clients/. Installs what it
# needs first (pinned; see clients/tools.sh), builds the server, and runs
# every part against a real `leasehold serve` that the tests start.
#
#   clients/test.sh                 every part, in this order:
#   clients/test.sh PART...         generate python sql typescript go java conformance
#
# Two runs may go side by side on parts that share nothing (scripts/test
# runs "python sql go" beside "typescript java conformance"), after one
# run that prepared what they share: `clients/test.sh prepare` installs
# the tools and the Python package and compiles the TypeScript, and
# LEASEHOLD_CLIENTS_PREPARED=1 then tells each run to leave those alone.
#
# PostgreSQL (for `sql`) must be installed: scripts/test does that with
# need_debs. Each part prints a header; the first failure stops the run.
set -euo pipefail
source "$(dirname "$0")/tools.sh"
cd "$root_dir"

all=(generate python sql typescript go java conformance)
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=("${all[@]}")
for p in "${parts[@]}"; do
  case " ${all[*]} prepare " in *" $p "*) ;; *) echo "unknown part: $p (parts: ${all[*]}, or prepare)" >&2; exit 2 ;; esac
done
prepared=${LEASEHOLD_CLIENTS_PREPARED:-}
want() { case " ${parts[*]} " in *" $1 "*) return 0 ;; esac; return 1; }

started=$(date +%s)
part() { printf '\n--> clients: %s (%ss)\n' "$*" "$(($(date +%s) - started))"; }

part "server binary"
# LEASEHOLD_BIN, when set, names a server binary already built (a client's
# tests then need no Rust build); otherwise the debug build is made here.
if [ -z "${LEASEHOLD_BIN:-}" ]; then
  cargo build --quiet --workspace --bin leasehold
  export LEASEHOLD_BIN="${CARGO_TARGET_DIR:-$root_dir/target}/debug/leasehold"
fi

if [ -z "$prepared" ]; then
  part "tools"
  ensure_venv
  if want typescript || want conformance || want generate || want prepare; then ensure_npm; fi
  # The Python package, installed as users install it.
  "$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./clients/python
fi

if want generate; then
  part "generated code is fresh (clients/generate.sh --check)"
  clients/generate.sh --check
  part "proof vectors are fresh (clients/conformance/proof_vectors.py --check)"
  "$py" clients/conformance/proof_vectors.py --check
fi

if want prepare; then
  part "typescript: tsc"
  (cd clients/typescript && npx tsc -p tsconfig.json)
fi

if want python; then
  part "python: pytest"
  (cd clients/python && "$py" -m pytest -p no:cacheprovider -q tests)
fi

if want sql; then
  part "sql: the PostgreSQL fencing recipe, from Python"
  (cd clients/sql && "$py" -m pytest -p no:cacheprovider -q tests)
fi

if [ -z "$prepared" ] && ! want prepare && { want typescript || want conformance; }; then
  part "typescript: tsc"
  (cd clients/typescript && npx tsc -p tsconfig.json)
fi
if want typescript; then
  part "typescript: node --test"
  # Each file is one test of the runner, under --test-timeout: the packed
  # package's builds take minutes on a loaded machine (its own tests allow
  # 10), so that file runs alone under a longer one.
  (cd clients/typescript &&
    node --test --test-concurrency=1 --test-timeout=120000 $(ls dist/test/*.test.js | grep -v '/package\.test\.js$') &&
    node --test --test-timeout=900000 dist/test/package.test.js)
fi

if want go; then
  part "go: vet, build"
  (cd clients/go && go vet ./... && go build ./...)
  unformatted=$(cd clients/go && gofmt -l .)
  if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted" >&2; exit 1; fi
fi
if want conformance; then
  part "go: the conformance worker"
  (cd clients/go && go build -o "$work_dir/bin/go-conformance-worker" ./cmd/conformance-worker)
fi
if want go; then
  part "go: go test"
  (cd clients/go && go test -count=1 ./...)
fi

# Maven's JVM and the tests' run for seconds: the quick compiler alone
# and the serial collector cost them far less CPU than the defaults.
java_opts="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
export MAVEN_OPTS="${MAVEN_OPTS:-$java_opts}"
if want java || want conformance; then
  # java: the jars (classes, sources, javadoc) installed into the local
  # repository first, so the example builds against them as a user's would.
  goals=(test-compile)
  want java && goals=(install -DskipTests)
  part "java: mvn ${goals[*]}"
  (cd clients/java && mvn -B -ntp -Dstyle.color=never "${goals[@]}" dependency:build-classpath \
    -Dmdep.outputFile=target/classpath.txt -Dmdep.includeScope=test)
fi
if want java; then
  part "java: the two-workers example, mvn package"
  (cd clients/java/examples/two-workers && mvn -B -ntp -q -Dstyle.color=never package)
  part "java: mvn surefire:test (the tests, a server required)"
  (cd clients/java && mvn -B -ntp -Dstyle.color=never surefire:test \
    -Dleasehold.requireServer=true -Dleasehold.requireBuilt=true "-DargLine=$java_opts")
fi

if want conformance; then
  part "conformance: one scenario, every language"
  # The Rust client's worker: an example of the root crate, built beside
  # the server (cargo test builds the examples; built here otherwise).
  rust_worker="$(dirname "$LEASEHOLD_BIN")/examples/conformance_worker"
  if [ ! -x "$rust_worker" ]; then
    cargo build --quiet --example conformance_worker
    rust_worker="${CARGO_TARGET_DIR:-$root_dir/target}/debug/examples/conformance_worker"
  fi
  "$py" - "$work_dir/workers.json" <<EOF
import json, sys
cp = open("clients/java/target/classpath.txt").read().strip()
json.dump({
    "rust": ["$rust_worker"],
    "python": ["$py", "clients/python/examples/conformance_worker.py"],
    "typescript": ["node", "clients/typescript/dist/examples/conformance_worker.js"],
    "go": ["$work_dir/bin/go-conformance-worker"],
    "java": ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
             "-cp", "clients/java/target/test-classes:clients/java/target/classes:" + cp,
             "dev.leasehold.examples.ConformanceWorker"],
}, open(sys.argv[1], "w"), indent=2)
EOF
  "$py" clients/conformance/run.py --workers "$work_dir/workers.json" \
    --mixed python:go --mixed java:typescript --mixed rust:python --mixed go:rust --results "$work_dir/conformance.json"
fi

# No line after this: the conformance summary ("conformance: N passed,
# N failed") closes the output.
