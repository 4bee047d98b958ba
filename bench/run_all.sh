#!/usr/bin/env bash
# Run every benchmark one after another and keep their outputs.
#
#   bash bench/run_all.sh [NAME ...]     # default: all, in the order below
#   bash bench/run_all.sh --help         # the names and their commands
#
# Outputs go to bench/results/<NAME>.txt (with the load average before and
# after each run); docs/performance.md quotes them. Run it on an otherwise idle
# machine: the figures are wall-clock rates and ratios taken in the same run.
# team needs the BuildGrid peer harness in ../shared/tools/peer.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
OUT=bench/results
mkdir -p "$OUT"

declare -A BENCH=(
  [cas]="$PY bench/bench_cas.py --runs 5"
  [grpc_floor]="$PY bench/bench_grpc_floor.py --runs 5"
  [trip]="$PY bench/execute_trip.py --runs 3"
  [firehose]="$PY bench/bench_firehose.py --actions 2000"
  [firehose_500]="$PY bench/bench_firehose.py --actions 500 --cpu 0.08 --runs 6 --no-unbounded --split"
  [small_actions]="$PY bench/bench_small_actions.py --rounds 5 lre"
  # brotli from its release sources: clean builds and edit-rebuilds, local sandboxed vs through lre
  [project]="$PY bench/bench_project.py"
  # the Bazel recording is kept in ~/.cache/lre-bench between runs
  [capacity]="$PY bench/bench_capacity.py"
  [replay]="$PY bench/bench_containment.py --only replay --rounds 8"
  [containment]="$PY bench/bench_containment.py --rounds 5"
  [memory_control]="$PY bench/memory_control.py --runs 3"
  [fair_share]="$PY bench/bench_fair_share.py --reps 3 --fair-off-reps 1"
  # the queue's A/A: both sides from this checkout
  [queue]="$PY bench/bench_queue.py --tree-a . --rounds 7 --ops 5000"
  [upstream]="$PY bench/bench_upstream.py --reps 5"
  [team]="$PY bench/bench_upstream.py --upstream buildgrid --reps 5"
)
ORDER=(cas grpc_floor trip memory_control firehose firehose_500 small_actions project capacity replay
  containment fair_share queue upstream team)
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
