"""The lab's "cloud storage" host: sshd + rsync at 10.213.77.30 (overflow staging).

Layout under /srv/cloud-storage is owned by plugins/module_utils/overflow/rsync_stager.py.
Cloud nodes reach it with their own key: .lab/storage/id_ed25519 is copied to
.lab/nodes/<cloud node>/storage_id_ed25519, visible in the node at
/etc/hybridgpu-lab/storage_id_ed25519 (that directory is bind-mounted from the host).
"""
import os
import shutil

from . import config, extra
from .util import run, write_if_changed

HOST = {"name": "cloud-storage", "ip": "10.213.77.30", "role": "storage"}
ROOT = "/srv/cloud-storage"


def key():
    return config.path("storage", "id_ed25519")


def ensure_key():
    k = key()
    if os.path.exists(k) and os.path.exists(k + ".pub"):
        return False
    os.makedirs(os.path.dirname(k), mode=0o700, exist_ok=True)
    for p in (k, k + ".pub"):
        if os.path.exists(p):
            os.unlink(p)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hybridgpu-lab-storage", "-f", k])
    return True


def ensure(image):
    ensure_key()
    state = extra.ensure_container(HOST, image)
    with open(config.path("ssh", "id_ed25519.pub")) as fh:
        lab_pub = fh.read().strip()
    with open(key() + ".pub") as fh:
        storage_pub = fh.read().strip()
    auth = extra.lab_file("storage", "authorized_keys")
    write_if_changed(auth, lab_pub + "\n" + storage_pub + "\n", 0o600)
    run(["podman", "cp", auth, "%s:/root/.ssh/authorized_keys" % HOST["name"]])
    run(["podman", "exec", HOST["name"], "sh", "-c", "mkdir -p %s/shared %s/jobs && chown root:root "
         "/root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys" % (ROOT, ROOT)])
    for n in config.NODES:
        if n["role"] == "cloud":
            dest = config.path("nodes", n["name"], "storage_id_ed25519")
            if os.path.isdir(os.path.dirname(dest)):
                shutil.copyfile(key(), dest)
                os.chmod(dest, 0o600)
    return state


def remove():
    return extra.remove([HOST["name"]])
