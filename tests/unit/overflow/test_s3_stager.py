"""The S3 stager against moto in server mode on loopback: checksums stored with each object and checked on
the way back, multipart uploads that resume without sending completed parts again, warm shared datasets,
and objects changed behind the stager's back that are sent again or refused."""
import base64
import hashlib
import io
import os
import random
import socket
import threading
import time

import pytest

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

from botocore.response import StreamingBody  # noqa: E402

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import s3_fetch, s3_send, s3_stager, s3_transfer  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import tree_digest  # noqa: E402

MIB = 1024 * 1024
PART = 5 * MIB


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    yield "http://127.0.0.1:%d" % server._port
    server.stop()


@pytest.fixture
def stager(endpoint, tmp_path, request):
    bucket = "stage-%s" % hashlib.sha256(request.node.name.encode()).hexdigest()[:12]
    st = s3_stager.S3Stager(bucket, str(tmp_path / "onprem"), prefix="site-a", part_size=PART, streams=3,
                            endpoint_url=endpoint, region="us-east-1", access_key="test", secret_key="test")
    st.client.create_bucket(Bucket=bucket)
    st.calls = {"UploadPart": 0, "PutObject": 0}

    def count(model, **kwargs):
        st.calls[model.name] = st.calls.get(model.name, 0) + 1
    st.client.meta.events.register("before-call.s3.*", lambda model, **kw: count(model))
    return st


