"""Network, SSH key and node containers.

Every lab host's SSH host keys go into .lab/ssh/known_hosts (`<ip> <type> <key>` lines, rewritten
when a host boots), read inside the container rather than over the network: the file a site would
hand out. The collection's own SSH connections check host keys against it (the lab inventory
passes it as known_hosts, revoke_known_hosts and node_removal_known_hosts)."""
import json
import os
import re
import subprocess
import time

from . import config
from .util import LabError, log, run, wait_for, write_if_changed

SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=5", "-o", "ControlMaster=no"]


def key_path():
    return config.path("ssh", "id_ed25519")


def ensure_ssh_key():
    key = key_path()
    if os.path.exists(key) and os.path.exists(key + ".pub"):
        return False
    os.makedirs(os.path.dirname(key), mode=0o700, exist_ok=True)
    for p in (key, key + ".pub"):
        if os.path.exists(p):
            os.unlink(p)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hybridgpu-lab", "-f", key])
    return True


def ensure_boundary_signer():
    """The lab security owner's boundary-signing key and the pinned signers file under
    <lab dir>/approvers (read by inventories/lab as hgpu_boundary_signers). The lab signs
    every boundary it writes with this key, as a site's security owner does."""
    folder = config.path("approvers")
    key = os.path.join(folder, "boundary-signer")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    made = False
    if not (os.path.exists(key) and os.path.exists(key + ".pub")):
        for p in (key, key + ".pub"):
            if os.path.exists(p):
                os.unlink(p)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sec-owner boundary signer", "-f", key])
        made = True
    with open(key + ".pub") as fh:
        pub = fh.read().strip()
    line = 'sec-owner namespaces="hybridgpu.fleet-boundary" %s\n' % pub
    signers = os.path.join(folder, "boundary_signers")
    if not os.path.exists(signers) or open(signers).read() != line:
        with open(signers, "w") as fh:
            fh.write(line)
        made = True
    return sign_lab_boundary(key, signers) or made


def ensure_audit_checkpoint_key():
    """The key that signs the audit log's checkpoints (<lab dir>/approvers/audit-checkpoint, read
    by inventories/lab as hgpu_audit_checkpoint_key), as a site pins one: every append of the
    lab's records signs the new head, and verification requires the checkpoints."""
    folder = config.path("approvers")
    key = os.path.join(folder, "audit-checkpoint")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if os.path.exists(key) and os.path.exists(key + ".pub"):
        return False
    for p in (key, key + ".pub"):
        if os.path.exists(p):
            os.unlink(p)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hybridgpu-lab audit checkpoints", "-f", key])
    return True


# The lab's access boundary (inventories/lab/preflight/boundary.yml, hgpu_boundary_path) is signed
# by the lab's security owner as a site's is: boundary.yml.sig beside it (git-ignored).
LAB_BOUNDARY = os.path.join(config.ROOT, "inventories", "lab", "preflight", "boundary.yml")
BOUNDARY_NAMESPACE = "hybridgpu.fleet-boundary"


def sign_lab_boundary(key, signers):
    """(Re)sign the lab boundary when its signature is missing or no longer matches its bytes."""
    sig = LAB_BOUNDARY + ".sig"
    if os.path.exists(sig):
        with open(LAB_BOUNDARY, "rb") as fh:
            ok = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", signers, "-I", "sec-owner", "-n",
                                 BOUNDARY_NAMESPACE, "-s", sig], stdin=fh, capture_output=True, check=False)
        if ok.returncode == 0:
            return False
        os.unlink(sig)
    run(["ssh-keygen", "-q", "-Y", "sign", "-f", key, "-n", BOUNDARY_NAMESPACE, LAB_BOUNDARY])
    return True


