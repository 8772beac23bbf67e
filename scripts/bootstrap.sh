#!/usr/bin/env bash
# Installs everything kfmm needs, idempotently (docs/building.md has the details):
#   - Debian packages: compiler, CMake, yaml-cpp 0.7, Google Benchmark 1.7, clang-format (bookworm);
#     Catch2 v3 (bookworm-backports, through a private apt state: /etc/apt is never edited).
#   - Kokkos 3.4.01 and Kokkos Kernels 3.4.01 from Debian's trilinos 13.2.0 source package, built into a
#     cache outside the clone whose folder name is keyed by versions and options; a later run reuses it.
# Usage: scripts/bootstrap.sh [options]
#   --cache DIR          dependency cache (default: ~/.cache/kfmm)
#   --cuda SM            also CUDA for sm_SM (only 90, the H200), Kokkos patched for CUDA 13 (cmake/patches)
#   --kokkos-src PATH    local Kokkos sources instead of the download: a folder holding kokkos/ and
#                        kokkos-kernels/ (or a Trilinos tree with packages/), or a tarball of either
#   --deps-src DIR       folder of carried source tarballs (see --pack-sources); with --no-apt, missing
#                        Catch2 / Google Benchmark / yaml-cpp are built from them into the cache
#   --no-apt             no package manager and no network: use what is installed, build the rest from
#                        --deps-src, and say which CMake options to turn off for what is still missing
#   --pack-sources DIR   write the sources a machine without network needs into DIR and stop:
#                        Kokkos + Kokkos Kernels 3.4.01 (3.5 MB) and the Debian sources of Catch2 3.7.1,
#                        Google Benchmark 1.7.1 and yaml-cpp 0.7.0 (all .tar.gz)
#   --jobs N             parallel build jobs (default: nproc)
#   --print-prefix       print only the Kokkos prefix for the chosen options (after installing)
set -euo pipefail

cache="${HOME}/.cache/kfmm"
cuda_sm=""
print_prefix=0
use_apt=1
kokkos_src_arg=""
deps_src=""
pack_dir=""
jobs="$(nproc 2>/dev/null || echo 2)"
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) cache="$2"; shift 2 ;;
    --cuda) cuda_sm="$2"; shift 2 ;;
    --kokkos-src) kokkos_src_arg="$2"; shift 2 ;;
    --deps-src) deps_src="$2"; shift 2 ;;
    --no-apt) use_apt=0; shift ;;
    --pack-sources) pack_dir="$2"; shift 2 ;;
    --jobs|-j) jobs="$2"; shift 2 ;;
    --print-prefix) print_prefix=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bootstrap.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$cuda_sm" ] && [ "$cuda_sm" != 90 ]; then
  echo "bootstrap.sh: --cuda $cuda_sm: only sm_90 (H100/H200) is supported: Kokkos 3.4 has no HOPPER90 and the" \
       "project's patch maps Kokkos_ARCH_AMPERE80 to sm_90 (cmake/patches/kokkos-3.4.01)" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
cache="$(abspath "$cache")"
[ -n "$kokkos_src_arg" ] && kokkos_src_arg="$(abspath "$kokkos_src_arg")"
[ -n "$deps_src" ] && deps_src="$(abspath "$deps_src")"
[ -n "$pack_dir" ] && pack_dir="$(abspath "$pack_dir")"
log() { if [ "$print_prefix" = 1 ]; then echo "[bootstrap] $*" >&2; else echo "[bootstrap] $*"; fi; }
die() { echo "[bootstrap] error: $*" >&2; exit 1; }
sudo_cmd=""
[ "$(id -u)" = 0 ] || sudo_cmd="sudo"
mkdir -p "$cache/src"

# One bootstrap at a time per cache (several clones or engineers may share it).
if command -v flock >/dev/null 2>&1; then
  exec 9> "$cache/.lock"
  flock 9
fi

kokkos_version=3.4.01
trilinos_version=13.2.0
src="${cache}/src/trilinos-${trilinos_version}"    # holds kokkos/ and kokkos-kernels/ (pristine)
extra_prefix="${cache}/extra-deps"                  # Catch2 / benchmark / yaml-cpp built from source (--no-apt)
slim_tarball_name="kokkos-${kokkos_version}-kk-${kokkos_version}-src.tar.gz"

