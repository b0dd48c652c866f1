#!/usr/bin/python3
"""Lab stand-in for Open MPI 4.1's mpirun.

Accepts the command line a site uses for nccl-tests across nodes:
  mpirun [--allow-run-as-root] [-np N] [--hostfile FILE | -H host[:slots],...] [-x VAR[=value]]...
         [--bind-to X] [--map-by X] [--mca key value]... program [args...]
Hostfile lines are `host slots=N` (comments and blank lines ignored). As root it refuses to run
without --allow-run-as-root (or OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1),
and more ranks than slots is an error, both with Open MPI's wording. Every host other than this
one must resolve and accept a TCP connection on port 22 (the real launcher starts its daemons
over SSH). The lab has no interconnect, so the program runs once, here, as rank 0 with
OMPI_COMM_WORLD_SIZE/RANK/LOCAL_RANK set and the hosts and their slots in HGPU_LAB_MPI_HOSTS
(`host:slots,...`, read by the lab's all_reduce_perf); its output and exit code are mpirun's.
"""
import os
import socket
import sys

FLAGS_WITH_VALUE = {"--bind-to", "--map-by", "--rank-by", "--report-bindings-file", "-wdir", "--wdir"}


def usage(msg):
    sys.stderr.write("mpirun: %s\n" % msg)
    return 1


def read_hostfile(path):
    hosts = []
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            slots = 1
            for word in parts[1:]:
                if word.startswith("slots="):
                    slots = int(word.split("=", 1)[1])
            hosts.append((parts[0], slots))
    return hosts


def parse(argv):
    opts = {"np": None, "hosts": [], "env": {}, "root_ok": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            return opts, argv[i:]
        if a in ("-np", "-n", "--np"):
            opts["np"] = int(argv[i + 1])
            i += 2
        elif a in ("--hostfile", "-hostfile", "--machinefile", "-machinefile"):
            opts["hosts"] += read_hostfile(argv[i + 1])
            i += 2
        elif a in ("-H", "--host", "-host"):
            for item in argv[i + 1].split(","):
                name, dummy, slots = item.partition(":")
                opts["hosts"].append((name, int(slots) if slots else 1))
            i += 2
        elif a == "-x":
            name, sep, value = argv[i + 1].partition("=")
            opts["env"][name] = value if sep else os.environ.get(name, "")
            i += 2
        elif a == "--mca":
            i += 3
        elif a == "--allow-run-as-root":
            opts["root_ok"] = True
            i += 1
        elif a in FLAGS_WITH_VALUE:
            i += 2
        else:
            i += 1  # other switches (--oversubscribe, --tag-output, ...) change nothing here
    return opts, []


def reachable(host, here):
    if host in ("localhost", "127.0.0.1", here):
        return None
    try:
        addr = socket.getaddrinfo(host, 22, type=socket.SOCK_STREAM)[0][4]
    except socket.gaierror:
        return "ssh: Could not resolve hostname %s: Name or service not known" % host
    try:
        with socket.create_connection(addr[:2], timeout=3):
            return None
    except OSError as exc:
        return "ssh: connect to host %s port 22: %s" % (host, exc.strerror or exc)


def main(argv):
    opts, program = parse(argv)
    if not program:
        return usage("no program given")
    root_env = os.environ.get("OMPI_ALLOW_RUN_AS_ROOT") == "1" and os.environ.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1"
    if os.geteuid() == 0 and not (opts["root_ok"] or root_env):
        sys.stderr.write("--------------------------------------------------------------------------\n"
                         "mpirun has detected an attempt to run as root.\n\n"
                         "Running as root is *strongly* discouraged as any mistake (e.g., in\n"
                         "defining TMPDIR) or bug can result in catastrophic damage to the OS\n"
                         "file system, leaving your system in an unusable state.\n\n"
                         "We strongly suggest that you run mpirun as a non-root user.\n\n"
                         "You can override this protection by adding the --allow-run-as-root option\n"
                         "to the cmd line or by setting two environment variables in the following way:\n"
                         "the variable OMPI_ALLOW_RUN_AS_ROOT=1 to allow this option to be used, and\n"
                         "the variable OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 to confirm the choice.\n"
                         "--------------------------------------------------------------------------\n")
        return 1
    here = socket.gethostname()
    hosts = opts["hosts"] or [(here, os.cpu_count() or 1)]
    slots = sum(s for dummy, s in hosts)
    np = opts["np"] if opts["np"] is not None else slots
    if np > slots:
        sys.stderr.write("--------------------------------------------------------------------------\n"
                         "There are not enough slots available in the system to satisfy the %d\n"
                         "slots that were requested by the application:\n\n  %s\n\n"
                         "Either request fewer slots for your application, or make more slots\n"
                         "available for use.\n"
                         "--------------------------------------------------------------------------\n"
                         % (np, program[0]))
        return 1
    for host, dummy in hosts:
        err = reachable(host, here)
        if err:
            sys.stderr.write("%s\n--------------------------------------------------------------------------\n"
                             "ORTE was unable to reliably start one or more daemons.\n"
                             "--------------------------------------------------------------------------\n" % err)
            return 1
    env = dict(os.environ, **opts["env"])
    env.update(OMPI_COMM_WORLD_SIZE=str(np), OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0",
               HGPU_LAB_MPI_HOSTS=",".join("%s:%d" % h for h in hosts))
    try:
        os.execvpe(program[0], program, env)
    except OSError as exc:
        sys.stderr.write("mpirun was unable to launch the specified application as it could not access\n"
                         "or execute an executable:\n\nExecutable: %s\nNode: %s\n\nwhile attempting to start "
                         "process rank 0.\n(%s)\n" % (program[0], here, exc.strerror))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
