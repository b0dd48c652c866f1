# -*- coding: utf-8 -*-
# Copyright: contributors to hybridgpu.fleet
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cloud storage settings (`storage`) of the overflow modules, and the stager they select.

`kind: rsync` (the default) stages over rsync/SSH to a storage host (rsync_stager); `kind: s3` stages to
an S3-compatible bucket through boto3 (s3_stager). The endpoint, bucket and credentials come from the
inventory; keys and tokens are no_log.
"""
from __future__ import annotations

from . import backends
from .rsync_stager import RsyncStager
from .s3_stager import MIB, S3Stager

STORAGE_OPTIONS = dict(
    kind=dict(type="str", choices=["rsync", "s3"]),
    onprem_root=dict(type="path"),
    # rsync
    host=dict(type="str"),
    ssh_key=dict(type="path", no_log=False),
    user=dict(type="str"),
    known_hosts=dict(type="path"),
    remote_root=dict(type="str"),
    # s3
    endpoint_url=dict(type="str"),
    region=dict(type="str"),
    bucket=dict(type="str"),
    prefix=dict(type="str"),
    access_key=dict(type="str", no_log=True),
    secret_key=dict(type="str", no_log=True),
    session_token=dict(type="str", no_log=True),
    validate_certs=dict(type="bool"),
    ca_bundle=dict(type="path"),
    addressing_style=dict(type="str", choices=["auto", "path", "virtual"]),
    part_size_mb=dict(type="int"),
    streams=dict(type="int"),
)


class StorageError(ValueError):
    pass


def _need(opts, *keys):
    for key in keys:
        if not opts.get(key):
            raise StorageError("storage.%s is required for kind %s" % (key, opts.get("kind") or "rsync"))


def build(opts):
    """The stager the `storage` settings name."""
    kind = opts.get("kind") or "rsync"
    if kind == "rsync":
        _need(opts, "host", "ssh_key", "onprem_root")
        return RsyncStager(opts["host"], opts["ssh_key"], opts["onprem_root"],
                           remote_root=opts.get("remote_root") or "/srv/cloud-storage", user=opts.get("user") or "root",
                           known_hosts=opts.get("known_hosts"))
    if kind == "s3":
        _need(opts, "bucket", "onprem_root")
        if bool(opts.get("access_key")) != bool(opts.get("secret_key")):
            raise StorageError("storage.access_key and storage.secret_key go together")
        for key in ("part_size_mb", "streams"):
            if opts.get(key) is not None and int(opts[key]) < (5 if key == "part_size_mb" else 1):
                raise StorageError("storage.%s is %s; the least is %d" % (key, opts[key], 5 if key == "part_size_mb" else 1))
        try:
            return S3Stager(opts["bucket"], opts["onprem_root"], prefix=opts.get("prefix") or "",
                            part_size=int(opts.get("part_size_mb") or 8) * MIB, streams=int(opts.get("streams") or 4),
                            endpoint_url=opts.get("endpoint_url"), region=opts.get("region"),
                            access_key=opts.get("access_key"), secret_key=opts.get("secret_key"),
                            session_token=opts.get("session_token"),
                            validate_certs=opts.get("validate_certs") is not False, ca_bundle=opts.get("ca_bundle"),
                            addressing_style=opts.get("addressing_style") or "auto")
        except (backends.TransferInterrupted, ValueError) as exc:
            raise StorageError("storage: %s" % exc)
    raise StorageError("storage.kind must be rsync or s3, not %r" % (kind,))
