"""Property test: random fault schedules against the protocol with the in-memory backends.

Checked at every step: no job runs on both sides at once, at most one commit per job ID, no job
whose output was committed also ran locally, one cloud Job per attempt, attempts under the cap.
After the faults stop and the world settles: every job is finished (committed once) or back in the
local queue and run there, and its trace explains it; a committed job's checksum is that of the
output its committed attempt really wrote, and so is the copy that landed on-prem.

It runs against both ledgers: the SQLite tracker, and the Kubernetes ledger (ledger_k8s) over the
in-memory double of the API (ledger_world.FakeObjects: 409 on a second create and on a stale
resourceVersion; test_ledger_k8s holds it to the emulator's answers) and, for a few short schedules,
over the API emulator on loopback (HTTPS, official client; about 45 ms a call here, so a full
schedule takes close to a minute). Each schedule has its own object name prefix.
Schedules per run: HGPU_PROTOCOL_SCHEDULES for SQLite (default 500, about 10 s on a loaded CI machine;
``make soak`` runs 10,000), HGPU_PROTOCOL_K8S_SCHEDULES for the double (default 100; ``make soak`` runs 1,000) and
HGPU_PROTOCOL_K8S_EMULATOR_SCHEDULES for the emulator (default 1, of at most 40 moves).
The count is part of the test id, and the test fails when fewer schedules ran.
"""
import itertools
import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import backends
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import protocol
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger_k8s import K8sLedger
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.ledger_kube import KubeObjects
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.protocol import Dispatcher

from ledger_world import Emulator, FakeObjects
from ovf_world import INPUTS, Clock, Ids, World

IMAGE = {"name": "overflow-job.tar"}

JOBS = ["job-a", "job-b"]
MAX_ATTEMPTS = 3
SCHEDULES = int(os.environ.get("HGPU_PROTOCOL_SCHEDULES", "500"))
K8S_SCHEDULES = int(os.environ.get("HGPU_PROTOCOL_K8S_SCHEDULES", "100"))
EMULATOR_SCHEDULES = int(os.environ.get("HGPU_PROTOCOL_K8S_EMULATOR_SCHEDULES", "1"))
# the ledger each schedule gets (None: the World's own SQLite tracker in memory)
LEDGER = {"factory": None}

job = st.sampled_from(JOBS)
action = st.one_of(
    # the protocol's own moves appear more often than faults so that schedules get deep
    st.tuples(st.sampled_from(["dispatch_policy", "dispatch_operator", "step", "step", "step", "sched_start",
                               "sched_finish", "cloud_advance", "cloud_advance", "cloud_advance", "node_lost",
                               "operator_return", "second_commit", "second_commit",
                               "gpus_free_at_dispatch", "cloud_finish_and_step"]), job),
    st.tuples(st.sampled_from(["link_down", "link_up", "drop_response", "reject_quota", "interrupt_transfer",
                               "evict_image", "corrupt_image_pull",
                               "corrupt_result", "fail_return"]), st.just(None)),
)


