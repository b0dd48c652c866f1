#!/usr/bin/env bash
# `make test`: every stage CI runs, with the time each took.
# The lab comes up in the background (on a fresh machine that means building its node image
# with debootstrap, mostly waiting on the network and dpkg) while quality runs. Integration then
# runs on the lab, and beside it, one after another: Molecule, unit and conformance.
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

# A stage that runs beside integration: its output goes to build/<name>-stage.log and is printed
# when integration ends, with its result and time (build/side-stages.end).
side() {  # name command...
  local name=$1
  shift
  local t0 rc
  t0=$(date +%s)
  "$@" >"build/$name-stage.log" 2>&1
  rc=$?
  echo "$name $rc $(( $(date +%s) - t0 ))" >>build/side-stages.end
}

t_lab=$(date +%s)
"$ROOT/.venv/bin/python" tests/lab/lab up >build/lab-up.log 2>&1 &
lab_pid=$!

stage quality "${MAKE[@]}" quality

echo "== lab up (started with quality; log build/lab-up.log)"
wait "$lab_pid"
lab_rc=$?
tail -n 5 build/lab-up.log
record "lab up (beside quality)" "$lab_rc" "$(( $(date +%s) - t_lab ))"
rm -f build/side-stages.end
if [ "$lab_rc" -eq 0 ]; then
  # Integration is the long stage and mostly waits on the nodes (alone it left half of the CPU
  # idle), so the other stages run one after another beside it, one worker each: Molecule (its
  # scenarios use containers of their own, not the lab's nodes), then unit and conformance.
  echo "== molecule, unit, conformance (one after another beside integration; logs build/*-stage.log)"
  (
    side molecule "${MAKE[@]}" molecule
    side unit "${MAKE[@]}" unit UNIT_WORKERS=1
    side conformance "${MAKE[@]}" conformance CONFORMANCE_WORKERS=1
  ) &
  side_pid=$!
  stage integration "${MAKE[@]}" integration
  wait "$side_pid"
else
  echo "lab up failed: the last 60 lines of build/lab-up.log"
  tail -n 60 build/lab-up.log
  record integration 1 0
  record molecule 1 0
  # The stages that need no lab still run.
  side unit "${MAKE[@]}" unit
  side conformance "${MAKE[@]}" conformance
fi
while read -r name rc secs; do
  echo "== $name (log build/$name-stage.log)"
  cat "build/$name-stage.log"
  record "$name" "$rc" "$secs"
done < <(cat build/side-stages.end 2>/dev/null)
for name in molecule unit conformance; do  # a stage that never reported its end failed
  grep -q "^$name " build/side-stages.end 2>/dev/null || [[ " ${names[*]} " == *" $name "* ]] \
    || record "$name" 1 0
done

echo
echo "make test stages:"
for i in "${!names[@]}"; do
  printf '  %-28s %s\n' "${names[$i]}" "${results[$i]}"
done
exit "$failed"
