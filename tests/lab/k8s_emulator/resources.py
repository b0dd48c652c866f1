"""The resource types the emulator serves, and the discovery documents built from them."""

VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class Resource:
    def __init__(self, group, version, plural, kind, namespaced, short=(), subresources=(),
                 has_status=True, field_labels=()):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.short = list(short)
        self.subresources = list(subresources)
        self.has_status = has_status
        self.field_labels = {"metadata.name", "metadata.namespace"} | set(field_labels)

    @property
    def api_version(self):
        return "%s/%s" % (self.group, self.version) if self.group else self.version

    @property
    def key(self):
        # Store key; plural names are unique across the groups we serve.
        return self.plural


RESOURCES = [
    Resource("", "v1", "namespaces", "Namespace", False, ["ns"], ["status"],
             field_labels=["status.phase"]),
    Resource("", "v1", "nodes", "Node", False, ["no"], ["status"],
             field_labels=["spec.unschedulable"]),
    Resource("", "v1", "pods", "Pod", True, ["po"], ["status", "log", "eviction"],
             field_labels=["spec.nodeName", "status.phase", "spec.restartPolicy",
                           "spec.schedulerName", "spec.serviceAccountName",
                           "status.podIP", "status.nominatedNodeName"]),
    Resource("", "v1", "secrets", "Secret", True, has_status=False, field_labels=["type"]),
    Resource("", "v1", "configmaps", "ConfigMap", True, ["cm"], has_status=False),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"], has_status=False),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, has_status=False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False,
             has_status=False),
    Resource("batch", "v1", "jobs", "Job", True, [], ["status"],
             field_labels=["status.successful"]),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"],
             ["status"]),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True, has_status=False),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"], ["status"]),
    # Object-count quota only (spec.hard "count/<plural>[.<group>]"), checked on create.
    Resource("", "v1", "resourcequotas", "ResourceQuota", True, ["quota"], ["status"]),
    Resource("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", False,
             ["csr"], ["status", "approval"], field_labels=["spec.signerName"]),
]

BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_PLURAL = {r.plural: r for r in RESOURCES}
GROUPS = []
for _r in RESOURCES:
    if _r.group and (_r.group, _r.version) not in GROUPS:
        GROUPS.append((_r.group, _r.version))


def _subresource_entry(res, sub):
    kinds = {"status": res.kind, "log": "Pod", "eviction": "Eviction", "approval": res.kind}
    verbs = {"status": ["get", "patch", "update"], "log": ["get"], "eviction": ["create"],
             "approval": ["get", "patch", "update"]}
    entry = {"name": "%s/%s" % (res.plural, sub), "singularName": "", "namespaced": res.namespaced,
             "kind": kinds[sub], "verbs": verbs[sub]}
    if sub == "eviction":
        entry.update({"group": "policy", "version": "v1"})
    return entry


def resource_list(group, version):
    """APIResourceList for one group/version, or None when we do not serve it."""
    items = []
    for res in RESOURCES:
        if res.group != group or res.version != version:
            continue
        items.append({"name": res.plural, "singularName": res.kind.lower(),
                      "namespaced": res.namespaced, "kind": res.kind, "verbs": VERBS_ALL,
                      "shortNames": res.short} if res.short else
                     {"name": res.plural, "singularName": res.kind.lower(),
                      "namespaced": res.namespaced, "kind": res.kind, "verbs": VERBS_ALL})
        for sub in res.subresources:
            items.append(_subresource_entry(res, sub))
    if not items:
        return None
    gv = "%s/%s" % (group, version) if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


def api_versions(server_address):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def api_group_list():
    groups = []
    for group, version in GROUPS:
        gv = {"groupVersion": "%s/%s" % (group, version), "version": version}
        groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group):
    for g, version in GROUPS:
        if g == group:
            gv = {"groupVersion": "%s/%s" % (group, version), "version": version}
            return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv],
                    "preferredVersion": gv}
    return None
