#!/usr/bin/env bash
# End-to-end tests of the kfmm command: cli_tests.sh KFMM_BINARY CASE. Each case runs the program in a
# fresh temporary folder and checks its exit status, its messages and its files. Registered one CTest
# test per case by apps/CMakeLists.txt.
set -uo pipefail
KFMM="$1"
CASE="$2"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kfmm-cli-${CASE}.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
export OMP_PROC_BIND=false OMP_NUM_THREADS=1  # behaviour, not speed: no thread contention

fail() {
  echo "FAIL [$CASE]: $*"
  echo "--- stdout:"; cat out.txt 2>/dev/null
  echo "--- stderr:"; cat err.txt 2>/dev/null
  exit 1
}
# run EXPECTED_STATUS ARGS...: runs kfmm, captures stdout/stderr, checks the status.
run() {
  local expected="$1"; shift
  "$KFMM" "$@" > out.txt 2> err.txt
  local status=$?
  [ "$status" -eq "$expected" ] || fail "kfmm $* exited $status, expected $expected"
}
expect_err() { grep -qE -- "$1" err.txt || fail "stderr does not match '$1'"; }
expect_out() { grep -qE -- "$1" out.txt || fail "stdout does not match '$1'"; }
one_line_error() {
  [ "$(wc -l < err.txt)" -eq 1 ] || fail "expected exactly one line on stderr"
  grep -q "error" err.txt || fail "the message does not say error"
}
# A random cloud: particles.csv with N rows (deterministic LCG, masses of both signs if $2 = mixed).
make_cloud() {
  awk -v n="$1" -v mixed="${2:-}" 'BEGIN {
    s = 12345; print "x,y,z,m";
    for (i = 0; i < n; i++) {
      for (k = 0; k < 4; k++) { s = (s * 1103515245 + 12345) % 2147483648; u[k] = s / 2147483648 }
      m = (mixed == "mixed") ? u[3] - 0.5 : 0.5 + u[3];
      printf "%.17g,%.17g,%.17g,%.17g\n", u[0], u[1], u[2], m / n
    } }' > particles.csv
}
# A bad-input case for `kfmm forces`: the output that exists must survive untouched.
forces_rejects() {
  local pattern="$1"; shift
  echo "precious" > result.csv
  run "${EXPECTED_STATUS:-1}" forces --input particles.csv --output result.csv "$@"
  expect_err "$pattern"
  one_line_error
  [ "$(cat result.csv)" = "precious" ] || fail "the existing output was modified"
  [ -z "$(ls -A | grep '\.tmp-')" ] || fail "a temporary file was left behind"
}
write_config() {  # write_config FILE STEPS [extra yaml lines...]
  local file="$1" steps="$2"; shift 2
  {
    echo "initial_conditions:"
    echo "  kind: plummer"
    echo "  particles: 300"
    echo "  seed: 3"
    echo "solver:"
    echo "  tolerance: 1.0e-3"
    echo "  softening: 0.05"
    echo "integrator:"
    echo "  time_step: 0.01"
    echo "  steps: $steps"
    echo "output:"
    echo "  directory: run"
    echo "  snapshot_every: 5"
    for line in "$@"; do echo "$line"; done
  } > "$file"
}

