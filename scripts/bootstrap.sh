#!/usr/bin/env bash
# Installs everything kfmm needs on Debian 12, idempotently:
#   - Debian packages: compiler, CMake, yaml-cpp 0.7, Google Benchmark 1.7, clang-format (bookworm);
#     Catch2 v3 (bookworm-backports, through a private apt state: /etc/apt is never edited).
#   - Kokkos 3.4.01 and Kokkos Kernels 3.4.01 from Debian's trilinos 13.2.0 source package, built into a
#     cache outside the clone whose folder name is keyed by versions and options; a later run reuses it.
# Usage: scripts/bootstrap.sh [--cache DIR] [--cuda SM] [--print-prefix]
#   --cache DIR      dependency cache (default: ~/.cache/kfmm)
#   --cuda SM        build Kokkos with CUDA for the given sm (90 for the H200), patched for CUDA 13
#   --print-prefix   print only the Kokkos prefix for the chosen options (after installing)
set -euo pipefail

cache="${HOME}/.cache/kfmm"
cuda_sm=""
print_prefix=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) cache="$2"; shift 2 ;;
    --cuda) cuda_sm="$2"; shift 2 ;;
    --print-prefix) print_prefix=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "bootstrap.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
jobs="$(nproc)"
log() { [ "$print_prefix" = 1 ] && echo "[bootstrap] $*" >&2 || echo "[bootstrap] $*"; }
sudo_cmd=""
[ "$(id -u)" = 0 ] || sudo_cmd="sudo"

# ---------------------------------------------------------------- Debian packages
need=()
for pkg in g++ cmake make libyaml-cpp-dev libbenchmark-dev clang-format ca-certificates xz-utils; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi

mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n1)"
[ -n "$mirror" ] || mirror="http://deb.debian.org/debian"
apt_state="${cache}/apt"
private_apt() {  # apt-get with its own source list and lists, for backports and deb-src
  mkdir -p "$apt_state/lists/partial"
  printf '%s\n' "$@" > "$apt_state/sources.list"
  local o=(-o "Dir::Etc::SourceList=$apt_state/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$apt_state/lists")
  $sudo_cmd apt-get "${o[@]}" update -qq 2>&1 | grep -v "unsandboxed" >&2 || true
  echo "${o[@]}"
}

catch2_version="$(dpkg-query -W -f='${Version}' libcatch2-dev 2>/dev/null || true)"
case "$catch2_version" in
  3.*) ;;
  *)
    log "installing Catch2 v3 from bookworm-backports"
    read -r -a o <<< "$(private_apt "deb $mirror bookworm-backports main")"
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get "${o[@]}" install -y -qq -t bookworm-backports libcatch2-dev >/dev/null
    ;;
esac

# ---------------------------------------------------------------- Kokkos + Kokkos Kernels
kokkos_version=3.4.01
variant="openmp-serial"
[ -n "$cuda_sm" ] && variant="cuda-sm${cuda_sm}-openmp-serial"
key="kokkos-${kokkos_version}-kk-${kokkos_version}-${variant}-cxx17-release"
prefix="${cache}/${key}"
src="${cache}/src/trilinos-13.2.0"

if [ ! -f "${prefix}/.complete" ]; then
  if [ ! -d "${src}/kokkos" ] || [ ! -d "${src}/kokkos-kernels" ]; then
    tarball="$(ls "${cache}"/src/trilinos_13.2.0.orig.tar.* 2>/dev/null | head -n1 || true)"
    if [ -z "$tarball" ]; then
      log "downloading Debian source package trilinos 13.2.0 (166 MB, once)"
      read -r -a o <<< "$(private_apt "deb-src $mirror bookworm main")"
      mkdir -p "${cache}/src"
      (cd "${cache}/src" && apt-get "${o[@]}" source --download-only -qq trilinos=13.2.0-4 >/dev/null 2>&1 \
        || apt-get "${o[@]}" source --download-only -qq trilinos >/dev/null)
      tarball="$(ls "${cache}"/src/trilinos_13.2.0.orig.tar.* | head -n1)"
    fi
    log "extracting packages/kokkos and packages/kokkos-kernels"
    rm -rf "${src}.partial" && mkdir -p "${src}.partial"
    tar -xf "$tarball" -C "${src}.partial" --strip-components=2 \
      Trilinos-trilinos-release-13-2-0/packages/kokkos Trilinos-trilinos-release-13-2-0/packages/kokkos-kernels
    rm -rf "$src" && mv "${src}.partial" "$src"
  fi

  build="${cache}/build/${key}"
  rm -rf "$build" "$prefix"
  mkdir -p "$build"
  kokkos_src="$src/kokkos"
  cmake_extra=()
  kk_extra=(-DBUILD_SHARED_LIBS=ON)
  cxx=g++
  if [ -n "$cuda_sm" ]; then
    # CUDA 13 needs the project's patches to Kokkos 3.4.01 (docs/gpu.md); patch a private copy.
    kokkos_src="${build}/kokkos-src"
    cp -r "$src/kokkos" "$kokkos_src"
    for p in "$root"/cmake/patches/kokkos-3.4.01/*.patch; do
      log "applying $(basename "$p")"
      patch -s -p1 -d "$kokkos_src" < "$p"
    done
    sed -i "s/^default_arch=.*/default_arch=\"sm_${cuda_sm}\"/" "$kokkos_src/bin/nvcc_wrapper"
    cxx="$kokkos_src/bin/nvcc_wrapper"
    cmake_extra=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ARCH_AMPERE80=ON
                 -DBUILD_SHARED_LIBS=OFF)
    kk_extra=(-DBUILD_SHARED_LIBS=OFF -DKokkosKernels_ENABLE_TPL_CUBLAS=OFF -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF)
  else
    cmake_extra=(-DBUILD_SHARED_LIBS=ON)
  fi
  log "building Kokkos ${kokkos_version} (${variant}) into ${prefix}"
  cmake -S "$kokkos_src" -B "$build/kokkos" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON \
    -DCMAKE_INSTALL_PREFIX="$prefix" "${cmake_extra[@]}" > "$build.kokkos.log" 2>&1
  cmake --build "$build/kokkos" -j"$jobs" >> "$build.kokkos.log" 2>&1 || { tail -n 40 "$build.kokkos.log"; exit 1; }
  cmake --install "$build/kokkos" >> "$build.kokkos.log" 2>&1
  log "building Kokkos Kernels ${kokkos_version} (batched + blas, no default ETI)"
  cmake -S "$src/kokkos-kernels" -B "$build/kk" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DKokkosKernels_ENABLED_COMPONENTS="BATCHED;BLAS" -DKokkosKernels_ADD_DEFAULT_ETI=OFF \
    -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF -DKokkosKernels_ENABLE_TPL_BLAS=OFF \
    "${kk_extra[@]}" > "$build.kk.log" 2>&1
  cmake --build "$build/kk" -j"$jobs" >> "$build.kk.log" 2>&1 || { tail -n 40 "$build.kk.log"; exit 1; }
  cmake --install "$build/kk" >> "$build.kk.log" 2>&1
  touch "${prefix}/.complete"
  rm -rf "$build"
else
  log "reusing ${prefix}"
fi

if [ "$print_prefix" = 1 ]; then echo "$prefix"; fi
