"""AWX objects as code (awx/*.yml), checked against the playbooks as they are on disk.

We cannot run AWX here, so this checks the structure: every template points at an existing
playbook and every playbook has a template; survey variables are inputs the playbook declares
(docs/playbook-inputs.md) with a matching type; destructive templates ask for the signed change
record; wave workflows run preflight -> NCCL baseline -> onboard -> validate -> report; the removal workflow
holds an approval node before the removal job; no playbook prompts or pauses for a person; the
playbooks a workflow chains hand their results on with set_stats. Each test lists every
offending file so they can all be fixed in one go.
"""
import ast
import glob
import os
import re

import jinja2
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWX = os.path.join(ROOT, "awx")
PLAYBOOK_DIR = os.path.join(ROOT, "playbooks")
AWX_COLLECTION = os.path.join(os.path.dirname(os.path.dirname(yaml.__file__)), "ansible_collections", "awx", "awx")
if not os.path.isdir(AWX_COLLECTION):
    import ansible_collections.awx.awx as _awx  # noqa: E402  (namespace package lookup)
    AWX_COLLECTION = list(_awx.__path__)[0]


class _Loader(yaml.SafeLoader):
    """Safe loader that reads Ansible's tags (!vault, !unsafe) as plain strings."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def load(path):
    with open(path) as fh:
        return yaml.load(fh, Loader=_Loader)


DATA = {}
for _name in ("controller", "job_templates", "workflows", "schedules"):
    DATA.update(load(os.path.join(AWX, _name + ".yml")))

TEMPLATES = DATA["awx_job_templates"]
BY_NAME = {t["name"]: t for t in TEMPLATES}
PLAYBOOKS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PLAYBOOK_DIR, "*.yml")))
CHANGE_VARS = DATA["awx_change_record_vars"]


def _module(task):
    """(short module name, args) of a task dict, or (None, None)."""
    skip = {"name", "when", "loop", "loop_control", "vars", "register", "tags", "become", "become_user",
            "delegate_to", "run_once", "changed_when", "failed_when", "ignore_errors", "no_log", "notify",
            "environment", "args", "check_mode", "diff", "until", "retries", "delay", "with_items", "listen",
            "module_defaults", "any_errors_fatal", "throttle", "timeout", "connection", "ignore_unreachable",
            "delegate_facts", "debugger", "collections", "async", "poll", "local_action", "action"}
    if "action" in task or "local_action" in task:
        value = task.get("action") or task.get("local_action")
        if isinstance(value, dict):
            return value.get("module", "").split(".")[-1], value
        return str(value).split()[0].split(".")[-1], {}
    for key, value in task.items():
        if key not in skip and not key.startswith("with_"):
            return key.split(".")[-1], value if isinstance(value, dict) else {"_raw": value}
    return None, None


def _role_dir(name):
    short = name.split(".")[-1] if name.startswith("hybridgpu.fleet.") or "." not in name else None
    if short is None:
        return None
    path = os.path.join(ROOT, "roles", short)
    return path if os.path.isdir(path) else None


class Walk:
    """Everything a playbook runs: its tasks, the roles it applies (with their own tasks and
    dependencies) and the playbooks it imports, gathered once."""

    def __init__(self, playbook):
        self.playbook = playbook
        self.tasks = []          # (where, task dict)
        self.plays = []          # play dicts
        self.specs = []          # (where, {option: spec}) input declarations
        self.unreadable = []     # declarations this test cannot read statically
        self.provided = set()    # variables the playbook sets itself (play, role or task vars)
        self._seen = set()
        self._playbook(os.path.join(PLAYBOOK_DIR, playbook))

    def _playbook(self, path):
        if path in self._seen or not os.path.exists(path):
            return
        self._seen.add(path)
        for play in load(path) or []:
            if "import_playbook" in play or "ansible.builtin.import_playbook" in play:
                target = play.get("import_playbook") or play.get("ansible.builtin.import_playbook")
                name = str(target).rsplit(".", maxsplit=1)[-1] if str(target).startswith("hybridgpu.fleet.") else target
                name = name if name.endswith(".yml") else name + ".yml"
                self._playbook(os.path.join(os.path.dirname(path), name))
                continue
            self.plays.append(play)
            self.provided |= set(play.get("vars") or {})
            where = os.path.relpath(path, ROOT)
            for role in play.get("roles") or []:
                if isinstance(role, dict):
                    self.provided |= set(role.get("vars") or {}) | {k for k in role if k not in ("role", "name")}
                self._role(role if isinstance(role, str) else role.get("role") or role.get("name"), "main")
            for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                self._tasks(play.get(section) or [], where)

    def _role(self, name, entry):
        key = (name, entry)
        if key in self._seen:
            return
        self._seen.add(key)
        path = _role_dir(name)
        if path is None:
            return
        spec_file = os.path.join(path, "meta", "argument_specs.yml")
        if os.path.exists(spec_file):
            specs = (load(spec_file) or {}).get("argument_specs") or {}
            if entry in specs:
                self.specs.append(("role %s (%s)" % (name, entry), specs[entry].get("options") or {}))
        meta = os.path.join(path, "meta", "main.yml")
        if os.path.exists(meta):
            for dep in (load(meta) or {}).get("dependencies") or []:
                self._role(dep if isinstance(dep, str) else dep.get("role") or dep.get("name"), "main")
        for sub in ("tasks", "handlers"):
            for tf in sorted(glob.glob(os.path.join(path, sub, "*.yml"))):
                self._tasks(load(tf) or [], os.path.relpath(tf, ROOT))

    def _tasks(self, tasks, where):
        for task in tasks:
            if not isinstance(task, dict):
                continue
            for section in ("block", "rescue", "always"):
                self._tasks(task.get(section) or [], where)
            module, args = _module(task)
            if module is None:
                continue
            self.tasks.append((where, module, args, task))
            self.provided |= set(task.get("vars") or {}) if isinstance(task.get("vars"), dict) else set()
            if module in ("import_role", "include_role"):
                self._role(args.get("name", ""), args.get("tasks_from", "main"))
            elif module == "validate_argument_spec":
                spec = args.get("argument_spec")
                if isinstance(spec, dict):
                    self.specs.append((where, spec))
                else:
                    self.unreadable.append(where)

    def inputs(self):
        merged = {}
        for dummy, spec in self.specs:
            merged.update(spec)
        return merged

    def uses(self, module):
        return [where for where, mod, dummy, dummy in self.tasks if mod == module]


WALKS = {p: Walk(p) for p in PLAYBOOKS}


def _playbook_of(template):
    return os.path.basename(template["playbook"])


def _survey(obj):
    return (obj.get("survey_spec") or {}).get("spec") or [] if obj.get("survey_enabled") else []


def _fail(problems, head):
    if problems:
        pytest.fail(head + ":\n  " + "\n  ".join(problems))


# --- the data itself ---------------------------------------------------------------------

# Keys of ours that awx_apply.yml resolves before calling awx.awx (never sent to AWX).
OUR_KEYS = {"survey_from_template"}


def _options(module):
    path = os.path.join(AWX_COLLECTION, "plugins", "modules", module + ".py")
    tree = ast.parse(open(path).read())
    doc = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", None) == "DOCUMENTATION")
    return yaml.safe_load(doc)["options"]


@pytest.mark.parametrize("key, module, many", [
    ("awx_organization", "organization", False), ("awx_execution_environment", "execution_environment", False),
    ("awx_project", "project", False), ("awx_inventory", "inventory", False),
    ("awx_inventory_source", "inventory_source", False), ("awx_job_templates", "job_template", True),
    ("awx_approval_workflows", "workflow_job_template", True), ("awx_schedules", "schedule", True),
    ("awx_credential_types", "credential_type", True)])
def test_definitions_are_awx_module_parameters(key, module, many):
    options = _options(module)
    items = DATA[key] if many else [DATA[key]]
    bad = ["%s: %s is not an option of awx.awx.%s" % (item.get("name"), k, module)
           for item in items for k in item if k not in options and k not in OUR_KEYS]
    _fail(bad, "awx/ definitions use unknown parameters")
    for item in items:
        assert item.get("name"), "%s: an item has no name" % key


def test_survey_questions_are_well_formed():
    types = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
    bad = []
    for obj in TEMPLATES + DATA["awx_approval_workflows"]:
        names = [q.get("variable") for q in _survey(obj)]
        if len(names) != len(set(names)):
            bad.append("%s: a survey variable is asked twice" % obj["name"])
        for q in _survey(obj):
            for field in ("question_name", "variable", "type"):
                if not q.get(field):
                    bad.append("%s: a question has no %s" % (obj["name"], field))
            if q.get("type") not in types:
                bad.append("%s: %s has unknown type %r" % (obj["name"], q.get("variable"), q.get("type")))
            if q.get("type") in ("multiplechoice", "multiselect") and not q.get("choices"):
                bad.append("%s: %s has no choices" % (obj["name"], q.get("variable")))
    _fail(bad, "malformed surveys")


def test_the_drill_survey_offers_exactly_the_drills_the_collection_has():
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import drills
    question = next(q for q in _survey(BY_NAME["hybridgpu overflow drill"]) if q["variable"] == "overflow_drill_failures")
    assert question["type"] == "multiselect" and not question["required"]
    assert question["choices"] == list(drills.SAFE_NAMES + drills.UNSAFE_NAMES)


# --- templates and playbooks -------------------------------------------------------------

def test_every_template_points_at_an_existing_playbook():
    bad = ["%s -> %s (no such playbook)" % (t["name"], t["playbook"]) for t in TEMPLATES
           if not os.path.exists(os.path.join(ROOT, t["playbook"])) or not t["playbook"].startswith("playbooks/")]
    _fail(bad, "job templates point at missing playbooks")


def test_every_playbook_has_one_template():
    templated = [_playbook_of(t) for t in TEMPLATES]
    bad = ["playbooks/%s has no job template in awx/job_templates.yml" % p for p in PLAYBOOKS
           if p not in DATA["awx_not_templated_playbooks"] and p not in templated]
    bad += ["%s has %d templates" % (p, templated.count(p)) for p in set(templated) if templated.count(p) > 1]
    _fail(bad, "playbooks without exactly one job template")


def test_every_playbook_declares_its_inputs():
    bad = []
    for p, walk in sorted(WALKS.items()):
        if not walk.specs:
            bad.append("playbooks/%s declares no inputs (add an ansible.builtin.validate_argument_spec task "
                       "or apply roles with meta/argument_specs.yml; docs/playbook-inputs.md)" % p)
        bad += ["%s: argument_spec is not inline, so its inputs cannot be read" % w for w in walk.unreadable]
        for where, spec in walk.specs:
            for opt, s in spec.items():
                if not isinstance(s, dict) or not s.get("description"):
                    bad.append("%s: input %s has no description" % (where, opt))
                if isinstance(s, dict) and s.get("type", "str") not in ("str", "int", "float", "bool", "list",
                                                                        "dict", "path", "raw"):
                    bad.append("%s: input %s has unknown type %r" % (where, opt, s.get("type")))
    _fail(bad, "playbooks whose inputs are not declared")


def test_no_playbook_waits_for_a_person():
    bad = []
    for p, walk in sorted(WALKS.items()):
        for play in walk.plays:
            if play.get("vars_prompt"):
                bad.append("playbooks/%s: play %r has vars_prompt" % (p, play.get("name")))
        for where, module, args, dummy in walk.tasks:
            if module == "pause" and not (args.get("seconds") or args.get("minutes")):
                bad.append("%s: pause without seconds/minutes waits for a person" % where)
    _fail(bad, "playbooks that wait for a person")


ANSIBLE_TYPE_TO_SURVEY = {
    "str": {"text", "textarea", "password", "multiplechoice"},
    "path": {"text", "textarea"},
    "raw": {"text", "textarea", "password", "integer", "float", "multiplechoice"},
    "int": {"integer"},
    "float": {"float", "integer"},
    "bool": {"multiplechoice"},
    "list": {"multiselect"},
    "dict": set(),
}


def _check_question(owner, q, spec):
    """Problems with one survey question against the declared input `spec`."""
    var, qtype = q["variable"], q["type"]
    if spec is None:
        return ["%s: survey asks %s, which the playbook does not declare" % (owner, var)]
    atype = spec.get("type", "str")
    out = []
    if qtype not in ANSIBLE_TYPE_TO_SURVEY[atype]:
        out.append("%s: %s is %s in the playbook but %s in the survey" % (owner, var, atype, qtype))
    choices = q.get("choices")
    if isinstance(choices, str):
        choices = choices.splitlines()
    if atype == "bool" and qtype == "multiplechoice" and sorted(choices or []) != ["false", "true"]:
        out.append("%s: bool %s must offer exactly true/false" % (owner, var))
    allowed = spec.get("choices")
    if allowed and qtype in ("multiplechoice", "multiselect") and not set(choices or []) <= {str(c) for c in allowed}:
        out.append("%s: %s offers %s outside the declared choices %s" % (owner, var, choices, allowed))
    if allowed and qtype not in ("multiplechoice", "multiselect"):
        out.append("%s: %s has declared choices, so the survey must be a choice" % (owner, var))
    if spec.get("no_log") and qtype != "password":
        out.append("%s: %s is no_log in the playbook, so the survey must be a password" % (owner, var))
    if spec.get("required") and not q.get("required"):
        out.append("%s: %s is required by the playbook but optional in the survey" % (owner, var))
    return out


def test_survey_variables_match_declared_inputs():
    bad = []
    for t in TEMPLATES:
        walk = WALKS.get(_playbook_of(t))
        if walk is None:
            continue  # reported by test_every_template_points_at_an_existing_playbook
        inputs = walk.inputs()
        asked = {q["variable"] for q in _survey(t)}
        for q in _survey(t):
            bad += _check_question(t["name"], q, inputs.get(q["variable"]))
        for var in (t.get("extra_vars") or {}):
            if var not in inputs:
                bad.append("%s: extra_vars sets %s, which the playbook does not declare" % (t["name"], var))
        for opt, spec in inputs.items():
            if isinstance(spec, dict) and spec.get("required") and "default" not in spec \
                    and opt not in asked and opt not in (t.get("extra_vars") or {}) and opt not in INVENTORY_VARS \
                    and opt not in walk.provided:
                bad.append("%s: the playbook requires %s but the template neither asks nor sets it"
                           % (t["name"], opt))
    _fail(bad, "surveys that do not match the playbooks' declared inputs")


def _inventory_vars():
    """Variables the AWX inventory (inventories/example) sets for every host or group."""
    found = set()
    for path in glob.glob(os.path.join(ROOT, "inventories", "example", "group_vars", "**", "*.yml"), recursive=True):
        found |= set(load(path) or {})
    return found


INVENTORY_VARS = _inventory_vars()


def _destructive(t):
    p = _playbook_of(t)
    walk = WALKS.get(p)
    return p in DATA["awx_destructive_playbooks"] or bool(walk and walk.uses("change_approval"))


def test_destructive_templates_require_the_change_record():
    destructive = [t for t in TEMPLATES if _destructive(t)]
    assert destructive, "no destructive template found (remove.yml, upgrade_rehearsal.yml)"
    bad = []
    for t in destructive:
        questions = {q["variable"]: q for q in _survey(t)}
        for var in CHANGE_VARS.values():
            q = questions.get(var)
            if q is None or not q.get("required") or q.get("type") != "textarea" or q.get("default"):
                bad.append("%s: survey must ask for %s (required textarea, no default)" % (t["name"], var))
        if t.get("ask_variables_on_launch"):
            bad.append("%s: free extra vars on launch would bypass the survey" % t["name"])
    _fail(bad, "destructive templates that do not require the change record")


def test_destructive_playbooks_check_the_signed_record():
    """The approval node in AWX gates the job; the job must still verify the signature."""
    bad = []
    for p in DATA["awx_destructive_playbooks"]:
        walk = WALKS.get(p)
        if walk is None:
            bad.append("awx_destructive_playbooks names playbooks/%s, which does not exist" % p)
            continue
        if not walk.uses("change_approval"):
            bad.append("playbooks/%s never runs hybridgpu.fleet.change_approval" % p)
        inputs = walk.inputs()
        for var in CHANGE_VARS.values():
            if var not in inputs:
                bad.append("playbooks/%s does not declare the input %s" % (p, var))
    _fail(bad, "destructive playbooks that do not verify the change record")


# The change record's action each destructive playbook asks for (boundary.ACTIONS); revoking a
# member removes them from the boundary, so it runs under `remove`.
APPROVAL_ACTIONS = {"remove.yml": "remove", "upgrade_rehearsal.yml": "driver_upgrade", "revoke_member.yml": "revoke_member"}
# Modules that read or check only: the tasks allowed before the approval.
READ_ONLY = {"validate_argument_spec", "assert", "fail", "debug", "set_fact", "stat", "include_vars",
             "access_boundary"}


def _in_order(tasks):
    """A task list flattened in the order it runs (block, rescue, always)."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        if "block" in task:
            for section in ("block", "rescue", "always"):
                yield from _in_order(task.get(section))
        else:
            yield task


