"""Carrying the queued job to the cloud: every rewrite, every refusal, the Slurm pod spec."""
import copy
import json

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import carry
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow.k8s_backend import K8sCloudCluster

TPL = {"node_selector": {"pool": "overflow"}, "tolerations": [{"key": "cloud", "operator": "Exists"}],
       "registry_map": {"registry.site.example/": "registry.cloud.example/site/"},
       "onprem_registries": ["registry.site.example/", "harbor.lan/"], "onprem_services": ["ldap.corp"],
       "staged_claims": ["train-data"], "outputs": ["output"],
       "upload": {"host": "st.cloud", "ssh_key": "/etc/ovf/key", "root": "/srv/cs", "known_hosts": "/etc/ovf/known_hosts"}}


def queued_job(**pod_extra):
    main = {"name": "train", "image": "registry.site.example/ml/train:1.4", "command": ["python3", "train.py"],
            "args": ["--epochs", "3"], "workingDir": "/work",
            "env": [{"name": "LR", "value": "0.1"}, {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "32Gi"}, "requests": {"cpu": "8"}},
            "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "scratch", "mountPath": "/scratch"}]}
    pod = {"containers": [main], "restartPolicy": "Never", "securityContext": {"fsGroup": 1000},
           "nodeSelector": {"site-rack": "r7", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
           "tolerations": [{"key": "onprem-gpu", "operator": "Exists"}],
           "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "train-data"}},
                       {"name": "scratch", "emptyDir": {}}]}
    pod.update(pod_extra)
    return {"metadata": {"name": "train-1", "annotations": {}}, "spec": {"template": {"spec": pod}}}


def fields(rewrites):
    return dict((r["field"], r) for r in rewrites)


def test_kubernetes_job_is_copied_and_only_cloud_fields_rewritten():
    job = queued_job()
    pod, rewrites = carry.k8s_pod_spec("train-1", job, TPL, inputs=[{"name": "own"}, {"name": "vocab", "shared": True}])
    main = pod["containers"][0]
    orig = job["spec"]["template"]["spec"]["containers"][0]
    # kept exactly: resources, env, security contexts, working dir, other volumes
    for key in ("resources", "env", "securityContext", "workingDir", "volumeMounts"):
        assert main[key] == orig[key], key
    assert pod["securityContext"] == {"fsGroup": 1000}
    assert {"name": "scratch", "emptyDir": {}} in pod["volumes"]
    # rewritten, each listed
    rw = fields(rewrites)
    assert main["image"] == "registry.cloud.example/site/ml/train:1.4"
    assert rw["containers.train.image"]["from"] == "registry.site.example/ml/train:1.4"
    assert pod["nodeSelector"] == {"pool": "overflow"}             # the on-prem GPU product is dropped
    assert rw["nodeSelector"]["from"]["site-rack"] == "r7"
    assert pod["tolerations"] == TPL["tolerations"] and rw["tolerations"]["from"] == [{"key": "onprem-gpu", "operator": "Exists"}]
    assert {"name": "data", "emptyDir": {}} in pod["volumes"] and rw["volumes.data"]["from"] == {"persistentVolumeClaim": "train-data"}
    # the user's command and args are kept, after the upload step
    assert main["command"][:2] == ["python3", "-c"] and "args" not in main
    assert main["command"][-5:] == ["--", "python3", "train.py", "--epochs", "3"]
    cfg = json.loads(main["command"][3])
    assert cfg["outputs"] == ["output"] and cfg["workdir"] == "/work"
    assert cfg["inputs"] == [{"dir": "/data", "remote": "jobs/train-1/inputs"},
                             {"dir": "/data", "remote": "shared/vocab", "file": True}]
    assert rw["containers.train.command"]["to"] == "upload step around it"
    assert job == queued_job()            # the queued Job itself is not changed


def test_cloud_gpu_type_rewrites_the_product_label():
    pod, rewrites = carry.k8s_pod_spec("t", queued_job(), dict(TPL, cloud_gpu_type="NVIDIA H200"))
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H200"


def test_outputs_annotation_wins_over_the_template():
    job = queued_job()
    job["metadata"]["annotations"][carry.OUTPUTS_ANNOTATION] = "results, logs/run.txt"
    pod, dummy = carry.k8s_pod_spec("t", job, TPL)
    assert json.loads(pod["containers"][0]["command"][3])["outputs"] == ["results", "logs/run.txt"]


def test_image_outside_on_prem_registries_is_kept_without_a_rewrite():
    job = queued_job()
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/pytorch:24.05-py3"
    pod, rewrites = carry.k8s_pod_spec("t", job, TPL)
    assert pod["containers"][0]["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert "containers.train.image" not in fields(rewrites)


def _refused(job, tpl=None, claims=None):
    tpl = TPL if tpl is None else tpl
    with pytest.raises(carry.CarryRefused) as err:
        carry.k8s_pod_spec("train-1", job, tpl, claim_classes=claims)
    return str(err.value)


def _with(change):
    job = queued_job()
    change(job["spec"]["template"]["spec"])
    return job


@pytest.mark.parametrize("change,needs", [
    (lambda p: p["volumes"].append({"name": "models", "hostPath": {"path": "/mnt/models"}}), "hostPath /mnt/models"),
    (lambda p: p["volumes"].append({"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-pvc"}}),
     "PVC ckpt-pvc (storage class ceph-rbd)"),
    (lambda p: p["volumes"].append({"name": "cfg", "configMap": {"name": "train-cfg"}}), "volume cfg: configMap"),
    (lambda p: p["volumes"].append({"name": "nfs", "nfs": {"server": "filer", "path": "/x"}}), "volume nfs: nfs"),
    (lambda p: p["containers"][0]["env"].append({"name": "DB", "value": "postgres://pg.data.svc.cluster.local:5432/x"}),
     "env DB names on-prem service pg.data.svc.cluster.local"),
    (lambda p: p["containers"][0]["env"].append({"name": "AUTH", "value": "ldaps://ldap.corp"}),
     "env AUTH names on-prem service ldap.corp"),
    (lambda p: p["containers"][0]["env"].append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "k"}}}),
     "env TOKEN from on-prem secret tok"),
    (lambda p: p["containers"][0].update(envFrom=[{"configMapRef": {"name": "settings"}}]), "envFrom on-prem configMap settings"),
    (lambda p: p["containers"][0].update(image="harbor.lan/ml/train:2"), "image harbor.lan/ml/train:2 from on-prem registry"),
    (lambda p: p["containers"][0].pop("command"), "container train to name its command"),
    (lambda p: p.update(serviceAccountName="trainer"), "service account trainer"),
])
def test_each_on_prem_need_is_refused_and_named(change, needs):
    assert needs in _refused(_with(change), claims={"ckpt-pvc": "ceph-rbd", "train-data": "ceph-rbd"})