def _file(tmp_path, name, size, seed=b"x"):
    path = tmp_path / name
    block = hashlib.sha256(seed).digest() * 32
    data = (block * (size // len(block) + 1))[:size]
    data = bytes(b ^ (i % 251) for i, b in enumerate(data[:4096])) + data[4096:]
    path.write_bytes(data)
    return str(path)


def _sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _head(st, key):
    return st.client.head_object(Bucket=st.bucket, Key=key, ChecksumMode="ENABLED")


class Job(object):
    def __init__(self, attempt_id):
        self.attempt_id = attempt_id


def test_round_trip_stores_and_checks_sha256(stager, tmp_path):
    small = _file(tmp_path, "small.bin", 300_000, b"s")
    big = _file(tmp_path, "big.bin", 12 * MIB + 5, b"b")
    got = stager.stage_inputs("job-1", [{"name": "small.bin", "path": small},
                                        {"name": "big.bin", "path": big, "shared": True}])
    assert got["bytes_sent"] == 300_000 + 12 * MIB + 5 and got["bytes_skipped"] == 0
    assert got["sha256"] == {"small.bin": _sha(small), "big.bin": _sha(big)}
    assert got["throughput_Bps"] > 0 and got["seconds"] > 0 and got["parts_sent"] == 1 + 3
    # one PUT: the store's SHA-256 is the file's; in parts: the composite of the part digests
    head = _head(stager, "site-a/jobs/job-1/inputs/small.bin")
    assert head["ChecksumSHA256"] == base64.b64encode(bytes.fromhex(_sha(small))).decode()
    assert head["Metadata"]["sha256"] == _sha(small)
    with open(big, "rb") as fh:
        parts = [hashlib.sha256(fh.read(PART)).digest() for dummy in range(3)]
    head = _head(stager, "site-a/shared/big.bin")
    assert s3_transfer.bare(head["ChecksumSHA256"]) == base64.b64encode(hashlib.sha256(b"".join(parts)).digest()).decode()
    # the cloud side writes outputs; they come back verified, with the tree digest of what landed
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "result.txt").write_text("loss=0.125\n")
    os.replace(_file(tmp_path, "ckpt.bin", 11 * MIB, b"c"), str(out / "sub" / "ckpt.bin"))
    stager.upload_tree("job-1", "a1", str(out))
    back = stager.fetch_outputs("job-1", Job("a1"))
    assert back["ref"] == os.path.join(stager.onprem_root, "job-1", "a1")
    assert back["checksum"] == tree_digest(str(out)) == tree_digest(back["ref"])
    assert back["files"] == 2 and back["fetched_again"] == [] and back["throughput_Bps"] > 0


def test_interrupted_multipart_upload_resumes_without_resending_parts(stager, tmp_path):
    big = _file(tmp_path, "data.bin", 4 * PART + 1000, b"d")      # 5 parts
    stager.interrupt_next, stager.interrupt_after_parts = 1, 2
    with pytest.raises(backends.TransferInterrupted) as err:
        stager.stage_inputs("job-2", [{"name": "data.bin", "path": big}])
    assert err.value.done_bytes == 2 * PART
    assert stager.calls["UploadPart"] == 2 and stager.last["bytes_sent"] == 2 * PART
    key = "site-a/jobs/job-2/inputs/data.bin"
    assert [u["Key"] for u in stager.client.list_multipart_uploads(Bucket=stager.bucket)["Uploads"]] == [key]
    got = stager.stage_inputs("job-2", [{"name": "data.bin", "path": big}])
    assert stager.calls["UploadPart"] == 5, "completed parts were sent again"
    assert got["resumed"] and got["parts_reused"] == 2 and got["parts_sent"] == 3
    assert got["bytes_sent"] == 2 * PART + 1000 and got["bytes_skipped"] == 2 * PART
    assert "Uploads" not in stager.client.list_multipart_uploads(Bucket=stager.bucket)
    body = stager.client.get_object(Bucket=stager.bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == _sha(big) == got["sha256"]["data.bin"]


def test_a_stale_part_is_caught_by_the_composite_and_sent_again(stager, tmp_path):
    old = _file(tmp_path, "v1.bin", 3 * PART, b"old")
    stager.interrupt_next, stager.interrupt_after_parts = 1, 2
    with pytest.raises(backends.TransferInterrupted):
        stager.stage_inputs("job-3", [{"name": "data.bin", "path": old}])
    new = _file(tmp_path, "v2.bin", 3 * PART, b"new")     # same size, other bytes: the listed parts are stale
    with pytest.raises(backends.TransferInterrupted, match="checksum mismatch"):
        stager.stage_inputs("job-3", [{"name": "data.bin", "path": new}])
    got = stager.stage_inputs("job-3", [{"name": "data.bin", "path": new}])
    assert got["bytes_sent"] == 3 * PART and not got["resumed"]
    body = stager.client.get_object(Bucket=stager.bucket, Key="site-a/jobs/job-3/inputs/data.bin")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == _sha(new)


def test_warm_shared_dataset_is_reused_and_refreshed_when_it_changes(stager, tmp_path):
    path = _file(tmp_path, "ds.bin", 7 * MIB, b"w")
    first = stager.warm_shared("ds.bin", path)
    assert first["bytes_sent"] == 7 * MIB and first["refreshed_shared"] == []
    assert stager.warm_state([{"name": "ds.bin", "path": path}]) == {"ds.bin": "warm"}
    before = dict(stager.calls)
    again = stager.stage_inputs("job-4", [{"name": "ds.bin", "path": path, "shared": True}])
    assert again["bytes_sent"] == 0 and again["bytes_skipped"] == 7 * MIB and again["warm_shared"] == ["ds.bin"]
    assert stager.calls["UploadPart"] == before["UploadPart"]
    _file(tmp_path, "ds.bin", 7 * MIB, b"w2")
    assert stager.warm_state([{"name": "ds.bin", "path": path}]) == {"ds.bin": "stale"}
    fresh = stager.warm_shared("ds.bin", path)
    assert fresh["bytes_sent"] == 7 * MIB and fresh["refreshed_shared"] == ["ds.bin"]
    assert fresh["sha256"]["ds.bin"] == _sha(path)


@pytest.mark.parametrize("with_checksum", [False, True])
def test_an_input_changed_behind_the_stagers_back_is_sent_again(stager, tmp_path, with_checksum):
    path = _file(tmp_path, "in.bin", 200_000, b"i")
    stager.stage_inputs("job-5", [{"name": "in.bin", "path": path}])
    key = "site-a/jobs/job-5/inputs/in.bin"
    meta = _head(stager, key)["Metadata"]
    extra = {"ChecksumAlgorithm": "SHA256"} if with_checksum else {}
    stager.client.put_object(Bucket=stager.bucket, Key=key, Body=b"\0" * 200_000, Metadata=meta, **extra)
    got = stager.stage_inputs("job-5", [{"name": "in.bin", "path": path}])
    assert got["bytes_sent"] == 200_000 and got["bytes_skipped"] == 0
    assert _head(stager, key)["ChecksumSHA256"] == base64.b64encode(bytes.fromhex(_sha(path))).decode()


def test_a_corrupted_output_is_refused_then_returned_when_sent_again(stager, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("answer=42\n")
    _file(out, "b.bin", 6 * MIB, b"o")
    stager.upload_tree("job-6", "a1", str(out))
    key = stager.output_prefix("job-6", "a1") + "a.txt"
    meta = _head(stager, key)["Metadata"]
    # silent damage: other bytes under the same metadata
    stager.client.put_object(Bucket=stager.bucket, Key=key, Body=b"answer=41\n", Metadata=meta)
    dest = os.path.join(stager.onprem_root, "job-6", "a1")
    with pytest.raises(backends.ReturnFailed, match="a.txt .* is corrupt"):
        stager.fetch_outputs("job-6", Job("a1"))
    assert not os.path.exists(dest), "a corrupt return left files on-prem"
    stager.upload_tree("job-6", "a1", str(out))          # the cloud side sends it again
    back = stager.fetch_outputs("job-6", Job("a1"))
    assert back["checksum"] == tree_digest(str(out)) == tree_digest(dest)


def test_damage_on_the_way_back_fetches_the_object_again(stager, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _file(out, "c.bin", 11 * MIB, b"k")
    stager.upload_tree("job-7", "a1", str(out))
    stager.corrupt_next = 1
    back = stager.fetch_outputs("job-7", Job("a1"))
    assert back["fetched_again"] == ["c.bin"]
    assert back["checksum"] == tree_digest(str(out)) == tree_digest(back["ref"])


def test_an_output_without_a_stored_checksum_is_refused(stager, tmp_path):
    stager.client.put_object(Bucket=stager.bucket, Key=stager.output_prefix("job-8", "a1") + "x.txt", Body=b"x")
    with pytest.raises(backends.ReturnFailed, match="no stored SHA-256"):
        stager.fetch_outputs("job-8", Job("a1"))


def test_image_cache_cold_pull_then_cached(stager, tmp_path):
    path = _file(tmp_path, "img.tar", 6 * MIB, b"img")
    digest = "sha256:" + _sha(path)
    first = stager.ensure_image("job-9", {"name": "reg/train-1", "path": path, "digest": digest})
    assert first["outcome"] == "cold_pull" and first["verified_digest"] == digest and first["bytes_sent"] == 6 * MIB
    again = stager.ensure_image("job-9", {"name": "reg/train-1", "path": path, "digest": digest})
    assert again["outcome"] == "cached" and again["cached_digest"] == digest and again["bytes_sent"] == 0
    with pytest.raises(backends.TransferInterrupted, match="declares"):
        stager.ensure_image("job-9", {"name": "reg/train-1", "path": path, "digest": "sha256:" + "0" * 64})


@pytest.mark.parametrize("bad", ["../x", "a/b", "-rf"])
def test_unsafe_names_are_refused_before_any_request(stager, tmp_path, bad):
    path = _file(tmp_path, "f.bin", 10, b"f")
    calls = sum(stager.calls.values())
    with pytest.raises(backends.TransferInterrupted, match="refused"):
        stager.stage_inputs(bad, [{"name": "f.bin", "path": path}])
    with pytest.raises(backends.TransferInterrupted, match="refused"):
        stager.stage_inputs("job", [{"name": bad, "path": path}])
    assert sum(stager.calls.values()) == calls


def test_storage_kind_selects_the_stager_and_hides_secrets(endpoint, tmp_path):
    from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import dispatch_run, rsync_stager, stagers
    from ansible_collections.hybridgpu.fleet.plugins.modules import overflow_dispatch
    st = dispatch_run.build_stager({"kind": "s3", "bucket": "b1", "onprem_root": str(tmp_path), "endpoint_url": endpoint,
                                    "region": "us-east-1", "access_key": "k", "secret_key": "s", "part_size_mb": 16,
                                    "streams": 2, "prefix": "/p/"})
    assert isinstance(st, s3_stager.S3Stager) and st.part_size == 16 * MIB and st.streams == 2 and st.key("x") == "p/x"
    assert isinstance(dispatch_run.build_stager({"host": "h", "ssh_key": "/k", "onprem_root": str(tmp_path)}),
                      rsync_stager.RsyncStager)
    with pytest.raises(dispatch_run.RunError, match="storage.bucket is required for kind s3"):
        dispatch_run.build_stager({"kind": "s3", "onprem_root": str(tmp_path)})
    with pytest.raises(dispatch_run.RunError, match="storage.access_key and storage.secret_key"):
        dispatch_run.build_stager({"kind": "s3", "bucket": "b", "onprem_root": str(tmp_path), "access_key": "k"})
    with pytest.raises(dispatch_run.RunError, match="part_size_mb is 1"):
        dispatch_run.build_stager({"kind": "s3", "bucket": "b", "onprem_root": str(tmp_path), "part_size_mb": 1})
    spec = overflow_dispatch.argument_spec()["storage"]["options"]
    assert spec is stagers.STORAGE_OPTIONS
    assert all(spec[k]["no_log"] for k in ("access_key", "secret_key", "session_token"))


def test_an_output_with_the_senders_sha256_is_checked_against_it(stager, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    big = _file(out, "m.bin", 11 * MIB, b"m")
    stager.upload_tree("job-10", "a1", str(out), manifest={"m.bin": _sha(big)})
    key = stager.output_prefix("job-10", "a1") + "m.bin"
    assert _head(stager, key)["Metadata"]["sha256"] == _sha(big)
    back = stager.fetch_outputs("job-10", Job("a1"))
    assert back["checksum"] == tree_digest(str(out))
    # the same parts but a manifest that does not match what is stored: refused
    stager.upload_tree("job-10", "a2", str(out), manifest={"m.bin": "0" * 64})
    with pytest.raises(backends.ReturnFailed, match="m.bin .* is corrupt"):
        stager.fetch_outputs("job-10", Job("a2"))


class Damaging(object):
    """The stager's client, with the ranged GETs of one key's bytes from `at` damaged on the way
    (one byte flipped in `times` responses), cut short, or held until `hold` is set; counts the GETs."""

    def __init__(self, client, key, at, times=1, short=False, hold=None):
        self.client, self.key, self.at, self.times, self.short, self.hold = client, key, at, times, short, hold
        self.gets = []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def get_object(self, **kwargs):
        self.gets.append((kwargs["Key"], kwargs.get("Range")))
        start = int(kwargs.get("Range", "bytes=0-").split("=", 1)[1].split("-", 1)[0])
        if self.hold is not None and kwargs["Key"] == self.key and start == self.at:
            self.hold.wait(30)
        res = self.client.get_object(**kwargs)
        if kwargs["Key"] != self.key or start != self.at or not self.times:
            return res
        self.times -= 1
        data = res["Body"].read()
        data = data[:len(data) // 2] if self.short else data[:10] + bytes([data[10] ^ 1]) + data[11:]
        return dict(res, Body=StreamingBody(io.BytesIO(data), len(data)))


def _outputs(stager, tmp_path, job, manifest):
    out = tmp_path / ("out-" + job)
    out.mkdir()
    files = {"a.bin": _file(out, "a.bin", 3 * PART + 7, b"a"), "b.bin": _file(out, "b.bin", 2 * PART, b"b"),
             "c.bin": _file(out, "c.bin", PART + 1, b"c"), "empty.txt": _file(out, "empty.txt", 0)}
    stager.upload_tree(job, "a1", str(out), manifest={k: _sha(v) for k, v in files.items()} if manifest else None)
    return out


@pytest.mark.parametrize("manifest", [True, False])
def test_one_range_damaged_on_the_way_is_fetched_again_then_refused(stager, tmp_path, manifest):
    # checked against the sender's sha256 (manifest) or against the store's composite of part checksums
    out = _outputs(stager, tmp_path, "job-11", manifest)
    key = stager.output_prefix("job-11", "a1") + "a.bin"
    damaged = stager.client = Damaging(stager.client, key, 2 * PART)
    back = stager.fetch_outputs("job-11", Job("a1"))
    assert back["fetched_again"] == ["a.bin"] and back["files"] == 4
    assert back["checksum"] == tree_digest(str(out)) == tree_digest(back["ref"])
    # every byte is read once: one GET per range, and the damaged object's ranges once more
    assert len(damaged.gets) == (4 + 2 + 2) + 4
    damaged.times = 2
    with pytest.raises(backends.ReturnFailed, match="a.bin .* is corrupt"):
        stager.fetch_outputs("job-11", Job("a1"))
    assert not os.path.exists(back["ref"]), "a refused return left files on-prem"
    assert not os.listdir(os.path.dirname(back["ref"]))


def test_a_range_cut_short_fails_the_return_and_keeps_nothing(stager, tmp_path):
    _outputs(stager, tmp_path, "job-12", True)
    stager.client = Damaging(stager.client, stager.output_prefix("job-12", "a1") + "b.bin", PART, short=True)
    with pytest.raises(backends.ReturnFailed, match="failed: .*b.bin"):
        stager.fetch_outputs("job-12", Job("a1"))
    assert not os.path.exists(os.path.join(stager.onprem_root, "job-12", "a1"))


def test_a_slow_range_in_front_holds_at_most_the_window_in_memory(stager, tmp_path):
    # the ranges behind a slow one land but wait for their hash: no more than 2 x streams are taken on
    out = tmp_path / "out"
    out.mkdir()
    _file(out, "long.bin", 5 * PART + 1, b"l")           # 6 ranges
    stager.upload_tree("job-14", "a1", str(out))
    stager.streams = 2
    go = threading.Event()
    damaged = stager.client = Damaging(stager.client, stager.output_prefix("job-14", "a1") + "long.bin", 0, times=0, hold=go)
    got = {}
    fetch = threading.Thread(target=lambda: got.update(back=stager.fetch_outputs("job-14", Job("a1"))))
    fetch.start()
    try:
        deadline = time.monotonic() + 10
        while len(damaged.gets) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert len(damaged.gets) == 4, "ranges taken on while the first one is slow"
    finally:
        go.set()
        fetch.join(30)
    assert got["back"]["checksum"] == tree_digest(str(out)) and len(damaged.gets) == 6


def test_drill_flips_follow_one_object_at_a_time(stager, tmp_path):
    # two flips: the first object's fetch and its fetch again, as when objects came back one by one
    out = _outputs(stager, tmp_path, "job-13", True)
    stager.corrupt_next = 2
    with pytest.raises(backends.ReturnFailed, match="a.bin .* is corrupt"):
        stager.fetch_outputs("job-13", Job("a1"))
    assert stager.corrupt_next == 0
    # three flips: the third was meant for an object whose bytes were never checked; it stays
    stager.corrupt_next = 3
    with pytest.raises(backends.ReturnFailed):
        stager.fetch_outputs("job-13", Job("a1"))
    assert stager.corrupt_next == 1
    back = stager.fetch_outputs("job-13", Job("a1"))
    assert back["fetched_again"] == ["a.bin"] and back["checksum"] == tree_digest(str(out))


def test_in_order_hash_of_ranges_that_land_in_any_order():
    data = os.urandom(5 * 1000 + 17)
    step, size = 1000, len(data)
    # one range's chunks arrive in order (one thread reads it); the ranges interleave freely
    ranges = dict((start, [data[pos:min(pos + 300, start + step)] for pos in range(start, min(start + step, size), 300)])
                  for start in range(0, size, step))
    for seed in range(30):
        rnd = random.Random(seed)
        left = dict((start, list(chunks)) for start, chunks in ranges.items())
        dig = s3_transfer.Digest(0)
        order = s3_fetch.InOrder(dig, size, step)
        while left:
            start = rnd.choice(sorted(left))
            order.offer(start, left[start].pop(0))
            assert order.hashed() <= size
            if not left[start]:
                del left[start]
        assert order.hashed() == size and dig.hexdigest() == hashlib.sha256(data).hexdigest()
    dig = s3_transfer.Digest(0)
    order = s3_fetch.InOrder(dig, size, step)
    threads = [threading.Thread(target=lambda s=s: [order.offer(s, c) for c in ranges[s]]) for s in sorted(ranges, reverse=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order.hashed() == size and dig.hexdigest() == hashlib.sha256(data).hexdigest()


# -- uploads: one stream of parts for all files of a call ------------------------------------------

class Watching(object):
    """The stager's client with its upload calls logged in the order they start; a hook
    {call: fn(kwargs, call)} runs in place of the call (`call()` makes the real one)."""

    def __init__(self, client, hooks=None):
        self.client, self.hooks = client, hooks or {}
        self.log = []
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.client, name)

    def _call(self, name, kwargs):
        with self.lock:
            self.log.append((name, kwargs.get("Key"), kwargs.get("PartNumber")))

        def call():
            return getattr(self.client, name)(**kwargs)
        hook = self.hooks.get(name)
        return hook(kwargs, call) if hook else call()

    def upload_part(self, **kwargs):
        return self._call("upload_part", kwargs)

    def create_multipart_upload(self, **kwargs):
        return self._call("create_multipart_upload", kwargs)

    def complete_multipart_upload(self, **kwargs):
        return self._call("complete_multipart_upload", kwargs)

    def abort_multipart_upload(self, **kwargs):
        return self._call("abort_multipart_upload", kwargs)

    def keys(self, name):
        return set(k for n, k, p in self.log if n == name)

    def first(self, name, key):
        return min(i for i, (n, k, p) in enumerate(self.log) if n == name and k == key)


def _three(stager, tmp_path, job):
    """Three files of three parts each (the last one short), their inputs and keys."""
    paths = [_file(tmp_path, "f%d.bin" % i, 2 * PART + 100 * (i + 1), b"f%d" % i) for i in range(3)]
    inputs = [{"name": os.path.basename(p), "path": p} for p in paths]
    return inputs, ["site-a/jobs/%s/inputs/%s" % (job, it["name"]) for it in inputs]


def _injected(call):
    return s3_stager.ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, call)


def test_the_next_files_parts_start_before_the_previous_file_is_completed(stager, tmp_path, monkeypatch):
    inputs, keys = _three(stager, tmp_path, "job-20")
    second = threading.Event()

    def part(kwargs, call):
        if kwargs["Key"] == keys[1]:
            second.set()
        if kwargs["Key"] == keys[0] and kwargs["PartNumber"] == 3:
            second.wait(5)      # the first file's last part stays in flight until the second file's parts run
        return call()
    watch = stager.client = Watching(stager.client, {"upload_part": part})
    # every byte of each file is read once, the SHA-256 computed in that read
    reads = dict((it["path"], 0) for it in inputs)

    class Counted(object):
        def __init__(self, path, mode):
            self.path, self.fh = path, open(path, mode)

        def read(self, size=-1):
            data = self.fh.read(size)
            reads[self.path] += len(data)
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()
    monkeypatch.setattr(s3_send, "open", Counted, raising=False)
    got = stager.stage_inputs("job-20", inputs)
    assert watch.first("upload_part", keys[1]) < watch.first("complete_multipart_upload", keys[0]), \
        "the second file's parts waited for the first file's completion"
    assert reads == dict((it["path"], os.path.getsize(it["path"])) for it in inputs)
    assert got["sha256"] == dict((it["name"], _sha(it["path"])) for it in inputs)
    assert got["parts_sent"] == 9 and got["bytes_sent"] == sum(reads.values())
    for it, key in zip(inputs, keys):
        head = _head(stager, key)
        assert head["ContentLength"] == os.path.getsize(it["path"]) and head["Metadata"]["part-size"] == str(PART)
    assert "Uploads" not in stager.client.list_multipart_uploads(Bucket=stager.bucket)


def test_a_failure_in_the_middle_aborts_every_open_upload_and_leaves_no_object(stager, tmp_path):
    inputs, keys = _three(stager, tmp_path, "job-21")
    started, failed = threading.Event(), threading.Event()

    def part(kwargs, call):
        if kwargs["Key"] != keys[0]:
            started.set()
            failed.wait(5)      # the next files' parts are in flight when the first file's completion fails
            time.sleep(0.2)
        return call()

    def complete(kwargs, call):
        if kwargs["Key"] == keys[0]:
            started.wait(5)
            failed.set()
            raise _injected("CompleteMultipartUpload")
        return call()
    watch = stager.client = Watching(stager.client, {"upload_part": part, "complete_multipart_upload": complete})
    with pytest.raises(backends.TransferInterrupted, match="CompleteMultipartUpload of %s failed" % keys[0]):
        stager.stage_inputs("job-21", inputs)
    opened = watch.keys("create_multipart_upload")
    assert keys[1] in opened and watch.keys("abort_multipart_upload") == opened
    assert "Uploads" not in stager.client.list_multipart_uploads(Bucket=stager.bucket)
    assert "Contents" not in stager.client.list_objects_v2(Bucket=stager.bucket, Prefix="site-a/")
    # the next try sends every file whole
    stager.client = watch.client
    got = stager.stage_inputs("job-21", inputs)
    assert not got["resumed"] and got["parts_sent"] == 9
    assert got["sha256"] == dict((it["name"], _sha(it["path"])) for it in inputs)


def test_a_part_the_store_refuses_keeps_that_upload_for_the_next_try_and_aborts_the_others(stager, tmp_path):
    inputs, keys = _three(stager, tmp_path, "job-22")
    first_done, third_opened, failed = threading.Event(), threading.Event(), threading.Event()

    def part(kwargs, call):
        if kwargs["Key"] == keys[1] and kwargs["PartNumber"] == 2:
            first_done.wait(5)
            third_opened.wait(5)
            failed.set()
            raise _injected("UploadPart")
        if kwargs["Key"] == keys[2]:
            failed.wait(5)
            time.sleep(0.2)
        return call()

    def complete(kwargs, call):
        res = call()
        if kwargs["Key"] == keys[0]:
            first_done.set()
        return res

    def create(kwargs, call):
        res = call()
        if kwargs["Key"] == keys[2]:
            third_opened.set()
        return res
    watch = stager.client = Watching(stager.client, {"upload_part": part, "complete_multipart_upload": complete,
                                                     "create_multipart_upload": create})
    with pytest.raises(backends.TransferInterrupted, match="UploadPart of %s failed" % keys[1]) as err:
        stager.stage_inputs("job-22", inputs)
    assert watch.keys("abort_multipart_upload") == {keys[2]}
    uploads = stager.client.list_multipart_uploads(Bucket=stager.bucket)["Uploads"]
    assert [u["Key"] for u in uploads] == [keys[1]]
    stored = stager.client.list_parts(Bucket=stager.bucket, Key=keys[1], UploadId=uploads[0]["UploadId"])["Parts"]
    assert 2 not in [p["PartNumber"] for p in stored] and err.value.done_bytes == sum(p["Size"] for p in stored) > 0
    objects = stager.client.list_objects_v2(Bucket=stager.bucket, Prefix="site-a/")["Contents"]
    assert [o["Key"] for o in objects] == [keys[0]]
    # the next try skips the first file, resumes the second and sends the third
    stager.client = watch.client
    got = stager.stage_inputs("job-22", inputs)
    assert got["resumed"] and got["parts_reused"] == len(stored) and got["parts_sent"] == 3 + 3 - len(stored)
    assert got["bytes_skipped"] == os.path.getsize(inputs[0]["path"]) + err.value.done_bytes
    assert got["sha256"] == dict((it["name"], _sha(it["path"])) for it in inputs)
    assert "Uploads" not in stager.client.list_multipart_uploads(Bucket=stager.bucket)
