# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cloud storage settings (I(storage)) of the overflow modules (module_utils/overflow/stagers.py)."""

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  storage:
    description:
      - Cloud storage. C(kind=rsync) (the default) stages to a storage host over SSH; C(kind=s3) to an
        S3-compatible bucket through boto3 (needs the C(boto3) Python package on the controller). Unknown keys are refused.
      - With C(kind=rsync), a job's inputs go in one SSH session to a small receiver run with the storage host's
        C(python3) (3.5 or later, standard library only), which hashes the bytes as it writes them and renames a
        copy to its name only when its SHA-256 equals the controller's; an interrupted copy is resumed. Outputs
        and images travel with C(rsync), which the storage host also needs.
      - Every staged object carries a SHA-256 checksum that is checked again on the way back.
    type: dict
    required: true
    suboptions:
      kind:
        description: C(rsync) or C(s3) (C(rsync) when omitted).
        type: str
        choices: [rsync, s3]
      onprem_root:
        description: On-prem folder where results land (C(<onprem_root>/<job ID>/<attempt ID>)).
        type: path
      host:
        description: rsync only. The storage host.
        type: str
      remote_root:
        description: rsync only. Storage root on the storage host (C(/srv/cloud-storage) when omitted).
        type: str
      ssh_key:
        description: rsync only. Private key for SSH.
        type: path
      user:
        description: rsync only. SSH user (C(root) when omitted).
        type: str
      known_hosts:
        description:
          - rsync only. File of trusted host keys (OpenSSH C(known_hosts) format). The host key is always checked
            (C(StrictHostKeyChecking=yes)); without this file, against the user's own known_hosts files.
        type: path
      endpoint_url:
        description: s3 only. The S3 endpoint of the cloud's object storage (AWS's own when omitted).
        type: str
      region:
        description: s3 only. The storage region.
        type: str
      bucket:
        description: s3 only. The bucket (it must exist).
        type: str
      prefix:
        description: s3 only. Key prefix under which the stager keeps C(shared/), C(jobs/) and C(image-cache/).
        type: str
      access_key:
        description: s3 only. Access key ID; without it, boto3's own credential chain (environment, profile, role).
        type: str
      secret_key:
        description: s3 only. Secret access key (given with I(access_key)).
        type: str
      session_token:
        description: s3 only. Session token of temporary credentials.
        type: str
      validate_certs:
        description: s3 only. Verify the endpoint's TLS certificate (on when omitted).
        type: bool
      ca_bundle:
        description: s3 only. CA bundle that signs the endpoint's certificate.
        type: path
      addressing_style:
        description: s3 only. Bucket addressing (C(auto) when omitted; many S3-compatible stores need C(path)).
        type: str
        choices: [auto, path, virtual]
      part_size_mb:
        description: s3 only. Part size of multipart uploads in MiB (8 when omitted, at least 5); larger files go in parts that resume.
        type: int
      streams:
        description: s3 only. Parallel connections per job (4 when omitted).
        type: int
"""
