"""The AWS provider and the provider_firewall module against moto (an AWS API emulator) in
server mode on loopback, started here; state is read back through boto3. Throttling is
injected with a client event hook that answers a call with EC2's throttling error."""
import json
import logging

import pytest

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

from ansible.module_utils import basic  # noqa: E402
from botocore.awsrequest import AWSResponse  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard import cloud_firewall as cf  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.onboard.cloud_firewall import aws  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.modules import provider_firewall  # noqa: E402

from cloud_firewall_kit import RULES, ProviderKit, converge, expected  # noqa: E402

REGION = "eu-west-1"
KEYS = {"access_key": "AKIDTESTING", "secret_key": "moto-secret-not-real"}
MARK = "hybridgpu.fleet:"


def serve():
    """moto in server mode on a free loopback port, for as long as the generator runs."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield "http://%s:%d" % (host, port)
    server.stop()


@pytest.fixture(scope="module")
def endpoint():
    yield from serve()


class Estate:
    """One VPC with a subnet and one instance (its launch group attached), built with boto3."""

    all_open_stays = True  # security groups add up: the All Open group keeps applying

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.ec2 = aws.client(region=REGION, endpoint_url=endpoint, **KEYS)
        self.vpc = self.ec2.create_vpc(CidrBlock="10.70.0.0/16")["Vpc"]["VpcId"]
        self.subnet = self.ec2.create_subnet(VpcId=self.vpc, CidrBlock="10.70.1.0/24")["Subnet"]["SubnetId"]
        self.launch_sg = self.ec2.create_security_group(GroupName="launch", Description="launch", VpcId=self.vpc)["GroupId"]
        self.ec2.authorize_security_group_ingress(GroupId=self.launch_sg, IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "10.70.0.0/16"}]}])
        self.instance = self.launch()

    def launch(self):
        res = self.ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=self.subnet,
                                     SecurityGroupIds=[self.launch_sg])
        return res["Instances"][0]["InstanceId"]

    def provider(self, instance=None, ec2=None):
        return aws.AwsProvider(ec2 or self.ec2, instance or self.instance, backoff=0, sleep=lambda s: None)

    def group(self):
        groups = self.ec2.describe_security_groups(Filters=[
            {"Name": "vpc-id", "Values": [self.vpc]}, {"Name": "group-name", "Values": ["hybridgpu-fleet"]}])
        return (groups["SecurityGroups"] or [None])[0]

    def eni_groups(self, instance=None):
        inst = self.ec2.describe_instances(InstanceIds=[instance or self.instance])["Reservations"][0]["Instances"][0]
        return sorted(g["GroupId"] for n in inst["NetworkInterfaces"] for g in n["Groups"])

    def hand_add(self, protocol, port, source):
        self.ec2.authorize_security_group_ingress(GroupId=self.group()["GroupId"], IpPermissions=[
            {"IpProtocol": protocol, "FromPort": int(port), "ToPort": int(port), "IpRanges": [{"CidrIp": source}]}])

    def open_all(self):
        sg = self.ec2.create_security_group(GroupName="All Open", Description="testing", VpcId=self.vpc)["GroupId"]
        self.ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=[
            {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}], "Ipv6Ranges": [{"CidrIpv6": "::/0"}]}])
        eni = self.eni()
        self.ec2.modify_network_interface_attribute(NetworkInterfaceId=eni, Groups=self.eni_groups() + [sg])
        return sg

    def eni(self):
        inst = self.ec2.describe_instances(InstanceIds=[self.instance])["Reservations"][0]["Instances"][0]
        return inst["NetworkInterfaces"][0]["NetworkInterfaceId"]

    def backend_rules(self):
        group = self.group()
        if group is None:
            return None
        out = set()
        for perm in group["IpPermissions"]:
            port = "%d" % perm["FromPort"] if perm["FromPort"] == perm["ToPort"] else "%d-%d" % (perm["FromPort"], perm["ToPort"])
            for r in perm.get("IpRanges", []):
                out.add((perm["IpProtocol"], port, r["CidrIp"]))
            for r in perm.get("Ipv6Ranges", []):
                out.add((perm["IpProtocol"], port, r["CidrIpv6"]))
        return out

    def untouched(self):
        launch = self.ec2.describe_security_groups(GroupIds=[self.launch_sg])["SecurityGroups"][0]
        ours = (self.group() or {}).get("GroupId")
        return launch["IpPermissions"], [g for g in self.eni_groups() if g != ours]


@pytest.fixture
def harness(endpoint):
    return Estate(endpoint)


class TestAwsProvider(ProviderKit):
    pass


def test_group_is_tagged_and_rules_carry_their_name(harness):
    converge(harness.provider(), RULES)
    group = harness.group()
    assert {"Key": aws.OWNER_TAG, "Value": "true"} in group["Tags"]
    descs = set(r["Description"] for p in group["IpPermissions"] for r in p.get("IpRanges", []) + p.get("Ipv6Ranges", []))
    assert descs == {MARK + "scrape-node-exporter", MARK + "nccl", MARK + "dns"}
    assert group["GroupId"] in harness.eni_groups() and harness.launch_sg in harness.eni_groups()


def test_a_group_of_that_name_not_owned_is_refused(harness):
    harness.ec2.create_security_group(GroupName="hybridgpu-fleet", Description="someone's", VpcId=harness.vpc)
    with pytest.raises(cf.ProviderError, match="not the collection's"):
        harness.provider().read()


def test_a_group_shared_with_another_instance_keeps_its_rules_on_removal(harness):
    other = harness.launch()
    converge(harness.provider(), RULES)
    converge(harness.provider(other), RULES)
    steps = cf.removal_plan(harness.provider().read())
    assert steps["detach"] and not steps["remove"] and not steps["delete"]
    harness.provider().execute(steps)
    gid = harness.group()["GroupId"]
    assert gid not in harness.eni_groups() and gid in harness.eni_groups(other)
    assert harness.backend_rules() == expected(RULES)


# -- throttling and API errors ---------------------------------------------------------------------

THROTTLED = (b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>'
             b'<Message>Request limit exceeded.</Message></Error></Errors><RequestID>t-1</RequestID></Response>')


class _Raw:
    def stream(self, **kwargs):
        yield THROTTLED


def throttle(ec2, operation, times):
    """Answer the next `times` calls of `operation` (CamelCase) with HTTP 503 RequestLimitExceeded."""
    seen = {"n": 0}

    def hook(request, **kwargs):
        if seen["n"] < times:
            seen["n"] += 1
            return AWSResponse(request.url, 503, {}, _Raw())
        return None
    ec2.meta.events.register("before-send.ec2.%s" % operation, hook)
    return seen


def test_throttled_calls_are_retried_with_backoff(harness):
    waits = []
    seen = throttle(harness.ec2, "AuthorizeSecurityGroupIngress", 3)
    fw = aws.AwsProvider(harness.ec2, harness.instance, backoff=0.5, sleep=waits.append)
    converge(fw, RULES)
    assert seen["n"] == 3 and fw.throttled == 3 and harness.backend_rules() == expected(RULES)
    # exponential: each wait is drawn from [half, all] of 0.5, 1, 2 seconds
    assert [0.25 <= waits[0] <= 0.5, 0.5 <= waits[1] <= 1, 1 <= waits[2] <= 2] == [True] * 3


def test_throttling_that_does_not_stop_names_the_call(harness):
    throttle(harness.ec2, "ModifyNetworkInterfaceAttribute", 99)
    fw = aws.AwsProvider(harness.ec2, harness.instance, retries=4, backoff=0, sleep=lambda s: None)
    with pytest.raises(cf.ProviderError) as err:
        converge(fw, RULES)
    assert "modify_network_interface_attribute" in str(err.value) and "RequestLimitExceeded" in str(err.value)
    assert "gave up after 4 attempts" in str(err.value)


# -- the module, through its main() ---------------------------------------------------------------

def run_module(monkeypatch, capsys, args, check=False):
    args = dict(args, _ansible_check_mode=check, _ansible_diff=True)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    monkeypatch.setattr(aws.AwsProvider, "BACKOFF", 0)
    with pytest.raises(SystemExit):
        provider_firewall.main()
    return json.loads(capsys.readouterr().out)


def module_args(h, **over):
    args = dict(provider="aws", instance_id=h.instance, region=REGION, endpoint_url=h.endpoint, rules=RULES, **KEYS)
    args.update(over)
    return args


def test_module_check_mode_diff_apply_idempotent(harness, monkeypatch, capsys):
    h = harness
    res = run_module(monkeypatch, capsys, module_args(h), check=True)
    assert res["changed"] and res["plan"]["create"] and h.group() is None
    assert res["diff"]["before"] == "" and "scrape-node-exporter" in res["diff"]["after"]
    res = run_module(monkeypatch, capsys, module_args(h))
    assert res["changed"] and not res.get("failed") and res["rules"] == cf.normalize_rules(RULES)
    assert h.backend_rules() == {("tcp", "9100", "198.51.100.0/28"), ("tcp", "40000-40100", "198.51.100.0/28"),
                                 ("tcp", "40000-40100", "203.0.113.5/32"), ("udp", "53", "2001:db8:5::/48")}
    assert h.group()["GroupId"] in h.eni_groups() and res["firewall"]["scope"] == h.vpc
    again = run_module(monkeypatch, capsys, module_args(h))
    assert not again["changed"] and "diff" not in again
    assert KEYS["secret_key"] not in json.dumps(res) + json.dumps(again)


def test_module_reports_drift_and_removes_it_only_when_asked(harness, monkeypatch, capsys):
    h = harness
    run_module(monkeypatch, capsys, module_args(h))
    h.hand_add("tcp", "8080", "192.0.2.77/32")
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    res = run_module(monkeypatch, capsys, module_args(h))
    assert not res["changed"] and [d["sources"] for d in res["drift"]] == [["192.0.2.77/32"]]
    assert [w for w in warned if "not added by the collection (drift, left)" in w]
    assert ("tcp", "8080", "192.0.2.77/32") in h.backend_rules()
    res = run_module(monkeypatch, capsys, module_args(h, remove_drift=True))
    assert res["changed"] and not res["drift"] and ("tcp", "8080", "192.0.2.77/32") not in h.backend_rules()


def test_module_flags_an_all_open_group_on_the_instance(harness, monkeypatch, capsys):
    sg = harness.open_all()
    res = run_module(monkeypatch, capsys, module_args(harness))
    assert res["all_open_before"] and res["all_open"]
    assert {(f["id"], f["firewall"]) for f in res["findings"]} == {(sg, "All Open")}


def test_module_removal_takes_exactly_what_it_added(harness, monkeypatch, capsys):
    h = harness
    before = h.untouched()
    run_module(monkeypatch, capsys, module_args(h))
    res = run_module(monkeypatch, capsys, module_args(h, state="absent", rules=[]))
    assert res["changed"] and res["plan"]["delete"] and res["firewall"] is None
    assert h.group() is None and h.untouched() == before
    assert not run_module(monkeypatch, capsys, module_args(h, state="absent", rules=[]))["changed"]


def test_module_names_the_failed_call(harness, monkeypatch, capsys):
    res = run_module(monkeypatch, capsys, module_args(harness, instance_id="i-0000000000000dead"))
    assert res["failed"] and "describe_instances" in res["msg"] and "InvalidInstanceID" in res["msg"]
    made = aws.client

    def throttled_client(**kwargs):
        ec2 = made(**kwargs)
        throttle(ec2, "CreateSecurityGroup", 99)
        return ec2
    monkeypatch.setattr(aws, "client", throttled_client)
    res = run_module(monkeypatch, capsys, module_args(harness, retries=2))
    assert res["failed"] and "create_security_group" in res["msg"] and "RequestLimitExceeded" in res["msg"]
    assert harness.group() is None


def test_module_requires_the_instance_for_aws(monkeypatch, capsys):
    res = run_module(monkeypatch, capsys, {"provider": "aws", "rules": []})
    assert res["failed"] and "instance_id" in res["msg"]


def test_module_run_stopped_half_way_is_finished_by_a_rerun(harness, monkeypatch, capsys):
    made = aws.client

    def throttled_client(**kwargs):
        ec2 = made(**kwargs)
        throttle(ec2, "ModifyNetworkInterfaceAttribute", 99)
        return ec2
    monkeypatch.setattr(aws, "client", throttled_client)
    res = run_module(monkeypatch, capsys, module_args(harness, retries=2))
    assert res["failed"] and "modify_network_interface_attribute" in res["msg"] and "a rerun continues" in res["msg"]
    # the group and its rules were made, the attachment was not
    assert harness.backend_rules() == expected(RULES) and harness.group()["GroupId"] not in harness.eni_groups()
    monkeypatch.setattr(aws, "client", made)
    res = run_module(monkeypatch, capsys, module_args(harness))
    assert res["changed"] and res["plan"]["attach"] and not res["plan"]["create"] and not res["plan"]["add"]
    assert harness.group()["GroupId"] in harness.eni_groups()
