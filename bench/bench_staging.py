#!/usr/bin/env python3
"""Benchmark: staging throughput with checksums, as a ratio to a plain copy of the same data, for both stagers.

rsync half: RsyncStager.stage_inputs of F files of S MB to the lab's cloud-storage host (one SSH session
for the job: the bytes go from the page cache to SSH and are hashed on the way, the storage host hashes
them as it writes them and renames each copy once the digests agree). Baseline in the
same run: one plain `scp` of the same files to another directory on the same host (no checksums).
It needs the lab's storage host and says so, then skips, when the lab is not up.
S3 half: S3Stager.stage_inputs of the same files (SHA-256 per object, multipart, one stream set per
job) and S3Stager.fetch_outputs of them (ranged parallel download through one stream set for all
files, each range written in place and the whole-file SHA-256 computed in file order as the bytes
stream in, checked against the sender's sha256 in the object's metadata, or with --manifest 0
against the store's part checksums). Baselines in the same run, the same part size and concurrency
and no checksums: boto3's upload_file / download_file file by file, and one boto3 TransferManager
given all files at once (its streams also run from one file into the next). The ratio is taken
against the faster of the two. The store is moto in server mode on loopback (a separate process),
or --endpoint with --bucket (credentials from the environment).
Sustained throughput = bytes / wall time of the whole call. Each figure is the median of --repeat runs,
stager and plain copies taking turns going first; the rsync half then checks the staged copies. Prints the rates and their ratios; no thresholds.
Removes what it wrote.

    .venv/bin/python bench/bench_staging.py [--files 4] [--mb 32] [--repeat 5] [--only s3|rsync]
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.remote import ssh_options  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import RsyncStager, file_sha256  # noqa: E402
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.rsync_stager import parse_sha256sum as rs_parse  # noqa: E402

HOST = "10.213.77.30"
MIB = 1024 * 1024


def make_inputs(tmp, files, mb):
    inputs = []
    for i in range(files):
        p = os.path.join(tmp, "in-%d.bin" % i)
        with open(p, "wb") as fh:
            fh.write(os.urandom(mb * 1_000_000))
        inputs.append({"name": os.path.basename(p), "path": p})
    return inputs


def rate(total, secs):
    return "%.2f s  (%.1f MB/s)" % (secs, total / secs / 1e6)


# -- rsync half ---------------------------------------------------------------------------------------

def lab_storage_up(key):
    if not os.path.isfile(key):
        return "no lab SSH key at %s" % key
    try:
        socket.create_connection((HOST, 22), timeout=2).close()
    except OSError as exc:
        return "the lab's storage host %s:22 is not reachable (%s)" % (HOST, exc)
    return None


def bench_rsync(a, inputs, total):
    why = lab_storage_up(a.key)
    if why:
        print("rsync half SKIPPED: %s; start the lab (tests/lab/lab up) to measure it" % why)
        return
    known = os.path.join(os.path.dirname(a.key), "known_hosts")
    known = known if os.path.isfile(known) else None
    root = "/srv/cloud-storage/bench-%d" % os.getpid()
    staged, plain = [], []
    st = RsyncStager(HOST, a.key, os.path.join(os.path.dirname(inputs[0]["path"]), "onprem"), remote_root=root,
                     known_hosts=known)
    try:
        for n in range(a.repeat):
            st.ssh("rm -rf %s; mkdir -p %s/plain" % (root, root))

            def stage():
                staged.append(st.stage_inputs("bench", inputs)["seconds"])

            def copy():
                t = time.monotonic()
                subprocess.run(["scp", "-q", "-i", a.key] + ssh_options(known) + [i["path"] for i in inputs] +
                               ["root@%s:%s/plain/" % (HOST, root)], check=True)
                plain.append(time.monotonic() - t)

            # stager and plain copy take turns going first
            for step in turn((stage, copy), n):
                step()
        # what landed is what was read (not timed)
        landed = rs_parse(st.ssh("sha256sum %s/jobs/bench/inputs/*" % root).stdout)
        wrong = [i["name"] for i in inputs if landed.get("%s/jobs/bench/inputs/%s" % (root, i["name"])) != file_sha256(i["path"])]
        if wrong:
            raise SystemExit("rsync half: the staged copies of %s differ from the inputs" % ", ".join(wrong))
    finally:
        st.ssh("rm -rf %s" % root, check=False)
    s, p = statistics.median(staged), statistics.median(plain)
    print("rsync stager with checksums: %s sustained" % rate(total, s))
    print("plain scp copy:              %s" % rate(total, p))
    print("ratio rsync (staged / plain throughput): %.2f" % (p / s))


# -- S3 half ------------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, "http://127.0.0.1:%d" % port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("moto server did not start on 127.0.0.1:%d" % port)


def bench_s3(a, inputs, total):
    try:
        from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import s3_stager
        from boto3.s3.transfer import TransferConfig, TransferManager
    except ImportError as exc:
        print("S3 half SKIPPED: %s (install boto3 and moto[server])" % exc)
        return
    proc = None
    if a.endpoint:
        endpoint, bucket, creds = a.endpoint, a.bucket, {}
    else:
        proc, endpoint = start_moto()
        bucket, creds = "bench-staging", {"access_key": "bench", "secret_key": "bench"}
    part = a.part_mb * MIB
    st = s3_stager.S3Stager(bucket, os.path.join(os.path.dirname(inputs[0]["path"]), "onprem"),
                            prefix="bench-%d" % os.getpid(), part_size=part, streams=a.streams,
                            endpoint_url=endpoint, region="us-east-1", **creds)
    # the plain copy: boto3's managed transfer, same part size and concurrency, no checksums at all
    plain_client = s3_stager.make_client(endpoint_url=endpoint, region="us-east-1", streams=a.streams, **creds)
    tconf = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=a.streams)
    try:
        if not a.endpoint:
            st.client.create_bucket(Bucket=bucket)
        up, down, plain_up, plain_down, all_up, all_down = [], [], [], [], [], []
        outputs = os.path.join(os.path.dirname(inputs[0]["path"]), "outputs")
        manifest = dict((it["name"], file_sha256(it["path"])) for it in inputs)
        for n in range(a.repeat):
            clean(st)
            # each repeat replaces the previous landing, as the plain download replaces its file
            attempt = "a1"

            def stage():
                up.append(st.stage_inputs("bench", inputs)["seconds"])

            def plain_upload():
                t = time.monotonic()
                for it in inputs:
                    plain_client.upload_file(it["path"], bucket, st.key("plain", it["name"]), Config=tconf)
                plain_up.append(time.monotonic() - t)

            def all_upload():
                t = time.monotonic()
                with TransferManager(plain_client, tconf) as tm:
                    futures = [tm.upload(it["path"], bucket, st.key("all", it["name"])) for it in inputs]
                    for fut in futures:
                        fut.result()
                all_up.append(time.monotonic() - t)

            def fetch():
                down.append(st.fetch_outputs("bench", types.SimpleNamespace(attempt_id=attempt))["seconds"])

            def plain_download():
                t = time.monotonic()
                for it in inputs:
                    plain_client.download_file(bucket, st.key("plain", it["name"]), it["path"] + ".plain", Config=tconf)
                plain_down.append(time.monotonic() - t)

            def all_download():
                t = time.monotonic()
                with TransferManager(plain_client, tconf) as tm:
                    futures = [tm.download(bucket, st.key("all", it["name"]), it["path"] + ".all") for it in inputs]
                    for fut in futures:
                        fut.result()
                all_down.append(time.monotonic() - t)

            # stager and plain copies take turns going first
            for step in turn((stage, plain_upload, all_upload), n):
                step()
            # the same bytes as an attempt's outputs, with the sender's checksum manifest (not timed)
            st.upload_tree("bench", attempt, outputs, manifest=manifest if a.manifest else None)
            for step in turn((fetch, plain_download, all_download), n):
                step()
    finally:
        clean(st)
        if proc:
            proc.kill()
            proc.wait()
    u, pu, au, d, pd, ad = (statistics.median(x) for x in (up, plain_up, all_up, down, plain_down, all_down))
    print("S3 store: %s (%s), part %d MiB, %d streams, median of %d, outputs %s" % (
        endpoint, "moto server, loopback" if proc else "given endpoint", a.part_mb, a.streams, a.repeat,
        "with the sender's sha256" if a.manifest else "with part checksums only"))
    print("S3 stager upload with SHA-256:    %s sustained" % rate(total, u))
    print("plain boto3 upload_file:          %s  (file by file)" % rate(total, pu))
    print("plain boto3 TransferManager:      %s  (all files at once)" % rate(total, au))
    print("ratio S3 upload (staged / faster plain throughput): %.2f" % (min(pu, au) / u))
    print("S3 stager fetch, verified:        %s sustained" % rate(total, d))
    print("plain boto3 download_file:        %s  (file by file)" % rate(total, pd))
    print("plain boto3 TransferManager:      %s  (all files at once)" % rate(total, ad))
    print("ratio S3 fetch (staged / faster plain throughput): %.2f" % (min(pd, ad) / d))


def turn(steps, n):
    """The steps, rotated so that each goes first in turn."""
    k = n % len(steps)
    return steps[k:] + steps[:k]


def clean(st):
    keys = [k for k, size in st._listing(st.key() + "/")]
    for i in range(0, len(keys), 1000):
        st.client.delete_objects(Bucket=st.bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--mb", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=["s3", "rsync"])
    ap.add_argument("--key", default=os.path.join(ROOT, ".lab", "ssh", "id_ed25519"))
    ap.add_argument("--endpoint", help="an S3 endpoint instead of a moto server (with --bucket)")
    ap.add_argument("--bucket")
    ap.add_argument("--part-mb", type=int, default=8)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--manifest", type=int, choices=[0, 1], default=1,
                    help="outputs carry the sender's sha256 in their metadata (1, as the cloud side's output step "
                         "writes them) or only the store's part checksums (0)")
    a = ap.parse_args()
    if a.endpoint and not a.bucket:
        ap.error("--endpoint needs --bucket")
    with tempfile.TemporaryDirectory() as tmp:
        inputs = make_inputs(tmp, a.files, a.mb)
        os.makedirs(os.path.join(tmp, "outputs"))
        for it in inputs:
            os.link(it["path"], os.path.join(tmp, "outputs", it["name"]))
        total = a.files * a.mb * 1_000_000
        print("data: %d files x %d MB = %.0f MB" % (a.files, a.mb, total / 1e6))
        if a.only != "s3":
            bench_rsync(a, inputs, total)
        if a.only != "rsync":
            bench_s3(a, inputs, total)


if __name__ == "__main__":
    main()
