# Sourced by clients/generate.sh and clients/test.sh: installs the pinned
# tools into clients/.work (git-ignored) through each ecosystem's own
# client. Every version is pinned here, in tools/requirements.txt, in
# typescript/package-lock.json, go/go.sum and java/pom.xml.
#
# Each ensure_* function is quick when its tools are already in place.

clients_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root_dir=$(dirname "$clients_dir")
# LEASEHOLD_CLIENTS_WORK_DIR moves it out of the checkout (scripts/test
# does, into a cache that outlives a clone, when LEASEHOLD_CACHE_DIR is set).
work_dir="${LEASEHOLD_CLIENTS_WORK_DIR:-$clients_dir/.work}"

# The generators, pinned.
PROTOC_GEN_GO_VERSION=v1.36.12      # google.golang.org/protobuf/cmd/protoc-gen-go
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2   # google.golang.org/grpc/cmd/protoc-gen-go-grpc
# The newest protoc-gen-grpc-java whose linux-x86_64 executable the registry
# serves; the Java runtime in java/pom.xml uses the same gRPC version.
PROTOC_GEN_GRPC_JAVA_VERSION=1.83.1
# protoc: the one bundled with grpcio-tools (tools/requirements.txt) for
# Python, TypeScript and Go; it has no Java generator, so Java uses protoc of
# the same version as published on Maven.
PROTOC_JAVA_VERSION=4.35.1          # com.google.protobuf:protoc (libprotoc 35.1)

venv="$work_dir/venv"
py="$venv/bin/python"

log() { printf '  [clients] %s\n' "$*" >&2; }

# The Python virtualenv: grpcio-tools (protoc), pytest, psycopg.
ensure_venv() {
  local req="$clients_dir/tools/requirements.txt" stamp="$venv/.requirements"
  if [ -x "$py" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
    return 0
  fi
  log "python venv: installing tools/requirements.txt"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$py" -m pip install -q --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
}

# node_modules for the TypeScript package: ts-proto, typescript, grpc-js.
ensure_npm() {
  local dir="$clients_dir/typescript"
  if [ -d "$dir/node_modules" ] && cmp -s "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.copy" 2>/dev/null; then
    return 0
  fi
  log "typescript: npm ci"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.copy"
}

# protoc-gen-go and protoc-gen-go-grpc, built from the pinned module versions.
ensure_go_plugins() {
  local bin="$work_dir/bin"
  if [ -x "$bin/protoc-gen-go-$PROTOC_GEN_GO_VERSION" ] && [ -x "$bin/protoc-gen-go-grpc-$PROTOC_GEN_GO_GRPC_VERSION" ]; then
    return 0
  fi
  log "go: installing protoc-gen-go $PROTOC_GEN_GO_VERSION, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION"
  mkdir -p "$bin"
  GOBIN="$bin" GOFLAGS=-mod=mod go install \
    "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION" \
    2>&1 | grep -v '^go: downloading' >&2 || true
  GOBIN="$bin" GOFLAGS=-mod=mod go install \
    "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION" \
    2>&1 | grep -v '^go: downloading' >&2 || true
  [ -x "$bin/protoc-gen-go" ] && [ -x "$bin/protoc-gen-go-grpc" ] || { echo "go install of the protoc plugins failed" >&2; return 1; }
  mv "$bin/protoc-gen-go" "$bin/protoc-gen-go-$PROTOC_GEN_GO_VERSION"
  mv "$bin/protoc-gen-go-grpc" "$bin/protoc-gen-go-grpc-$PROTOC_GEN_GO_GRPC_VERSION"
}

# grpcurl, a generic gRPC client no one here wrote: the test that error
# details decode through reflection runs it (tests/it/api.rs). Pinned;
# installed into $work_dir/bin as grpcurl-VERSION.
GRPCURL_VERSION=v1.9.4
grpcurl_bin="$work_dir/bin/grpcurl-$GRPCURL_VERSION"
ensure_grpcurl() {
  [ -x "$grpcurl_bin" ] && return 0
  log "go: installing grpcurl $GRPCURL_VERSION"
  mkdir -p "$work_dir/bin"
  GOBIN="$work_dir/bin" GOFLAGS=-mod=mod go install \
    "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION" \
    2>&1 | grep -v '^go: downloading' >&2 || true
  [ -x "$work_dir/bin/grpcurl" ] || { echo "go install of grpcurl failed" >&2; return 1; }
  mv "$work_dir/bin/grpcurl" "$grpcurl_bin"
}

# Runs mvn quietly; shows its output only when it fails.
mvn_quiet() {
  local out
  if ! out=$(mvn -B -Dstyle.color=never "$@" 2>&1); then
    printf '%s\n' "$out" | grep -E 'ERROR|FAIL' | head -n 30 >&2
    return 1
  fi
}

# Fetches an executable published as a Maven artifact into .work/bin.
# Usage: fetch_exe GROUP ARTIFACT VERSION NAME
fetch_exe() {
  local group=$1 artifact=$2 version=$3 name=$4 bin="$work_dir/bin" arch
  [ -x "$bin/$name" ] && return 0
  case "$(uname -m)" in
    x86_64) arch=linux-x86_64 ;;
    aarch64) arch=linux-aarch_64 ;;
    *) echo "no $artifact executable for $(uname -m)" >&2; return 1 ;;
  esac
  log "java: fetching $artifact $version"
  mkdir -p "$bin" "$work_dir/dl"
  mvn_quiet org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
    -Dartifact="$group:$artifact:$version:exe:$arch" -DoutputDirectory="$work_dir/dl"
  mv "$work_dir/dl/$artifact-$version-$arch.exe" "$bin/$name"
  chmod +x "$bin/$name"
}

# protoc and protoc-gen-grpc-java for Java, as published on Maven.
ensure_java_plugin() {
  fetch_exe com.google.protobuf protoc "$PROTOC_JAVA_VERSION" "protoc-$PROTOC_JAVA_VERSION"
  fetch_exe io.grpc protoc-gen-grpc-java "$PROTOC_GEN_GRPC_JAVA_VERSION" "protoc-gen-grpc-java-$PROTOC_GEN_GRPC_JAVA_VERSION"
}