def write_ssh_config():
    """.lab/ssh/config, so a person can `ssh -F .lab/ssh/config owned-a100-1`."""
    lines = []
    for n in config.all_nodes():
        lines += ["Host %s" % n["name"], "  HostName %s" % n["ip"], "  User root",
                  "  IdentityFile %s" % key_path(), "  IdentitiesOnly yes",
                  "  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                  "  LogLevel ERROR", ""]
    write_if_changed(config.path("ssh", "config"), "\n".join(lines), 0o600)


def known_hosts_path():
    return config.path("ssh", "known_hosts")


def record_host_keys(host):
    """Put the host's public host keys (read inside the container, not over the network) into the
    lab's known_hosts, replacing the lines of its address."""
    res = run(["podman", "exec", host["name"], "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"], timeout=20)
    keys = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(("ssh-", "ecdsa-")):
            keys.append("%s %s %s" % (host["ip"], parts[0], parts[1]))
    if not keys:
        raise LabError("%s has no SSH host keys in /etc/ssh" % host["name"])
    path = known_hosts_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    kept = []
    if os.path.exists(path):
        with open(path) as fh:
            kept = [ln.rstrip("\n") for ln in fh if ln.strip() and ln.split()[0] != host["ip"]]
    return write_if_changed(path, "\n".join(kept + keys) + "\n", 0o644)


def ssh_cmd(node, *cmd):
    return ["ssh", "-i", key_path(), *SSH_OPTS, "root@" + node["ip"], *cmd]


def ssh_ok(node, timeout=10):
    try:
        return run(ssh_cmd(node, "true"), check=False, timeout=timeout).returncode == 0
    except LabError:
        return False


def network_exists():
    return run(["podman", "network", "exists", config.NETWORK], check=False).returncode == 0


def attached_containers():
    res = run(["podman", "ps", "-a", "--filter", "network=" + config.NETWORK, "--format", "{{.Names}}"],
              check=False)
    return res.stdout.split()


def ensure_network():
    """The lab's bridge, without podman's DNS server: nodes know each other through --add-host,
    so an aardvark-dns that dies cannot take a container's network down with it."""
    if network_exists():
        info = json.loads(run(["podman", "network", "inspect", config.NETWORK]).stdout)[0]
        subnets = [s.get("subnet") for s in info.get("subnets", [])]
        if config.SUBNET not in subnets:
            raise LabError("podman network %s exists with subnets %s, expected %s; "
                           "run `tests/lab/lab down` first" % (config.NETWORK, subnets, config.SUBNET))
        if not info.get("dns_enabled") or attached_containers():
            return False
        log("podman network %s runs a DNS server the lab does not use: recreating it" % config.NETWORK)
        run(["podman", "network", "rm", config.NETWORK])
    log("creating podman network %s (%s)" % (config.NETWORK, config.SUBNET))
    run(["podman", "network", "create", "--disable-dns", "--subnet", config.SUBNET,
         "--gateway", config.BRIDGE_IP, "--label", config.NODE_LABEL_KEY + "=network", config.NETWORK])
    return True


def remove_api_guard():
    """Delete the API guard's table on this host (onboarding makes it again). Returns whether it was there."""
    if run(["nft", "list", "table", "inet", config.API_GUARD_TABLE], check=False).returncode != 0:
        return False
    run(["nft", "delete", "table", "inet", config.API_GUARD_TABLE])
    return True


def guard_member(ip, present=True):
    """Add (or delete) an owned node's address in the API guard, as a site operator would with
    `nft add element`; nothing when the guard is not up."""
    if run(["nft", "list", "set", "inet", config.API_GUARD_TABLE, "members"], check=False).returncode != 0:
        return False
    verb = "add" if present else "delete"
    res = run(["nft", verb, "element", "inet", config.API_GUARD_TABLE, "members", "{ %s }" % ip], check=False)
    return res.returncode == 0


KUBELET_CLIENT_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


def joined_elsewhere():
    """Running owned nodes whose kubelet client certificate is not the one their manifest in the
    lab's records names: joined again under another records folder (an AWX persistent path
    removed and re-onboarded the node), so the lab's records describe a join that is gone.
    Returns (name, serial recorded, serial on the node) for each. A node without a certificate
    (not joined, or removed and not joined again) is left to the records as they are. The serial
    tells joins apart here because the lab's kubelet never rotates its certificate (a real one
    does, which is why onboarding records the serial it finds rather than judging by it)."""
    found = []
    for node in config.all_nodes():
        if node["role"] != "owned":
            continue
        name = node["name"]
        try:
            with open(os.path.join(config.ROOT, "records", "manifests", name + ".json")) as fh:
                doc = json.load(fh)
            cert = doc["sections"]["join"]["facts"]["client_certificate"]
            recorded = str(cert["serial"]).lower()
        except (OSError, ValueError, KeyError, TypeError):
            continue  # no manifest, or no join recorded in it: nothing to compare
        info = inspect(name)
        if info is None or not info["State"]["Running"]:
            continue
        res = run(["podman", "exec", name, "openssl", "x509", "-noout", "-serial", "-in",
                   KUBELET_CLIENT_CERT], check=False, timeout=30)
        serial = re.search(r"serial=([0-9A-Fa-f]+)", res.stdout)
        if serial and serial.group(1).lower() != recorded:
            found.append((name, recorded, serial.group(1).lower()))
    return found


def retire_records(names):
    """An owned node made afresh carries nothing of an earlier onboarding or removal, so what the
    lab's records hold about the containers it replaces (manifests with their standalone state,
    removal states, finished or not) moves to records/retired/<time>/ and the next onboarding or
    removal starts from the new node. Returns the names whose records moved."""
    records = os.path.join(config.ROOT, "records")
    dest = os.path.join(records, "retired", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    moved = set()
    for name in names:
        for sub, entry in (("manifests", name + ".json"), ("manifests", name + ".html"), ("removals", name)):
            src = os.path.join(records, sub, entry)
            if os.path.lexists(src):
                os.makedirs(os.path.join(dest, sub), exist_ok=True)
                os.replace(src, os.path.join(dest, sub, entry))
                moved.add(name)
    return sorted(moved)


def remove_network():
    """Remove the network; containers that are not the lab's but still attached are named,
    not removed (podman network rm without -f)."""
    if network_exists():
        res = run(["podman", "network", "rm", config.NETWORK], check=False)
        if res.returncode != 0:
            raise LabError("podman network rm %s failed (other containers attached?): %s" % (
                config.NETWORK, res.stderr.strip()))


def inspect(name):
    res = run(["podman", "container", "inspect", name], check=False)
    if res.returncode != 0:
        return None
    return json.loads(res.stdout)[0]


def write_gpu_spec(node):
    """Write the node's declared gpu-spec.json. Tests change it to inject faults and restore it
    afterwards; a run that was killed leaves its fault behind, which `lab up` clears here."""
    spec_path = config.path("nodes", node["name"], "gpu-spec.json")
    existed = os.path.exists(spec_path)
    changed = write_if_changed(spec_path, json.dumps(config.gpu_spec(node), indent=2) + "\n")
    if changed and existed:
        log("%s: GPU spec back to the declared one (faults cleared)" % node["name"])
    return changed


def write_image_digests(node):
    """Write the node's images.json (config.LAB_IMAGES): what its kubelet stand-in's runtime holds."""
    return write_if_changed(config.path("nodes", node["name"], "images.json"),
                            json.dumps(config.LAB_IMAGES, indent=2, sort_keys=True) + "\n")


RESTART_POLICY = "always"
# Seconds a container may stay stopped while booting before it is restarted.
STOPPED_GRACE_S = 15


def create_node(node, image):
    name = node["name"]
    spec_dir = config.path("nodes", name)
    apt_dir = config.path("apt")
    os.makedirs(apt_dir, exist_ok=True)
    run(["podman", "create", "--name", name, "--hostname", name,
         "--network", config.NETWORK, "--ip", node["ip"],
         "--systemd=always", "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW",
         "--cap-add", "AUDIT_WRITE",
         # A reboot inside the node (systemctl reboot, shutdown -r) ends the container; podman
         # starts it again, so the node's units really restart, as after a real reboot.
         "--restart", RESTART_POLICY,
         "--label", "%s=%s" % (config.NODE_LABEL_KEY, name),
         # The other nodes by name (a site's DNS), e.g. for an MPI hostfile naming a peer.
         *[arg for n in config.all_nodes() if n["name"] != name for arg in ("--add-host", "%s:%s" % (n["name"], n["ip"]))],
         "-v", "%s:/srv/hybridgpu-apt:ro" % apt_dir,
         # The directory, not the file: a host-side atomic rewrite stays visible.
         "-v", "%s:/etc/hybridgpu-lab:rw" % spec_dir,
         image, "/sbin/init"])
    # The lab key goes in before the first boot, so sshd accepts it from the start.
    with open(key_path() + ".pub") as fh:
        pub = fh.read()
    tmp = config.path("ssh", "authorized_keys")
    write_if_changed(tmp, pub, 0o600)
    run(["podman", "cp", tmp, "%s:/root/.ssh/authorized_keys" % name])


def ensure_node(node, image):
    """Create/start a node container. Returns 'created', 'started' or 'ok'."""
    name = node["name"]
    write_gpu_spec(node)
    write_image_digests(node)
    info = inspect(name)
    if info is not None and (info["Config"].get("Labels") or {}).get(config.NODE_LABEL_KEY) != name:
        raise LabError("a container named %s exists but was not made by the lab; remove it" % name)
    if info is not None and info.get("ImageName") != image:
        log("%s runs %s, the lab image is now %s: recreating" % (name, info.get("ImageName"), image))
        run(["podman", "rm", "-f", "-t", "5", name])
        info = None
    policy = ((info or {}).get("HostConfig") or {}).get("RestartPolicy") or {}
    if info is not None and policy.get("Name") != RESTART_POLICY:
        log("%s was made without restart policy %s (a reboot inside it would stop it): recreating"
            % (name, RESTART_POLICY))
        run(["podman", "rm", "-f", "-t", "5", name])
        info = None
    if info is None:
        create_node(node, image)
        run(["podman", "start", name])
        return "created"
    if not info["State"]["Running"]:
        run(["podman", "start", name])
        return "started"
    return "ok"


def exec_(node, *cmd, check=True, timeout=300):
    return run(["podman", "exec", node["name"], *cmd], check=check, timeout=timeout)


def boot_state(name):
    """systemd's state in the container, or why it could not be read."""
    res = run(["podman", "exec", name, "systemctl", "is-system-running"], check=False, timeout=20)
    return res.stdout.strip() or res.stderr.strip()[:200] or "rc %d" % res.returncode


def boot_report(name):
    """What a node that does not finish booting is waiting for: its state, systemd's queued jobs
    and the container's last log lines."""
    jobs = run(["podman", "exec", name, "systemctl", "list-jobs", "--no-legend", "--plain"],
               check=False, timeout=20)
    logs = run(["podman", "logs", "--tail", "15", name], check=False, timeout=20)
    return "state %s; queued jobs:\n%s\nlast container output:\n%s" % (
        boot_state(name), (jobs.stdout.strip() or jobs.stderr.strip() or "none"),
        (logs.stdout + logs.stderr).strip() or "none")


def wait_until_booted(name, timeout, recreate=None):
    """systemd's final boot state ('running' or 'degraded'). A node that has not finished in time
    is restarted once (its report logged) and given the time again; a second miss fails with what
    it still waits for. A container that podman cannot restart (its state left broken by a failed
    network teardown) is removed and made again by `recreate` when given. A loaded 2-core
    machine boots five nodes in well under a minute."""
    stopped = []

    def probe():
        state = boot_state(name)
        if state in ("running", "degraded"):
            return state
        # A container that stopped (and that its restart policy did not start again) is
        # not waited on for the whole timeout.
        if "stopped container" in state or "no such container" in state.lower():
            stopped.append(time.monotonic())
            if stopped[-1] - stopped[0] > STOPPED_GRACE_S:
                return "stopped"
        else:
            stopped.clear()
        return None
    what = "%s to boot (systemctl is-system-running)" % name
    try:
        state = wait_for(what, probe, timeout)
        if state != "stopped":
            return state
        log("%s stopped while booting; restarting it once. %s" % (name, boot_report(name)))
    except LabError as exc:
        log("%s; restarting it once. %s" % (exc, boot_report(name)))
    res = run(["podman", "restart", "-t", "5", name], check=False, timeout=120)
    if res.returncode != 0:
        why = (res.stderr or res.stdout).strip()[-600:]
        if recreate is None:
            raise LabError("podman restart %s failed (rc=%d):\n%s" % (name, res.returncode, why))
        log("podman restart %s failed (rc=%d): removing it and making it again\n%s" % (name, res.returncode, why))
        run(["podman", "rm", "-f", "-t", "5", name], check=False, timeout=120)
        recreate()
    stopped.clear()
    try:
        state = wait_for(what, probe, timeout)
    except LabError as exc:
        raise LabError("%s (after one restart)\n%s" % (exc, boot_report(name)))
    if state == "stopped":
        raise LabError("%s stopped again while booting (after one restart)\n%s" % (name, boot_report(name)))
    return state


def wait_booted(node, image=None, timeout=150):
    """Wait for systemd to finish booting; fail listing failed units when degraded. With `image`,
    a node podman cannot restart is made again from it."""
    def recreate():
        create_node(node, image)
        run(["podman", "start", node["name"]])
    state = wait_until_booted(node["name"], timeout, recreate if image else None)
    if state == "degraded":
        failed = exec_(node, "systemctl", "--failed", "--no-legend", "--plain", check=False).stdout
        raise LabError("%s booted degraded; failed units:\n%s" % (node["name"], failed.strip()))
    wait_for("sshd on %s (%s) to accept the lab key" % (node["name"], node["ip"]),
             lambda: ssh_ok(node), 60)
    record_host_keys(node)


def lab_containers():
    """Names of the lab's node containers (those carrying the node label with a lab node name,
    light ones included whatever their number)."""
    res = run(["podman", "ps", "-a", "--filter", "label=" + config.NODE_LABEL_KEY,
               "--format", "{{.Names}} {{.Labels}}"], check=False)
    ours = {n["name"] for n in config.NODES}
    return [ln.split()[0] for ln in res.stdout.splitlines()
            if ln.split() and (ln.split()[0] in ours or is_light(ln.split()[0]))]


def is_light(name):
    return name.startswith(config.LIGHT_PREFIX) and name[len(config.LIGHT_PREFIX):].isdigit()


def remove_light_nodes(keep):
    """Remove the light owned nodes past the first `keep` (`lab up` declares how many there are).
    Returns the names removed."""
    wanted = {n["name"] for n in config.light_nodes(keep)}
    extra = [name for name in lab_containers() if is_light(name) and name not in wanted]
    if extra:
        run(["podman", "rm", "-f", "-t", "5", *extra], check=False, timeout=300)
    return extra


def recorded_light_nodes(keep):
    """Light owned nodes past the first `keep` that the lab's records still hold a manifest or a
    removal state of: their containers are gone (or going), so those records describe nothing."""
    wanted = {n["name"] for n in config.light_nodes(keep)}
    records = os.path.join(config.ROOT, "records")
    names = set()
    for sub, suffix in (("manifests", ".json"), ("manifests", ".html"), ("removals", "")):
        folder = os.path.join(records, sub)
        for entry in (os.listdir(folder) if os.path.isdir(folder) else []):
            if entry.endswith(suffix):
                names.add(entry[:len(entry) - len(suffix)] if suffix else entry)
    return sorted(name for name in names if is_light(name) and name not in wanted)


def remove_nodes():
    names = lab_containers()
    if names:
        run(["podman", "rm", "-f", "-t", "5", *names], check=False, timeout=300)
    return names