def _play_steps(play):
    """(name, module, task) of what a play runs, in order: pre_tasks, roles, tasks, post_tasks."""
    for task in _in_order(play.get("pre_tasks")):
        yield task.get("name"), _module(task)[0], task
    for role in play.get("roles") or []:
        yield "role %s" % (role if isinstance(role, str) else role.get("role") or role.get("name")), "role", {}
    for section in ("tasks", "post_tasks"):
        for task in _in_order(play.get(section)):
            yield task.get("name"), _module(task)[0], task


def _approval_problems(playbook, plays):
    """What is wrong with where and how a playbook runs change_approval."""
    problems = []
    before = []
    for play in plays:
        steps = list(_play_steps(play))
        approvals = [i for i, (dummy, module, dummy2) in enumerate(steps) if module == "change_approval"]
        if not approvals:
            before += [(name, module) for name, module, dummy in steps if module not in READ_ONLY]
            continue
        first = approvals[0]
        before += [(name, module) for name, module, dummy in steps[:first] if module not in READ_ONLY]
        task = steps[first][2]
        args = task[next(k for k in task if k.split(".")[-1] == "change_approval")] or {}
        if args.get("action") != APPROVAL_ACTIONS.get(playbook):
            problems.append("%s: change_approval checks action %r, the playbook does %r"
                            % (playbook, args.get("action"), APPROVAL_ACTIONS.get(playbook)))
        if "ansible_play_hosts_all" not in str(args.get("targets")):
            problems.append("%s: change_approval must check the play's hosts as targets, not %r"
                            % (playbook, args.get("targets")))
        if task.get("ignore_errors") or "failed_when" in task:
            problems.append("%s: a failed approval must stop the play (no ignore_errors or failed_when)" % playbook)
        if not play.get("any_errors_fatal"):
            problems.append("%s: the approving play must set any_errors_fatal" % playbook)
        tagged_later = [name for name, dummy, t in steps[first + 1:] if t.get("tags")]
        if tagged_later and "always" not in (task.get("tags") or []):
            problems.append("%s: change_approval is not tagged always, yet later tasks are tagged (%s): "
                            "--tags would skip the approval" % (playbook, tagged_later[0]))
        break
    else:
        problems.append("%s: no play runs change_approval" % playbook)
    for name, module in before:
        problems.append("%s: %r (%s) runs before the approval and may change state" % (playbook, name, module))
    return problems


