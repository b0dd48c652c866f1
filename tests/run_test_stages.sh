#!/usr/bin/env bash
# `make test`: every stage CI runs, with the time each took.
# The lab comes up in the background (on a fresh machine that means building its node image
# with debootstrap, mostly waiting on the network and dpkg) while quality runs. Integration then
# runs on the lab; beside lab up and integration, one after another: unit, conformance, Molecule.
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
rm -f build/side-stages.end build/lab-up.rc

stage quality "${MAKE[@]}" quality

# Beside what follows, one after another and one worker each: unit and conformance, which need
# no lab and so start now (on a fresh machine `lab up` is still building the node image), then
# Molecule once the lab is up (its scenarios run containers of the lab's image, not the lab's
# nodes). Integration mostly waits on the nodes (alone it left half of the CPU idle), so these
# fill what it leaves. Molecule's script is called directly: `make molecule` would run `lab up`
# again, and a `lab up` in the middle of integration would put back what a test has changed.
echo "== unit, conformance, molecule (one after another beside lab up and integration; logs build/*-stage.log)"
(
  side unit "${MAKE[@]}" unit UNIT_WORKERS=1
  side conformance "${MAKE[@]}" conformance CONFORMANCE_WORKERS=1
  while [ ! -s build/lab-up.rc ]; do sleep 2; done
  if [ "$(cat build/lab-up.rc)" -eq 0 ]; then
    side molecule tests/run_molecule.sh
  else
    echo "lab up failed: Molecule needs the lab's node image" >build/molecule-stage.log
    echo "molecule 1 0" >>build/side-stages.end
  fi
) &
side_pid=$!

echo "== lab up (started with quality; log build/lab-up.log)"
wait "$lab_pid"
lab_rc=$?
echo "$lab_rc" >build/lab-up.rc
tail -n 5 build/lab-up.log
record "lab up (beside quality)" "$lab_rc" "$(( $(date +%s) - t_lab ))"
if [ "$lab_rc" -eq 0 ]; then
  stage integration "${MAKE[@]}" integration
else
  echo "lab up failed: the last 60 lines of build/lab-up.log"
  tail -n 60 build/lab-up.log
  record integration 1 0
fi
wait "$side_pid"
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