# ---------------------------------------------------------------- Debian packages
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n1 || true)"
[ -n "$mirror" ] || mirror="http://deb.debian.org/debian"
mirror="${KFMM_DEBIAN_MIRROR:-$mirror}"   # an override, e.g. to test what happens without the archive
apt_state="${cache}/apt"
private_apt() {  # apt-get with its own source list and lists, for backports and deb-src; prints its options
  mkdir -p "$apt_state/lists/partial"
  printf '%s\n' "$@" > "$apt_state/sources.list"
  local o=(-o "Dir::Etc::SourceList=$apt_state/sources.list" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$apt_state/lists")
  $sudo_cmd apt-get "${o[@]}" update -qq 2>&1 | grep -v "unsandboxed" >&2 || true
  echo "${o[@]}"
}

if [ "$use_apt" = 1 ] && [ -z "$pack_dir" ]; then
  need=()
  for pkg in g++ cmake make patch libyaml-cpp-dev libbenchmark-dev clang-format ca-certificates xz-utils; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
  done
  if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  catch2_version="$(dpkg-query -W -f='${Version}' libcatch2-dev 2>/dev/null || true)"
  case "$catch2_version" in
    3.*) ;;
    *)
      log "installing Catch2 v3 from bookworm-backports"
      read -r -a o <<< "$(private_apt "deb $mirror bookworm-backports main")"
      DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get "${o[@]}" install -y -qq -t bookworm-backports \
        libcatch2-dev >/dev/null
      ;;
  esac
fi
command -v cmake >/dev/null || die "cmake not found"
host_cxx="${KFMM_HOST_CXX:-g++}"
command -v "$host_cxx" >/dev/null || die "$host_cxx not found (set KFMM_HOST_CXX)"

# ---------------------------------------------------------------- Kokkos sources
check_kokkos_tree() {  # $1: folder with kokkos/ and kokkos-kernels/; fails unless both are 3.4.01
  grep -Eq "^tag: +${kokkos_version} " "$1/kokkos/master_history.txt" 2>/dev/null &&
    grep -Eq "^tag: +${kokkos_version} " "$1/kokkos-kernels/master_history.txt" 2>/dev/null
}
extract_kokkos_tarball() {  # $1: trilinos orig tarball, or a tarball whose top holds kokkos/ + kokkos-kernels/
  local tarball="$1" first
  log "extracting Kokkos and Kokkos Kernels from $(basename "$tarball")"
  rm -rf "${src}.partial" && mkdir -p "${src}.partial"
  first="$( (tar -tf "$tarball" 2>/dev/null || true) | head -n1)"
  case "$first" in
    Trilinos-*)
      tar -xf "$tarball" -C "${src}.partial" --strip-components=2 \
        "${first%%/*}/packages/kokkos" "${first%%/*}/packages/kokkos-kernels" ;;
    *) tar -xf "$tarball" -C "${src}.partial" ;;
  esac
  check_kokkos_tree "${src}.partial" || die "$tarball holds no Kokkos + Kokkos Kernels ${kokkos_version}"
  rm -rf "$src" && mv "${src}.partial" "$src"
}
download_trilinos() {
  [ "$use_apt" = 1 ] || die "no Kokkos sources in ${src} and --no-apt: pass --kokkos-src (see docs/gpu.md)"
  log "downloading Debian source package trilinos ${trilinos_version} (166 MB, once)"
  read -r -a o <<< "$(private_apt "deb-src $mirror bookworm main")"
  (cd "${cache}/src" && { apt-get "${o[@]}" source --download-only -qq "trilinos=${trilinos_version}-4" \
    >/dev/null 2>&1 || apt-get "${o[@]}" source --download-only -qq trilinos >/dev/null; })
}
# Sets kokkos_tree to a folder holding kokkos/ and kokkos-kernels/ version 3.4.01.
resolve_kokkos_sources() {
  if [ -n "$kokkos_src_arg" ]; then
    if [ -d "$kokkos_src_arg" ]; then
      local t="" cand
      for cand in "$kokkos_src_arg" "$kokkos_src_arg/packages"; do
        if check_kokkos_tree "$cand"; then t="$cand"; break; fi
      done
      if [ -z "$t" ]; then  # a folder holding a tarball
        cand="$(ls "$kokkos_src_arg"/${slim_tarball_name} "$kokkos_src_arg"/trilinos_${trilinos_version}.orig.tar.* \
                 2>/dev/null | head -n1 || true)"
        [ -n "$cand" ] || die "--kokkos-src $kokkos_src_arg: no kokkos/ + kokkos-kernels/ ${kokkos_version} and no tarball"
        check_kokkos_tree "$src" || extract_kokkos_tarball "$cand"
        t="$src"
      fi
      kokkos_tree="$t"
    elif [ -f "$kokkos_src_arg" ]; then
      check_kokkos_tree "$src" || extract_kokkos_tarball "$kokkos_src_arg"
      kokkos_tree="$src"
    else
      die "--kokkos-src $kokkos_src_arg does not exist"
    fi
    return
  fi
  if ! check_kokkos_tree "$src"; then
    local tarball
    tarball="$(ls "${cache}"/src/trilinos_${trilinos_version}.orig.tar.* 2>/dev/null | head -n1 || true)"
    if [ -z "$tarball" ]; then
      download_trilinos
      tarball="$(ls "${cache}"/src/trilinos_${trilinos_version}.orig.tar.* | head -n1)"
    fi
    extract_kokkos_tarball "$tarball"
  fi
  kokkos_tree="$src"
}

