#!/usr/bin/env bash
# `make test`: every stage CI runs, with the time each took.
# The lab comes up in the background (on a fresh machine that means building its node image
# with debootstrap, mostly waiting on the network and dpkg) while the stages that need no lab
# run: unit, conformance, quality. Integration and Molecule then run on the lab side by side.
# Every stage runs even when an earlier one failed; the exit status is 1 if any stage failed
# or ran no test (pytest's exit status 5 counts as a failure), 0 otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
mkdir -p build
MAKE=(make --no-print-directory)

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

t_lab=$(date +%s)
"$ROOT/.venv/bin/python" tests/lab/lab up >build/lab-up.log 2>&1 &
lab_pid=$!

stage unit "${MAKE[@]}" unit
stage conformance "${MAKE[@]}" conformance
stage quality "${MAKE[@]}" quality

echo "== lab up (started with the first stage; log build/lab-up.log)"
wait "$lab_pid"
lab_rc=$?
tail -n 5 build/lab-up.log
record "lab up (in the background)" "$lab_rc" "$(( $(date +%s) - t_lab ))"
if [ "$lab_rc" -eq 0 ]; then
  # Molecule runs beside integration: its scenarios use their own containers, not the lab's
  # nodes, and integration mostly waits on the nodes (half the CPU idle), so the two overlap
  # well. Its output goes to build/molecule-stage.log and is printed when it ends.
  t_mol=$(date +%s)
  echo "== molecule (beside integration; log build/molecule-stage.log)"
  rm -f build/molecule-stage.end
  ( "${MAKE[@]}" molecule >build/molecule-stage.log 2>&1; echo "$? $(date +%s)" >build/molecule-stage.end ) &
  mol_pid=$!
  stage integration "${MAKE[@]}" integration
  wait "$mol_pid"
  read -r mol_rc mol_end <build/molecule-stage.end || { mol_rc=1; mol_end=$(date +%s); }
  echo "== molecule (ran beside integration)"
  cat build/molecule-stage.log
  record "molecule (beside integration)" "$mol_rc" "$(( mol_end - t_mol ))"
else
  echo "lab up failed: the last 60 lines of build/lab-up.log"
  tail -n 60 build/lab-up.log
  record integration 1 0
  record molecule 1 0
fi

echo
echo "make test stages:"
for i in "${!names[@]}"; do
  printf '  %-28s %s\n' "${names[$i]}" "${results[$i]}"
done
exit "$failed"