def test_destructive_playbooks_approve_first_with_their_action():
    """change_approval, with the playbook's action and its hosts, runs before any task that can
    change state (only checks and reads come before it)."""
    assert sorted(APPROVAL_ACTIONS) == sorted(DATA["awx_destructive_playbooks"]), \
        "a destructive playbook without an expected action here: add it to APPROVAL_ACTIONS"
    bad = []
    for playbook in DATA["awx_destructive_playbooks"]:
        bad += _approval_problems(playbook, load(os.path.join(PLAYBOOK_DIR, playbook)) or [])
    _fail(bad, "destructive playbooks that do not approve first")


@pytest.mark.parametrize("change, expect", [
    (lambda plays: plays[0]["tasks"].insert(0, {"name": "Cordon", "hybridgpu.fleet.k8s_drain": {"state": "cordon"}}),
     "'Cordon' (k8s_drain) runs before the approval"),
    (lambda plays: plays[0]["tasks"].insert(0, {"block": [{"name": "Reboot", "ansible.builtin.reboot": {}}]}),
     "'Reboot' (reboot) runs before the approval"),
    (lambda plays: plays[0].setdefault("roles", []).append("hybridgpu.fleet.node_removal"),
     "'role hybridgpu.fleet.node_removal' (role) runs before the approval"),
    (lambda plays: next(t for t in plays[0]["tasks"] if "hybridgpu.fleet.change_approval" in t)
     ["hybridgpu.fleet.change_approval"].update(action="drain"),
     "checks action 'drain', the playbook does 'remove'"),
    (lambda plays: next(t for t in plays[0]["tasks"] if "hybridgpu.fleet.change_approval" in t)
     .update(ignore_errors=True), "a failed approval must stop the play"),
    (lambda plays: [t for t in plays[0]["tasks"] if "hybridgpu.fleet.change_approval" in t][0].update(tags=["x"])
     or plays[0]["tasks"][-1].update(tags=["y"]), "--tags would skip the approval"),
    (lambda plays: plays[0]["tasks"].remove(
        next(t for t in plays[0]["tasks"] if "hybridgpu.fleet.change_approval" in t)),
     "no play runs change_approval"),
])
def test_the_approval_order_check_catches(change, expect):
    plays = load(os.path.join(PLAYBOOK_DIR, "remove.yml"))
    assert _approval_problems("remove.yml", plays) == []
    change(plays)
    assert any(expect in problem for problem in _approval_problems("remove.yml", plays)), \
        _approval_problems("remove.yml", plays)


