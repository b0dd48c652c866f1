"""The AWX harness (tests/integration/awx_runner.py) on localhost-only playbooks, run by
ansible-runner without process isolation: survey defaults and launch answers become extra vars
by AWX's rules, credentials are injected as AWX injects them (env, files, ssh-agent, -u),
set_stats artifacts reach the next workflow node, a failed node takes its failure edge, an
approval gates its job, and a schedule launches its target with its extra_data."""
import datetime
import json
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import awx_runner as ar  # noqa: E402

pytest.importorskip("ansible_runner")

# Writes what the job saw (vars, env, credential files, the ssh-agent's keys) to <out>/<job>.json
# and hands a value on with set_stats.
EMIT = """
- hosts: all
  gather_facts: false
  tasks:
    - name: What the job saw
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ awx_job_id }}-{{ inventory_hostname }}.json"
        content: "{{ seen | to_json }}"
      vars:
        seen:
          greeting: "{{ greeting | default(None) }}"
          target: "{{ target | default(None) }}"
          from_template: "{{ from_template | default(None) }}"
          handed: "{{ handed | default(None) }}"
          wave: "{{ wave | default(None) }}"
          user: "{{ awx_user_name | default(None) }}"
          schedule: "{{ awx_schedule_name | default(None) }}"
          workflow: "{{ awx_workflow_job_name | default(None) }}"
          inventory_dir: "{{ inventory_dir }}"
          kubeconfig_env: "{{ lookup('env', 'K8S_AUTH_KUBECONFIG') }}"
          kubeconfig: "{{ lookup('file', lookup('env', 'K8S_AUTH_KUBECONFIG')) if lookup('env', 'K8S_AUTH_KUBECONFIG') else '' }}"
          agent_keys: "{{ lookup('pipe', 'ssh-add -L 2>/dev/null || true') }}"
    - name: Fail when told to
      ansible.builtin.fail:
        msg: told to fail
      when: (fail_now | default('no')) == 'fail' and awx_job_template_name == 'emit'
    - name: Hand on
      ansible.builtin.set_stats:
        data:
          handed: "{{ greeting | default('none') }} from {{ awx_job_template_name }}"
        per_host: false
      run_once: true
"""

WORKFLOW_NODES = [
    {"identifier": "first", "unified_job_template": {"name": "emit", "type": "job_template"},
     "related": {"success_nodes": [{"identifier": "second"}], "failure_nodes": [{"identifier": "cleanup"}]}},
    {"identifier": "second", "unified_job_template": {"name": "emit", "type": "job_template"},
     "extra_data": {"wave": "wave1"}},
    {"identifier": "cleanup", "unified_job_template": {"name": "tell", "type": "job_template"}},
]


