"""Helpers of the third-party client suite (kubectl, kubernetes.core)."""


def release_nodes(h, since):
    """Stop heartbeating and delete the Nodes a test made (h.created_nodes[since:]), so the fake
    kubelet's load does not grow with every client check."""
    for name in h.created_nodes[since:]:
        h.kubelet.remove(name)
        try:
            h.core.delete_node(name)
        except Exception:  # pylint: disable=broad-except
            # already gone
            pass
    del h.created_nodes[since:]
