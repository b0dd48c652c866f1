#!/usr/bin/env bash
# Run every role's Molecule scenario (converge, idempotence, verify), HGPU_MOLECULE_JOBS at a
# time (default 2: the scenarios wait on containers and SSH more than they compute). Each
# scenario logs to build/molecule/<role>.log; a failure prints that log's tail. Exit 1 if any failed.
# Usage: tests/run_molecule.sh [role ...]     (the lab must be up: it provides the image and repo)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$ROOT/.venv/bin:$PATH" ANSIBLE_CONFIG="$ROOT/ansible.cfg"
LOGS="$ROOT/build/molecule"
mkdir -p "$LOGS"
if [ $# -gt 0 ]; then roles=("$@"); else
  roles=(); for d in "$ROOT"/roles/*/molecule/default/molecule.yml; do
    r=${d#"$ROOT"/roles/}; roles+=("${r%%/*}"); done
fi
[ ${#roles[@]} -gt 0 ] || { echo "no Molecule scenarios found"; exit 1; }

run_one() {
  local role=$1 start rc
  start=$(date +%s)
  (cd "$ROOT/roles/$role" && molecule test) >"$LOGS/$role.log" 2>&1
  rc=$?
  echo "$role $rc $(( $(date +%s) - start ))" >>"$LOGS/results"
  echo "molecule $role: $([ $rc -eq 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
  return $rc
}
export -f run_one
export ROOT LOGS
: >"$LOGS/results"
printf '%s\n' "${roles[@]}" | xargs -P "${HGPU_MOLECULE_JOBS:-2}" -I{} bash -c 'run_one {}'
failed=$(awk '$2 != 0 {print $1}' "$LOGS/results")
passed=$(awk '$2 == 0' "$LOGS/results" | wc -l)
for role in $failed; do
  # The failing task first (a verify failure scrolls out of the tail under destroy's output).
  echo "===== $role: failed tasks in build/molecule/$role.log"
  sed 's/\x1b\[[0-9;]*m//g' "$LOGS/$role.log" | grep -n -B 3 -A 25 -E '(fatal|failed): \[' | head -n 200
  echo "===== $role (last 60 lines of build/molecule/$role.log)"; tail -n 60 "$LOGS/$role.log"
done
total=$(wc -l <"$LOGS/results")
echo "molecule: $passed passed, $(( total - passed )) failed"
[ -z "$failed" ] && [ "$total" -eq ${#roles[@]} ]