def _definitions(out_dir):
    real = ar.Definitions(os.path.join(ROOT, "awx"))
    emit = {"name": "emit", "playbook": "playbooks/emit.yml", "ask_limit_on_launch": True,
            "extra_vars": {"out_dir": out_dir, "from_template": "tmpl", "greeting": "from template"},
            "survey_enabled": True,
            "survey_spec": {"name": "s", "description": "", "spec": [
                {"question_name": "Greeting", "variable": "greeting", "type": "multiplechoice",
                 "choices": ["hello", "hi"], "default": "hello", "required": True},
                {"question_name": "Target", "variable": "target", "type": "text", "required": False},
                {"question_name": "Wave", "variable": "wave", "type": "text", "required": False},
                {"question_name": "Fail", "variable": "fail_now", "type": "multiplechoice",
                 "choices": ["fail", "pass"], "required": False}]}}
    tell = {"name": "tell", "playbook": "playbooks/emit.yml", "extra_vars": {"out_dir": out_dir},
            "ask_limit_on_launch": False, "survey_enabled": False}
    data = {
        "awx_job_templates": [emit, tell],
        "awx_credentials": real.data["awx_credentials"],
        "awx_credential_types": real.data["awx_credential_types"],
        "awx_workflows": [
            {"name": "chain", "ask_limit_on_launch": True, "workflow_nodes": WORKFLOW_NODES},
            {"name": "chain with survey", "survey_enabled": True, "survey_spec": emit["survey_spec"],
             "workflow_nodes": WORKFLOW_NODES},
            {"name": "approved", "survey_enabled": True, "survey_spec": emit["survey_spec"], "workflow_nodes": [
                {"identifier": "approve",
                 "unified_job_template": {"name": "ok?", "type": "workflow_approval", "timeout": 60},
                 "related": {"success_nodes": [{"identifier": "job"}]}},
                {"identifier": "job", "unified_job_template": {"name": "emit", "type": "job_template"}}]}],
        "awx_schedules": [{"name": "wave1 nightly", "unified_job_template": "chain with survey",
                           "rrule": "DTSTART:20260101T020000Z RRULE:FREQ=DAILY;INTERVAL=1",
                           "extra_data": {"greeting": "hi", "wave": "wave1", "fail_now": "fail"}},
                          {"name": "gone", "unified_job_template": "tell",
                           "rrule": "DTSTART:20200101T020000Z RRULE:FREQ=DAILY;COUNT=1"}],
    }
    return ar.Definitions(data=data)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("awx")
    project = base / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "playbooks" / "emit.yml").write_text(EMIT)
    inv_dir = base / "source"
    inv_dir.mkdir()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "wave1": {"hosts": {"n1": dict(local, ansible_ssh_private_key_file="/nowhere/key")}},
        "wave2": {"hosts": {"n2": dict(local)}}}}}))
    key = base / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleet-ssh", "-f", str(key)], check=True)
    out = base / "out"
    out.mkdir()
    creds = {
        "GPU fleet SSH": ar.Credential("GPU fleet SSH", "ssh", username="alice", ssh_key_data=key.read_text()),
        "GPU fleet kubeconfig": ar.Credential("GPU fleet kubeconfig", "Kubeconfig file",
                                              kubeconfig="apiVersion: v1\nkind: Config\n# from the vault\n"),
    }
    s = ar.Site(_definitions(str(out)), str(project), str(inv_dir / "hosts.yml"), creds, str(base / "jobs"),
                inventory_drop_vars=["ansible_ssh_private_key_file"],
                collections_path=os.path.join(ROOT, ".collections"), timeout=120)
    s.out = out
    s.pubkey = (base / "id.pub").read_text().split()[1]
    return s


def seen(site, job, host="n1"):
    with open(os.path.join(str(site.out), "%s-%s.json" % (job.extra_vars["awx_job_id"], host))) as fh:
        return json.load(fh)


def test_job_gets_survey_defaults_launch_answers_credentials_and_limit(site):
    job = site.launch_job("emit", extra_vars={"target": "{{ lookup('env', 'HOME') }}"}, limit="wave1")
    assert job.status == "successful", job.stdout
    assert set(job.recap()) == {"n1"}, "the limit must keep wave2 out: %s" % job.recap()
    got = seen(site, job)
    # template extra_vars < survey default < launch answer; launch answers are !unsafe (not templated)
    assert got["greeting"] == "hello" and got["from_template"] == "tmpl"
    assert got["target"] == "{{ lookup('env', 'HOME') }}"
    assert got["user"] == "admin" and got["schedule"] is None
    # the synced inventory is a script in the job's own folder; the dropped variable is gone
    assert got["inventory_dir"] == os.path.join(job.private_data_dir, "inventory")
    hostvars = site._inventory["_meta"]["hostvars"]["n1"]
    assert "ansible_ssh_private_key_file" not in hostvars
    # custom credential type: the kubeconfig file private to the job, named by K8S_AUTH_KUBECONFIG
    assert got["kubeconfig_env"].startswith(os.path.join(job.private_data_dir, "env") + os.sep)
    assert got["kubeconfig"].rstrip("\n") == "apiVersion: v1\nkind: Config\n# from the vault"
    assert oct(os.stat(got["kubeconfig_env"]).st_mode & 0o777) == "0o600"
    # machine credential: the key through ssh-agent, the user as -u
    assert site.pubkey in got["agent_keys"]
    with open(os.path.join(job.private_data_dir, "artifacts", job.ident, "command")) as fh:
        command = json.load(fh)["command"]
    assert "-u alice" in " ".join(command) or ("-u" in command and "alice" in command), command
    assert job.artifacts == {"handed": "hello from emit"}


