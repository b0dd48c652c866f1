"""CLI: python -m k8s_emulator --cluster onprem --bind 10.213.77.1 --bind 127.0.0.1 ..."""
import argparse
import logging
import signal
import sys
import threading

from . import serve


def main(argv=None):
    p = argparse.ArgumentParser(prog="k8s_emulator", description=__doc__)
    p.add_argument("--cluster", required=True, help="cluster name, used in logs")
    p.add_argument("--bind", action="append", required=True,
                   help="address to listen on (repeat for several)")
    p.add_argument("--port", type=int, default=6443)
    p.add_argument("--cert", required=True, help="serving certificate (PEM)")
    p.add_argument("--key", required=True, help="serving key (PEM)")
    p.add_argument("--token-file", required=True,
                   help='static tokens, kube-apiserver format: token,user,uid,"g1,g2"')
    p.add_argument("--rules-file", help="optional RBAC-lite YAML rules for other users")
    p.add_argument("--node-grace", type=float, default=40.0,
                   help="seconds without heartbeat before a Node goes Ready=Unknown")
    p.add_argument("--version", default="v1.30.4", help="gitVersion served on /version")
    p.add_argument("--log-file", help="append one line per request here (default: stderr)")
    p.add_argument("--client-ca-file", help="CA that client certificates are verified against "
                   "(also published in kube-public/cluster-info)")
    p.add_argument("--cluster-signing-cert-file", help="CA certificate that signs approved kubelet CSRs")
    p.add_argument("--cluster-signing-key-file", help="its key")
    p.add_argument("--cluster-signing-duration", type=float, default=365 * 24 * 3600,
                   help="longest certificate lifetime in seconds (default one year)")
    p.add_argument("--csr-auto-approve-group", action="append", default=[],
                   help="bootstrap token group whose kubelet client CSRs are approved at once "
                        "(kube-controller-manager's csrapproving for that group; repeatable)")
    args = p.parse_args(argv)

    logging.basicConfig(level=logging.INFO if not args.log_file else logging.WARNING,
                        format="%(message)s", stream=sys.stderr)
    try:
        srv = serve(args.cluster, args.bind, args.port, args.cert, args.key, args.token_file,
                    node_grace=args.node_grace, version=args.version, log_file=args.log_file,
                    rules_file=args.rules_file, client_ca=args.client_ca_file,
                    signing_cert=args.cluster_signing_cert_file,
                    signing_key=args.cluster_signing_key_file,
                    signing_duration=args.cluster_signing_duration,
                    auto_approve_groups=args.csr_auto_approve_group)
    except OSError as exc:
        print("k8s_emulator: cannot start %s: %s" % (args.cluster, exc), file=sys.stderr)
        return 1
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print("k8s_emulator %s listening on %s port %d" % (args.cluster, ", ".join(args.bind),
                                                       srv.port), file=sys.stderr, flush=True)
    while not done.wait(1.0):
        pass
    srv.stop()
    print("k8s_emulator %s stopped" % args.cluster, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
