#!/usr/bin/env bash
# Source-compatibility check of kfmm's public headers against Kokkos 5.x and 4.x (compile only).
# Kokkos >= 4 cannot be built on Debian 12 (docs/building.md), but Debian sid's binary -dev packages
# can be downloaded (not installed) and their headers used: each public header (core/, tree/,
# operators/, drivers/) becomes its own translation unit, compiled with -fsyntax-only -Wall -Wextra
# against the backend configuration the package ships:
#   kokkos-5.2.2          libkokkos-dev 5.2.2 (OpenMP, C++20), without Kokkos Kernels
#   kokkos-4.5.01         libtrilinos-kokkos-dev 16.1 (Kokkos 4.5.01, Serial, C++17), without Kokkos Kernels
#   kokkos-4.5.01-kk      the same plus libtrilinos-kokkos-kernels-dev 16.1 (Kokkos Kernels 4.5.01),
#                         with KFMM_HAVE_KOKKOSKERNELS defined
# (Kokkos Kernels 3.4 does not compile against Kokkos 5, and sid has no Kokkos Kernels 5.)
# The packages are downloaded once into the dependency cache (<cache>/compat) and reused.
# Usage: scripts/check_kokkos_compat.sh [--cache DIR] [--config NAME]... [--jobs N]
#        (default configs: kokkos-5.2.2 and kokkos-4.5.01-kk)
# Exit status: 0 all compile, 1 a header fails, 77 skipped (the packages cannot be downloaded).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${HOME}/.cache/kfmm"
jobs="$(nproc 2>/dev/null || echo 2)"
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) cache="$2"; shift 2 ;;
    --config) configs+=("$2"); shift 2 ;;
    --jobs|-j) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "check_kokkos_compat.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
# Default: 5.x without and 4.x with Kokkos Kernels (between them every #if branch of kfmm compiles once).
[ "${#configs[@]}" -gt 0 ] || configs=(kokkos-5.2.2 kokkos-4.5.01-kk)
cxx="${CXX:-g++}"
log() { echo "[compat] $*"; }
skip() { echo "[compat] SKIPPED: $*"; exit 77; }

# ---------------------------------------------------------------- the packages (once, into the cache)
compat="${cache}/compat"
packages=("libkokkos-dev=5.2.2-2" "libtrilinos-kokkos-dev=16.1.0-5+b2" "libtrilinos-kokkos-kernels-dev=16.1.0-5+b2")
mkdir -p "$compat"
if command -v flock >/dev/null 2>&1; then
  exec 9> "$compat/.lock"
  flock 9
fi
missing=()
for p in "${packages[@]}"; do
  [ -f "$compat/${p%%=*}/.complete" ] || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || skip "apt-get/dpkg-deb not available"
  mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n1 || true)"
  [ -n "$mirror" ] || mirror="http://deb.debian.org/debian"
  mirror="${KFMM_DEBIAN_MIRROR:-$mirror}"   # an override, e.g. to test the skip without network
  apt_state="$compat/apt"
  mkdir -p "$apt_state/lists/partial" "$apt_state/cache/archives/partial" "$compat/debs"
  echo "deb $mirror sid main" > "$apt_state/sources.list"
  o=(-o "Dir::Etc::SourceList=$apt_state/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o "Dir::State::Lists=$apt_state/lists" -o "Dir::Cache=$apt_state/cache" -o Dir::State::status=/dev/null
     -o Acquire::Retries=1 -o Acquire::http::Timeout=20)
  log "downloading ${missing[*]} from Debian sid (headers only, not installed)"
  timeout 300 apt-get "${o[@]}" update -qq >"$compat/apt.log" 2>&1 || skip "apt-get update for sid failed ($compat/apt.log)"
  for p in "${missing[@]}"; do
    name="${p%%=*}"
    rm -f "$compat/debs/${name}_"*.deb
    # The pinned version first; sid moves on, so any version of the same package is the fallback.
    (cd "$compat/debs" && { timeout 300 apt-get "${o[@]}" download -qq "$p" || timeout 300 apt-get "${o[@]}" download -qq "$name"; }) \
      >>"$compat/apt.log" 2>&1 || skip "apt-get download $p failed ($compat/apt.log)"
    rm -rf "$compat/$name"
    dpkg-deb -x "$compat/debs/${name}_"*.deb "$compat/$name"
    dpkg-deb -f "$compat/debs/${name}_"*.deb Version > "$compat/$name/.complete"
  done
fi
kokkos5="$compat/libkokkos-dev/usr/include/kokkos"
kokkos4="$compat/libtrilinos-kokkos-dev/usr/include/kokkos"
kk4="$compat/libtrilinos-kokkos-kernels-dev/usr/include/trilinos"
version_of() { sed -n 's/^#define KOKKOS_VERSION \([0-9]*\).*/\1/p' "$1/KokkosCore_config.h"; }

# ---------------------------------------------------------------- the headers
mapfile -t headers < <(cd "$root" && find core tree operators drivers -path '*/kfmm/*' -name '*.hpp' 2>/dev/null | sort)
[ "${#headers[@]}" -gt 0 ] || { echo "[compat] no headers found under $root"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
includes=()
for layer in core tree operators drivers; do includes+=(-I "$root/$layer"); done

status=0
for config in "${configs[@]}"; do
  case "$config" in
    kokkos-5.2.2) flags=(-std=c++20 -fopenmp -isystem "$kokkos5"); kinc="$kokkos5" ;;
    kokkos-4.5.01) flags=(-std=c++17 -isystem "$kokkos4"); kinc="$kokkos4" ;;
    kokkos-4.5.01-kk) flags=(-std=c++17 -isystem "$kokkos4" -isystem "$kk4" -DKFMM_HAVE_KOKKOSKERNELS); kinc="$kokkos4" ;;
    *) echo "[compat] unknown config '$config'" >&2; exit 2 ;;
  esac
  mkdir -p "$work/$config"
  list="$work/$config/list"
  : > "$list"
  for h in "${headers[@]}"; do
    rel="${h#*/}"                          # kfmm/core/x.hpp (the spelling host codes use)
    tu="$work/$config/$(echo "$rel" | tr '/.' '__').cpp"
    printf '#include "%s"\n#include "%s"  // twice: include guards\n' "$rel" "$rel" > "$tu"
    echo "$tu" >> "$list"
  done
  start=$(date +%s)
  export cxx
  # One compiler per header, in parallel; a failing header leaves its diagnostics in <tu>.log.
  xargs -P "$jobs" -I{} sh -c '"$0" "$@" -fsyntax-only -Wall -Wextra {} > {}.log 2>&1 || touch {}.failed' \
    "$cxx" "${flags[@]}" "${includes[@]}" < "$list"
  failed=0
  while read -r tu; do
    if [ -f "$tu.failed" ] || [ -s "$tu.log" ]; then
      failed=$((failed + 1))
      name="$(basename "$tu" .cpp)"
      if [ -f "$tu.failed" ]; then echo "[compat] $config: FAILED $name"; else echo "[compat] $config: WARNINGS $name"; fi
      # The diagnostics, and where in kfmm an error inside Kokkos comes from.
      grep -E "error|warning|^$root/.*(required from|note)" "$tu.log" | sed 's/^/    /' | head -n 20
    fi
  done < "$list"
  log "$config (Kokkos $(version_of "$kinc"), ${flags[0]}): $(( ${#headers[@]} - failed ))/${#headers[@]} headers clean in $(( $(date +%s) - start )) s"
  [ "$failed" = 0 ] || status=1
done
exit "$status"