def test_launch_refusals_follow_awx(site):
    with pytest.raises(ar.LaunchError) as err:
        site.launch_job("emit", extra_vars={"greeting": "bonjour"})
    assert "variables_needed_to_start" in err.value.errors
    with pytest.raises(ar.LaunchError) as err:
        site.launch_job("emit", extra_vars={"hgpu_boundary_signers": "mine"})
    assert "hgpu_boundary_signers" in err.value.errors["extra_vars"][0]
    with pytest.raises(ar.LaunchError) as err:
        site.launch_job("tell", limit="wave2")
    assert "limit" in err.value.errors
    # a required question without a default needs an answer (the record of a destructive job)
    errors = ar.accept_variables(ar.Definitions(os.path.join(ROOT, "awx")).templates["hybridgpu remove"],
                                 {"remove_targets": "n1"})[2]
    assert errors["variables_needed_to_start"] == ["'change_record' value missing", "'change_signature' value missing"]
    # a node's extra_data the template does not ask for is dropped, as AWX drops it
    accepted, errors = ar.accept_prompts(site.defs.templates["tell"], {"extra_vars": {"wave": "wave1"}})
    assert accepted["extra_vars"] == {} and "wave" in errors["extra_vars"][0]


def test_workflow_hands_artifacts_on(site):
    run = site.launch_workflow("chain", limit="wave1")
    assert run.status == "successful" and run.order == ["first", "second"] and run.skipped == ["cleanup"]
    second = run.nodes["second"].job
    assert seen(site, second)["handed"] == "hello from emit"
    assert seen(site, second)["wave"] == "wave1" and seen(site, second)["workflow"] == "chain"
    # artifacts are launch-time values: !unsafe in the job's extravars file
    with open(os.path.join(second.private_data_dir, "env", "extravars")) as fh:
        assert "!unsafe 'handed': !unsafe 'hello from emit'" in fh.read()


def test_approval_gates_the_job(site):
    answers = {"greeting": "hi"}
    asked = []
    denied = site.launch_workflow("approved", extra_vars=answers,
                                  approve=lambda node, wf_vars: asked.append(wf_vars["greeting"]) or False)
    assert asked == ["hi"], "the approver sees the workflow's survey answers"
    assert denied.status == "failed" and denied.order == ["approve"] and denied.skipped == ["job"]
    assert denied.nodes["approve"].approval == "denied"
    expired = site.launch_workflow("approved", extra_vars=answers, approve=lambda node, wf_vars: None)
    assert expired.nodes["approve"].approval == "timed_out" and "job" not in expired.nodes
    approved = site.launch_workflow("approved", extra_vars=answers, approve=lambda node, wf_vars: True)
    assert approved.status == "successful" and approved.order == ["approve", "job"]
    assert seen(site, approved.nodes["job"].job, "n2")["greeting"] == "hi"


def test_schedule_launches_its_target_and_a_failed_node_takes_the_failure_edge(site):
    """The schedule's extra_data (fail_now=fail among them) are the workflow's launch answers: the
    first node fails, so the failure edge runs cleanup and the success edge's node never runs."""
    now = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.timezone.utc)
    run = site.launch_schedule("wave1 nightly", now=now)
    assert run.scheduled_for == datetime.datetime(2026, 3, 2, 2, 0, tzinfo=datetime.timezone.utc)
    assert run.order == ["first", "cleanup"] and run.skipped == ["second"], run.order
    assert run.nodes["first"].status == "failed" and run.nodes["cleanup"].status == "successful"
    assert run.status == "successful", "the failure edge handles the failed node"
    assert run.nodes["first"].job.artifacts == {}, "a job that failed before set_stats hands nothing on"
    # cleanup asks no limit, so it runs on every host
    assert set(run.nodes["cleanup"].job.recap()) == {"n1", "n2"}
    got = seen(site, run.nodes["cleanup"].job, "n2")
    assert got["greeting"] == "hi" and got["wave"] == "wave1" and got["handed"] is None
    assert got["schedule"] == "wave1 nightly" and got["user"] is None, "a scheduled job has no launching user"
    with pytest.raises(ar.LaunchError):
        site.launch_schedule("gone", now=now)


def test_wave_workflows_are_rendered_from_awx_apply():
    defs = ar.Definitions(os.path.join(ROOT, "awx"))
    for wave in defs.data["awx_waves"]:
        wf = defs.workflows["hybridgpu %s" % wave]
        assert wf["limit"] == wave
        steps = [n["identifier"] for n in wf["workflow_nodes"]]
        assert steps == [s["identifier"] for s in defs.data["awx_wave_steps"]]


