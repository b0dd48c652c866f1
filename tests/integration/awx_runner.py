"""Run the AWX objects of awx/ the way AWX runs them, with ansible-runner (test-only).

AWX turns a job into an ansible-runner private data directory and calls ansible-runner; this
module does the same for the definitions under awx/, following AWX's rules (awx/main/models and
awx/main/tasks of AWX 24):

- extra vars: the template's extra_vars, then the survey defaults, then the launch answers; a
  launch answer the template does not ask for (no survey question, no ask_variables_on_launch)
  is refused on a manual launch and dropped on a workflow node, and a required question without
  an answer stops the launch. Launch values are written as ``!unsafe`` (AWX's default
  ALLOW_JINJA_IN_EXTRA_VARS=template); AWX's own awx_* variables are added.
- limit: taken from the launch (or the workflow) only when the template asks for it.
- inventory: ``ansible-inventory --list --export`` of the source (AWX's inventory sync: group
  variables stay on their groups, templates stay unrendered), written as the executable
  ``inventory/hosts`` script AWX writes; ``inventory_dir`` is therefore the job's own inventory
  folder, not the source's. Variables set on the AWX inventory itself go in with
  ``set_inventory_vars``.
- project: a copy of the project's files in ``project/`` (the job's working directory);
  collections come from ANSIBLE_COLLECTIONS_PATH as AWX sets it (the EE's installed ones).
- credentials: a Machine credential becomes ``env/ssh_key`` (ssh-agent, as AWX does) and
  ``-u <username>``; "OpenShift or Kubernetes API Bearer Token" sets K8S_AUTH_HOST,
  K8S_AUTH_API_KEY, K8S_AUTH_VERIFY_SSL and K8S_AUTH_SSL_CA_CERT (a file under env/); a custom
  credential type renders its ``injectors`` (file, env, extra_vars) with ``tower.filename``.
- workflows: nodes run along their success/failure/always edges; a job's ``set_stats`` data
  (artifact_data of the playbook_on_stats event) becomes its artifacts, and every downstream
  node gets the merged artifacts of its ancestors as extra vars, below the workflow's own extra
  vars; an approval node asks a callback (approve, deny or let it time out); a workflow fails
  when a failed node has no failure or always edge.
- schedules: the rrule must yield a next run; the schedule's extra_data is a launch answer.

With ``ee_image`` the job runs with process isolation in that image (podman), the private data
directory mounted at /runner, as AWX's execution nodes run it.
"""
import datetime
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid

import jinja2
import jinja2.sandbox
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTAINER_ROOT = "/runner"
# AWX's environment variable block list for custom credential injectors
# (awx/main/fields.py CredentialTypeInjectorField, settings.ENV_BLOCKLIST).
ENV_BLOCKLIST = {"VIRTUAL_ENV", "PATH", "PYTHONPATH", "JOB_ID", "INVENTORY_ID", "INVENTORY_SOURCE_ID",
                 "INVENTORY_UPDATE_ID", "AD_HOC_COMMAND_ID", "REST_API_URL", "REST_API_TOKEN", "MAX_EVENT_RES",
                 "CALLBACK_QUEUE", "CALLBACK_CONNECTION", "CACHE", "JOB_CALLBACK_DEBUG", "INVENTORY_HOSTVARS",
                 "AWX_HOST", "PROJECT_REVISION", "SUPERVISOR_CONFIG_PATH"}
# Collections path AWX sets for a job (RunJob.build_env): the project's requirements, then the EE's.
EE_COLLECTIONS_PATH = "/runner/requirements_collections:~/.ansible/collections:/usr/share/ansible/collections"
EE_ROLES_PATH = "/runner/requirements_roles:~/.ansible/roles:/usr/share/ansible/roles:/etc/ansible/roles"


class LaunchError(Exception):
    """AWX would answer the launch with 400: the errors by field."""

    def __init__(self, errors):
        super().__init__("launch refused: %s" % json.dumps(errors, sort_keys=True))
        self.errors = errors


