#!/usr/bin/python3
"""nvidia-ctk stand-in (lab): `nvidia-ctk --version` prints what NVIDIA Container Toolkit's
CLI prints, and `nvidia-ctk runtime configure --runtime=containerd [--config=PATH]
[--set-as-default]` adds the `nvidia` runtime to containerd's configuration (version 2
layout, as the real command writes it), keeping the runtimes already there.

Tests break the node the way it breaks in reality: `apt-get remove nvidia-container-toolkit`,
or a containerd config without the nvidia runtime; this command puts the runtime back.
"""
import os
import sys

VERSION = "1.17.3"
COMMIT = "0000000"  # the lab build has no upstream commit
CRI = 'plugins."io.containerd.grpc.v1.cri"'
RUNTIME = """        [%(cri)s.containerd.runtimes.nvidia]
          privileged_without_host_devices = false
          runtime_engine = ""
          runtime_root = ""
          runtime_type = "io.containerd.runc.v2"
          [%(cri)s.containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
"""
BASE = """version = 2

[plugins]

  [%(cri)s]

    [%(cri)s.containerd]
      default_runtime_name = "%(default)s"

      [%(cri)s.containerd.runtimes]

        [%(cri)s.containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"

          [%(cri)s.containerd.runtimes.runc.options]
            SystemdCgroup = true

"""


def configure(args):
    runtime, path, default = None, "/etc/containerd/config.toml", False
    for arg in args:
        if arg.startswith("--runtime="):
            runtime = arg.split("=", 1)[1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg == "--set-as-default":
            default = True
    if runtime != "containerd":
        sys.stderr.write("nvidia-ctk stand-in: only --runtime=containerd is supported\n")
        return 1
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        text = BASE % {"cri": CRI, "default": "runc"}
    if "containerd.runtimes.nvidia]" not in text:
        text = text.rstrip("\n") + "\n\n" + RUNTIME % {"cri": CRI}
    if default:
        text = text.replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    sys.stderr.write('level=info msg="Wrote updated config to %s"\n' % path)
    return 0


def main(argv):
    if argv[:1] in (["--version"], ["-v"]):
        sys.stdout.write("NVIDIA Container Toolkit CLI version %s\ncommit: %s\n" % (VERSION, COMMIT))
        return 0
    if argv[:2] == ["runtime", "configure"]:
        return configure(argv[2:])
    sys.stderr.write("nvidia-ctk stand-in: unsupported arguments %s\n" % " ".join(argv))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
