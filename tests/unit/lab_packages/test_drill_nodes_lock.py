"""The lab drill's lock over the shared cloud nodes: backends run their scenarios side by side, and a
lost-node scenario has the nodes alone (tests/lab/overflow/drill.py SharedNodes)."""
import importlib.util
import os
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DRILL = os.path.join(HERE, "..", "..", "lab", "overflow", "drill.py")


def load():
    spec = importlib.util.spec_from_file_location("lab_drill_for_lock", DRILL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(lock, events, name, alone, hold_s, start_after=0.0):
    time.sleep(start_after)
    with lock.hold(alone):
        events.append(("in", name, time.monotonic()))
        time.sleep(hold_s)
        events.append(("out", name, time.monotonic()))


def spans(events):
    got = {}
    for kind, name, at in events:
        got.setdefault(name, {})[kind] = at
    return got


def test_scenarios_share_the_nodes_and_a_lost_node_scenario_has_them_alone():
    lock = load().SharedNodes()
    events = []
    threads = [threading.Thread(target=run, args=(lock, events, "a", False, 0.4)),
               threading.Thread(target=run, args=(lock, events, "b", False, 0.4, 0.05)),
               threading.Thread(target=run, args=(lock, events, "lost", True, 0.3, 0.1)),
               threading.Thread(target=run, args=(lock, events, "c", False, 0.1, 0.2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    s = spans(events)
    assert s["b"]["in"] < s["a"]["out"], "two scenarios run side by side"
    assert s["lost"]["in"] >= max(s["a"]["out"], s["b"]["out"]), "the lost node waits for the running scenarios"
    assert s["c"]["in"] >= s["lost"]["out"], "a scenario that comes after a waiting lost-node scenario waits for it"
