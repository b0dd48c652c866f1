"""The control-host modules that onboarding runs once per node (node_manifest, node_agents_check,
firewall_rules) run through their action plugins in ansible-playbook's own process: no module
process, so they work where the control host's interpreter for modules does not exist, and
they give what the module gives, with the task's check and diff modes and argument checks."""
import json
import os

from hgpu_testenv import ROOT, play_tasks as play, run_module

PRE = os.path.join(ROOT, "inventories", "example", "preflight")
BASELINE = {"recorded_at": "2026-01-01T00:00:00Z", "active_units": [], "packages": {}, "users": [],
            "nft_ruleset": "", "paths": {}}
AGENT = {"name": "dcgm-exporter", "package": "datacenter-gpu-manager-exporter",
         "systemd_unit": "nvidia-dcgm-exporter.service", "user": "nvidia-dcgm-exporter",
         "privileges": ["reads GPU metrics"], "capabilities": [], "outbound": [], "listen": [9400]}


def task(name, module, args, **keys):
    return dict({"name": name, "hybridgpu.fleet." + module: args, "ignore_errors": True}, **keys)


def test_node_manifest_records_reads_and_refuses_in_the_playbook_process(tmp_path):
    path = str(tmp_path / "manifests" / "n1.json")
    section = {"path": path, "node": "n1", "section": "agents", "created_only": True,
               "artefacts": [{"kind": "file", "path": "/usr/local/bin/x"}]}
    got = play(tmp_path, [
        task("dry", "node_manifest", {"path": path, "node": "n1", "pre_onboarding": BASELINE}, check_mode=True),
        task("absent after dry", "node_manifest", {"path": path, "node": "n1", "read": True}),
        task("baseline", "node_manifest", {"path": path, "node": "n1", "pre_onboarding": BASELINE}),
        task("section", "node_manifest", section, diff=True),
        task("section again", "node_manifest", section),
        task("other node", "node_manifest", {"path": path, "node": "n2", "read": True}),
        task("both", "node_manifest", {"path": path, "node": "n1", "read": True, "section": "agents"}),
        task("unknown", "node_manifest", {"path": path, "node": "n1", "colour": "red"}),
    ])
    assert got["dry"]["changed"] is True and got["absent after dry"]["baseline_recorded"] is False
    assert got["baseline"]["changed"] is True and got["baseline"]["baseline_recorded"] is True
    assert got["section"]["changed"] is True and '"/usr/local/bin/x"' in got["section"]["diff"]["after"]
    assert got["section again"]["changed"] is False
    assert "invocation" not in got["section"]  # no module process ran it
    with open(path) as fh:
        assert json.load(fh)["sections"]["agents"]["artefacts"] == [{"kind": "file", "path": "/usr/local/bin/x"}]
    assert os.path.exists(path[:-len(".json")] + ".html")
    assert got["other node"]["failed"] and "n1" in got["other node"]["msg"] and path in got["other node"]["msg"]
    assert got["both"]["failed"] and "mutually exclusive: read|section" in got["both"]["msg"]
    assert got["unknown"]["failed"] and "colour" in got["unknown"]["msg"]

    # The module run as its own process writes the same document from the same calls.
    twin = str(tmp_path / "twin" / "n1.json")
    run_module("node_manifest", {"path": twin, "node": "n1", "pre_onboarding": BASELINE})
    out = run_module("node_manifest", dict(section, path=twin))
    assert out["text"] == got["section"]["text"] and out["had"] == got["section"]["had"]


def test_agent_check_and_firewall_rules_give_what_the_modules_give(tmp_path):
    boundary, paths = os.path.join(PRE, "boundary.yml"), os.path.join(PRE, "paths.yml")
    agents = {"agents": [AGENT], "boundary": boundary}
    rules = {"node": "dh1-a100-01", "path_table": paths, "boundary": boundary}
    got = play(tmp_path, [
        task("agents", "node_agents_check", agents),
        task("unlisted agent", "node_agents_check", {"agents": [dict(AGENT, name="miner")], "boundary": boundary}),
        task("rules", "firewall_rules", rules),
        task("unknown node", "firewall_rules", dict(rules, node="dh9-x-01")),
    ])
    assert got["agents"]["agents"] == run_module("node_agents_check", agents)["agents"]
    assert "NoNewPrivileges" in got["agents"]["agents"][0]["dropin"]
    assert got["unlisted agent"]["failed"] and "miner" in got["unlisted agent"]["msg"]
    module = run_module("firewall_rules", rules)
    assert {k: v for k, v in got["rules"].items() if k in module and k != "invocation"} == \
        {k: v for k, v in module.items() if k != "invocation"}
    assert got["rules"]["management_sources"]
    assert got["unknown node"]["failed"] and "dh9-x-01" in got["unknown node"]["msg"] and paths in got["unknown node"]["msg"]


def test_node_join_command_checks_its_inputs_in_the_playbook_process(tmp_path):
    """validate_only runs in the playbook's process, gives what the module gives, and keeps the
    secret out of the result as the module's exit would; every other run needs the node's
    interpreter (here one that does not exist), as any module does."""
    secret = "act-5e1f0c2a"
    args = {"packages": ["acme-node-agent"], "installer": ["/usr/bin/acme-node", "activate"], "secret": secret,
            "secret_env": "ACME_TOKEN", "units": ["acme-node-agent.service"],
            "uninstall": ["/usr/bin/acme-node", "deactivate"], "node_name": "gpu-07", "cluster": "onprem",
            "validate_only": True}
    leaky = dict(args, installer=["/usr/bin/acme-node", "--token", secret])
    got = play(tmp_path, [
        task("good", "node_join_command", args),
        task("leaky", "node_join_command", leaky),
        task("unknown", "node_join_command", dict(args, colour="red")),
        task("on the node", "node_join_command", dict(args, validate_only=False)),
    ])
    assert not got["good"].get("failed") and got["good"]["changed"] is False, got["good"]
    assert got["good"]["facts"]["uninstall_command"] == ["/usr/bin/acme-node", "deactivate"], got["good"]
    assert "invocation" not in got["good"]
    module = run_module("node_join_command", args)
    assert {k: module[k] for k in ("artefacts", "facts")} == {k: got["good"][k] for k in ("artefacts", "facts")}
    assert got["leaky"]["failed"] and "installer: holds the secret" in got["leaky"]["msg"], got["leaky"]
    assert "nothing was changed" in got["leaky"]["msg"] and secret not in json.dumps(got["leaky"])
    assert got["unknown"]["failed"] and "colour" in got["unknown"]["msg"], got["unknown"]
    assert got["on the node"]["failed"] and "/nonexistent/python" in json.dumps(got["on the node"]), got["on the node"]
