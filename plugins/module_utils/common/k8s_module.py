# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module base of every Kubernetes-facing module.

`K8sModule` is an AnsibleModule that
- adds the shared connection options (K8S_AUTH_ARG_SPEC, documented once in
  plugins/doc_fragments/k8s_auth.py; the modules are the action group ``hybridgpu.fleet.k8s`` in
  meta/runtime.yml, so a play sets them once with ``module_defaults``);
- checks that the kubernetes client imports, in one place, when the first client is built
  (``client()``), so input checks that need no API still run and fail first;
- fails every API error in one format (``fail_api()``): what the module was doing, the object
  (kind, namespace/name), the context, then the call that failed with its HTTP status.

A module that keeps its work in ``run(module)`` (with ARGUMENT_SPEC and SPEC_OPTIONS beside it)
also runs inside the collection's action plugin of the same name, in the playbook's process, with
a `K8sTask` as its module object: the client library is then imported once per playbook run
instead of once per task.
"""

from __future__ import (absolute_import, division, print_function)

__metaclass__ = type

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import (
    HAS_K8S,
    K8S_IMPORT_ERROR,
    K8sError,
    Kube,
)

# The shared connection options; the same names as k8s.AUTH_KEYS. Environment names follow
# kubernetes.core.
K8S_AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="path", fallback=(env_fallback, ["K8S_AUTH_KUBECONFIG"])),
    context=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_CONTEXT"])),
    host=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_HOST"])),
    api_key=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_API_KEY"])),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"], fallback=(env_fallback, ["K8S_AUTH_SSL_CA_CERT"])),
    validate_certs=dict(type="bool", aliases=["verify_ssl"], fallback=(env_fallback, ["K8S_AUTH_VERIFY_SSL"])),
    request_timeout=dict(type="float", default=20.0),
    api_retries=dict(type="int", default=4),
)


def describe(kind=None, name=None, namespace=None):
    """'Secret kube-system/node-a-token', 'Node a', 'Pods in namespace x': the object as messages name it."""
    if namespace and name:
        ref = "%s/%s" % (namespace, name)
    elif namespace:
        ref = "in namespace %s" % namespace
    else:
        ref = name
    return " ".join(part for part in (kind, ref) if part)


class K8sCalls(object):
    """What a Kubernetes module's run() uses besides its parameters: the client, the head of its
    messages and the one format of API failures. Shared by K8sModule and K8sTask."""

    def client(self, params=None, **kwargs):
        """A Kube built from this module's connection options (or from ``params``); fails the
        task with the install hint when the kubernetes client cannot be imported."""
        if not HAS_K8S:
            self.fail_json(msg=missing_required_lib("kubernetes"), exception=str(K8S_IMPORT_ERROR))
        return Kube(self.params if params is None else params, **kwargs)

    def where(self, doing, kind=None, name=None, namespace=None):
        """'<doing> <kind> <namespace>/<name> (context <context>)', the head of every message."""
        context = self.params.get("context")
        head = " ".join(part for part in (doing, describe(kind, name, namespace)) if part)
        return "%s (%s)" % (head, "context %s" % context if context else "current context")

    def fail_api(self, err, doing, kind=None, name=None, namespace=None, **result):
        """Fail for an API error: where() then the call that failed, with its HTTP status
        (``http_status`` in the result; none when no HTTP answer came back)."""
        if isinstance(err, K8sError):
            result.setdefault("http_status", err.status)
        self.fail_json(msg="%s: %s" % (self.where(doing, kind, name, namespace), err), **result)


class K8sModule(K8sCalls, AnsibleModule):
    """AnsibleModule with the shared connection options, one client import check and one
    error format for API failures."""

    def __init__(self, argument_spec=None, **kwargs):
        super().__init__(argument_spec=with_auth(argument_spec), **kwargs)


def with_auth(argument_spec):
    """The module's argument spec with the shared connection options."""
    spec = dict(K8S_AUTH_ARG_SPEC)
    spec.update(argument_spec or {})
    return spec


class TaskEnd(Exception):
    """Ends a run() inside an action plugin with the task's result (K8sTask)."""

    def __init__(self, result):
        super(TaskEnd, self).__init__(result.get("msg", "done"))
        self.result = result


class K8sTask(K8sCalls):
    """The module object a Kubernetes module's run() gets inside the collection's action plugin
    (plugin_utils/controller.py), in the playbook's process: parameters the plugin has checked,
    and exit_json and fail_json that end run() with TaskEnd instead of ending the process."""

    def __init__(self, params, check_mode=False, diff=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = diff

    def exit_json(self, **result):
        raise TaskEnd(result)

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        raise TaskEnd(result)
