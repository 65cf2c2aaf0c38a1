#!/usr/bin/env bash
# Regenerates every client's code from proto/leasehold/v1/leasehold.proto and chaos.proto,
# with the pinned generators of clients/tools.sh (installing them first).
#
#   clients/generate.sh           write the generated code into the tree
#   clients/generate.sh --check   generate into a temporary dir and fail if
#                                 it differs from what is committed
#
# Generated code, all committed:
#   python/src/leasehold/v1/        grpcio-tools (protoc + grpc plugin, .pyi)
#   typescript/src/gen/             ts-proto (grpc-js services, bigint tokens)
#   go/leaseholdv1/                 protoc-gen-go, protoc-gen-go-grpc
#   java/src/generated/java/        protoc's java_out, protoc-gen-grpc-java
set -euo pipefail
source "$(dirname "$0")/tools.sh"

check=
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

ensure_venv
ensure_npm
ensure_go_plugins
ensure_java_plugin

# The generated directories, relative to clients/.
gen_dirs=(python/src/leasehold/v1 typescript/src/gen go/leaseholdv1 java/src/generated/java)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Include path: our proto, protobuf's well-known types (shipped with
# grpcio-tools), and google/rpc (shipped with googleapis-common-protos).
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
inc="$out/include"
mkdir -p "$inc/google/rpc"
cp "$site/google/rpc/status.proto" "$site/google/rpc/error_details.proto" "$inc/google/rpc/"
wkt="$site/grpc_tools/_proto"
# The contract, and the chaos API that every client's test helper calls.
protos=(leasehold/v1/leasehold.proto leasehold/v1/chaos.proto)

protoc() {
  (cd "$root_dir/proto" && "$py" -m grpc_tools.protoc -I. -I"$inc" -I"$wkt" "$@")
}

# Python: modules land at leasehold/v1/, inside the `leasehold` package.
mkdir -p "$out/python/src"
protoc --python_out="$out/python/src" --pyi_out="$out/python/src" \
  --grpc_python_out="$out/python/src" "${protos[@]}"
printf '"""Generated from proto/leasehold/v1/leasehold.proto by clients/generate.sh. Do not edit."""\n' \
  >"$out/python/src/leasehold/v1/__init__.py"

# TypeScript: messages, grpc-js service clients, and google.rpc.Status /
# ErrorInfo to decode error details.
mkdir -p "$out/typescript/src/gen"
protoc --plugin=protoc-gen-ts_proto="$clients_dir/typescript/node_modules/.bin/protoc-gen-ts_proto" \
  --ts_proto_out="$out/typescript/src/gen" \
  --ts_proto_opt=outputServices=grpc-js,env=node,forceLong=bigint,esModuleInterop=true,useOptionals=none,outputPartialMethods=false \
  "${protos[@]}" google/rpc/status.proto google/rpc/error_details.proto

# Go: package leaseholdv1 inside the clients/go module.
mkdir -p "$out/go"
protoc --plugin=protoc-gen-go="$work_dir/bin/protoc-gen-go-$PROTOC_GEN_GO_VERSION" \
  --plugin=protoc-gen-go-grpc="$work_dir/bin/protoc-gen-go-grpc-$PROTOC_GEN_GO_GRPC_VERSION" \
  --go_out="$out/go" --go_opt=module=github.com/leasehold/leasehold/clients/go \
  --go-grpc_out="$out/go" --go-grpc_opt=module=github.com/leasehold/leasehold/clients/go \
  "${protos[@]}"

# Java: package dev.leasehold.v1, with protoc from Maven (grpcio-tools'
# protoc has no Java generator) of the same libprotoc version.
java_protoc="$work_dir/bin/protoc-$PROTOC_JAVA_VERSION"
if [ "$("$java_protoc" --version)" != "$(protoc --version)" ]; then
  echo "protoc versions differ: $("$java_protoc" --version) (Java) vs $(protoc --version) (grpcio-tools)" >&2
  exit 1
fi
mkdir -p "$out/java/src/generated/java"
(cd "$root_dir/proto" && "$java_protoc" -I. -I"$wkt" \
  --plugin=protoc-gen-grpc-java="$work_dir/bin/protoc-gen-grpc-java-$PROTOC_GEN_GRPC_JAVA_VERSION" \
  --java_out="$out/java/src/generated/java" --grpc-java_out="$out/java/src/generated/java" \
  "${protos[@]}")

status=0
for d in "${gen_dirs[@]}"; do
  if [ -n "$check" ]; then
    if ! diff -r -u "$clients_dir/$d" "$out/$d" >"$out/diff.txt" 2>&1; then
      echo "generated code in clients/$d is stale; run clients/generate.sh" >&2
      head -n 40 "$out/diff.txt" >&2
      status=1
    fi
  else
    rm -rf "${clients_dir:?}/$d"
    mkdir -p "$(dirname "$clients_dir/$d")"
    cp -R "$out/$d" "$clients_dir/$d"
  fi
done
if [ -n "$check" ] && [ "$status" -eq 0 ]; then
  echo "generated code is up to date (${gen_dirs[*]})"
fi
exit "$status"