def accept_launch(obj, extra_vars, limit):
    """The prompts of a launch accepted by AWX's rules for ``obj`` (a job template or a
    workflow); raises LaunchError naming each refused one."""
    prompts = {}
    if extra_vars is not None:
        prompts["extra_vars"] = extra_vars
    if limit is not None:
        prompts["limit"] = limit
    accepted, errors = accept_prompts(obj, prompts)
    if "extra_vars" not in prompts:
        # A launch without answers still has to satisfy the survey's required questions.
        errors.update(accept_variables(obj, {})[2])
        errors.pop("extra_vars", None)
    if errors:
        raise LaunchError(errors)
    return accepted


# --- definitions -------------------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """Safe loader that reads Ansible's tags (!vault, !unsafe) as plain strings."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def _load(path):
    with open(path) as fh:
        return yaml.load(fh, Loader=_Loader) or {}


class Definitions:
    """The AWX objects of a definitions folder, as AWX would hold them after awx_apply.yml."""

    FILES = ("controller", "job_templates", "workflows", "schedules")

    def __init__(self, awx_dir=None, data=None, apply_playbook=None):
        if data is None:
            data = {}
            for name in self.FILES:
                path = os.path.join(awx_dir, name + ".yml")
                if os.path.exists(path):
                    data.update(_load(path))
        self.data = data
        self.templates = {t["name"]: t for t in data.get("awx_job_templates", [])}
        self.workflows = {}
        for wf in data.get("awx_approval_workflows", []):
            template = self.templates.get(wf.get("survey_from_template"), {})
            self.workflows[wf["name"]] = dict(
                wf, survey_enabled=template.get("survey_enabled", False), survey_spec=template.get("survey_spec"))
        for wf in data.get("awx_workflows", []):
            self.workflows[wf["name"]] = wf
        if data.get("awx_waves") and data.get("awx_wave_steps"):
            for wave in data["awx_waves"]:
                self.workflows["hybridgpu %s" % wave] = {
                    "name": "hybridgpu %s" % wave, "limit": wave,
                    "workflow_nodes": wave_nodes(data, wave, apply_playbook)}
        self.schedules = {s["name"]: s for s in data.get("awx_schedules", [])}
        self.credential_types = {c["name"]: c for c in data.get("awx_credential_types", [])}


def wave_nodes(data, wave, apply_playbook=None):
    """The nodes awx_apply.yml sends for a wave workflow: its own Jinja template, rendered."""
    apply_playbook = apply_playbook or os.path.join(ROOT, "playbooks", "awx_apply.yml")
    tasks = _load(apply_playbook)[0]["tasks"]
    task = next(t for t in tasks if "awx_apply_wave_nodes" in (t.get("vars") or {}))
    text = jinja2.Environment().from_string(task["vars"]["awx_apply_wave_nodes"]).render(
        item=wave, awx_wave_steps=data["awx_wave_steps"], awx_organization=data.get("awx_organization", {}))
    return yaml.safe_load(text)


# --- AWX's prompt and survey rules -------------------------------------------------------

def _survey(template):
    if template.get("survey_enabled") and template.get("survey_spec"):
        return template["survey_spec"].get("spec") or []
    return []


def _choices(question):
    choices = question.get("choices") or []
    if isinstance(choices, str):
        choices = [c for c in choices.split("\n") if c]
    return choices


def survey_element_errors(question, data, validate_required=True):
    """SurveyJobTemplateMixin._survey_element_validation."""
    var, kind = question["variable"], question.get("type")
    if var not in data:
        # A required question with a default is answered by it (AWX fills defaults in).
        if question.get("required") and question.get("default") in (None, "") and validate_required:
            return ["'%s' value missing" % var]
        return []
    value = data[var]
    errors = []
    if kind in ("text", "textarea", "password"):
        if not isinstance(value, str):
            return ["Value %s for '%s' expected to be a string." % (value, var)]
        if "min" in question and question["min"] not in (None, "") and len(value) < int(question["min"]):
            errors.append("'%s' value %s is too small (length is %d must be at least %s)."
                          % (var, value, len(value), question["min"]))
        if "max" in question and question["max"] not in (None, "") and len(value) > int(question["max"]):
            errors.append("'%s' value %s is too large (must be no more than %s)." % (var, value, question["max"]))
    elif kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append("Value %s for '%s' expected to be an integer." % (value, var))
    elif kind == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errors.append("Value %s for '%s' expected to be a numeric type." % (value, var))
    elif kind == "multiplechoice":
        if value not in _choices(question):
            errors.append("Value %s for '%s' expected to be one of %s." % (value, var, _choices(question)))
    elif kind == "multiselect":
        if not isinstance(value, list) or any(v not in _choices(question) for v in value):
            errors.append("Value %s for '%s' expected to be a list of %s." % (value, var, _choices(question)))
    return errors


