"""`lab up|down|status`."""
import argparse
import contextlib
import fcntl
import os
import sys
import time

from . import config, extra, host, image, inventory, k8s, nodes, packages, slurm, storage, telemetry, util
from .util import LabError, log, run


def up(args):
    t0 = time.monotonic()
    steps = []

    def step(name, fn, *a):
        t = time.monotonic()
        res = fn(*a)
        steps.append((name, time.monotonic() - t))
        return res

    os.makedirs(config.LAB_DIR, exist_ok=True)
    if not 0 <= args.owned <= config.LIGHT_MAX:
        raise LabError("--owned %d: the lab holds 0 to %d light owned nodes" % (args.owned, config.LIGHT_MAX))
    step("host prerequisites", host.ensure_host)
    ref, built = step("node image", image.ensure_images)
    step("ssh key", nodes.ensure_ssh_key)
    step("boundary signer", nodes.ensure_boundary_signer)
    step("audit checkpoint key", nodes.ensure_audit_checkpoint_key)
    step("network", nodes.ensure_network)
    repo_changed = False
    if not args.no_packages:
        repo_changed = step("apt repository", packages.ensure_repo)
    states = {}
    # The light owned nodes this run declares (none without --owned): those past the number go,
    # with their Node objects in the onprem emulator.
    gone = nodes.remove_light_nodes(args.owned)
    if gone:
        log("removed light owned nodes: " + " ".join(gone))
    # Their manifests and removal states (also of light nodes an earlier run removed) describe
    # containers that are gone: they move to records/retired/ as a made-afresh node's do.
    retired = nodes.retire_records(nodes.recorded_light_nodes(args.owned))
    if retired:
        log("records of removed light owned nodes moved to records/retired/: %d nodes" % len(retired))
    if config.light_count() != args.owned:
        util.write_if_changed(config.path("light-nodes"), "%d\n" % args.owned)
    nodes.write_ssh_config()

    # An owned node joined again under another records folder is made afresh: the lab's records
    # describe its earlier join (CSRs and token gone), and onboarding from them would keep that.
    remade = []
    for name, recorded, current in nodes.joined_elsewhere():
        log("%s holds kubelet client certificate %s, not %s that records/manifests/%s.json names: "
            "joined again under another records folder, so the lab makes it afresh" % (name, current, recorded, name))
        run(["podman", "rm", "-f", "-t", "5", name])
        remade.append(name)

    def start_all():
        for n in config.all_nodes():
            states[n["name"]] = nodes.ensure_node(n, ref)
        for n in config.all_nodes():
            nodes.wait_booted(n, ref)
    step("nodes", start_all)
    # No API guard until onboarding makes one: owned nodes made afresh are not onboarded, so a
    # guard left from their predecessors goes. Nodes that kept their disks keep their guard.
    owned = [n["name"] for n in config.all_nodes() if n["role"] == "owned"]
    if all(states[name] == "created" for name in owned) and nodes.remove_api_guard():
        log("deleted the API guard table inet %s (owned nodes made afresh)" % config.API_GUARD_TABLE)
    retired = nodes.retire_records([name for name in owned if states[name] == "created"])
    if retired:
        log("made afresh, so their earlier manifests and removal states moved to records/retired/: %s"
            % " ".join(retired))
    step("inventory", inventory.write)
    # overflow: the Slurm site scheduler and the cloud storage host
    step("slurm + storage", lambda: (storage.ensure(ref), slurm.ensure(ref)))
    if not args.no_packages:
        def node_packages():
            # Four nodes at a time: each is mostly apt waiting on dpkg inside its container.
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(lambda n: packages.ensure_node_packages(n, repo_changed), config.all_nodes()))
        step("node packages", node_packages)
    if not args.no_k8s:
        step("emulators", k8s.ensure_emulators)
        k8s.delete_nodes(remade)  # as kubeadm join requires: no Node of that name left
        stale = k8s.delete_light_nodes(keep=args.owned)
        if stale:
            log("deleted the Node objects of removed light owned nodes: " + " ".join(stale))
        # Working namespaces stay (made on demand and reused). Pods or Jobs an earlier run left
        # in them are named, not deleted: lab up also runs beside the overflow lane's tests,
        # whose Jobs it cannot tell from leftovers.
        left = [x for x in k8s.working_namespaces() if x[2] or x[3]]
        for cluster, name, pods, jobs in left:
            log("%s: namespace %s holds %d unfinished pods and %d unfinished jobs from an earlier or running "
                "job; kept. If nothing runs there: kubectl --kubeconfig %s --context %s delete namespace %s"
                % (cluster, name, pods, jobs, config.path("k8s", "kubeconfig"), cluster, name))
        if not args.no_packages:
            def join():
                cloud = [n for n in config.NODES if n["role"] == "cloud"]
                for n in cloud:
                    k8s.join_node(n)
                for n in cloud:
                    run_wait_ready(n)
            step("cloud join", join)
            step("telemetry", lambda: (telemetry.ensure_cloud_exporters(), telemetry.start_prometheus()))
    total = time.monotonic() - t0
    created = sum(1 for s in states.values() if s != "ok")
    kind = "cold" if (built or created) else "warm"
    for name, secs in steps:
        log("  %-20s %6.1fs" % (name, secs))
    log("lab up done in %.1fs (%s: image %s, %d/%d nodes created or started)" % (
        total, kind, "built" if built else "cached", created, len(config.all_nodes())))
    log("inventory: %s   ssh: ssh -F %s owned-a100-1" % (config.INVENTORY, config.path("ssh", "config")))
    log("ansible: ANSIBLE_CONFIG=%s (the lab's inventory; host keys checked against %s)"
        % (os.path.join(config.LAB_SRC, "ansible.cfg"), nodes.known_hosts_path()))
    return 0


