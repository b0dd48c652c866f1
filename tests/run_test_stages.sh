#!/usr/bin/env bash
# `make test`: every stage CI runs, with the time each took.
# Two lines of work share the machine. In the background: `lab up` (on a fresh machine that
# builds the node image with debootstrap, mostly waiting on the network and dpkg), then the
# Molecule scenarios, which need the lab's image and API emulator and run in containers of
# their own. In the foreground: unit, conformance and quality, which need no lab. Integration
# runs last, alone, because its tests change the lab's nodes and the emulator's objects.
# Every stage runs even when an earlier one failed; the exit status is 1 if any stage failed
# or ran no test (pytest's exit status 5 counts as a failure), 0 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
mkdir -p build
MAKE=(make --no-print-directory)
BG_RESULTS=build/test-stages-background
: >"$BG_RESULTS"

names=()
results=()
failed=0

record() {  # name rc seconds
  names+=("$1")
  if [ "$2" -eq 0 ]; then results+=("passed in $3 s"); else results+=("FAILED (exit $2) after $3 s"); failed=1; fi
}

stage() {  # name command...
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  echo "== $name"
  "$@"
  rc=$?
  record "$name" "$rc" "$(( $(date +%s) - t0 ))"
}

background() {  # lab up, then Molecule; each writes "name rc seconds" to BG_RESULTS
  local t0 rc
  t0=$(date +%s)
  "$ROOT/.venv/bin/python" tests/lab/lab up >build/lab-up.log 2>&1
  rc=$?
  echo "lab-up $rc $(( $(date +%s) - t0 ))" >>"$BG_RESULTS"
  [ "$rc" -eq 0 ] || return
  t0=$(date +%s)
  tests/run_molecule.sh >build/molecule-stage.log 2>&1
  echo "molecule $? $(( $(date +%s) - t0 ))" >>"$BG_RESULTS"
}

background &
bg_pid=$!

stage unit "${MAKE[@]}" unit
stage conformance "${MAKE[@]}" conformance
stage quality "${MAKE[@]}" quality

echo "== lab up and molecule (in the background since the first stage; build/lab-up.log, build/molecule-stage.log)"
wait "$bg_pid"
read -r _ lab_rc lab_s < <(grep '^lab-up ' "$BG_RESULTS") || { lab_rc=1; lab_s=0; }
tail -n 3 build/lab-up.log
record "lab up (background)" "$lab_rc" "$lab_s"
if [ "$lab_rc" -ne 0 ]; then
  echo "lab up failed: the last 60 lines of build/lab-up.log"
  tail -n 60 build/lab-up.log
  record molecule 1 0
  record integration 1 0
else
  read -r _ mol_rc mol_s < <(grep '^molecule ' "$BG_RESULTS") || { mol_rc=1; mol_s=0; }
  cat build/molecule-stage.log
  record "molecule (background)" "$mol_rc" "$mol_s"
  stage integration "${MAKE[@]}" integration
fi

echo
echo "make test stages:"
for i in "${!names[@]}"; do
  printf '  %-28s %s\n' "${names[$i]}" "${results[$i]}"
done
exit "$failed"
