#!/usr/bin/env bash
# Fails (and lists the files) when a C++ source is not formatted as .clang-format says.
# scripts/check_format.sh --fix reformats them in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' 2>/dev/null || find core tree operators drivers apps unit_tests perf_tests -name '*.[hc]pp')
[ "${#files[@]}" -gt 0 ] || exit 0
if [ "${1:-}" = "--fix" ]; then clang-format -i "${files[@]}"; exit 0; fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "not clang-formatted (run scripts/check_format.sh --fix):"; printf '  %s\n' "${bad[@]}"; exit 1
fi
echo "format: ok (${#files[@]} files)"