def test_all_needs_are_named_at_once_and_no_outputs_is_a_need():
    job = _with(lambda p: p["volumes"].append({"name": "m", "hostPath": {"path": "/m"}}))
    msg = _refused(job, tpl=dict(TPL, outputs=[]))
    assert "hostPath /m" in msg and "declared outputs" in msg


def test_a_claim_is_staged_only_when_the_site_says_so():
    msg = _refused(queued_job(), tpl=dict(TPL, staged_claims=[]), claims={"train-data": "ceph-rbd"})
    assert "PVC train-data (storage class ceph-rbd)" in msg


def test_missing_upload_settings_are_a_configuration_error():
    with pytest.raises(ValueError, match="job_template.upload needs host"):
        carry.k8s_pod_spec("t", queued_job(), dict(TPL, upload={"ssh_key": "/k", "root": "/r"}))


def test_cloud_job_body_carries_the_pod_spec_ids_and_rewrites():
    pod, rewrites = carry.k8s_pod_spec("train-1", queued_job(), TPL)
    cloud = K8sCloudCluster(kube=None, namespace="overflow")
    spec_in = {"pod_spec": copy.deepcopy(pod), "rewrites": rewrites, "labels": {"hybridgpu.io/overflow-job": "ovf-train-1"}}
    body = cloud.body("ovf-train-1", "train-1", "a1", spec_in)
    spec = body["spec"]["template"]["spec"]
    env = dict((e["name"], e.get("value")) for e in spec["containers"][0]["env"])
    assert env["OVF_JOB_ID"] == "train-1" and env["OVF_ATTEMPT_ID"] == "a1" and env["LR"] == "0.1"
    assert spec["volumes"] == pod["volumes"] and spec["securityContext"] == {"fsGroup": 1000}
    assert json.loads(body["metadata"]["annotations"]["hybridgpu.io/overflow-rewrites"]) == rewrites
    assert body["metadata"]["annotations"]["hybridgpu.io/overflow-job-id"] == "train-1"
    assert body["spec"]["backoffLimit"] == 0 and body["spec"]["suspend"] is False


