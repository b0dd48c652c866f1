"""The node's GPU exporter page, DCGM diagnostic and GPU feature discovery labels in the
validation verdicts: real dcgm-exporter / dcgmi outputs, the lab exporter's own text, and each
failure naming the node and the missing piece."""
import importlib.util
import os

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import gpu_health, validation
from ansible_collections.hybridgpu.fleet.plugins.modules import validation_check
from hgpu_testenv import REAL_OUTPUTS, ROOT

A100 = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 8, "gpu_memory_mib": 81920}
NODE = "owned-a100-1"


def real(tool, name):
    with open(os.path.join(REAL_OUTPUTS, tool, name), encoding="utf-8", newline="") as fh:
        return fh.read()


def load(name, *path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lab_exporter():
    return load("hybridgpu_gpu_exporter", "tests", "lab", "packages", "gpu-exporter", "hybridgpu-gpu-exporter.py")


def lab_page(count=8, xids=None, hostname=NODE):
    exporter = lab_exporter()
    gpus = [dict(zip(exporter.FIELDS, [str(i), "GPU-%08d" % i, "NVIDIA A100-SXM4-80GB", "535.161.08", "3", "1",
                                       "0", "81920", "34", "61.5", "1410", "1593"])) for i in range(count)]
    return exporter.render(gpus, xids or {}, hostname)


# -- the lab exporter's page ----------------------------------------------------------------

def test_lab_exporter_page_passes_for_every_gpu_of_the_row():
    out = gpu_health.exporter_verdict(NODE, lab_page(), 8)
    assert out["passed"], out["reasons"]
    assert out["gpus"] == [str(i) for i in range(8)] and out["hosts"] == [NODE]


def test_lab_exporter_missing_gpu_names_node_and_gpu():
    out = gpu_health.exporter_verdict(NODE, lab_page(count=6), 8)
    assert not out["passed"]
    assert out["reasons"] == [
        "GPU %d of node %s is missing from the GPU exporter page (8 GPUs in the matrix row, the page lists "
        "0, 1, 2, 3, 4, 5)" % (i, NODE) for i in (6, 7)]
    assert {"gpu": "7", "metric": None} in out["missing"]


def test_lab_exporter_missing_metric_family_names_node_gpu_and_metric():
    text = "\n".join(line for line in lab_page(count=2).splitlines()
                     if not (line.startswith("DCGM_FI_DEV_GPU_TEMP") and 'gpu="1"' in line))
    out = gpu_health.exporter_verdict(NODE, text, 2)
    assert out["reasons"] == ["GPU 1 of node %s does not report DCGM_FI_DEV_GPU_TEMP" % NODE]
    assert out["missing"] == [{"gpu": "1", "metric": "DCGM_FI_DEV_GPU_TEMP"}]


def test_lab_exporter_nonzero_xid_names_node_gpu_and_xid():
    out = gpu_health.exporter_verdict(NODE, lab_page(xids={3: 79}), 8)
    assert out["reasons"] == ["GPU 3 of node %s reports Xid 79" % NODE]


def test_lab_exporter_wrong_or_missing_hostname():
    out = gpu_health.exporter_verdict(NODE, lab_page(hostname="owned-a100-2"), 8)
    assert out["reasons"] == ["GPU exporter page of node %s carries Hostname owned-a100-2" % NODE]
    assert gpu_health.exporter_verdict(NODE, lab_page(hostname=NODE + ".lab.example"), 8)["passed"]
    out = gpu_health.exporter_verdict(NODE, lab_page(hostname=""), 8)
    assert out["reasons"] == ["GPU exporter page of node %s has GPU series without a Hostname label" % NODE]


def test_unreadable_page_names_the_node():
    out = gpu_health.exporter_verdict(NODE, "", 8, error="http://10.213.77.11:9400/metrics: HTTP status -1, refused")
    assert out["reasons"] == ["GPU exporter page of node %s could not be read: http://10.213.77.11:9400/metrics: "
                              "HTTP status -1, refused" % NODE]


# -- real dcgm-exporter outputs ---------------------------------------------------------------

def test_real_t4_page_passes():
    text = real("dcgm-exporter", "tesla-t4_drv460_dcgm-exporter-metrics.txt")
    out = gpu_health.exporter_verdict("424773df46e0", text, 1)
    assert out["passed"], out["reasons"]
    out = gpu_health.exporter_verdict("424773df46e0", text, 2)
    assert out["reasons"] == ["GPU 1 of node 424773df46e0 is missing from the GPU exporter page (2 GPUs in the "
                              "matrix row, the page lists 0)"]


def test_real_a100_mig_page_lacks_gpu_util():
    # dcgm-exporter's documentation sample: GPU and GPU-instance series, no DCGM_FI_DEV_GPU_UTIL (the
    # profiling metrics replace it under MIG).
    text = real("dcgm-exporter", "a100-40gb-mig-1g.5gb_gpu-and-gpu-instance-series_docs.txt")
    out = gpu_health.exporter_verdict("ub20-a100-k8s", text, 1)
    assert out["reasons"] == ["GPU 0 of node ub20-a100-k8s does not report DCGM_FI_DEV_GPU_UTIL"]
    families = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert gpu_health.exporter_verdict("ub20-a100-k8s", text, 1, families)["passed"]


def test_real_v100_excerpt_every_gpu_and_the_gaps():
    text = real("dcgm-exporter", "v100-sxm2-32gb-x4_dcgm-exporter-main-2024_excerpt.txt")
    assert gpu_health.exporter_verdict("r6i3n0", text, 4, ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",))["passed"]
    out = gpu_health.exporter_verdict("r6i3n0", text, 4, ("DCGM_FI_DEV_GPU_UTIL",))
    assert out["reasons"] == ["GPU %d of node r6i3n0 does not report DCGM_FI_DEV_GPU_UTIL" % i for i in (1, 2, 3)]


def test_real_a30_mig_instances_count_for_their_gpu():
    text = real("dcgm-exporter", "a30-mig-1g.6gb-x2_per-gpu-instance-series_excerpt.txt")
    node = "yg-data-k8s-gpu-a30-node-test-test0003.mt"
    assert gpu_health.exporter_verdict(node, text, 2, ("DCGM_FI_DEV_SM_CLOCK",))["passed"]


def test_real_injected_xid_42_is_reported():
    text = real("dcgm-exporter", "t400-4gb_drv545_xid-42-injected_exp-xid-errors-count.txt")
    out = gpu_health.exporter_verdict("workstation", text, 1, ("DCGM_FI_DEV_XID_ERRORS_ACTIVE",))
    assert out["reasons"] == ["GPU 0 of node workstation reports Xid 42 (1 times)"]


def test_real_page_from_another_host_is_refused():
    text = real("dcgm-exporter", "h100-80gb-hbm3-mig-1g.10gb_drv535_k8s-pod-labels_excerpt.txt")
    out = gpu_health.exporter_verdict(NODE, text, 1, ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",))
    assert out["reasons"] == ["GPU exporter page of node %s carries Hostname gsrh100-074" % NODE]


# -- dcgmi diag ---------------------------------------------------------------------------

@pytest.mark.parametrize("rc,error", [(127, "dcgmi not installed"), (2, "[Errno 2] No such file or directory: b'dcgmi'")])
def test_diag_not_installed_is_not_run_never_pass(rc, error):
    out = gpu_health.diag_verdict(NODE, "", rc, error)
    assert out["state"] == "not run" and out["note"] == "dcgmi not installed" and out["reasons"] == []


def test_diag_real_outputs():
    ok = gpu_health.diag_verdict(NODE, real("dcgmi-diag", "r2_p4de-a100-80gb-x8_dcgm3.3.3_drv535_all-pass.txt"))
    assert ok["state"] == "pass" and ok["reasons"] == []
    bad = gpu_health.diag_verdict(NODE, real("dcgmi-diag", "r2_gpu-memory-fail-gpu0_thermal-violation-warning_excerpt.txt"), 226)
    assert bad["state"] == "fail"
    assert bad["reasons"] == ["DCGM diagnostic on node %s failed: GPU Memory (GPU: 0)" % NODE]
    remap = gpu_health.diag_verdict(NODE, real("dcgmi-diag",
                                               "deployment-error_uncorrectable-memory-row-remap-pending_excerpt.txt"), 226)
    assert remap["state"] == "fail" and "GPU 3 has uncorrectable memory errors" in remap["reasons"][0]
    assert NODE in remap["reasons"][0]


def test_diag_that_did_not_run_fails():
    out = gpu_health.diag_verdict(NODE, "Error: unable to establish a connection to the specified host: localhost\n", 255,
                                  "non-zero return code")
    assert out["state"] == "fail"
    assert out["reasons"] == ["DCGM diagnostic on node %s did not run (rc 255): Error: unable to establish a "
                              "connection to the specified host: localhost" % NODE]


# -- the telemetry step through the module's judge ------------------------------------------

def telemetry_evidence(**extra):
    ev = {"series_nodes": [NODE, "cloud-h200-1"], "owned": [NODE], "cloud": ["cloud-h200-1"],
          "existing_nodes": [NODE], "alerts": [], "alert_name": "GPUXidError", "fault_node": "",
          "expected_gpus": "8", "exporter_metrics": list(gpu_health.EXPORTER_FAMILIES), "exporter_error": "",
          "dcgm_diag": {"rc": 127, "stdout": "", "msg": "dcgmi not installed"}}
    ev.update(extra)
    return ev


def test_telemetry_step_judges_the_exporter_page_and_diag():
    out = validation_check.judge("telemetry", NODE, telemetry_evidence(), lab_page())
    assert out["passed"], out["reasons"]
    assert out["exporter"]["gpus"] == [str(i) for i in range(8)]
    assert out["dcgm_diag"]["state"] == "not run"
    out = validation_check.judge("telemetry", NODE, telemetry_evidence(), lab_page(xids={0: 79}))
    assert out["reasons"] == ["GPU 0 of node %s reports Xid 79" % NODE]
    out = validation_check.judge("telemetry", NODE, telemetry_evidence(exporter_error="refused"), "")
    assert out["reasons"] == ["GPU exporter page of node %s could not be read: refused" % NODE]
    # without a page nor a diag the step is what it was
    plain = dict(telemetry_evidence(), dcgm_diag={})
    out = validation_check.judge("telemetry", NODE, plain)
    assert out["passed"] and "exporter" not in out and "dcgm_diag" not in out


def test_telemetry_without_matrix_row_reads_the_listed_gpus():
    out = validation_check.judge("telemetry", NODE, telemetry_evidence(expected_gpus=""), lab_page(count=2))
    assert out["passed"], out["reasons"]


# -- inventory: the GPU feature discovery labels -----------------------------------------------

def labelled_node(product="NVIDIA-A100-SXM4-80GB", count="8", **more):
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": count, "nvidia.com/gpu.present": "true"}
    labels.update(more)
    return {"metadata": {"name": NODE, "labels": labels}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}


def facts():
    return {"count": 8, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920}


def test_labelled_product_and_count_match_the_row():
    out = validation.inventory_verdict(NODE, facts(), labelled_node(), A100)
    assert out["passed"], out["reasons"]
    assert out["gpu_labels"]["state"] == "labelled" and out["gpu_labels"]["compared"] == ["gpu_model", "gpu_count"]


def test_labelled_product_mismatch_names_node_and_field():
    out = validation.inventory_verdict(NODE, facts(), labelled_node(product="NVIDIA-L40S"), A100)
    assert out["reasons"] == ["gpu_model (labels on node %s): expected NVIDIA A100-SXM4-80GB, observed NVIDIA-L40S"
                              % NODE]
    assert {"field": "gpu_model", "source": "labels", "expected": "NVIDIA A100-SXM4-80GB",
            "observed": "NVIDIA-L40S"} in out["differences"]


def test_labelled_count_mismatch_names_node_and_field():
    out = validation.inventory_verdict(NODE, facts(), labelled_node(count="4"), A100)
    assert out["reasons"] == ["gpu_count (labels on node %s): expected 8, observed 4" % NODE]
    # the role's expected_labels already checks nvidia.com/gpu.count: reported once, as that label
    out = validation.inventory_verdict(NODE, facts(), labelled_node(count="4"), A100, {"nvidia.com/gpu.count": "8"})
    assert out["reasons"] == ["label nvidia.com/gpu.count (api): expected 8, observed 4"]


def test_shared_and_mig_single_products_compare_their_gpu():
    shared = validation.inventory_verdict(NODE, facts(), labelled_node(product="A100-SXM4-80GB-SHARED"), A100)
    assert shared["passed"], shared["reasons"]
    mig = validation.inventory_verdict(
        NODE, facts(), labelled_node(product="NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", count="56"), A100)
    assert mig["passed"], mig["reasons"]
    assert mig["gpu_labels"]["compared"] == ["gpu_model"] and "single MIG strategy" in mig["gpu_labels"]["note"]


@pytest.mark.parametrize("labels", [{}, {"nvidia.com/gpu.count": "8"}])
def test_not_labelled_does_not_fail(labels):
    node = {"metadata": {"name": NODE, "labels": labels}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    out = validation.inventory_verdict(NODE, facts(), node, A100)
    assert out["passed"], out["reasons"]
    assert out["gpu_labels"]["state"] == "not labelled" and "not labelled" in out["gpu_labels"]["note"]


def test_lab_agent_labels_match_the_row():
    # the labels the lab's node agent sets from nvidia-smi on the A100 stand-in
    agent = load("hgpu_lab_node_agent", "tests", "lab", "packages", "node-agent", "agent.py")
    labels = agent.node_labels(NODE, [("NVIDIA A100-SXM4-80GB", 81920)] * 8, "535.161.08")
    summary = {"name": NODE, "labels": labels, "gpu_capacity": 8}
    out = validation_check.judge("inventory", NODE, {"facts": facts(), "node_obj": summary, "expected": A100,
                                                     "expected_labels": {"nvidia.com/gpu.count": "8"}})
    assert out["passed"], out["reasons"]
    assert out["gpu_labels"]["state"] == "labelled" and out["gpu_labels"]["product"] == "NVIDIA-A100-SXM4-80GB"


def test_health_gate_judges_the_real_diag_outputs():
    """The gate before a node returns to service: a real all-pass run passes, a real failed
    memory test fails naming the node and the test, no dcgmi passes as not run."""
    ok = validation_check.judge("health", NODE, {"dcgm_diag": {
        "rc": 0, "stdout": real("dcgmi-diag", "r2_p4de-a100-80gb-x8_dcgm3.3.3_drv535_all-pass.txt"), "msg": ""}})
    assert ok["passed"] and ok["dcgm_diag"]["state"] == "pass", ok
    bad = validation_check.judge("health", NODE, {"dcgm_diag": {
        "rc": 226, "stdout": real("dcgmi-diag", "r2_gpu-memory-fail-gpu0_thermal-violation-warning_excerpt.txt"),
        "msg": ""}})
    assert not bad["passed"] and bad["reasons"][0].startswith("DCGM diagnostic on node %s failed: " % NODE), bad
    assert "memory" in bad["reasons"][0].lower()
    absent = validation_check.judge("health", NODE, {"dcgm_diag": {"rc": 127, "stdout": "", "msg": "dcgmi not installed"}})
    assert absent["passed"] and absent["dcgm_diag"]["state"] == "not run"