# ---------------------------------------------------------------- --pack-sources
if [ -n "$pack_dir" ]; then
  resolve_kokkos_sources
  mkdir -p "$pack_dir"
  if [ ! -f "$pack_dir/$slim_tarball_name" ]; then
    log "packing $slim_tarball_name"
    tar -czf "$pack_dir/$slim_tarball_name.partial" -C "$kokkos_tree" kokkos kokkos-kernels
    mv "$pack_dir/$slim_tarball_name.partial" "$pack_dir/$slim_tarball_name"
  fi
  missing=()
  for spec in "catch2=3.7.1-0.4~bpo12+1:catch2_3.7.1" "benchmark=1.7.1-1:benchmark_1.7.1" \
              "yaml-cpp=0.7.0+dfsg-8:yaml-cpp_0.7.0+dfsg"; do
    ls "$pack_dir/${spec#*:}".orig.tar.gz >/dev/null 2>&1 || missing+=("$spec")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    [ "$use_apt" = 1 ] || die "--pack-sources needs the network for ${missing[*]}"
    log "downloading the Debian sources of ${missing[*]%%:*}"
    read -r -a o <<< "$(private_apt "deb-src $mirror bookworm main" "deb-src $mirror bookworm-backports main")"
    tmp="$(mktemp -d)"
    for spec in "${missing[@]}"; do
      (cd "$tmp" && apt-get "${o[@]}" source --download-only -qq "${spec%%:*}" >/dev/null 2>&1) \
        || die "apt-get source ${spec%%:*} failed"
      f="$(ls "$tmp/${spec#*:}".orig.tar.*)"
      case "$f" in
        *.tar.gz) cp "$f" "$pack_dir/" ;;
        *) mkdir -p "$tmp/x" && tar -xf "$f" -C "$tmp/x" &&
           tar -czf "$pack_dir/${spec#*:}.orig.tar.gz" -C "$tmp/x" $(ls "$tmp/x") && rm -rf "$tmp/x" ;;
      esac
    done
    rm -rf "$tmp"
  fi
  log "sources for a machine without network are in $pack_dir:"
  (cd "$pack_dir" && ls -l)
  exit 0
fi