REQ = {"job_id": "4242", "gpus": 2, "gpu_type": "a100", "time_limit_s": 5400, "cpus": 8, "mem_mb": 65536,
       "workdir": "/home/ana/exp"}
SCRIPT = {"shebang": "#!/bin/bash -l", "container_image": "registry.site.example/ml/eval:3",
          "body": "#!/bin/bash -l\n#SBATCH -c 8\npython3 eval.py\n"}


def test_slurm_job_runs_its_script_with_its_tres_in_its_pyxis_image():
    pod, rewrites = carry.slurm_pod_spec("4242", REQ, SCRIPT, dict(TPL, image="class/image:1", cloud_gpu_type="NVIDIA H200"),
                                         inputs=[{"name": "a"}])
    c = pod["containers"][0]
    assert c["image"] == "registry.cloud.example/site/ml/eval:3"          # the script's image, mapped
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "2", "memory": "65536Mi"},
                              "requests": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "65536Mi"}}
    assert pod["activeDeadlineSeconds"] == 5400
    assert pod["nodeSelector"] == {"pool": "overflow", "nvidia.com/gpu.product": "NVIDIA-H200"}
    assert c["command"][-3:] == ["/bin/bash", "-l", "/home/ana/exp/.ovf-batch-4242"]
    cfg = json.loads(c["command"][3])
    assert cfg["script"] == {"path": "/home/ana/exp/.ovf-batch-4242", "text": SCRIPT["body"]}
    assert cfg["workdir"] == "/home/ana/exp" and cfg["inputs"][0]["dir"] == "/home/ana/exp"
    env = dict((e["name"], e["value"]) for e in c["env"])
    assert env["SLURM_JOB_ID"] == "4242" and env["SLURM_SUBMIT_DIR"] == "/home/ana/exp"
    assert fields(rewrites)["image"]["to"] == "registry.cloud.example/site/ml/eval:3"


def test_slurm_job_without_an_image_uses_the_class_image_or_is_refused():
    script = dict(SCRIPT, container_image=None)
    pod, dummy = carry.slurm_pod_spec("4242", REQ, script, dict(TPL, image="nvcr.io/nvidia/pytorch:24.05-py3"))
    assert pod["containers"][0]["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    with pytest.raises(carry.CarryRefused, match="an image"):
        carry.slurm_pod_spec("4242", REQ, script, TPL)
    with pytest.raises(carry.CarryRefused, match="harbor.lan/x:1 from an on-prem registry"):
        carry.slurm_pod_spec("4242", REQ, dict(SCRIPT, container_image="harbor.lan/x:1"), TPL)


def test_a_read_only_mount_of_the_staged_inputs_becomes_writable_for_the_upload_step():
    job = queued_job()
    job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = True
    pod, rewrites = carry.k8s_pod_spec("t", job, TPL)
    assert pod["containers"][0]["volumeMounts"][0] == {"name": "data", "mountPath": "/data", "readOnly": False}
    assert fields(rewrites)["containers.train.volumeMounts.data.readOnly"]["to"] is False


def test_inputs_are_pulled_only_when_some_were_staged():
    assert carry.inputs_of("j", [], "/in") == []
    assert carry.inputs_of("j", [{"name": "v", "shared": True}], "/in") == [{"dir": "/in", "remote": "shared/v", "file": True}]