def run_wait_ready(node):
    from .util import wait_for
    wait_for("Node %s Ready in the cloud emulator" % node["name"],
             lambda: k8s.node_ready("cloud", node["name"]), 60, interval=1)


def down(args):
    t0 = time.monotonic()
    if telemetry.stop_prometheus():
        log("stopped prometheus")
    for cluster in config.CLUSTERS:
        pid = k8s.stop_emulator(cluster)
        if pid:
            log("stopped %s emulator (pid %d)" % (cluster, pid))
    names = nodes.remove_nodes() + slurm.remove() + storage.remove()
    if names:
        log("removed containers: " + " ".join(names))
    if nodes.remove_api_guard():
        log("deleted the API guard table inet " + config.API_GUARD_TABLE)
    if nodes.network_exists():
        nodes.remove_network()
        log("removed network " + config.NETWORK)
    # Per-run state goes; keys, PKI and cached images stay unless --purge.
    import shutil
    for sub in ("nodes",):
        shutil.rmtree(config.path(sub), ignore_errors=True)
    for cluster in config.CLUSTERS:
        for f in ("emulator.pid",):
            p = os.path.join(k8s.cluster_dir(cluster), f)
            if os.path.exists(p):
                os.unlink(p)
    if os.path.exists(config.INVENTORY):
        os.unlink(config.INVENTORY)
    if args.purge:
        image.remove_images()
        from .util import safe_rmtree
        safe_rmtree(config.LAB_DIR)
        log("purged images and " + config.LAB_DIR)
    log("lab down done in %.1fs" % (time.monotonic() - t0))
    return 0


def image_cmd(args):
    """Host prerequisites and the node image only (for Molecule: localhost/hgpu-lab-node:latest)."""
    t0 = time.monotonic()
    host.ensure_host()
    ref, built = image.ensure_images()
    log("node image %s (%s, :latest) in %.1fs" % (ref, "built" if built else "cached", time.monotonic() - t0))
    return 0


def status(args):
    ok = True
    print("network %s: %s" % (config.NETWORK, "present" if nodes.network_exists() else "absent"))
    print("nodes:")
    for n in config.all_nodes():
        info = nodes.inspect(n["name"])
        if info is None:
            print("  %-14s %-14s absent" % (n["name"], n["ip"]))
            ok = False
            continue
        running = info["State"]["Running"]
        ssh = nodes.ssh_ok(n) if running else False
        ok = ok and running and ssh
        print("  %-14s %-14s %-8s ssh %s" % (n["name"], n["ip"], "running" if running else "stopped",
                                             "ok" if ssh else "FAIL"))
    for extra_host in (slurm.HOST, storage.HOST):
        line, up_ok = extra.status_line(extra_host)
        print(line)
        ok = ok and up_ok
    print("emulators:")
    for cluster in config.CLUSTERS:
        pid = k8s.running_pid(cluster)
        reach = bool(pid) and k8s.reachable(cluster)
        ok = ok and reach
        print("  %-7s %-26s pid %-7s %s" % (cluster, config.api_url(cluster), pid or "-",
                                           "reachable" if reach else "NOT reachable"))
        if reach:
            try:
                listed = k8s.list_nodes(cluster)
            except LabError as exc:
                print("    nodes: error: %s" % exc)
                continue
            if not listed:
                print("    (no Nodes)")
            for name, ready in listed:
                print("    Node %-14s Ready=%s" % (name, ready))
    prom = telemetry.prometheus_status()
    print("prometheus: %s pid %s %s" % (prom["url"], prom["pid"] or "-", "ready" if prom["ready"] else "NOT ready"))
    ok = ok and prom["ready"]
    return 0 if ok else 1


@contextlib.contextmanager
def lab_lock():
    """One lab command at a time on this machine (outside .lab, which --purge deletes)."""
    path = "/run/lock/hybridgpu-lab.lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("another lab command is running; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def main(argv=None):
    p = argparse.ArgumentParser(prog="lab", description="The hybridgpu embedded lab (docs/lab-design.md).")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="build/start everything (idempotent)")
    u.add_argument("--no-packages", action="store_true", help="skip the apt repository and node packages")
    u.add_argument("--no-k8s", action="store_true", help="skip the Kubernetes emulators and cloud join")
    u.add_argument("--owned", type=int, default=0, metavar="N",
                   help="also run N light owned nodes (a100 row, no collectives' tools) for measuring "
                        "waves at scale; without it, light nodes a previous run added are removed")
    d = sub.add_parser("down", help="remove containers, network and emulator processes")
    d.add_argument("--purge", action="store_true", help="also remove cached images and the whole lab dir")
    sub.add_parser("status", help="show nodes, emulators and Node readiness")
    sub.add_parser("image", help="host prerequisites + node image only (tagged %s:latest)" % config.NODE_IMAGE)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("lab: must run as root (rootful podman, apt)", file=sys.stderr)
        return 2
    try:
        with lab_lock():
            return {"up": up, "down": down, "status": status, "image": image_cmd}[args.cmd](args)
    except LabError as exc:
        print("[lab] ERROR: %s" % exc, file=sys.stderr, flush=True)
        return 1
