#!/usr/bin/env bash
# Quality gates: ansible-lint (production profile), ansible-test sanity (every test, run
# locally in per-test virtualenvs) and antsibull-changelog lint. Exits non-zero on any finding.
# Usage: tests/quality.sh   (from anywhere; uses the repo's .venv)
# Two lanes run at once, each single-threaded, so that both cores work: pylint (the longest
# sanity test) in one, ansible-lint and every other sanity test in the other. Each lane has its
# own installed copy and its own log; the logs are printed in full, one after the other.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/.venv/bin"
export PATH="$BIN:$PATH" ANSIBLE_CONFIG="$ROOT/ansible.cfg"
status=0

# ansible-test needs the collection physically at ansible_collections/<ns>/<name> (a symlink
# is resolved away), so it tests what users get: the built tarball, installed in a temporary
# folder outside the git checkout (inside it, git ls-files would hide the copy).
SANITY="$(mktemp -d /tmp/hgpu-sanity.XXXXXX)"
trap 'rm -rf "$SANITY"' EXIT
ansible-galaxy collection build --force --output-path "$SANITY" "$ROOT" >/dev/null || exit 1
for lane in pylint rest; do
  ANSIBLE_COLLECTIONS_PATH="$SANITY/$lane" ansible-galaxy collection install --offline --no-deps --force \
    -p "$SANITY/$lane" "$SANITY"/hybridgpu-fleet-*.tar.gz >/dev/null || exit 1
done
# Every sanity test runs, each in the virtualenv ansible-test builds for it from PyPI. The one
# thing this network cannot reach is the pip bootstrap script ansible-test fetches from
# ci-files.testing.ansible.com; ansible-test uses a cached copy when there is one, so we put
# our stand-in there (tests/tools/ansible_test_pip_bootstrap.py: runs pip from the pip wheel
# that PyPI serves). A real get-pip script already in the cache is left alone.
PIP_VERSION="$(python3 -c 'import re,sys; print(re.search(r"pip=.([0-9.]+).", open(sys.argv[1]).read()).group(1))' \
  "$("$BIN/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py")" || exit 1
CACHE="$HOME/.ansible/test/cache"
BOOT="$CACHE/get_pip_${PIP_VERSION//./_}.py"
mkdir -p "$CACHE"
if [ ! -e "$BOOT" ] || grep -q "hybridgpu.fleet offline pip bootstrap" "$BOOT"; then
  cp "$ROOT/tests/tools/ansible_test_pip_bootstrap.py" "$BOOT"
  ls "$CACHE"/pip-"$PIP_VERSION"-py3-none-any.whl >/dev/null 2>&1 ||
    "$BIN/pip" download --quiet --no-deps --only-binary :all: -d "$CACHE" "pip==$PIP_VERSION" || exit 1
fi
SANITY_ARGS=(sanity --local --python 3.11 --color no)
(
  rc=0
  echo "== ansible-lint --profile production"
  (cd "$ROOT" && ansible-lint --profile production --offline -q) || rc=1
  echo "== ansible-test sanity (every test but pylint)"
  (cd "$SANITY/rest/ansible_collections/hybridgpu/fleet" && ansible-test "${SANITY_ARGS[@]}" --skip-test pylint) || rc=1
  exit $rc
) >"$SANITY/rest.log" 2>&1 &
rest_pid=$!
(
  echo "== ansible-test sanity (pylint)"
  cd "$SANITY/pylint/ansible_collections/hybridgpu/fleet" && ansible-test "${SANITY_ARGS[@]}" --test pylint
) >"$SANITY/pylint.log" 2>&1
pylint_rc=$?
wait "$rest_pid"
rest_rc=$?
cat "$SANITY/rest.log" "$SANITY/pylint.log"
[ "$rest_rc" -eq 0 ] && [ "$pylint_rc" -eq 0 ] || status=1

echo "== antsibull-changelog lint"
(cd "$ROOT" && antsibull-changelog lint) || status=1

exit $status