# --- workflows -------------------------------------------------------------------------

def _wave_nodes(wave):
    """The workflow nodes exactly as playbooks/awx_apply.yml renders them."""
    apply = load(os.path.join(PLAYBOOK_DIR, "awx_apply.yml"))
    task = next(t for t in apply[0]["tasks"] if str(t.get("name", "")).startswith("Wave workflows"))
    text = jinja2.Environment().from_string(task["vars"]["awx_apply_wave_nodes"]).render(
        awx_wave_steps=DATA["awx_wave_steps"], awx_organization=DATA["awx_organization"], item=wave)
    return yaml.safe_load(text)


def _chain(nodes):
    """Identifiers from the single root along success edges; fails on any other shape."""
    by_id = {n["identifier"]: n for n in nodes}
    children = {i: [c["identifier"] for c in ((n.get("related") or {}).get("success_nodes") or [])]
                for i, n in by_id.items()}
    for i, n in by_id.items():
        rel = n.get("related") or {}
        assert not rel.get("failure_nodes") and not rel.get("always_nodes"), \
            "%s: only success edges may lead on" % i
    parents = {c for cs in children.values() for c in cs}
    roots = [i for i in by_id if i not in parents]
    assert len(roots) == 1, "workflow must have one start node, has %s" % roots
    order, cur = [], roots[0]
    while cur:
        order.append(cur)
        assert len(children[cur]) <= 1, "%s branches" % cur
        cur = children[cur][0] if children[cur] else None
    assert sorted(order) == sorted(by_id), "nodes not on the chain: %s" % (set(by_id) - set(order))
    return [by_id[i] for i in order]


