"""Agents declared as data against the lab's access boundary."""
import os

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import agents
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import boundary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ALLOWED = boundary.load_boundary(os.path.join(ROOT, "inventories", "lab", "preflight", "boundary.yml")).allowed_agents()

EXPORTER = {"name": "hybridgpu-gpu-exporter",
            "binary": {"src": "hybridgpu-gpu-exporter.py", "dest": "/usr/local/lib/hybridgpu/gpu-exporter.py"},
            "exec_start": "/usr/bin/python3 /usr/local/lib/hybridgpu/gpu-exporter.py",
            "systemd_unit": "hybridgpu-gpu-exporter.service", "user": "hgpu-gpu-exporter",
            "capabilities": [], "outbound": [], "listen": [9400]}


def test_allowed_agent_gets_a_least_privilege_dropin():
    (agent,) = agents.check([EXPORTER], ALLOWED)
    assert agent["dedicated_user"] is True
    lines = agent["dropin"].splitlines()
    for want in ("User=hgpu-gpu-exporter", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "CapabilityBoundingSet=", "AmbientCapabilities=", "PrivateTmp=yes"):
        assert want in lines


def test_capabilities_and_overrides_are_kept():
    text = agents.dropin("root", ["CAP_NET_BIND_SERVICE"], {"ProtectSystem": "full"})
    assert "CapabilityBoundingSet=CAP_NET_BIND_SERVICE" in text and "ProtectSystem=full" in text
    assert "User=" not in text


@pytest.mark.parametrize("change, needle", [
    ({"name": "rogue-agent"}, "agent rogue-agent is not in the access boundary"),
    ({"outbound": ["203.0.113.5/32:443"]}, "not granted by the access boundary"),
    ({"package": "x"}, "exactly one of package or binary"),
    ({"systemd_unit": "exporter"}, ".service"),
    ({"package": "prometheus-node-exporter=1.5.0-1", "binary": {}}, "is not a Debian package name"),
    ({"package": "--force-yes", "binary": {}}, "is not a Debian package name"),
    ({"capabilities": ["NET_ADMIN"]}, "CAP_"),
    ({"exec_start": ""}, "exec_start"),
    ({"colour": "red"}, "unknown field"),
])
def test_bad_agents_are_refused(change, needle):
    with pytest.raises(agents.AgentError) as err:
        agents.check([dict(EXPORTER, **change)], ALLOWED)
    assert needle in str(err.value)


def test_management_agent_outbound_matches_the_boundary():
    agent = {"name": "hybridgpu-node-agent", "package": "hybridgpu-node-agent",
             "systemd_unit": "hybridgpu-node-agent.service", "user": "root",
             "outbound": ["10.213.77.1/32:6443"], "hardening": {"ProtectSystem": "full"}}
    (out,) = agents.check([agent], ALLOWED)
    assert out["dedicated_user"] is False and out["outbound"] == ["10.213.77.1/32:6443"]