def accept_variables(template, data):
    """SurveyJobTemplateMixin._accept_or_ignore_variables: (accepted, rejected, errors)."""
    extra = dict(data)
    accepted, rejected, errors = {}, {}, {}
    survey_errors = []
    for question in _survey(template):
        key = question["variable"]
        element_errors = survey_element_errors(question, data)
        if element_errors:
            survey_errors += element_errors
            if key in extra:
                rejected[key] = extra.pop(key)
        elif key in extra:
            accepted[key] = extra.pop(key)
    if survey_errors:
        errors["variables_needed_to_start"] = survey_errors
    if template.get("ask_variables_on_launch"):
        accepted.update(extra)
        extra = {}
    own = template.get("extra_vars") or {}
    for key in [k for k in extra if k in own and own[k] == extra[k]]:
        extra.pop(key)
    if extra:
        rejected.update(extra)
        errors["extra_vars"] = ["Variables %s provided, but this template cannot accept them."
                                % ", ".join(map(str, extra))]
    return accepted, rejected, errors


def accept_prompts(template, prompts):
    """UnifiedJobTemplate._accept_or_ignore_job_kwargs for the prompts used here (extra_vars,
    limit): (accepted, errors)."""
    accepted, errors = {}, {}
    if "extra_vars" in prompts:
        ok, rejected, var_errors = accept_variables(template, prompts["extra_vars"] or {})
        accepted["extra_vars"] = ok
        errors.update(var_errors)
    if "limit" in prompts:
        if template.get("ask_limit_on_launch"):
            accepted["limit"] = prompts["limit"]
        elif prompts["limit"] != template.get("limit", ""):
            errors["limit"] = ["Field is not configured to prompt on launch."]
    return accepted, errors


def job_extra_vars(template, launch_vars):
    """SurveyJobTemplateMixin._update_unified_job_kwargs: template extra_vars, then the survey
    defaults that pass their own question, then the launch answers."""
    extra = dict(template.get("extra_vars") or {})
    for question in _survey(template):
        default = question.get("default")
        if default is None or question["variable"] in launch_vars:
            continue
        if not survey_element_errors(question, {question["variable"]: default}):
            extra[question["variable"]] = default
    extra.update(launch_vars)
    return extra


class _UnsafeText(str):
    pass


class _SafeStringDumper(yaml.SafeDumper):
    pass


_SafeStringDumper.add_representer(str, lambda d, v: d.represent_scalar("!unsafe", v))
_SafeStringDumper.add_representer(_UnsafeText, lambda d, v: d.represent_scalar("!unsafe", v))


def safe_dump(extra_vars, safe_dict):
    """awx.main.utils.safe_yaml.safe_dump: a key-value pair identical to the template's own is
    written as is; everything else with every string marked !unsafe."""
    parts = []
    for key, value in extra_vars.items():
        if key in safe_dict and safe_dict[key] == value:
            parts.append(yaml.safe_dump({key: value}, default_flow_style=False, allow_unicode=True))
        else:
            parts.append(yaml.dump({key: value}, Dumper=_SafeStringDumper, default_flow_style=False,
                                   allow_unicode=True))
    return "".join(parts)


# --- credentials -------------------------------------------------------------------------

class Credential:
    """A credential as AWX holds it: a type (``ssh`` for Machine, ``kubernetes_bearer_token``,
    or the name of a custom credential type) and its inputs."""

    def __init__(self, name, kind, **inputs):
        self.name, self.kind, self.inputs = name, kind, inputs