# ---------------------------------------------------------------- Catch2, benchmark, yaml-cpp from source
# Only with --no-apt: a probe project asks CMake what find_package sees; what is missing is built from the
# carried Debian sources (--deps-src, or the cache's src/) into ${extra_prefix}.
cmake_probe() {  # $1: find_package arguments; succeeds when found
  local d
  d="$(mktemp -d)"
  printf 'cmake_minimum_required(VERSION 3.16)\nproject(probe CXX)\nfind_package(%s REQUIRED)\n' "$1" > "$d/CMakeLists.txt"
  if cmake -S "$d" -B "$d/b" -DCMAKE_CXX_COMPILER="$host_cxx" -DCMAKE_PREFIX_PATH="$extra_prefix" >/dev/null 2>&1; then
    rm -rf "$d"; return 0
  fi
  rm -rf "$d"; return 1
}
build_from_source() {  # $1 name, $2 tarball glob, $3... cmake options
  local name="$1" glob="$2" tarball="" d
  shift 2
  for d in "$deps_src" "${cache}/src"; do
    [ -n "$d" ] || continue
    tarball="$(ls "$d"/$glob 2>/dev/null | head -n1 || true)"
    [ -n "$tarball" ] && break
  done
  [ -n "$tarball" ] || return 1
  local stamp
  stamp="${extra_prefix}/.complete-$(basename "$tarball")"
  if [ -f "$stamp" ]; then log "reusing $name from ${extra_prefix}"; return 0; fi
  log "building $name from $(basename "$tarball") into ${extra_prefix}"
  local b="${cache}/build/extra-${name}"
  rm -rf "$b" && mkdir -p "$b/x"
  tar -xf "$tarball" -C "$b/x" || die "cannot extract $tarball"
  local top
  top="$(dirname "$(find "$b/x" -maxdepth 3 -name CMakeLists.txt | awk '{ print length, $0 }' | sort -n | head -n1 | cut -d' ' -f2-)")"
  cmake -S "$top" -B "$b/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$host_cxx" \
    -DCMAKE_INSTALL_PREFIX="$extra_prefix" -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON "$@" > "$b.log" 2>&1 || { tail -n 30 "$b.log"; die "$name configure"; }
  cmake --build "$b/build" -j"$jobs" >> "$b.log" 2>&1 || { tail -n 30 "$b.log"; die "$name build"; }
  cmake --install "$b/build" >> "$b.log" 2>&1
  touch "$stamp"
  rm -rf "$b" "$b.log"
}
# KFMM_BOOTSTRAP_FORCE_SOURCE="catch2 benchmark yaml-cpp" builds those from source even when installed
# (to test the --no-apt route on a machine that has the packages).
forced() { case " ${KFMM_BOOTSTRAP_FORCE_SOURCE:-} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if [ "$use_apt" = 0 ]; then
  off=()
  if forced catch2 || ! cmake_probe "Catch2 3"; then
    build_from_source catch2 "catch2_3*.orig.tar.gz" -DBUILD_TESTING=OFF -DCATCH_INSTALL_DOCS=OFF \
      -DCATCH_INSTALL_EXTRAS=ON || off+=("-DKFMM_ENABLE_TESTS=OFF (Catch2 v3: carry catch2_3.7.1.orig.tar.gz)")
  fi
  if forced benchmark || ! cmake_probe "benchmark"; then
    build_from_source benchmark "benchmark_1*.orig.tar.gz" -DBENCHMARK_ENABLE_TESTING=OFF \
      -DBENCHMARK_ENABLE_GTEST_TESTS=OFF -DBENCHMARK_ENABLE_WERROR=OFF -DBENCHMARK_INSTALL_DOCS=OFF \
      || off+=("-DKFMM_ENABLE_BENCHMARKS=OFF (Google Benchmark: carry benchmark_1.7.1.orig.tar.gz)")
  fi
  if forced yaml-cpp || ! cmake_probe "yaml-cpp"; then
    build_from_source yaml-cpp "yaml-cpp_0*.orig.tar.gz" -DYAML_CPP_BUILD_TESTS=OFF -DYAML_CPP_BUILD_TOOLS=OFF \
      -DYAML_CPP_BUILD_CONTRIB=OFF -DYAML_BUILD_SHARED_LIBS=OFF \
      || off+=("-DKFMM_ENABLE_APPS=OFF (yaml-cpp: carry yaml-cpp_0.7.0+dfsg.orig.tar.gz)")
  fi
  if [ "${#off[@]}" -gt 0 ]; then
    log "not available here; configure with:"
    for x in "${off[@]}"; do log "  $x"; done
  fi
fi

# ---------------------------------------------------------------- Kokkos + Kokkos Kernels
variant="openmp-serial"
[ -n "$cuda_sm" ] && variant="cuda-sm${cuda_sm}-openmp-serial"
key="kokkos-${kokkos_version}-kk-${kokkos_version}-${variant}-cxx17-release"
prefix="${cache}/${key}"
patches_dir="$root/cmake/patches/kokkos-${kokkos_version}"

# What the prefix was built from, beyond its key: compilers and (CUDA) the patches. A prefix whose
# record differs is rebuilt; an empty record (older bootstraps) is accepted.
nvcc_bin=""
if [ -n "$cuda_sm" ]; then
  nvcc_bin="$(command -v nvcc || true)"
  [ -n "$nvcc_bin" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || { export PATH="/usr/local/cuda/bin:$PATH"; nvcc_bin=/usr/local/cuda/bin/nvcc; }
  [ -n "$nvcc_bin" ] || die "--cuda: nvcc not found (put the CUDA toolkit's bin/ on PATH)"
fi
record="kfmm bootstrap: ${key}
host compiler: $("$host_cxx" --version | head -n1)"
if [ -n "$cuda_sm" ]; then
  record="${record}
nvcc: $("$nvcc_bin" --version | tail -n1)
patches: $(cat "$patches_dir"/*.patch | cksum | cut -d' ' -f1)"
fi
if [ -f "${prefix}/.complete" ] && { [ ! -s "${prefix}/.complete" ] || [ "$(cat "${prefix}/.complete")" = "$record" ]; }; then
  log "reusing ${prefix}"
else
  [ -f "${prefix}/.complete" ] && log "${prefix} was built differently; rebuilding"
  resolve_kokkos_sources
  build="${cache}/build/${key}"
  rm -rf "$build" "$prefix"
  mkdir -p "$build"
  kokkos_src="$kokkos_tree/kokkos"
  cxx="$host_cxx"
  kokkos_extra=(-DBUILD_SHARED_LIBS=ON)
  kk_extra=(-DBUILD_SHARED_LIBS=ON)
  if [ -n "$cuda_sm" ]; then
    # CUDA 13 needs the project's patches to Kokkos 3.4.01 (docs/gpu.md); patch a private copy.
    kokkos_src="${build}/kokkos-src"
    cp -r "$kokkos_tree/kokkos" "$kokkos_src"
    for p in "$patches_dir"/*.patch; do
      log "applying $(basename "$p")"
      if command -v patch >/dev/null; then
        patch -s -p1 -d "$kokkos_src" < "$p"
      else
        (cd "$kokkos_src" && git apply -p1 --unsafe-paths "$p")
      fi
    done
    sed -i "s/^default_arch=.*/default_arch=\"sm_${cuda_sm}\"/" "$kokkos_src/bin/nvcc_wrapper"
    cxx="$kokkos_src/bin/nvcc_wrapper"
    export NVCC_WRAPPER_DEFAULT_COMPILER="$host_cxx"
    # Kokkos with CUDA builds static, non-PIC libraries: Kokkos Kernels must be static too.
    kokkos_extra=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ARCH_AMPERE80=ON
                  -DBUILD_SHARED_LIBS=OFF)
    # CMake >= 4: Kokkos 3.4's exported CUDA targets need CUDAToolkit found first (docs/gpu.md).
    kk_extra=(-DBUILD_SHARED_LIBS=OFF -DKokkosKernels_ENABLE_TPL_CUBLAS=OFF -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF
              -DCMAKE_PROJECT_KokkosKernels_INCLUDE="$root/cmake/bootstrap/find_cudatoolkit_first.cmake")
  fi
  log "building Kokkos ${kokkos_version} (${variant}) into ${prefix}"
  cmake -S "$kokkos_src" -B "$build/kokkos" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON \
    -DCMAKE_INSTALL_PREFIX="$prefix" "${kokkos_extra[@]}" > "$build.kokkos.log" 2>&1 \
    || { tail -n 40 "$build.kokkos.log"; die "Kokkos configure failed (log: $build.kokkos.log)"; }
  cmake --build "$build/kokkos" -j"$jobs" >> "$build.kokkos.log" 2>&1 \
    || { tail -n 40 "$build.kokkos.log"; die "Kokkos build failed (log: $build.kokkos.log)"; }
  cmake --install "$build/kokkos" >> "$build.kokkos.log" 2>&1
  # Kokkos Kernels uses the installed nvcc_wrapper (the build copy is deleted below).
  [ -n "$cuda_sm" ] && cxx="$prefix/bin/nvcc_wrapper"
  log "building Kokkos Kernels ${kokkos_version} (batched + blas, no default ETI)"
  cmake -S "$kokkos_tree/kokkos-kernels" -B "$build/kk" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DKokkosKernels_ENABLED_COMPONENTS="BATCHED;BLAS" -DKokkosKernels_ADD_DEFAULT_ETI=OFF \
    -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF -DKokkosKernels_ENABLE_TPL_BLAS=OFF \
    "${kk_extra[@]}" > "$build.kk.log" 2>&1 \
    || { tail -n 40 "$build.kk.log"; die "Kokkos Kernels configure failed (log: $build.kk.log)"; }
  cmake --build "$build/kk" -j"$jobs" >> "$build.kk.log" 2>&1 \
    || { tail -n 40 "$build.kk.log"; die "Kokkos Kernels build failed (log: $build.kk.log)"; }
  cmake --install "$build/kk" >> "$build.kk.log" 2>&1
  printf '%s' "$record" > "${prefix}/.complete"
  rm -rf "$build"
  log "done: ${prefix}"
fi

if [ "$print_prefix" = 1 ]; then echo "$prefix"; fi
