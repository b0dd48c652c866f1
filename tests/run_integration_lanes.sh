#!/usr/bin/env bash
# `make integration`: the lab tests in two lanes at once, each its own pytest process.
#   estate:   every file but the two below, in the order the estate's users work (conftest ORDER)
#   overflow: test_ee.py (builds the EE image, needs only podman), then test_overflow.py
# The lanes share the lab, so a file that uses what overflow uses (the cloud nodes, Slurm, the
# storage host, lab-wide state) holds the lane lock for its whole module, and overflow holds it
# too (conftest.py, lane_lock): overflow runs beside onboarding, the upgrade and the removals.
# The overflow lane's output goes to build/integration-overflow.log and is printed at the end.
# Exit status 1 if either lane failed or ran no test (pytest's exit status 5).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
mkdir -p build
PYTEST=("$ROOT/.venv/bin/pytest" -q -m "lab and not long")
SIDE=(tests/integration/test_ee.py tests/integration/test_overflow.py)

# The lab is up (make integration depends on lab-up): the lanes do not run `lab up` again.
export HGPU_LAB_READY=1

"${PYTEST[@]}" --durations=10 "${SIDE[@]}" >build/integration-overflow.log 2>&1 &
side_pid=$!
ignore=()
for f in "${SIDE[@]}"; do ignore+=(--ignore "$f"); done
"${PYTEST[@]}" --durations=25 tests/integration "${ignore[@]}"
estate=$?
wait "$side_pid"
side=$?
echo "== overflow lane (build/integration-overflow.log)"
cat build/integration-overflow.log
echo "integration lanes: estate exit $estate, overflow exit $side"
[ "$estate" -eq 0 ] && [ "$side" -eq 0 ]
