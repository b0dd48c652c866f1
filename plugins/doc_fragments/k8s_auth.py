# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options shared by every Kubernetes-facing module of hybridgpu.fleet."""

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file.
      - Falls back to E(K8S_AUTH_KUBECONFIG), then the first entry of E(KUBECONFIG), then C(~/.kube/config).
    type: path
  context:
    description:
      - Context of the kubeconfig to use; the current context when omitted.
      - Falls back to E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - API server URL, overriding the kubeconfig's server. Falls back to E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token, overriding the kubeconfig's credentials. Falls back to E(K8S_AUTH_API_KEY).
    type: str
  ca_cert:
    description:
      - CA bundle that signs the API server's certificate. Falls back to E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description:
      - Verify the API server's certificate. Leave on outside throwaway labs.
      - Given either way it wins over the kubeconfig's C(insecure-skip-tls-verify). Not given, the
        kubeconfig decides (verification is on unless it sets C(insecure-skip-tls-verify)).
        Falls back to E(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  request_timeout:
    description:
      - Seconds to wait for one API request.
    type: float
    default: 20.0
  api_retries:
    description:
      - How many times a request is retried, with exponential backoff and jitter, after
        HTTP 429, 500, 502, 503, 504 or a transport error. Eviction's 429 (a
        PodDisruptionBudget) is never retried here; the drain logic owns that decision.
    type: int
    default: 4
requirements:
  - kubernetes >= 30.1.0 (the official Python client)
"""