def test_awx_accepts_every_node_and_schedule_of_awx_definitions():
    """AWX refuses a workflow node (and a schedule) whose extra_data its template does not ask for
    ("Variables ... provided, but this template cannot accept them") and drops it at run time."""
    defs = ar.Definitions(os.path.join(ROOT, "awx"))
    bad = []
    for wf in defs.workflows.values():
        for node in wf["workflow_nodes"]:
            ujt = node["unified_job_template"]
            if ujt.get("type") != "job_template":
                continue
            prompts = {"extra_vars": node["extra_data"]} if node.get("extra_data") else {}
            if wf.get("limit"):
                prompts["limit"] = wf["limit"]
            errors = ar.accept_prompts(defs.templates[ujt["name"]], prompts)[1]
            errors.pop("variables_needed_to_start", None)
            if errors:
                bad.append("%s/%s: %s" % (wf["name"], node["identifier"], errors))
    for sched in defs.schedules.values():
        target = defs.templates.get(sched["unified_job_template"]) or defs.workflows[sched["unified_job_template"]]
        errors = ar.accept_prompts(target, {"extra_vars": sched["extra_data"]} if sched.get("extra_data") else {})[1]
        if errors:
            bad.append("schedule %s: %s" % (sched["name"], errors))
    assert not bad, "AWX would refuse:\n" + "\n".join(bad)


def test_every_wave_has_a_schedule_of_its_workflow():
    defs = ar.Definitions(os.path.join(ROOT, "awx"))
    scheduled = {s["unified_job_template"] for s in defs.schedules.values() if s.get("enabled", True)}
    missing = [w for w in defs.data["awx_waves"] if "hybridgpu %s" % w not in scheduled]
    assert not missing, "waves without a schedule: %s" % missing
    for s in defs.schedules.values():
        assert ar.next_occurrence(s["rrule"]) is not None, "%s never runs again" % s["name"]


def test_bearer_token_and_custom_injectors_as_awx_writes_them(tmp_path):
    defs = ar.Definitions(os.path.join(ROOT, "awx"))
    token = ar.Credential("api", "kubernetes_bearer_token", host="https://api.example:6443", bearer_token="s3cret",
                          verify_ssl=True, ssl_ca_cert="-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    kubeconfig = ar.Credential("kc", "Kubeconfig file", kubeconfig="apiVersion: v1\n")
    env, args = ar.inject_credentials([token, kubeconfig], defs, str(tmp_path), isolated=True)
    assert env["K8S_AUTH_HOST"] == "https://api.example:6443" and env["K8S_AUTH_API_KEY"] == "s3cret"
    assert env["K8S_AUTH_VERIFY_SSL"] == "True" and args == []
    # the files live under env/ of the private data dir; the job sees them under /runner/env/
    for var in ("K8S_AUTH_SSL_CA_CERT", "K8S_AUTH_KUBECONFIG"):
        assert env[var].startswith("/runner/env/"), env[var]
        on_host = os.path.join(str(tmp_path), os.path.relpath(env[var], "/runner"))
        assert oct(os.stat(on_host).st_mode & 0o777) == "0o600"
    with open(os.path.join(str(tmp_path), os.path.relpath(env["K8S_AUTH_KUBECONFIG"], "/runner"))) as fh:
        assert fh.read() == "apiVersion: v1\n"
    env, args = ar.inject_credentials([ar.Credential("t", "kubernetes_bearer_token", host="h", bearer_token="t")],
                                      defs, str(tmp_path), isolated=False)
    assert env["K8S_AUTH_VERIFY_SSL"] == "False" and "K8S_AUTH_SSL_CA_CERT" not in env
    # AWX refuses an injector that would set Ansible's own configuration
    bad = ar.Definitions(data={"awx_credential_types": [{"name": "bad", "inputs": {"fields": []},
                                                         "injectors": {"env": {"ANSIBLE_CONFIG": "x"}}}]})
    with pytest.raises(ar.LaunchError):
        ar.inject_credentials([ar.Credential("b", "bad")], bad, str(tmp_path), isolated=False)
    with pytest.raises(ar.LaunchError):
        ar.inject_credentials([ar.Credential("kc", "Kubeconfig file")], defs, str(tmp_path), isolated=False)