case "$CASE" in
  help)
    run 0 --help; expect_out "usage: kfmm"; expect_out "forces"; expect_out "nbody"
    for c in demo forces nbody calibrate; do
      run 0 "$c" --help; expect_out "usage: kfmm"
    done
    run 0 forces --help; expect_out "ax,ay,az,phi"; expect_out "--tolerance"
    run 0 nbody --help; expect_out "snapshot_every"; expect_out "restart"
    run 2 bogus; expect_err "unknown command 'bogus'"; one_line_error
    run 2 forces --input; expect_err "needs a value"; one_line_error
    run 2 forces --frobnicate 3; expect_err "unknown option '--frobnicate'"; one_line_error
    ;;
  forces_two_bodies)
    printf 'x,y,z,m\n0,0,0,1\n1,0,0,2\n' > particles.csv
    run 0 forces --input particles.csv --output result.csv --G 2
    [ "$(head -1 result.csv)" = "ax,ay,az,phi" ] || fail "header"
    # a_0 = -G m_1 (x_0 - x_1) / r^3 = +4, phi_0 = -G m_1 / r = -4; a_1 = -2, phi_1 = -2.
    [ "$(sed -n 2p result.csv)" = "4,0,0,-4" ] || fail "row 1: $(sed -n 2p result.csv)"
    [ "$(sed -n 3p result.csv)" = "-2,0,0,-2" ] || fail "row 2: $(sed -n 3p result.csv)"
    expect_out "fp64"; expect_out "order p = "; expect_out "theta = "; expect_out "OpenMP|Serial|Cuda"
    # Softened: r^2 + eps^2 = 1 + 3 = 4.
    run 0 forces --input particles.csv --output soft.csv --softening 1.7320508075688772
    awk -F, 'NR == 2 { if ($1 < 0.2499999999 || $1 > 0.2500000001 || $4 > -0.9999999999 || $4 < -1.0000000001) exit 1 }' soft.csv \
      || fail "softened pair: $(sed -n 2p soft.csv)"
    ;;
  forces_small_n)
    printf 'x,y,z,m\n' > particles.csv
    run 0 forces --input particles.csv --output result.csv --check 10
    [ "$(cat result.csv)" = "ax,ay,az,phi" ] || fail "N = 0 output: $(cat result.csv)"
    printf '# one particle\nx,y,z,m\n0.5,0.5,0.5,3\n' > particles.csv
    run 0 forces --input particles.csv --output result.csv
    [ "$(sed -n 2p result.csv)" = "0,0,0,0" ] || fail "N = 1 output: $(sed -n 2p result.csv)"
    printf 'x,y,z,m,vx,vy,vz\n0,0,0,1,5,5,5\n1,0,0,2,5,5,5\n' > particles.csv  # snapshots work as input
    run 0 forces --input particles.csv --output result.csv --G 2
    [ "$(sed -n 2p result.csv)" = "4,0,0,-4" ] || fail "snapshot input: $(sed -n 2p result.csv)"
    printf 'm,z,y,x\n1,0,0,0\n1,0,0,0\n' > particles.csv  # any column order; coincident, unsoftened
    run 0 forces --input particles.csv --output result.csv
    [ "$(sed -n 2p result.csv)" = "0,0,0,0" ] || fail "coincident pair: $(sed -n 2p result.csv)"
    ;;
  forces_accuracy)
    make_cloud 3000 mixed
    for tol in 1e-3 1e-6 1e-9; do
      run 0 forces --input particles.csv --output result.csv --tolerance "$tol" --check 3000
      expect_out "within the requested tolerance"
      [ "$(wc -l < result.csv)" -eq 3001 ] || fail "row count"
    done
    run 0 forces --input particles.csv --output result.csv --precision fp32 --check 500
    expect_out "fp32"; expect_out "within the requested tolerance"
    run 0 forces --input particles.csv --output result.csv --order 4 --theta 0.5 --leaf-size 16 --softening 0.001 --check 200
    expect_out "as given"; expect_out "leaf size 16"
    # Both list builds: the same lists, so the same results, bitwise.
    run 0 forces --input particles.csv --output sorted.csv --list-build sort
    run 0 forces --input particles.csv --output scattered.csv --list-build scatter
    cmp sorted.csv scattered.csv || fail "--list-build changes the results"
    ;;
  forces_fp32_rounding)
    # fp32 runs take positions relative to their bounding box's centre (subtracted in double): a clump
    # 1e-3 wide at coordinate 1000 keeps its digits (in raw fp32 coordinates, spaced 6e-5 there, the error
    # against the double data was 0.56).
    awk 'BEGIN { s = 4242; n = 2000; print "x,y,z,m";
      for (i = 0; i < n; i++) {
        for (k = 0; k < 3; k++) { s = (s * 1103515245 + 12345) % 2147483648; u[k] = 1000 + 1e-3 * s / 2147483648 }
        printf "%.17g,%.17g,%.17g,%.17g\n", u[0], u[1], u[2], 1 / n } }' > particles.csv
    run 0 forces --input particles.csv --output result.csv --precision fp32 --tolerance 1e-4 --check 500
    expect_out "fp32: positions taken relative to \\(1000.0"
    expect_out "against the fp64 direct sum of the inputs rounded to fp32"
    expect_out "within the requested tolerance 0.0001$"
    # A clump 1e-5 wide away from the centre of a unit cloud: rounding to fp32 still moves its particles
    # by a good part of their separations. The check reports both errors and judges the tolerance against
    # the inputs rounded to fp32, which the evaluation is given (docs/usage.md, "Accuracy").
    awk 'BEGIN { s = 777; n = 2000; print "x,y,z,m";
      for (i = 0; i < n; i++) {
        for (k = 0; k < 3; k++) { s = (s * 1103515245 + 12345) % 2147483648; u[k] = s / 2147483648 }
        if (i % 2) { for (k = 0; k < 3; k++) u[k] = 0.9 + 1e-5 * u[k] }
        printf "%.17g,%.17g,%.17g,%.17g\n", u[0], u[1], u[2], 1 / n } }' > particles.csv
    run 0 forces --input particles.csv --output result.csv --precision fp32 --tolerance 1e-4 --check 500
    expect_out "within the requested tolerance 0.0001; rounding the input to fp32 costs the rest"
    run 0 forces --input particles.csv --output result.csv --tolerance 1e-4 --check 500
    expect_out "within the requested tolerance 0.0001$"
    if grep -q "rounded to fp32" out.txt; then fail "fp64 run reports an fp32 rounding check"; fi
    ;;
  forces_concentrated)
    # Two groups of coincident particles (a third of the mass each) in a uniform cloud: the walk's
    # concentration rule keeps the tolerance; the plain criterion (ratio 0) misses it (docs/tree.md).
    awk 'BEGIN { s = 12345; n = 1500; print "x,y,z,m";
      for (i = 0; i < n; i++) {
        for (k = 0; k < 3; k++) { s = (s * 1103515245 + 12345) % 2147483648; u[k] = s / 2147483648 }
        g = i % 3; if (g < 2) { u[0] = u[1] = u[2] = (g == 0) ? 0.25 : 0.75 }
        printf "%.17g,%.17g,%.17g,%.17g\n", u[0], u[1], u[2], 1 / n } }' > particles.csv
    run 0 forces --input particles.csv --output result.csv --tolerance 1e-4 --check 1500
    expect_out "within the requested tolerance"
    run 0 forces --input particles.csv --output result.csv --tolerance 1e-4 --check 1500 --concentration-ratio 0
    expect_out "ABOVE the requested tolerance"
    expect_out "concentration rule off"
    ;;
  forces_bad_input)
    make_cloud 20
    run 1 forces --input missing.csv --output result.csv; expect_err "cannot open 'missing.csv'"; one_line_error
    sed -i '5s/.*/0.1,abc,0.3,0.4/' particles.csv
    forces_rejects "particles.csv:5: column 'y': 'abc' is not a number"
    make_cloud 20; sed -i '7s/.*/0.1,0.2,0.3/' particles.csv
    forces_rejects "particles.csv:7: expected 4 fields"
    make_cloud 20; sed -i '3s/.*/nan,0.2,0.3,0.1/' particles.csv
    forces_rejects "particles.csv:3: column 'x' is NaN"
    make_cloud 20; sed -i '4s/.*/0.1,0.2,0.3,inf/' particles.csv
    forces_rejects "particles.csv:4: column 'm'.*infinite"
    make_cloud 20; sed -i '6s/.*/0.1,0.2,1e999,1/' particles.csv
    forces_rejects "particles.csv:6: column 'z'.*out of range"
    make_cloud 20; sed -i '5s/.*/0.1,0.2,1e39,1/' particles.csv
    forces_rejects "particles.csv:5: column 'z' does not fit in fp32" --precision fp32
    make_cloud 20; sed -i '8s/.*/0.1,,0.3,1/' particles.csv
    forces_rejects "particles.csv:8: column 'y' is empty"
    make_cloud 20; sed -i '1d' particles.csv
    forces_rejects "particles.csv:1: the header line is missing"
    make_cloud 20; sed -i '1s/.*/x,y,z,mass/' particles.csv
    forces_rejects "unknown column 'mass'"
    make_cloud 20; sed -i '1s/.*/x,y,x,m/' particles.csv
    forces_rejects "column 'x' appears twice"
    : > particles.csv
    forces_rejects "no header line"
    mkdir folder.csv
    run 1 forces --input folder.csv --output result.csv; expect_err "is a folder"
    make_cloud 20
    run 1 forces --input particles.csv --output no/such/folder/result.csv; expect_err "folder 'no/such/folder' does not exist"
    ;;
  forces_bad_options)
    make_cloud 20
    EXPECTED_STATUS=2 forces_rejects "--theta 1.5 is outside \(0, 1\)" --theta 1.5 --order 4
    EXPECTED_STATUS=2 forces_rejects "--theta 0 is outside \(0, 1\)" --theta 0
    EXPECTED_STATUS=2 forces_rejects "--order 17 is out of range" --order 17 --theta 0.5
    EXPECTED_STATUS=2 forces_rejects "--order -1 is out of range" --order -1
    EXPECTED_STATUS=2 forces_rejects "--order: '4.5' is not an integer" --order 4.5
    EXPECTED_STATUS=2 forces_rejects "--tolerance: 'tight' is not a number" --tolerance tight
    EXPECTED_STATUS=2 forces_rejects "--leaf-size 0 must be in 1..1000000" --leaf-size 0
    EXPECTED_STATUS=2 forces_rejects "--leaf-size 2000000 must be in 1..1000000" --leaf-size 2000000
    EXPECTED_STATUS=2 forces_rejects "--softening -1 must be >= 0" --softening -1
    EXPECTED_STATUS=2 forces_rejects "--concentration-ratio 2 must be in \[0, 1\]" --concentration-ratio 2
    EXPECTED_STATUS=2 forces_rejects "--list-build 'quick' is not one of automatic, sort, scatter" --list-build quick
    EXPECTED_STATUS=2 forces_rejects "precision 'fp16' is not one of fp32, fp64" --precision fp16
    EXPECTED_STATUS=2 forces_rejects "not all three" --order 4 --theta 0.5 --tolerance 1e-3
    forces_rejects "tolerance = 1e-14 is below the precision floor" --tolerance 1e-14
    forces_rejects "below the precision floor .* of float" --tolerance 1e-8 --precision fp32
    forces_rejects "order = 1 cannot reach tolerance" --tolerance 1e-9 --order 1
    EXPECTED_STATUS=2 forces_rejects "--seed: '-3' is not an integer in 0..18446744073709551615" --seed -3 --check 5
    EXPECTED_STATUS=2 forces_rejects "--seed: '18446744073709551616' is not an integer in 0.." --seed 18446744073709551616 --check 5
    forces_rejects "Options::G = 1e\+39 exceeds the range of float" --G 1e39 --precision fp32
    ;;
  calibrate_options)
    small="--distributions uniform,plummer --leaf-sizes 16,32 --no-progress"  # (bad values below: before any work)
    run 0 calibrate $small --particles 300 --targets 50 --repeat 1 --orders 1-2 --thetas 0.4,0.6 --csv table.csv
    [ "$(wc -l < table.csv)" -eq 9 ] || fail "2 orders x 2 thetas x 2 distributions: $(wc -l < table.csv) lines"
    run 2 calibrate $small --orders 1,1; expect_err "--orders: order 1 is listed twice"; one_line_error
    run 2 calibrate $small --orders 3-1; expect_err "range 3-1 is empty"; one_line_error
    run 2 calibrate $small --orders 4294967297; expect_err "--orders: 4294967297 is outside 0..16"
    run 2 calibrate $small --thetas 0.6,0.4; expect_err "0.4 must be larger than the angle before it"
    run 2 calibrate $small --thetas 0.5,0.5; expect_err "0.5 must be larger"
    run 2 calibrate $small --targets 0; expect_err "--targets: 0 is outside 1.."
    run 2 calibrate $small --targets 4294967297; expect_err "--targets: 4294967297 is outside"
    run 2 calibrate $small --repeat 0; expect_err "--repeat: 0 is outside 1..1000"
    run 2 calibrate $small --leaf-theta 1.5; expect_err "--leaf-theta 1.5 is outside \(0, 1\)"
    run 2 calibrate $small --float-floor -1; expect_err "--float-floor -1 is outside \(0, 1\)"
    run 2 calibrate $small --seed -1; expect_err "--seed: '-1' is not an integer in 0..18446744073709551615"
    run 2 calibrate $small --particles 1; expect_err "--particles: 1 is outside 2.."
    ;;
  nbody_run_and_restart)
    write_config full.yaml 20
    run 0 nbody --config full.yaml --no-progress
    expect_out "fp64"; expect_out "order p = "; expect_out "energy: "; expect_out "per step"
    for s in 00000000 00000005 00000010 00000015 00000020; do
      [ -f "run/snapshot_$s.csv" ] || fail "snapshot $s missing"
    done
    [ "$(wc -l < run/energy.csv)" -eq 22 ] || fail "energy.csv should have 21 rows"
    head -1 run/energy.csv | grep -q "^step,time,kinetic,potential,total,energy_error,px,py,pz,lx,ly,lz$" || fail "energy header"
    awk -F, 'NR > 1 { e = $6 < 0 ? -$6 : $6; if (e > 1e-4) exit 1 }' run/energy.csv || fail "energy error above 1e-4"
    mv run full_run
    # The same run in two parts: 10 steps, then the config says 20 and the run continues.
    write_config part.yaml 10
    run 0 nbody --config part.yaml --no-progress
    [ ! -f run/snapshot_00000015.csv ] || fail "ran too far"
    write_config part.yaml 20
    run 0 nbody --config part.yaml --no-progress
    expect_out "restarting from step 10"
    cmp run/snapshot_00000020.csv full_run/snapshot_00000020.csv || fail "restart does not reproduce the run bitwise"
    cmp run/energy.csv full_run/energy.csv || fail "restarted energy log differs"
    # The walk's list builds give the same lists, entry for entry: the same run, bitwise.
    for build in sort scatter; do
      write_config "$build.yaml" 20 && sed -i "s/  softening: 0.05/  softening: 0.05\n  list_build: $build/; s/directory: run/directory: run_$build/" "$build.yaml"
      run 0 nbody --config "$build.yaml" --no-progress
      cmp "run_$build/snapshot_00000020.csv" full_run/snapshot_00000020.csv || fail "list_build: $build changes the run"
    done
    # restart: false refuses to touch the existing run.
    write_config norestart.yaml 20 "  restart: false"
    sed -i 's/directory: run/directory: full_run/' norestart.yaml
    run 1 nbody --config norestart.yaml --no-progress; expect_err "already holds snapshots"; one_line_error
    # Continuing with another time step or precision is refused (the log would mix two runs).
    write_config other_dt.yaml 30 && sed -i 's/time_step: 0.01/time_step: 0.02/; s/directory: run/directory: full_run/' other_dt.yaml
    run 1 nbody --config other_dt.yaml --no-progress
    expect_err "was made with another time step .*time_step=0.01.* than integrator.time_step = 0.02"; one_line_error
    write_config other_precision.yaml 30 "  restart: true" && sed -i 's/directory: run/directory: full_run/; s/  softening: 0.05/  softening: 0.05\n  precision: fp32/' other_precision.yaml
    run 1 nbody --config other_precision.yaml --no-progress
    expect_err "was made in fp64 .*not in solver.precision = fp32"; one_line_error
    # So is continuing with other initial conditions, G or softening (the snapshots record them).
    write_config other_seed.yaml 30 && sed -i 's/  seed: 3/  seed: 4/; s/directory: run/directory: full_run/' other_seed.yaml
    run 1 nbody --config other_seed.yaml --no-progress
    expect_err "was made with initial_conditions.seed = 3 .*not 4 as other_seed.yaml says"; one_line_error
    write_config other_g.yaml 30 && sed -i 's/  softening: 0.05/  softening: 0.05\n  G: 2/; s/directory: run/directory: full_run/' other_g.yaml
    run 1 nbody --config other_g.yaml --no-progress; expect_err "was made with solver.G = 1 .*not 2"
    write_config other_kind.yaml 30 && sed -i 's/  kind: plummer/  kind: uniform/; s/directory: run/directory: full_run/' other_kind.yaml
    run 1 nbody --config other_kind.yaml --no-progress; expect_err "was made with initial_conditions.kind = plummer .*not uniform"
    [ ! -f full_run/snapshot_00000025.csv ] || fail "a refused restart ran"
    # An energy log without a snapshot to continue from is not replaced.
    mkdir -p log_only && echo "keep me" > log_only/energy.csv
    write_config log_only.yaml 2 && sed -i 's/directory: run/directory: log_only/' log_only.yaml
    run 1 nbody --config log_only.yaml --no-progress; expect_err "holds log_only/energy.csv but no snapshot"
    [ "$(cat log_only/energy.csv)" = "keep me" ] || fail "energy.csv was replaced"
    # A snapshot whose step number is out of range is named, not a bare stoll error.
    mkdir -p odd && touch odd/snapshot_99999999999999999999.csv
    write_config odd.yaml 2 && sed -i 's/directory: run/directory: odd/' odd.yaml
    run 1 nbody --config odd.yaml --no-progress; expect_err "holds 'snapshot_99999999999999999999.csv', whose step number is out of range"
    ;;
  nbody_file_and_fp32)
    make_cloud 200
    cat > ics.yaml <<EOF
