"""Shared world for protocol tests: in-memory backends and a fake clock."""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import Dispatcher
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.tracker import Tracker


class Clock(object):
    def __init__(self, start=1_700_000_000.0):
        self.now = start

    def __call__(self):
        self.now += 0.001
        return self.now


class Ids(object):
    def __init__(self):
        self.count = 0

    def __call__(self):
        self.count += 1
        return "att-%d" % self.count


class World(object):
    def __init__(self, db=":memory:", path="policy", **caps):
        self.local = backends.MemoryLocalQueue()
        self.storage = backends.MemoryStorage()
        self.cloud = backends.MemoryCloud(self.storage)
        self.stager = backends.MemoryStager(self.storage)
        self.tracker = Tracker(db, clock=Clock())
        self.disp = Dispatcher(self.local, self.cloud, self.stager, self.tracker, path, id_factory=Ids(), **caps)

    def add(self, job_id):
        self.local.add(job_id)

    def run_cloud_to_end(self, job_id):
        while self.cloud.live(job_id):
            self.cloud.advance(job_id)

    def both_sides(self, job_id):
        return self.local.state(job_id) == backends.Q_RUNNING and self.cloud.live(job_id)


INPUTS = [{"name": "data.bin", "size": 1000}, {"name": "shards", "size": 4000, "shared": True}]