@pytest.mark.parametrize("wave", DATA["awx_waves"])
def test_wave_workflow_runs_preflight_baseline_onboard_validate_report(wave):
    chain = _chain(_wave_nodes(wave))
    playbooks = [_playbook_of(BY_NAME[n["unified_job_template"]["name"]]) for n in chain]
    assert [p[:-4] for p in playbooks] == ["preflight", "baseline", "onboard", "validate", "wave_record"], playbooks
    bad = []
    for n in chain:
        t = BY_NAME[n["unified_job_template"]["name"]]
        assert t.get("ask_limit_on_launch"), "%s must accept the wave's limit" % t["name"]
        walk = WALKS.get(_playbook_of(t))
        for var, value in (n.get("extra_data") or {}).items():
            assert value == wave
            if walk is not None and var not in walk.inputs():
                bad.append("playbooks/%s selects hosts with %s but does not declare it" % (_playbook_of(t), var))
    _fail(bad, "wave variables the playbooks do not declare")


def test_waves_are_groups_of_the_example_inventory():
    inv = load(os.path.join(ROOT, "inventories", "example", "hosts.yml"))
    groups = set()

    def walk(name, body):
        groups.add(name)
        for child, sub in ((body or {}).get("children") or {}).items():
            walk(child, sub)
    walk("all", inv["all"])
    waves = {g for g in groups if re.match(r"^wave\d+$", g)}
    assert set(DATA["awx_waves"]) == waves, (sorted(DATA["awx_waves"]), sorted(waves))