initial_conditions:
  kind: file
  file: particles.csv
solver:
  precision: fp32
  softening: 0.05
integrator:
  time_step: 0.001
  steps: 3
output:
  directory: out
EOF
    run 0 nbody --config ics.yaml --no-progress
    expect_out "fp32"; expect_out "200 particles"
    [ -f out/snapshot_00000003.csv ] || fail "final snapshot missing"
    # Velocities beyond float's range are refused in fp32, by --dry-run as well.
    printf 'x,y,z,m,vx,vy,vz\n0,0,0,1,0,0,0\n1,0,0,1,0,4e38,0\n' > particles.csv
    sed -i 's/directory: out/directory: out2/' ics.yaml
    run 1 nbody --config ics.yaml --dry-run; expect_err "particles.csv:3: column 'vy' does not fit in fp32"
    run 1 nbody --config ics.yaml --no-progress; expect_err "particles.csv:3: column 'vy' does not fit in fp32"
    [ ! -d out2 ] || fail "a failed start created its output folder"
    ;;
  nbody_bad_config)
    write_config c.yaml 10 && sed -i 's/  tolerance: 1.0e-3/  tolerence: 1.0e-6/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:6: unknown key 'solver.tolerence'"; one_line_error
    write_config c.yaml 10 && sed -i 's/  steps: 10/  steps: ten/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:10: key 'integrator.steps' must be an integer, got 'ten'"
    write_config c.yaml 10 && sed -i 's/  time_step: 0.01/  time_step: [1, 2]/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:9: key 'integrator.time_step' must be a number, got a list"
    write_config c.yaml 10 && sed -i 's/  softening: 0.05/  softening: -1/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:7: 'solver.softening' must be >= 0"
    write_config c.yaml 10 && sed -i 's/  softening: 0.05/  softening: 0.05\n  concentration_ratio: -0.5/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:8: 'solver.concentration_ratio' must be in \[0, 1\]"
    write_config c.yaml 10 && sed -i 's/  softening: 0.05/  softening: 0.05\n  list_build: quick/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:8: 'solver.list_build' must be automatic, sort or scatter \(got 'quick'\)"
    write_config c.yaml 10 && sed -i 's/  tolerance: 1.0e-3/  theta: 1.2/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:6: 'solver.theta' must be in \(0, 1\)"
    write_config c.yaml 10 && sed -i 's/  tolerance: 1.0e-3/  order: 40/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:6: 'solver.order' is out of range"
    write_config c.yaml 10 && sed -i 's/  tolerance: 1.0e-3/  tolerance: 1.0e-15/' c.yaml
    run 1 nbody --config c.yaml; expect_err "below the precision floor"
    write_config c.yaml 10 && sed -i 's/  kind: plummer/  kind: king/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:2: 'initial_conditions.kind' must be one of plummer, uniform, file"
    write_config c.yaml 10 && sed -i 's/  seed: 3/  seed: 3\n  radius: 2/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:5: 'initial_conditions.radius' has no meaning for kind: plummer \(only for uniform\)"
    write_config c.yaml 10 && sed -i 's/  kind: plummer/  kind: uniform\n  virial_ratio: 0.5/; s/  softening: 0.05/  softening: 0.05\n  G: -1/' c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:3: 'initial_conditions.virial_ratio' needs solver.G > 0"
    write_config c.yaml 10 && sed -i '/time_step/d' c.yaml
    run 1 nbody --config c.yaml; expect_err "'integrator.time_step' is required"
    write_config c.yaml 10 && sed -i 's/  seed: 3/  seed: 3\n  seed: 4/' c.yaml
    run 1 nbody --config c.yaml; expect_err "(appears twice|duplicate)"
    printf 'solver:\n  tolerance: [1e-6\n' > c.yaml
    run 1 nbody --config c.yaml; expect_err "c.yaml:[0-9]+: YAML syntax error"
    run 1 nbody --config missing.yaml; expect_err "cannot open configuration 'missing.yaml'"
    : > c.yaml
    run 1 nbody --config c.yaml; expect_err "empty"
    printf 'initial_conditions:\n  kind: file\n  file: nope.csv\nintegrator:\n  time_step: 0.1\n  steps: 1\n' > c.yaml
    run 1 nbody --config c.yaml; expect_err "cannot open 'nope.csv'"
    [ ! -d c_run ] || [ -z "$(ls c_run)" ] || fail "a failed start left snapshots behind"
    run 2 nbody; expect_err "--config RUN.yaml is required"
    # A second YAML document would be dropped by a plain load: refused.
    write_config c.yaml 10 && printf -- '---\nsolver: {order: 99}\n' >> c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "c.yaml:[0-9]+: the file holds 2 YAML documents"
    write_config c.yaml 10 && sed -i 's/directory: run/directory: ""/' c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "'output.directory' is empty \(leave the key out for the default, c_run\)"
    write_config c.yaml 10 && sed -i 's/  softening: 0.05/  softening: 0.05\n  G: -1/' c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "c.yaml:8: 'solver.G' must be >= 0 for initial_conditions.kind: plummer"
    write_config c.yaml 10 && sed -i 's/  kind: plummer/  kind: uniform\n  radius: 1e39/; s/  softening: 0.05/  softening: 0.05\n  precision: fp32/' c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "the uniform initial conditions do not fit in fp32 \(a position of"
    write_config c.yaml 10 && sed -i 's/  particles: 300/  particles: 2147483647/' c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "'initial_conditions.particles' must be in 0..2147483646"
    # Seeds span 0..2^64-1; a subnormal softening is a number (the nearest double), not an error.
    write_config c.yaml 10 && sed -i 's/  seed: 3/  seed: 18446744073709551615/; s/  softening: 0.05/  softening: 1e-310/' c.yaml
    run 0 nbody --config c.yaml --dry-run; expect_out "is valid"
    write_config c.yaml 10 && sed -i 's/  seed: 3/  seed: -1/' c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "c.yaml:4: key 'initial_conditions.seed' must be an integer in 0..18446744073709551615, got '-1'"
    # In fp32 G and the softening are floats.
    write_config c.yaml 10 && sed -i 's/  softening: 0.05/  softening: 0.05\n  G: 1e39\n  precision: fp32/' c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "c.yaml:8: 'solver.G' is beyond the range of fp32"
    # A run whose physics overflows its precision names the step and the keys, not a NaN particle.
    write_config c.yaml 10 && sed -i 's/  time_step: 0.01/  time_step: 1e308/' c.yaml
    run 1 nbody --config c.yaml --no-progress
    expect_err "c.yaml: step 1: .*the run left the range of fp64 \(smaller masses or solver.G, or a smaller integrator.time_step, keep it finite; the last snapshot is step 0\)"
    # A run that fails mid-way leaves the rows logged before the failure on disk; a restart continues from
    # the last snapshot and drops the rows after it, also when it fails again before logging a row.
    printf 'x,y,z,m,vx,vy,vz\n0,0,0,1,0,0,0\n1,0,0,1,1e38,0,0\n' > drift.csv
    printf 'initial_conditions:\n  kind: file\n  file: drift.csv\nsolver:\n  G: 0\n  precision: fp32\nintegrator:\n  time_step: 1\n  steps: 10\noutput:\n  directory: drift\n  snapshot_every: 0\n  log_every: 1\n' > d.yaml
    logged() { cut -d, -f1 drift/energy.csv | tr '\n' ' '; }
    run 1 nbody --config d.yaml --no-progress
    expect_err "d.yaml: step 4: particle 1 has a NaN or infinite position or velocity; the run left the range of fp32 .*the last snapshot is step 0\)"
    [ "$(logged)" = "step 0 1 2 3 " ] || fail "energy.csv holds steps $(logged), expected 0 1 2 3"
    sed -i 's/log_every: 1/log_every: 2/' d.yaml
    run 1 nbody --config d.yaml --no-progress; expect_out "restarting from step 0"
    [ "$(logged)" = "step 0 2 " ] || fail "after the restart energy.csv holds steps $(logged), expected 0 2"
    sed -i 's/log_every: 2/log_every: 5/' d.yaml
    run 1 nbody --config d.yaml --no-progress; expect_err "d.yaml: step 4: "
    [ "$(logged)" = "step 0 " ] || fail "after the second restart energy.csv holds steps $(logged), expected 0"
    write_config c.yaml 10 && sed -i 's/  seed: 3/  seed: 3\n  total_mass: 1e300/' c.yaml
    run 1 nbody --config c.yaml --dry-run
    expect_err "c.yaml: the plummer initial conditions overflow double \(a velocity is NaN or infinite\); choose smaller"
    # finite dynamics whose energy double cannot hold: the log could not record it
    write_config c.yaml 10 && sed -i 's/  seed: 3/  seed: 3\n  total_mass: 1e160/; s/  time_step: 0.01/  time_step: 1e-90/; s/directory: run/directory: heavy/' c.yaml
    run 1 nbody --config c.yaml --no-progress
    expect_err "c.yaml: step 0: the energy \(kinetic inf, potential -inf\) is beyond double's range"
    # numbers that round to 0 are refused; seeds take integral forms of any spelling
    write_config c.yaml 10 && sed -i 's/  softening: 0.05/  softening: 0.05\n  G: 1e-400/' c.yaml
    run 1 nbody --config c.yaml --dry-run; expect_err "c.yaml:8: key 'solver.G' = '1e-400' is below the smallest double"
    write_config c.yaml 10 && sed -i 's/  seed: 3/  seed: 1e5/' c.yaml
    run 0 nbody --config c.yaml --dry-run; expect_out "is valid"
    ;;
  configs)
    # Every shipped run file is valid (from_file.yaml reads ics.csv from the current folder).
    make_cloud 50 && cp particles.csv ics.csv
    for f in "$(dirname "$0")"/../../configs/*.yaml; do
      run 0 nbody --config "$f" --dry-run; expect_out "is valid"
    done
    ;;
  demo_small)
    run 0 demo --particles 3000 --check 200 --nbody-particles 300 --steps 4 --no-progress
    expect_out "within the tolerance"; expect_out "stage"; expect_out "p2p"; expect_out "energy: "
    expect_out "order p = "; expect_out "fp64"
    run 2 demo --particles 100 --nbody-particles 1; expect_err "must be 0 \(no N-body run\) or in 2.."
    run 2 demo --particles 100 --seed -2; expect_err "--seed: '-2' is not an integer in 0..18446744073709551615"
    ;;
  *)
    echo "unknown case $CASE"; exit 2 ;;
esac
echo "PASS [$CASE]"