class _Namespace:
    pass


def to_container_path(path, private_data_dir, isolated):
    if not isolated:
        return path
    return os.path.join(CONTAINER_ROOT, os.path.relpath(path, private_data_dir))


def _private_file(private_data_dir, data):
    env_dir = os.path.join(private_data_dir, "env")
    os.makedirs(env_dir, exist_ok=True)
    handle, path = tempfile.mkstemp(dir=env_dir)
    with os.fdopen(handle, "w") as fh:
        fh.write(data)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    return path


def inject_credentials(credentials, definitions, private_data_dir, isolated):
    """Environment, command-line arguments and files for the job's credentials, as AWX builds
    them (RunJob.build_private_data_files, build_args, build_env; CredentialType.inject_credential)."""
    env, args = {}, []
    for cred in credentials:
        if cred.kind == "ssh":
            key = cred.inputs.get("ssh_key_data")
            if key:
                if "OPENSSH PRIVATE KEY" in key and not key.endswith("\n"):
                    key += "\n"
                os.makedirs(os.path.join(private_data_dir, "env"), exist_ok=True)
                path = os.path.join(private_data_dir, "env", "ssh_key")
                with open(path, "w") as fh:
                    fh.write(key)
                os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
            if cred.inputs.get("username"):
                args += ["-u", cred.inputs["username"]]
            if cred.inputs.get("become_method"):
                args += ["--become-method", cred.inputs["become_method"]]
            if cred.inputs.get("become_username"):
                args += ["--become-user", cred.inputs["become_username"]]
        elif cred.kind == "kubernetes_bearer_token":
            env["K8S_AUTH_HOST"] = cred.inputs.get("host", "")
            env["K8S_AUTH_API_KEY"] = cred.inputs.get("bearer_token", "")
            if cred.inputs.get("verify_ssl") and "ssl_ca_cert" in cred.inputs:
                env["K8S_AUTH_VERIFY_SSL"] = "True"
                path = _private_file(private_data_dir, cred.inputs["ssl_ca_cert"])
                env["K8S_AUTH_SSL_CA_CERT"] = to_container_path(path, private_data_dir, isolated)
            else:
                env["K8S_AUTH_VERIFY_SSL"] = "False"
        else:
            ctype = definitions.credential_types.get(cred.kind)
            if ctype is None:
                raise LaunchError({"credentials": ["no credential type %r" % cred.kind]})
            e, a = _inject_custom(ctype, cred, private_data_dir, isolated)
            env.update(e)
            args += a
    return env, args


def _inject_custom(ctype, cred, private_data_dir, isolated):
    tower = _Namespace()
    namespace = {"tower": tower}
    for field in (ctype.get("inputs") or {}).get("fields", []):
        if field["id"] in cred.inputs:
            namespace[field["id"]] = cred.inputs[field["id"]]
        elif field.get("type") == "boolean":
            namespace[field["id"]] = field.get("default", False)
        elif "default" in field:
            namespace[field["id"]] = field["default"]
    for field in (ctype.get("inputs") or {}).get("required", []):
        if field not in cred.inputs:
            raise LaunchError({"credentials": ["%s: %s is required" % (cred.name, field)]})
    injectors = ctype.get("injectors") or {}
    sandbox = jinja2.sandbox.ImmutableSandboxedEnvironment()
    for label, tmpl in (injectors.get("file") or {}).items():
        path = _private_file(private_data_dir, sandbox.from_string(tmpl).render(**namespace))
        container_path = to_container_path(path, private_data_dir, isolated)
        if "." not in label:
            tower.filename = container_path
        else:
            if not hasattr(tower, "filename"):
                tower.filename = _Namespace()
            setattr(tower.filename, label.split(".", 1)[1], container_path)
    env = {}
    for var, tmpl in (injectors.get("env") or {}).items():
        if var.startswith("ANSIBLE_") or var in ENV_BLOCKLIST:
            raise LaunchError({"injectors": ["Environment variable %s may affect Ansible configuration so its use "
                                             "is not allowed in credentials." % var]})
        env[var] = sandbox.from_string(tmpl).render(**namespace)
    args = []

    def build(node):
        if isinstance(node, dict):
            return dict((build(k), build(v)) for k, v in node.items())
        if isinstance(node, list):
            return [build(x) for x in node]
        if isinstance(node, str):
            return sandbox.from_string(node).render(**namespace)
        return node
    extra = build(injectors.get("extra_vars") or {})
    if extra:
        path = _private_file(private_data_dir, safe_dump(extra, extra))
        args += ["-e", "@%s" % to_container_path(path, private_data_dir, isolated)]
    return env, args