def test_workflow_steps_hand_results_on_with_set_stats():
    bad = []
    for step in DATA["awx_wave_steps"][:-1]:
        p = _playbook_of(BY_NAME[step["template"]])
        if p in WALKS and not WALKS[p].uses("set_stats"):
            bad.append("playbooks/%s feeds the next workflow node but never calls ansible.builtin.set_stats" % p)
    _fail(bad, "workflow steps that do not hand results on")


@pytest.mark.parametrize("wf", DATA["awx_approval_workflows"], ids=lambda w: w["name"])
def test_approval_workflow_approval_comes_before_the_job(wf):
    chain = _chain(wf["workflow_nodes"])
    first, rest = chain[0], chain[1:]
    assert first["unified_job_template"]["type"] == "workflow_approval"
    assert first["unified_job_template"].get("timeout", 0) > 0, "an approval must expire"
    jobs = [n["unified_job_template"]["name"] for n in rest if n["unified_job_template"].get("type") == "job_template"]
    assert jobs == [wf["survey_from_template"]], "the approval must release exactly the job whose survey it asks"
    assert all(n["unified_job_template"].get("type") != "workflow_approval" for n in rest)
    # The workflow asks the job template's survey (awx_apply.yml copies it), so the record and
    # its signature reach the job, which verifies them.
    template = BY_NAME[wf["survey_from_template"]]
    assert _destructive(template), "%s guards a template that changes nothing" % wf["name"]
    asked = {q["variable"] for q in _survey(template) if q.get("required")}
    assert set(CHANGE_VARS.values()) <= asked


