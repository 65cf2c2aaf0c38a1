#!/usr/bin/env bash
# Runs each fuzz target for a bounded time (default 60 s each) and prints
# what libFuzzer reports. Needs the nightly toolchain and cargo-fuzz:
#   rustup toolchain install nightly && cargo install cargo-fuzz
# Usage: fuzz/run.sh [SECONDS_PER_TARGET]
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in decode rules; do
  echo "==> fuzz $target for ${secs}s"
  mkdir -p "corpus/$target"
  cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$secs" -print_final_stats=1 2>&1 \
    | grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs|SUMMARY|panicked|ERROR" || true
  # A crash leaves an artifact; fail loudly if one exists.
  if ls "artifacts/$target"/crash-* >/dev/null 2>&1; then
    echo "fuzz $target found a crash: $(ls artifacts/$target/crash-*)"
    exit 1
  fi
done