# --- jobs --------------------------------------------------------------------------------

class Job:
    """One finished job: status (successful, failed, error), rc, artifacts, events, stdout."""

    def __init__(self, template, ident, private_data_dir, extra_vars, limit, env, args):
        self.template, self.ident, self.private_data_dir = template, ident, private_data_dir
        self.extra_vars, self.limit, self.env, self.args = extra_vars, limit, env, args
        self.status, self.rc, self.events, self.stdout, self.artifacts = None, None, [], "", {}

    @property
    def failed(self):
        return self.status != "successful"

    def recap(self):
        """{host: {ok, changed, failures, dark, skipped, ...}} from the playbook_on_stats event."""
        stats = next((e["event_data"] for e in self.events if e.get("event") == "playbook_on_stats"), {})
        hosts = {}
        for key in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"):
            for host, count in (stats.get(key) or {}).items():
                hosts.setdefault(host, {})[key] = count
        return hosts

    def __repr__(self):
        return "<Job %s %s rc=%s>" % (self.template["name"], self.status, self.rc)


class Site:
    """An AWX stand-in: definitions, a project folder, an inventory source, named credentials,
    and where jobs run (the host, or an EE image with process isolation)."""

    def __init__(self, definitions, project_dir, inventory_source, credentials, work_dir, ee_image=None,
                 container_options=(), envvars=None, user="admin", inventory_drop_vars=(), project_files=None,
                 collections_path=None, timeout=900, inventory_drop_hosts=()):
        self.defs = definitions
        self.project_dir, self.inventory_source = project_dir, inventory_source
        self.credentials = credentials
        self.work_dir, self.ee_image = work_dir, ee_image
        self.container_options = list(container_options)
        self.envvars = dict(envvars or {})
        self.user = user
        self.inventory_drop_vars = set(inventory_drop_vars)
        self.inventory_drop_hosts = set(inventory_drop_hosts)
        self.project_files = project_files
        self.collections_path = collections_path
        self.timeout = timeout
        self.jobs = []
        self._inventory = None
        self._next_id = 1
        os.makedirs(work_dir, exist_ok=True)

    # AWX's inventory sync: ansible-inventory --list of the source, stored; each job gets it
    # as an executable script.
    def sync_inventory(self):
        exe = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
        env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_WARNING="False")
        res = subprocess.run([exe, "-i", self.inventory_source, "--list", "--export"], capture_output=True, text=True,
                             check=False, cwd=self.project_dir, env=env, timeout=300)
        if res.returncode:
            raise RuntimeError("inventory sync failed: %s" % res.stderr[-2000:])
        data = json.loads(res.stdout)
        for host_vars in (data.get("_meta") or {}).get("hostvars", {}).values():
            for var in self.inventory_drop_vars:
                host_vars.pop(var, None)
        for name, group in data.items():
            if name != "_meta" and isinstance(group, dict):
                for var in self.inventory_drop_vars:
                    (group.get("vars") or {}).pop(var, None)
                if self.inventory_drop_hosts and "hosts" in group:
                    group["hosts"] = [h for h in group["hosts"] if h not in self.inventory_drop_hosts]
        for host in self.inventory_drop_hosts:
            (data.get("_meta") or {}).get("hostvars", {}).pop(host, None)
        self._inventory = data
        return data

    def set_inventory_vars(self, **values):
        """Variables of the AWX inventory itself (the group all), as an administrator sets them."""
        if self._inventory is None:
            self.sync_inventory()
        self._inventory.setdefault("all", {}).setdefault("vars", {}).update(values)

    def _new_id(self):
        job_id = self._next_id
        self._next_id += 1
        return job_id

    def launch(self, name, extra_vars=None, limit=None, **kw):
        """Launch a job template or a workflow by name, as a person would (prompts checked)."""
        if name in self.defs.workflows:
            return self.launch_workflow(name, extra_vars=extra_vars, limit=limit, **kw)
        return self.launch_job(name, extra_vars=extra_vars, limit=limit, **kw)

    def launch_job(self, name, extra_vars=None, limit=None, launch_type="manual", awx_vars=None):
        template = self.defs.templates[name]
        accepted = accept_launch(template, extra_vars, limit)
        user = None if launch_type == "scheduled" else self.user
        return self._run(template, accepted.get("extra_vars", {}), accepted.get("limit", template.get("limit")),
                         launch_type, awx_vars or {}, user)

    def _run(self, template, launch_vars, limit, launch_type, awx_vars, user):
        import ansible_runner
        job_id = self._new_id()
        ident = "job-%d" % job_id
        pdd = os.path.join(self.work_dir, "%s-%s" % (ident, uuid.uuid4().hex[:6]))
        isolated = self.ee_image is not None
        os.makedirs(os.path.join(pdd, "env"))
        self._copy_project(os.path.join(pdd, "project"))
        if self._inventory is None:
            self.sync_inventory()
        inv_dir = os.path.join(pdd, "inventory")
        os.makedirs(inv_dir)
        script = os.path.join(inv_dir, "hosts")
        with open(script, "w") as fh:
            fh.write("#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n" % json.dumps(self._inventory))
        os.chmod(script, stat.S_IRUSR | stat.S_IXUSR | stat.S_IWUSR)

        names = template.get("credentials") or list((self.defs.data.get("awx_credentials") or {}).values())
        missing = [n for n in names if n not in self.credentials]
        if missing:
            raise LaunchError({"credentials": ["no credential named %s" % ", ".join(missing)]})
        creds = [self.credentials[n] for n in names]
        cred_env, cred_args = inject_credentials(creds, self.defs, pdd, isolated)

        extra = job_extra_vars(template, launch_vars)
        awx = {"awx_job_id": job_id, "awx_job_launch_type": launch_type, "awx_job_template_name": template["name"],
               "awx_inventory_name": self.defs.data.get("awx_inventory", {}).get("name", "inventory"),
               "awx_project_revision": "", "awx_project_scm_branch": ""}
        if user:
            # A scheduled job (and every job of a scheduled workflow) has no launching user.
            awx.update({"awx_user_id": 1, "awx_user_name": user})
        awx.update(awx_vars)
        for key, value in list(awx.items()):
            awx["tower_" + key[len("awx_"):]] = value
        extra.update(awx)
        with open(os.path.join(pdd, "env", "extravars"), "w") as fh:
            fh.write(safe_dump(extra, dict(template.get("extra_vars") or {}, **awx)))

        env = dict(self.envvars)
        if not isolated:
            # On the host: the ansible-playbook beside this interpreter.
            env.setdefault("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        env.update(cred_env)
        env.update({"JOB_ID": str(job_id), "AWX_HOST": "https://awx.test", "ANSIBLE_RETRY_FILES_ENABLED": "False",
                    "ANSIBLE_COLLECTIONS_PATH": self.collections_path or EE_COLLECTIONS_PATH,
                    "ANSIBLE_ROLES_PATH": EE_ROLES_PATH,
                    "ANSIBLE_FORCE_COLOR": "False", "ANSIBLE_NOCOLOR": "1"})
        job = Job(template, ident, pdd, extra, limit, env, cred_args)
        kwargs = dict(private_data_dir=pdd, playbook=template["playbook"], ident=ident, envvars=env,
                      cmdline=" ".join(_quote(a) for a in cred_args) or None, quiet=True,
                      settings={"suppress_ansible_output": True, "job_timeout": self.timeout})
        if limit:
            kwargs["limit"] = limit
        if isolated:
            # AWX's own container options come first (build_execution_environment_params of
            # awx/main/tasks/jobs.py): the job runs as root in the EE, which under AWX's rootless
            # podman is the execution node's awx user, the owner of the private data directory.
            kwargs.update(process_isolation=True, process_isolation_executable="podman",
                          container_image=self.ee_image, container_options=["--user=root"] + self.container_options)
        if isolated:
            # ansible-runner's command-line automounts (the caller's ~/.ssh, SSH_AUTH_SOCK) are not
            # part of an AWX job: the container sees only what the credentials inject.
            import ansible_runner.config._base as runner_base
            saved, runner_base.cli_mounts = runner_base.cli_mounts, lambda: []
            try:
                result = ansible_runner.run(**kwargs)
            finally:
                runner_base.cli_mounts = saved
        else:
            # AWX applies the project's ansible.cfg (the job's working directory), never one the
            # launching process names: a job on the host does not inherit this ANSIBLE_CONFIG.
            saved_config = os.environ.pop("ANSIBLE_CONFIG", None)
            try:
                result = ansible_runner.run(**kwargs)
            finally:
                if saved_config is not None:
                    os.environ["ANSIBLE_CONFIG"] = saved_config
        job.status, job.rc = result.status, result.rc
        job.events = list(result.events)
        job.stdout = "".join(e.get("stdout", "") + "\n" for e in job.events if e.get("stdout"))
        stats = next((e for e in job.events if e.get("event") == "playbook_on_stats"), None)
        if stats:
            job.artifacts = (stats.get("event_data") or {}).get("artifact_data") or {}
        self.jobs.append(job)
        return job

    def _copy_project(self, dest):
        if self.project_files is None:
            shutil.copytree(self.project_dir, dest, symlinks=True)
            return
        for rel in self.project_files:
            src = os.path.join(self.project_dir, rel)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(dest, rel), symlinks=True)
            else:
                os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
                shutil.copy2(src, os.path.join(dest, rel))

    # --- workflows --------------------------------------------------------------------

    def launch_workflow(self, name, extra_vars=None, limit=None, approve=None, launch_type="manual",
                        awx_vars=None):
        """Run a workflow. ``approve(node, workflow_extra_vars)`` answers an approval node:
        True approves, False denies, None lets it time out (both fail the node)."""
        wf = self.defs.workflows[name]
        accepted = accept_launch(wf, extra_vars, limit)
        wf_vars = job_extra_vars(wf, accepted.get("extra_vars", {}))
        wf_limit = accepted.get("limit", wf.get("limit"))
        run = WorkflowRun(wf, wf_vars)
        wf_awx = {"awx_workflow_job_id": self._new_id(), "awx_workflow_job_name": wf["name"],
                  "awx_workflow_job_launch_type": launch_type}
        wf_awx.update(awx_vars or {})
        nodes = {n["identifier"]: n for n in wf["workflow_nodes"]}
        parents = {i: [] for i in nodes}
        for i, n in nodes.items():
            for edge in ("success_nodes", "failure_nodes", "always_nodes"):
                for child in ((n.get("related") or {}).get(edge) or []):
                    parents[child["identifier"]].append((i, edge))
        skipped = set()
        progressed = True
        while progressed:
            progressed = False
            for ident, node in nodes.items():
                if ident in run.nodes or ident in skipped:
                    continue
                if any(p not in run.nodes and p not in skipped for p, edge in parents[ident]):
                    continue
                fired = not parents[ident] or any(p in run.nodes and _fires(run.nodes[p].status, edge)
                                                  for p, edge in parents[ident])
                progressed = True
                if not fired:
                    skipped.add(ident)
                    continue
                aa = {}
                for parent, edge in parents[ident]:
                    if parent in run.nodes:
                        aa.update(run.nodes[parent].ancestor_artifacts)
                        if run.nodes[parent].job is not None:
                            aa.update(run.nodes[parent].job.artifacts)
                run.nodes[ident] = self._run_node(node, run, aa, wf_limit, wf_awx, launch_type, approve)
                run.order.append(ident)
        run.skipped = sorted(skipped)
        run.status = "successful"
        for ident, result in run.nodes.items():
            rel = nodes[ident].get("related") or {}
            if result.status != "successful" and not rel.get("failure_nodes") and not rel.get("always_nodes"):
                run.status = "failed"
        return run

    def _run_node(self, node, run, aa, wf_limit, wf_awx, launch_type, approve):
        ujt = node["unified_job_template"]
        result = NodeRun(node["identifier"], aa)
        if ujt.get("type") == "workflow_approval":
            answer = approve(node, dict(run.extra_vars)) if approve else None
            result.approval = {True: "approved", False: "denied", None: "timed_out"}[answer]
            result.status = "successful" if answer is True else "failed"
            return result
        template = self.defs.templates[ujt["name"]]
        prompts = {}
        if node.get("extra_data"):
            prompts["extra_vars"] = dict(node["extra_data"])
        if node.get("limit"):
            prompts["limit"] = node["limit"]
        if wf_limit:
            prompts["limit"] = wf_limit
        accepted, errors = accept_prompts(template, prompts)
        result.ignored = {k: v for k, v in errors.items() if k != "variables_needed_to_start"}
        extra = accepted.get("extra_vars", {})
        extra.update({k: v for k, v in aa.items() if k != "_ansible_no_log"})
        extra.update(run.extra_vars)
        needed = accept_variables(template, extra)[2].get("variables_needed_to_start")
        if needed:
            result.status = "failed"
            result.error = "variables_needed_to_start: %s" % needed
            return result
        user = None if launch_type == "scheduled" else self.user
        result.job = self._run(template, extra, accepted.get("limit", template.get("limit")), "workflow", wf_awx, user)
        result.status = result.job.status
        return result

    # --- schedules --------------------------------------------------------------------

    def launch_schedule(self, name, now=None, approve=None):
        """Launch what a schedule launches at its next occurrence after ``now``."""
        sched = self.defs.schedules[name]
        when = next_occurrence(sched["rrule"], now)
        if when is None:
            raise LaunchError({"rrule": ["%s has no further occurrence" % sched["rrule"]]})
        if not sched.get("enabled", True):
            raise LaunchError({"enabled": ["%s is disabled" % name]})
        awx = {"awx_schedule_id": 1, "awx_schedule_name": name}
        target = sched["unified_job_template"]
        kw = {}
        if sched.get("extra_data"):
            kw["extra_vars"] = dict(sched["extra_data"])
        if sched.get("limit"):
            kw["limit"] = sched["limit"]
        if target in self.defs.workflows:
            run = self.launch_workflow(target, launch_type="scheduled", awx_vars=awx, approve=approve, **kw)
        else:
            run = self.launch_job(target, launch_type="scheduled", awx_vars=awx, **kw)
        run.scheduled_for = when
        return run


