"""A focused Kubernetes API server for the lab, spoken to by the official client over HTTPS.

In-process use (tests):

    from k8s_emulator import serve
    srv = serve(cluster="t", binds=["127.0.0.1"], port=0, cert=..., key=..., token_file=...)
    ...  srv.url, srv.port, srv.store
    srv.stop()
"""
from .server import Emulator

__all__ = ["Emulator", "serve"]


def serve(cluster, binds, port, cert, key, token_file, node_grace=40.0, version="v1.30.4",
          log_file=None, rules_file=None, tick=0.2, pdb_lag=0.2, confirm_pod_deletion=False, **identity):
    """Start an emulator in background threads and return it (call .stop() when done).
    `confirm_pod_deletion` is for tests without any kubelet: the server then confirms a
    Terminating pod at once, as its kubelet would.
    identity: client_ca (CA that client certificates are verified against, also published in
    cluster-info), signing_cert/signing_key (the CSR signer), signing_duration (seconds),
    auto_approve_groups (bootstrap token groups whose kubelet client CSRs are approved, as a
    managed service's control plane approves its own agents')."""
    return Emulator(cluster, binds, port, cert, key, token_file, node_grace=node_grace,
                    version=version, log_file=log_file, rules_file=rules_file,
                    tick=tick, pdb_lag=pdb_lag, confirm_pod_deletion=confirm_pod_deletion, **identity).start()
