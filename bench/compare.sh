#!/usr/bin/env bash
# leasehold side by side with what users would pick instead, on this
# machine, in one run:
#
#   bench/compare.sh            full run (about 15 minutes)
#   bench/compare.sh --quick    about 2 minutes
#   bench/compare.sh --update   full run, then writes the results and the
#                               chart into BENCHMARKS.md and bench/chart.png
#
# Installs PostgreSQL, etcd and Redis from Debian packages when missing,
# starts each on 127.0.0.1 under a temporary directory (PostgreSQL as the
# `postgres` user; Redis twice: AOF with fsync on every write, and the
# defaults), builds leasehold and the bench in release mode, runs the
# interleaved rounds, stops everything it started, prints the Markdown
# table and draws bench/out/chart.png. Nothing listens beyond 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=
update=
for a in "$@"; do
  case "$a" in
    --quick) quick=--quick ;;
    --update) update=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a (try --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$quick" ] && [ -n "$update" ]; then
  echo "--update records full runs only" >&2
  exit 2
fi
out=bench/out
mkdir -p "$out"

# Installs Debian packages that are missing (apt-get update once, only when
# something is missing), as scripts/test does.
need_debs() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  echo "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

need_debs postgresql etcd-server redis-server fonts-dejavu-core

# A TCP port on 127.0.0.1 that nothing listens on.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}

# Waits until something accepts connections on 127.0.0.1:$1 (at most 30 s).
wait_port() {
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

tmp=$(mktemp -d /tmp/leasehold-bench.XXXXXX)
chmod 755 "$tmp"
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pg_started=
pids=()
cleanup() {
  set +e
  if [ -n "$pg_started" ]; then
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$tmp/pg/data" -m fast -w stop >/dev/null 2>&1
  fi
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "==> building leasehold and the bench (release)"
cargo build --release --quiet --workspace --bins

echo "==> starting PostgreSQL, etcd, Redis (AOF always), Redis (defaults) under $tmp"
pg_port=$(free_port)
mkdir -p "$tmp/pg"
chown postgres:postgres "$tmp/pg"
runuser -u postgres -- "$pgbin/initdb" -D "$tmp/pg/data" -A trust -U postgres >/dev/null
# Default durability: fsync on, synchronous_commit on.
runuser -u postgres -- "$pgbin/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/log" -w \
  -o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$tmp/pg -c max_connections=300 -c fsync=on -c synchronous_commit=on" \
  start >/dev/null
pg_started=1

etcd_port=$(free_port)
etcd_peer=$(free_port)
etcd --name bench --data-dir "$tmp/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "bench=http://127.0.0.1:$etcd_peer" \
  --logger zap --log-level error >"$tmp/etcd.log" 2>&1 &
pids+=($!)

redis_aof_port=$(free_port)
mkdir -p "$tmp/redis-aof" "$tmp/redis"
redis-server --bind 127.0.0.1 --port "$redis_aof_port" --dir "$tmp/redis-aof" \
  --appendonly yes --appendfsync always --save '' --daemonize no --loglevel warning \
  >"$tmp/redis-aof.log" 2>&1 &
pids+=($!)
redis_port=$(free_port)
redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$tmp/redis" \
  --daemonize no --loglevel warning >"$tmp/redis.log" 2>&1 &
pids+=($!)

for p in "$pg_port" "$etcd_port" "$redis_aof_port" "$redis_port"; do wait_port "$p"; done

cmdline="bench/compare.sh${quick:+ $quick}"
echo "==> running ($cmdline)"
rel="${CARGO_TARGET_DIR:-target}/release"
"$rel/leasehold-bench" run $quick \
  --leasehold-bin "$rel/leasehold" \
  --work-dir "$tmp/work" --out-dir "$out" \
  --postgres "host=127.0.0.1 port=$pg_port user=postgres dbname=postgres" \
  --etcd "http://127.0.0.1:$etcd_port" \
  --redis-aof "redis://127.0.0.1:$redis_aof_port/" \
  --redis "redis://127.0.0.1:$redis_port/" \
  --command-line "$cmdline"

if [ -n "$update" ]; then
  cp "$out/chart.png" bench/chart.png
  # Replace what lies between the two markers in BENCHMARKS.md.
  python3 - "$out/results.md" <<'EOF'
import sys
results = open(sys.argv[1]).read()
doc = open("BENCHMARKS.md").read()
start, end = "<!-- results -->", "<!-- /results -->"
i, j = doc.index(start) + len(start), doc.index(end)
open("BENCHMARKS.md", "w").write(doc[:i] + "\n" + results.strip() + "\n" + doc[j:])
EOF
  echo "==> BENCHMARKS.md and bench/chart.png updated"
fi