class NodeRun:
    def __init__(self, identifier, ancestor_artifacts):
        self.identifier, self.ancestor_artifacts = identifier, ancestor_artifacts
        self.status, self.job, self.approval, self.error, self.ignored = None, None, None, None, {}

    def __repr__(self):
        return "<Node %s %s>" % (self.identifier, self.status)


class WorkflowRun:
    def __init__(self, wf, extra_vars):
        self.workflow, self.extra_vars = wf, extra_vars
        self.nodes, self.order, self.skipped, self.status = {}, [], [], None

    @property
    def failed(self):
        return self.status != "successful"


def _fires(status, edge):
    if edge == "always_nodes":
        return True
    return (status == "successful") == (edge == "success_nodes")


def next_occurrence(rrule, now=None):
    """The next occurrence of an AWX rrule ("DTSTART:...Z RRULE:...") after now, or None."""
    from dateutil import rrule as du
    m = re.match(r"^DTSTART(?:;TZID=\S+)?:(\d{8}T\d{6}Z?)\s+(RRULE:\S+)$", rrule.strip())
    if not m:
        raise LaunchError({"rrule": ["%r is not DTSTART:... RRULE:..." % rrule]})
    start = datetime.datetime.strptime(m.group(1).rstrip("Z"), "%Y%m%dT%H%M%S").replace(tzinfo=datetime.timezone.utc)
    rule = du.rrulestr(m.group(2), dtstart=start)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return rule.after(now)


def _quote(arg):
    import shlex
    return shlex.quote(arg)
