"""overflow_warm_shared run for real through ansible against moto in server mode on loopback: check mode,
a first warming, an idempotent rerun, a refresh after the dataset changed, and errors that name the field."""
import json
import os
import socket
import subprocess
import sys

import pytest

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run(args, check=False):
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
           "-m", "hybridgpu.fleet.overflow_warm_shared", "-a", json.dumps(args)] + (["--check"] if check else [])
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture(scope="module")
def storage():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    opts = {"kind": "s3", "endpoint_url": "http://127.0.0.1:%d" % port, "region": "us-east-1", "bucket": "warm",
            "prefix": "site-a", "access_key": "test", "secret_key": "test-secret"}
    boto3.client("s3", endpoint_url=opts["endpoint_url"], region_name="us-east-1", aws_access_key_id="test",
                 aws_secret_access_key="test-secret").create_bucket(Bucket="warm")
    yield opts
    server.stop()


def test_warm_then_kept_then_refreshed(storage, tmp_path):
    ds = tmp_path / "tok.tar"
    ds.write_bytes(b"v1" * 50_000)
    args = {"storage": storage, "datasets": [{"name": "tok.tar", "path": str(ds)}]}
    dry = run(args, check=True)
    assert dry["changed"] is True and dry["datasets"][0]["outcome"] == "would_send"
    first = run(args)
    assert first["changed"] is True and first["datasets"][0]["outcome"] == "sent"
    assert first["datasets"][0]["bytes_sent"] == 100_000 and first["datasets"][0]["throughput_Bps"] > 0
    assert "test-secret" not in json.dumps(first)
    again = run(args)
    assert again["changed"] is False and again["datasets"][0]["outcome"] == "warm"
    assert run(args, check=True)["changed"] is False
    ds.write_bytes(b"v2" * 50_000)
    assert run(args, check=True)["datasets"][0]["outcome"] == "would_refresh"
    fresh = run(args)
    assert fresh["changed"] is True and fresh["datasets"][0]["outcome"] == "refreshed"


@pytest.mark.parametrize("datasets, storage_patch, message", [
    ([{"name": "../x", "path": "/etc/hostname"}], {}, "datasets[0].name '../x' is refused"),
    ([{"name": "x", "path": "/nonexistent"}], {}, "datasets[0].path '/nonexistent' is not a file"),
    ([{"name": "x", "path": "/etc/hostname"}], {"bucket": None}, "storage.bucket is required"),
])
def test_errors_name_the_field(storage, datasets, storage_patch, message):
    opts = dict(storage, **storage_patch)
    res = run({"storage": dict((k, v) for k, v in opts.items() if v is not None), "datasets": datasets})
    assert res.get("failed") and message in res["msg"]


def test_the_playbook_warms_then_changes_nothing(storage, tmp_path):
    ds = tmp_path / "eval.tar"
    ds.write_bytes(b"e" * 300_000)
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"hgpu_overflow_storage": dict(storage, prefix="playbook"),
                                 "hgpu_overflow_shared_datasets": [{"name": "eval.tar", "path": str(ds)}]}))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "playbooks/overflow_warm_shared.yml",
           "-i", "localhost,", "-e", "@" + str(extra), "-e", "ansible_python_interpreter=" + sys.executable]
    for expect in ("sent", "warm"):
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
        assert out.returncode == 0, out.stdout[-2000:]
        stats = json.loads(out.stdout)["stats"]["localhost"]
        assert stats["changed"] == (1 if expect == "sent" else 0)
        assert '"outcome": "%s"' % expect in out.stdout
    assert "test-secret" not in out.stdout
