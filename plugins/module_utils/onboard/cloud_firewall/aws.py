# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The AWS provider: an EC2 security group per VPC, owned by the collection.

The group is found by name in the instance's VPC and carries the tag ``OWNER_TAG=true``;
a group of that name without the tag is refused. Every ingress entry the collection adds
has the description ``hybridgpu.fleet:<rule name>``; entries without it are drift. The
group is attached to the instance by adding it to the security groups of each of the
instance's network interfaces. Only ingress is managed: the group keeps the egress rule
AWS gives every new group. Calls go through `call()`, which retries throttling with
exponential backoff and names the failed API call in the error.
"""

from __future__ import annotations

import random
import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall as base
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard.cloud_firewall import aws_rules as conv

try:
    import boto3
    import botocore.config
    import botocore.exceptions
    HAS_BOTO3 = True
    SDK_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
except ImportError:  # pragma: no cover - reported by the module
    HAS_BOTO3 = False
    SDK_ERRORS = ()

OWNER_TAG = "hybridgpu.fleet/managed"
THROTTLING = ("RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
              "RequestThrottled", "RequestThrottledException", "SlowDown")


def client(region=None, profile=None, endpoint_url=None, access_key=None, secret_key=None, session_token=None):
    """An EC2 client from the standard credential chain, or the keys given. botocore's own
    retries are off: `AwsProvider.call` retries, so it knows which call failed."""
    session = boto3.session.Session(profile_name=profile or None, region_name=region or None,
                                    aws_access_key_id=access_key or None, aws_secret_access_key=secret_key or None,
                                    aws_session_token=session_token or None)
    config = botocore.config.Config(retries={"total_max_attempts": 1})
    return session.client("ec2", endpoint_url=endpoint_url or None, config=config)


class AwsProvider(base.ProviderFirewall):
    name = "aws"
    # First wait (seconds) after a throttled call; doubled per attempt, capped at 20.
    BACKOFF = 0.5

    def __init__(self, ec2, instance_id, group_name="hybridgpu-fleet", retries=5, backoff=None, sleep=time.sleep):
        self.ec2 = ec2
        self.instance_id = instance_id
        self.group_name = group_name
        self.retries = max(1, int(retries))
        self.backoff = self.BACKOFF if backoff is None else backoff
        self.sleep = sleep
        self.throttled = 0
        # what read() found: the instance's network interfaces, its VPC, the owned group
        self._enis, self._vpc, self._group_id = [], None, None

    def call(self, operation, **kwargs):
        """One EC2 call (snake_case name); throttling is retried, any other error raised as a
        ProviderError naming the call, the error code and the object."""
        target = kwargs.get("GroupId") or kwargs.get("NetworkInterfaceId") or kwargs.get("GroupName") or ""
        for attempt in range(1, self.retries + 1):
            try:
                return getattr(self.ec2, operation)(**kwargs)
            except botocore.exceptions.ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                msg = err.response.get("Error", {}).get("Message", "")
                if code in THROTTLING and attempt < self.retries:
                    self.throttled += 1
                    self.sleep(min(20.0, self.backoff * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))
                    continue
                raise base.ProviderError("EC2 %s failed%s: %s: %s%s" % (
                    operation, " on %s" % target if target else "", code, msg,
                    " (throttled, gave up after %d attempts)" % attempt if code in THROTTLING else ""))
            except botocore.exceptions.BotoCoreError as err:
                raise base.ProviderError("EC2 %s failed%s: %s" % (operation, " on %s" % target if target else "", err))
        raise AssertionError("unreachable")  # pragma: no cover

    def _instance(self):
        res = self.call("describe_instances", InstanceIds=[self.instance_id])
        found = [i for r in res.get("Reservations", []) for i in r.get("Instances", [])]
        if not found:
            raise base.ProviderError("EC2 describe_instances: instance %s not found" % self.instance_id)
        inst = found[0]
        enis = [{"id": n["NetworkInterfaceId"], "groups": [g["GroupId"] for g in n.get("Groups", [])]}
                for n in inst.get("NetworkInterfaces", [])]
        if not enis:
            raise base.ProviderError("instance %s has no network interface to attach a security group to"
                                     % self.instance_id)
        return inst["VpcId"], sorted(enis, key=lambda e: e["id"])

    def _group(self, vpc):
        res = self.call("describe_security_groups", Filters=[{"Name": "vpc-id", "Values": [vpc]},
                                                             {"Name": "group-name", "Values": [self.group_name]}])
        groups = res.get("SecurityGroups", [])
        if not groups:
            return None
        group = groups[0]
        tags = dict((t["Key"], t["Value"]) for t in group.get("Tags", []))
        if tags.get(OWNER_TAG) != "true":
            raise base.ProviderError("security group %s (%s) in %s is not the collection's (no tag %s=true); "
                                     "give another firewall name" % (self.group_name, group["GroupId"], vpc, OWNER_TAG))
        return group

    def read(self):
        vpc, enis = self._instance()
        self._enis, self._vpc = enis, vpc
        group = self._group(vpc)
        self._group_id = group["GroupId"] if group else None
        other_ids = sorted(set(g for e in enis for g in e["groups"]) - {self._group_id})
        others = []
        if other_ids:
            res = self.call("describe_security_groups", GroupIds=other_ids)
            for g in res.get("SecurityGroups", []):
                rules = [conv.from_permission(p, entry)[0] for p in g.get("IpPermissions", [])
                         for entry in conv.entries(p)]
                others.append({"id": g["GroupId"], "name": g.get("GroupName", ""), "rules": rules})
        state = {"firewall": None, "rules": [], "drift": [], "attached": False, "shared": 0, "others": others}
        if group is None:
            return state
        ours, drift = conv.split(group.get("IpPermissions", []))
        mine = set(e["id"] for e in enis)
        res = self.call("describe_network_interfaces", Filters=[{"Name": "group-id", "Values": [group["GroupId"]]}])
        elsewhere = [n for n in res.get("NetworkInterfaces", []) if n["NetworkInterfaceId"] not in mine]
        state.update(firewall={"id": group["GroupId"], "name": group["GroupName"], "scope": vpc, "created": True},
                     rules=ours, drift=drift, shared=len(elsewhere),
                     attached=all(group["GroupId"] in e["groups"] for e in enis))
        return state

    def execute(self, steps):
        state = self.read()
        gid = self._group_id
        if steps["create"] and gid is None:
            res = self.call("create_security_group", GroupName=self.group_name, VpcId=self._vpc,
                            Description="hybridgpu.fleet cloud-side firewall (rules from the path table)",
                            TagSpecifications=[{"ResourceType": "security-group", "Tags": [
                                {"Key": OWNER_TAG, "Value": "true"}, {"Key": "Name", "Value": self.group_name}]}])
            gid = res["GroupId"]
        if gid is None:
            return
        if steps["add"]:
            self.call("authorize_security_group_ingress", GroupId=gid, IpPermissions=conv.permissions(steps["add"]))
        gone = conv.permissions(steps["remove"]) + [d["permission"] for d in steps["remove_drift"] if "permission" in d]
        if gone:
            self.call("revoke_security_group_ingress", GroupId=gid, IpPermissions=gone)
        if steps["attach"]:
            for eni in self._enis:
                if gid not in eni["groups"]:
                    self.call("modify_network_interface_attribute", NetworkInterfaceId=eni["id"],
                              Groups=eni["groups"] + [gid])
        if steps["detach"]:
            self._detach(gid)
        if steps["delete"] and state["firewall"] is not None:
            self.call("delete_security_group", GroupId=gid)

    def _detach(self, gid):
        for eni in self._enis:
            if gid in eni["groups"]:
                rest = [g for g in eni["groups"] if g != gid]
                if not rest:
                    raise base.ProviderError("network interface %s has only security group %s; attach another "
                                             "group before removing it" % (eni["id"], gid))
                self.call("modify_network_interface_attribute", NetworkInterfaceId=eni["id"], Groups=rest)
