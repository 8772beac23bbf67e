#!/usr/bin/env bash
# Issue 7's goal benchmarks in one command: the set-up, the build of bench_solver, the sweeps that
# docs/benchmarks.md's goal table comes from, and that table for this machine (scripts/goal_table.py).
#   scripts/bench_goals.sh --cpu        OpenMP build (the README's set-up): perf_tests/sweeps/cpu_goals.yaml on
#                                       one thread (3 repetitions) and its 3e-5 point on two
#   scripts/bench_goals.sh --cuda 90    CUDA build for sm_90 (H100 / H200; scripts/bootstrap.sh --cuda 90):
#                                       h200_goals.yaml (the explicit goal points), h200_fp32.yaml and
#                                       h200_fp64.yaml (tolerance mode), seed_table.yaml
#   --out DIR                           results folder (default: build/goals)
# Writes DIR/<sweep>.json (Google Benchmark JSON, every counter) and DIR/table.md, and prints the table.
# Times depend on the machine and its load: compare with docs/benchmarks.md only on the same kind of
# machine, and rerun a baseline build in the same session before calling a difference a change.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

mode=""
sm=""
out="build/goals"
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu; shift ;;
    --cuda) mode=cuda; sm="${2:-}"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench_goals.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$mode" ] || { echo "bench_goals.sh: give --cpu or --cuda 90 (see --help)" >&2; exit 2; }

if ! command -v python3 > /dev/null; then  # (goal_table.py; Debian's python3, standard library only)
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq python3 > /dev/null
fi
mkdir -p "$out"
run() {  # run <json name> <bench_solver arguments...>
  local name="$1"; shift
  echo "=== $name: bench_solver $*"
  "$bin" "$@" --benchmark_out="$out/$name.json" --benchmark_out_format=json
}

if [ "$mode" = cpu ]; then
  scripts/bootstrap.sh
  cmake --preset release > /dev/null
  cmake --build --preset release -j"$(nproc)" --target bench_solver
  bin=build/release/bin/bench_solver
  OMP_NUM_THREADS=1 OMP_PROC_BIND=false run cpu_goals_1t --sweep perf_tests/sweeps/cpu_goals.yaml \
    --benchmark_min_time=0.01 --benchmark_repetitions=3
  OMP_NUM_THREADS=2 OMP_PROC_BIND=false run cpu_goals_2t --sweep perf_tests/sweeps/cpu_goals.yaml \
    --benchmark_filter='p:9/' --benchmark_min_time=0.01 --benchmark_repetitions=3
  files=("$out/cpu_goals_1t.json" "$out/cpu_goals_2t.json")
else
  scripts/bootstrap.sh --cuda "$sm"
  cmake --preset cuda > /dev/null
  cmake --build --preset cuda -j"$(nproc)" --target bench_solver
  bin=build/cuda/bin/bench_solver
  command -v nvidia-smi > /dev/null && nvidia-smi -L
  files=()
  for sweep in h200_goals h200_fp32 h200_fp64 seed_table; do
    run "$sweep" --sweep "perf_tests/sweeps/$sweep.yaml" --benchmark_min_time=0.05
    files+=("$out/$sweep.json")
  done
fi
python3 scripts/goal_table.py "${files[@]}" | tee "$out/table.md"
