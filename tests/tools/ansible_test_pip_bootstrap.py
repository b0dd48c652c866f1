"""Stand-in for the get-pip bootstrap script that ansible-test downloads.

ansible-test creates an empty virtual environment per sanity test and fills it by running
``python <bootstrap> <pip options> pip==X setuptools wheel``; it fetches that bootstrap
from ci-files.testing.ansible.com, which this network cannot reach.  It looks for a cached
copy first (~/.ansible/test/cache/get_pip_X_Y.py), and tests/quality.sh puts this file there.

This script does what the bootstrap does: it runs pip from a pip wheel that
tests/quality.sh downloaded from PyPI into the same folder, and installs the requested
packages into the running interpreter.  Everything else still comes from PyPI.
"""
import glob
import os
import sys

MARKER = "hybridgpu.fleet offline pip bootstrap"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    wheels = sorted(glob.glob(os.path.join(here, "pip-*-py3-none-any.whl")))
    if not wheels:
        sys.stderr.write("%s: no pip wheel in %s (tests/quality.sh downloads one)\n" % (MARKER, here))
        return 2
    wheel = wheels[-1]
    # A wheel is a zip archive that Python can import pip from.
    sys.path.insert(0, wheel)
    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel

    # get-pip's own options: it adds setuptools and wheel unless told not to.
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    for name in ("setuptools", "wheel"):
        if "--no-" + name not in sys.argv[1:] and not any(a.split("=")[0].split("<")[0] == name for a in args):
            args.append(name)
    return pip_main(["install", "--upgrade", "--force-reinstall"] + args)


if __name__ == "__main__":
    sys.exit(main())
