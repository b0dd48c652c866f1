"""A focused Kubernetes API server for the lab, spoken to by the official client over HTTPS.

In-process use (tests):

    from k8s_emulator import serve
    srv = serve(cluster="t", binds=["127.0.0.1"], port=0, cert=..., key=..., token_file=...)
    ...  srv.url, srv.port, srv.store
    srv.stop()
"""
from .server import Emulator

__all__ = ["Emulator", "serve"]


def serve(cluster, binds, port, cert, key, token_file, node_grace=20.0, version="v1.30.4",
          log_file=None, rules_file=None, tick=0.2, **identity):
    """Start an emulator in background threads and return it (call .stop() when done).
    identity: client_ca (CA that client certificates are verified against, also published in
    cluster-info), signing_cert/signing_key (the CSR signer), signing_duration (seconds)."""
    return Emulator(cluster, binds, port, cert, key, token_file, node_grace=node_grace,
                    version=version, log_file=log_file, rules_file=rules_file,
                    tick=tick, **identity).start()
