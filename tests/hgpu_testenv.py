"""Paths every test layer shares. Import this (not `conftest`) from test modules:
several conftest.py files exist, and which one `import conftest` finds depends on the run."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = ROOT
COLLECTIONS = os.path.join(ROOT, ".collections")

# `ansible_collections.hybridgpu.fleet` resolves to this checkout through a symlink.
_link = os.path.join(COLLECTIONS, "ansible_collections", "hybridgpu", "fleet")
if not os.path.lexists(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink(os.path.join("..", "..", ".."), _link)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# Real tool outputs from public sources, laid beside the checkout as ../shared.
REAL_OUTPUTS = os.environ.get(
    "HGPU_REAL_OUTPUTS",
    os.path.join(os.path.dirname(ROOT), "shared", "testdata", "real-outputs"),
)


def run_module(name, args, check_mode=False, diff=False, env=None, clean_env=False):
    """One run of plugins/modules/<name>.py as a separate process, as Ansible runs it; returns
    the module's JSON result. `env` adds to the process environment, or is all of it with
    `clean_env`."""
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    proc_env = dict({} if clean_env else os.environ, PYTHONPATH=COLLECTIONS, **(env or {}))
    proc = subprocess.run([sys.executable, os.path.join(REPO, "plugins", "modules", name + ".py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True,
                          text=True, env=proc_env, timeout=60, check=False)
    return json.loads(proc.stdout)


def play_tasks(folder, tasks):
    """Run the tasks on localhost with ansible-playbook, where the interpreter for modules does
    not exist: only action plugins that run in the playbook's process can succeed. Returns each
    task's result by task name (the json callback)."""
    path = os.path.join(str(folder), "play.yml")
    with open(path, "w") as fh:
        json.dump([{"name": "Controller actions", "hosts": "localhost", "gather_facts": False, "tasks": tasks}], fh)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=/nonexistent/python", path],
                          capture_output=True, text=True, env=env, timeout=120, check=False, cwd=ROOT)
    out = json.loads(proc.stdout)
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]}


def module_on_doubles(name, fixed_args, bin_dir, state_dir):
    """run(args, check_mode=False, diff=False) for module `name` with `fixed_args` under every
    call, the command doubles in `bin_dir` first on PATH and STATE_DIR set for them; and
    run.calls(skip), the doubles' logged calls since the last read (lines of $STATE_DIR/calls
    whose first two words are not in `skip`), which it clears."""
    def run(args, check_mode=False, diff=False):
        return run_module(name, dict(fixed_args, **args), check_mode, diff,
                          env={"STATE_DIR": str(state_dir), "PATH": str(bin_dir) + os.pathsep + os.environ["PATH"]})

    def calls(skip=()):
        path = os.path.join(str(state_dir), "calls")
        lines = []
        if os.path.exists(path):
            with open(path) as fh:
                lines = fh.read().splitlines()
            os.unlink(path)
        return [ln for ln in lines if not set(ln.split()[:2]) & set(skip)]

    run.calls = calls
    return run
