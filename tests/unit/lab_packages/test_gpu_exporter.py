"""The GPU exporter stand-in collects as dcgm-exporter does: once per interval, one collection
at a time, whatever the number of scrapes; an injected Xid still shows at the next scrape."""
import os
import subprocess
import threading
import time

from lab_packages_support import PACKAGES, load_module

exporter = load_module("hgpu_gpu_exporter", os.path.join(PACKAGES, "gpu-exporter", "hybridgpu-gpu-exporter.py"))

GPU = {"index": "0", "uuid": "GPU-1", "name": "NVIDIA A100-SXM4-80GB", "driver_version": "535.230.02",
       "utilization.gpu": "0", "utilization.memory": "0", "memory.used": "0", "memory.free": "81920",
       "temperature.gpu": "30", "power.draw": "60", "clocks.sm": "1410", "clocks.mem": "1593"}


class SlowRead:
    """A collection that takes a while and counts how often it ran and how many ran at once."""

    def __init__(self, fail=False):
        self.calls = 0
        self.running = 0
        self.most = 0
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, _nvidia_smi):
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
        if self.fail:
            raise subprocess.CalledProcessError(1, "nvidia-smi")
        return [dict(GPU)]


def test_scrapes_together_share_one_collection():
    read = SlowRead()
    collector = exporter.Collector("nvidia-smi", 30.0, read=read)
    threads = [threading.Thread(target=collector.get, name="scrape-%d" % number) for number in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert read.calls == 1 and read.most == 1


def test_a_reading_older_than_the_interval_is_taken_again():
    now = [100.0]
    read = SlowRead()
    collector = exporter.Collector("nvidia-smi", 30.0, clock=lambda: now[0], read=read)
    assert collector.get()[0]["uuid"] == "GPU-1"
    now[0] += 29.9
    collector.get()
    assert read.calls == 1
    now[0] += 0.1
    collector.get()
    assert read.calls == 2


def test_a_failed_collection_is_tried_again_at_the_next_scrape():
    read = SlowRead(fail=True)
    collector = exporter.Collector("nvidia-smi", 30.0, clock=lambda: 5.0, read=read)
    for attempt in range(2):
        try:
            collector.get()
        except subprocess.CalledProcessError:
            pass
        else:
            raise AssertionError("attempt %d: the failure was not raised" % attempt)
    assert read.calls == 2


def test_an_injected_xid_shows_without_a_new_collection(tmp_path):
    spec = tmp_path / "gpu-spec.json"
    spec.write_text('{"faults": {"xid": []}}')
    read = SlowRead()
    collector = exporter.Collector("nvidia-smi", 30.0, read=read)
    before = exporter.render(collector.get(), exporter.read_xids(str(spec)), "owned-a100-1")
    spec.write_text('{"faults": {"xid": [{"gpu": 0, "xid": 79}]}}')
    after = exporter.render(collector.get(), exporter.read_xids(str(spec)), "owned-a100-1")
    assert read.calls == 1
    assert 'DCGM_FI_DEV_XID_ERRORS{gpu="0"' in before and "} 0\n" in before
    assert [line for line in after.splitlines() if line.startswith("DCGM_FI_DEV_XID_ERRORS{")][0].endswith(" 79")


def test_a_changed_gpu_spec_starts_a_new_collection(tmp_path):
    spec = tmp_path / "gpu-spec.json"
    spec.write_text('{"faults": {"hide_gpus": 0}}')
    read = SlowRead()
    collector = exporter.Collector("nvidia-smi", 30.0, spec_path=str(spec), clock=lambda: 5.0, read=read)
    collector.get()
    collector.get()
    assert read.calls == 1
    spec.write_text('{"faults": {"hide_gpus": 2}}')
    collector.get()
    collector.get()
    assert read.calls == 2