def test_every_destructive_template_has_an_approval_workflow():
    guarded = {wf["survey_from_template"] for wf in DATA["awx_approval_workflows"]}
    missing = [t["name"] for t in TEMPLATES if _destructive(t) and t["name"] not in guarded]
    assert not missing, "destructive templates without an approval workflow: %s" % missing


def test_awx_apply_copies_the_survey_of_the_guarded_template():
    """The workflow's survey is the template's, taken by name in awx_apply.yml."""
    text = open(os.path.join(ROOT, "playbooks", "awx_apply.yml")).read()
    assert "loop: \"{{ awx_approval_workflows }}\"" in text
    assert "selectattr('name', 'equalto', item.survey_from_template)" in text


def test_schedules_run_existing_templates():
    names = set(BY_NAME) | {wf["name"] for wf in DATA["awx_approval_workflows"]} | {"hybridgpu %s" % w for w in DATA["awx_waves"]}
    bad = ["%s -> %s (no such template)" % (s["name"], s["unified_job_template"]) for s in DATA["awx_schedules"]
           if s["unified_job_template"] not in names]
    bad += ["%s: rrule %r is not DTSTART:...Z RRULE:FREQ=..." % (s["name"], s["rrule"]) for s in DATA["awx_schedules"]
            if not re.match(r"^DTSTART:\d{8}T\d{6}Z RRULE:FREQ=(MINUTELY|HOURLY|DAILY|WEEKLY)(;[A-Z]+=[^; ]+)*$",
                            s["rrule"])]
    _fail(bad, "broken schedules")
    scheduled = {BY_NAME[s["unified_job_template"]]["playbook"] for s in DATA["awx_schedules"]
                 if s["unified_job_template"] in BY_NAME}
    assert any("overflow" in p for p in scheduled), "the policy-driven overflow check has no schedule"
    for s in DATA["awx_schedules"]:
        assert not _destructive(BY_NAME.get(s["unified_job_template"], {"playbook": "x"})), \
            "%s schedules a destructive job" % s["name"]


def test_launchers_cannot_choose_the_trust_root():
    """The boundary, its pinned signers and the executor are not launch answers: a survey
    asks for none of them, and no template lets the launcher pick the inventory (where
    hgpu_boundary_signers is pinned) or free extra vars."""
    bad = []
    for t in TEMPLATES:
        for q in _survey(t):
            var = q["variable"]
            if var.endswith("_boundary") or var.startswith("hgpu_boundary") or var.endswith("_executor"):
                bad.append("%s: the survey asks for %s" % (t["name"], var))
        if _destructive(t) and (t.get("ask_inventory_on_launch") or t.get("ask_variables_on_launch")):
            bad.append("%s: the launcher may choose the inventory or free extra vars" % t["name"])
    assert "hgpu_boundary_signers" in INVENTORY_VARS, "inventories/example must pin hgpu_boundary_signers"
    _fail(bad, "templates whose launcher chooses the trust root")