class Sim(object):
    def __init__(self):
        self.world = World(max_attempts=MAX_ATTEMPTS)
        if LEDGER["factory"] is not None:
            self.world.tracker.close()
            self.world.tracker = self.world.disp.tracker = LEDGER["factory"]()
        ids = Ids()
        self.world.disp.new_id = ids
        self.operator = Dispatcher(self.world.local, self.world.cloud, self.world.stager, self.world.tracker, "operator",
                                   actor="operator", max_attempts=MAX_ATTEMPTS, id_factory=ids)
        for j in JOBS:
            self.world.add(j)
        self.world.storage.onprem_images[IMAGE["name"]] = b"image-bytes" * 100
        self.second_commit_tries = 0

    def do(self, name, j, data):
        world = self.world
        if name == "dispatch_policy":
            world.disp.dispatch(j, "small-input", {}, INPUTS, image=IMAGE)
        elif name == "dispatch_operator":
            self.operator.dispatch(j, "large-input", {}, INPUTS, image=IMAGE)
        elif name == "step":
            world.disp.step(j)
        elif name == "sched_start":
            world.local.start(j)
        elif name == "sched_finish":
            world.local.finish(j)
        elif name == "cloud_advance":
            world.cloud.advance(j)
        elif name == "cloud_finish_and_step":
            world.cloud.advance(j)
            world.cloud.advance(j)
            world.disp.step(j)
        elif name == "node_lost":
            world.cloud.lose_node(j)
        elif name == "operator_return":
            self.operator.return_to_local(j, who="operator:drill")
        elif name == "second_commit":
            c = world.tracker.commit_of(j)
            if c is not None:
                attempts = [a["attempt_id"] for a in world.tracker.attempts(j)]
                pick = data.draw(st.sampled_from(attempts))
                v = world.tracker.commit(j, pick, "sha256:dup", "drill")
                assert not v["committed"]
                self.second_commit_tries += 1
        elif name == "gpus_free_at_dispatch":
            world.local.started_on_hold.add(j)
        elif name == "link_down":
            world.cloud.link_down = True
        elif name == "link_up":
            world.cloud.link_down = False
        elif name == "drop_response":
            world.cloud.drop_responses += 1
        elif name == "reject_quota":
            world.cloud.reject_next += 1
        elif name == "evict_image":
            world.stager.clear_image(IMAGE["name"])
        elif name == "corrupt_image_pull":
            world.stager.corrupt_pull_next += 1
        elif name == "interrupt_transfer":
            world.stager.interrupt_next += 1
        elif name == "corrupt_result":
            world.stager.corrupt_next += 1
        elif name == "fail_return":
            world.stager.fail_return_next += 1

    def check(self):
        world = self.world
        created = [att for dummy, att in world.cloud.creations]
        assert len(created) == len(set(created)), "an attempt created two cloud Jobs"
        started_locally = {jid for jid, what in world.local.history if what == "started"}
        for j in JOBS:
            assert not world.both_sides(j), "%s runs on both sides" % j
            assert world.tracker.commit_count(j) <= 1
            if world.tracker.commit_count(j):
                assert j not in started_locally, "%s committed from the cloud and also ran locally" % j
            cloud_attempts = [a for a in world.tracker.attempts(j) if a["cloud_name"]]
            assert len(cloud_attempts) <= MAX_ATTEMPTS

    def settle(self):
        world = self.world
        world.cloud.link_down = False
        world.cloud.drop_responses = world.cloud.reject_next = 0
        world.stager.interrupt_next = world.stager.corrupt_next = world.stager.fail_return_next = 0
        world.local.started_on_hold.clear()
        for dummy in range(30):
            for j in JOBS:
                world.cloud.advance(j)
                world.disp.step(j)
                self.check()
                if world.local.state(j) == backends.Q_QUEUED:
                    world.local.start(j)
                elif world.local.state(j) == backends.Q_RUNNING:
                    world.local.finish(j)
                self.check()

    def final(self):
        world = self.world
        for j in JOBS:
            trace = world.tracker.trace(j) if world.tracker.job(j) else None
            local = world.local.state(j)
            live = world.cloud.live(j)
            assert not live, "%s still has a live cloud Job after settling" % j
            if world.tracker.commit_count(j) == 1:
                assert trace["job"]["state"] == protocol.J_FINISHED
                commit = world.tracker.commit_of(j)
                real = backends.sha256_hex(backends._content("out:%s:%s" % (j, commit["attempt_id"]),
                                                             world.cloud.output_size))
                assert commit["checksum"] == real, "%s committed a checksum that is not its output's" % j
                landed = world.storage.onprem_outputs.get(commit["output_ref"])
                assert landed is not None and backends.sha256_hex(landed) == real, "%s: the on-prem copy is not the output" % j
                assert local == backends.Q_WITHDRAWN
                assert trace["verdict"]["cloud_resources_in_use"] == []
            else:
                # not lost: it went back to the local queue and ran there
                assert local == backends.Q_DONE, "%s is %s locally with no commit" % (j, local)
                if trace is not None:
                    assert trace["job"]["state"] in (protocol.J_BACK_LOCAL, protocol.J_LOCAL_RUNNING, protocol.J_QUEUED, protocol.J_GONE)
                    assert trace["verdict"]["cloud_resources_in_use"] == []


RAN = []


def one_schedule(actions, data):
    RAN.append(1)
    sim = Sim()
    try:
        for name, j in actions:
            sim.do(name, j, data)
            sim.check()
        sim.settle()
        sim.final()
        # a second commit after settling, by a drawn attempt, is refused too
        for j in JOBS:
            sim.do("second_commit", j, data)
        sim.check()
    finally:
        sim.world.tracker.close()


def run_schedules(count, max_moves=120):
    del RAN[:]
    settings(max_examples=count, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
        given(actions=st.lists(action, min_size=20, max_size=max_moves), data=st.data())(one_schedule))()
    assert len(RAN) >= count, "only %d of %d schedules ran" % (len(RAN), count)


@pytest.mark.parametrize("schedules", [SCHEDULES], ids=["%d-schedules" % SCHEDULES])
def test_random_fault_schedules_keep_exactly_once(schedules):
    LEDGER["factory"] = None
    run_schedules(schedules)


def use_k8s_ledger(objects):
    count = itertools.count()
    LEDGER["factory"] = lambda: K8sLedger(objects, objects.ns, prefix="s%d" % next(count), clock=Clock())


@pytest.mark.parametrize("schedules", [K8S_SCHEDULES], ids=["k8s-double-%d-schedules" % K8S_SCHEDULES])
def test_random_fault_schedules_keep_exactly_once_on_the_k8s_ledger(schedules):
    use_k8s_ledger(FakeObjects())
    try:
        run_schedules(schedules)
    finally:
        LEDGER["factory"] = None


@pytest.mark.slow
@pytest.mark.parametrize("schedules", [EMULATOR_SCHEDULES], ids=["k8s-emulator-%d-schedules" % EMULATOR_SCHEDULES])
def test_random_fault_schedules_keep_exactly_once_on_the_k8s_ledger_in_the_emulator(tmp_path, schedules):
    emu = Emulator(tmp_path)
    ns = "ledger-%s" % uuid.uuid4().hex[:6]
    emu.kube().ensure_namespace(ns)
    use_k8s_ledger(KubeObjects(emu.kube(), ns))
    try:
        run_schedules(schedules, max_moves=40)
    finally:
        LEDGER["factory"] = None
        emu.stop()
