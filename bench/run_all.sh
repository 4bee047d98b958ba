#!/usr/bin/env bash
# Run every benchmark one after another and keep their outputs.
#
#   bash bench/run_all.sh [NAME ...]     # default: all, in the order below
#   bash bench/run_all.sh --help         # the names and their commands
#
# Outputs go to bench/results/<NAME>.txt (with the load average before and
# after each run); docs/performance.md quotes them. Run it on an otherwise idle
# machine: the figures are wall-clock rates and ratios taken in the same run.
# Some need more than this checkout: bazel and team the BuildGrid peer harness
# in ../shared/tools/peer, action_network root.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
OUT=bench/results
mkdir -p "$OUT"

bazel_bench() {
  # lre and the BuildGrid peer side by side, each on its own port.
  local root port peer_out
  root=$(mktemp -d /tmp/lre-bench-bazel.XXXXXX)
  port=50081
  LRE_HOME="$root" .venv/bin/lre up --detach --no-client-config --port "$port" || return 1
  peer_out=$(bash ../shared/tools/peer/start_buildgrid.sh 50071 2>&1 | tail -n 1)
  echo "peer server pid: $peer_out"
  # the flags lre.bazelrc gives a Bazel 4 user (jobs 16, top-level downloads), for both servers
  $PY bench/bench_bazel.py --reps 7 --lre "127.0.0.1:$port" --lre-instance main \
      --jobs 16 --remote-flag=--remote_download_toplevel \
      --peer 127.0.0.1:50071 --peer-instance main
  local status=$?
  LRE_HOME="$root" .venv/bin/lre down
  bash /tmp/peer-bg-50071/stop.sh >/dev/null 2>&1 || true
  rm -rf "$root"
  return $status
}

clean_build_bench() {
  # a clean Bazel build through an lre already running against the local sandbox
  local root port
  root=$(mktemp -d /var/tmp/lre-bench-clean.XXXXXX)
  port=50191
  LRE_HOME="$root" .venv/bin/lre up --detach --no-client-config --port "$port" || return 1
  $PY bench/bench_bazel.py --modules 20 --reps 20 --warmup 2 --jobs 16 \
      --remote-flag=--remote_download_toplevel --no-cached --lre "127.0.0.1:$port"
  local status=$?
  LRE_HOME="$root" .venv/bin/lre down
  rm -rf "$root"
  return $status
}

declare -A BENCH=(
  [sampler]="$PY bench/bench_sampler.py"
  [memory_figures]="$PY bench/bench_sampler.py --figures"
  [cas]="$PY bench/bench_cas.py --runs 5"
  [execute]="$PY bench/bench_execute.py --runs 5 --only scheduler,held"
  [worker]="$PY bench/bench_execute.py --runs 5 --only worker"
  [grpc_floor]="$PY bench/bench_grpc_floor.py --runs 5"
  [trip]="$PY bench/execute_trip.py --runs 3"
  [rustc]="$PY bench/bench_rustc.py --runs 3"
  [firehose]="$PY bench/bench_firehose.py --actions 2000"
  [firehose_500]="$PY bench/bench_firehose.py --actions 500 --cpu 0.08 --runs 6 --no-unbounded --split"
  [bazel]="bazel_bench"
  [clean_build_20]="clean_build_bench"
  [edit_loop]="$PY bench/bench_edit_split.py --rounds 10 --warmup 2 --instant"
  [small_actions]="$PY bench/bench_small_actions.py --rounds 5 lre"
  # the A/A of the same-run A/B: both servers from this checkout
  [lre_ab]="$PY bench/bench_lre_ab.py --tree-a . --work true --rounds 12 --reps 4"
  [replay]="$PY bench/bench_containment.py --only replay --rounds 8"
  # the Bazel recording is kept in ~/.cache/lre-bench between runs
  [capacity]="$PY bench/bench_capacity.py"
  # brotli from its release sources, local sandboxed vs through an lre it starts itself
  [project]="$PY bench/bench_project.py"
  [upstream]="$PY bench/bench_upstream.py --reps 5"
  [team]="$PY bench/bench_upstream.py --upstream buildgrid --reps 5"
  [cache_contract]="$PY bench/bench_cache_contract.py"
  [memory_control]="$PY bench/memory_control.py --runs 3"
  [view]="$PY bench/bench_view.py --rounds 3 --runs 100 --dir /var/tmp"
  [action_network]="$PY bench/bench_action_network.py --rounds 5"
  [fair_share]="$PY bench/bench_fair_share.py --reps 3 --fair-off-reps 1"
  [queue]="$PY bench/bench_queue.py --tree-a . --rounds 7 --ops 5000"
  [history]="$PY bench/bench_history.py --actions 100000"
  [fuzz]="$PY bench/fuzz_parsers.py"
  [crash]="$PY bench/crash_cycles.py --cycles 50"
  [soak]="$PY bench/soak.py --seconds 120"
  # break lre on purpose; each mutation's guarding tests must fail
  [mutations]="$PY bench/mutations.py"
  [containment]="$PY bench/bench_containment.py --rounds 5"
)
ORDER=(sampler memory_figures cas execute worker grpc_floor trip memory_control rustc
  firehose firehose_500 bazel clean_build_20 edit_loop small_actions project replay capacity lre_ab containment
  view action_network fair_share queue history upstream team
  cache_contract fuzz crash soak mutations)
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { print substr($0, 3) }' "${BASH_SOURCE[0]}"
  for name in "${ORDER[@]}"; do printf '  %-15s %s\n' "$name" "${BENCH[$name]}"; done
  exit 0
fi
for name in "$@"; do
  [[ -v "BENCH[$name]" ]] || { echo "run_all.sh: no benchmark named $name (see --help)" >&2; exit 2; }
done
(($#)) && ORDER=("$@")

for name in "${ORDER[@]}"; do
  echo "== $name  (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  {
    echo "# $name: ${BENCH[$name]}"
    echo "# started $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
    start=$(date +%s)
    ${BENCH[$name]} 2>&1
    echo "# exit $?, $(( $(date +%s) - start )) s, load after $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$OUT/$name.txt"
  tail -n 25 "$OUT/$name.txt"
done
