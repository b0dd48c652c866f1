"""What a Slurm job asks for: scontrol show job (real samples, -o, --json) and the batch script."""
import json

import pytest

from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import slurm, slurm_job

import realsamples


def _one(filename):
    parsed = slurm.parse_scontrol_jobs(realsamples.read_sample("slurm", filename))
    assert parsed["errors"] == []
    return parsed["jobs"][0]


def test_real_running_job_gives_its_tres_time_and_command():
    req = slurm_job.job_request(_one("scontrol-show-job_running_epfl-fidis_partial.txt"))
    assert req["job_id"] == "10804568" and req["state"] == "RUNNING"
    assert req["cpus"] == 1 and req["mem_mb"] == 4096 and req["gpus"] == 0
    assert req["time_limit_s"] == 2 * 86400
    # a path holding '=' stays whole
    assert req["command"] == "/scratch/tdegeus/front-dynamics/Run/sims_A=900/python_PinAndTrigger.py-00.slurm"


@pytest.mark.parametrize("filename,job_id,cpus", [
    ("scontrol-show-job_man-example_completed-2010.txt", "71701", 10),
    ("scontrol-show-job_pending_launch_failed_requeued_held_partial.txt", "80634", 1)])
def test_real_samples_without_tres_read_cpus_and_unlimited_time(filename, job_id, cpus):
    req = slurm_job.job_request(_one(filename))
    assert req["job_id"] == job_id and req["cpus"] == cpus
    assert req["time_limit_s"] is None and req["gpus"] == 0 and req["workdir"] is None


ONE_LINE = ("JobId=4242 JobName=train-llm UserId=ana(1001) GroupId=ana(1001) MCS_label=N/A Priority=4294901758 "
            "Nice=0 Account=research QOS=normal JobState=PENDING Reason=Resources Dependency=(null) Requeue=1 "
            "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=1-02:30:00 TimeMin=N/A "
            "Partition=cloud-small NumNodes=1 NumCPUs=8 NumTasks=1 CPUs/Task=8 "
            "ReqTRES=cpu=8,mem=64G,node=1,billing=8,gres/gpu=2,gres/gpu:a100=2 "
            "TresPerNode=gres:gpu:a100:2 MinMemoryNode=64G "
            "Command=/home/ana/run.sh WorkDir=/home/ana/exp 1 StdOut=/home/ana/exp 1/slurm-4242.out")


def test_one_line_output_gives_gpus_type_memory_and_workdir():
    parsed = slurm.parse_scontrol_jobs(ONE_LINE)
    req = slurm_job.job_request(parsed["jobs"][0])
    assert req == {"job_id": "4242", "name": "train-llm", "state": "PENDING", "gpus": 2, "gpu_type": "a100",
                   "time_limit_s": 26 * 3600 + 1800, "cpus": 8, "mem_mb": 65536, "workdir": "/home/ana/exp 1",
                   "command": "/home/ana/run.sh", "partition": "cloud-small"}


@pytest.mark.parametrize("field,gpus,gtype", [
    ("TresPerNode=gres/gpu:h100:4", 4, "h100"), ("TresPerNode=gres:gpu:2", 2, None),
    ("TresPerJob=gres/gpu:1", 1, None), ("Gres=gpu:v100:3(IDX:0-2)", 3, "v100"), ("TresPerNode=gres/gpu", 1, None)])
def test_gpus_from_the_per_node_and_per_job_forms(field, gpus, gtype):
    req = slurm_job.job_request(slurm.parse_scontrol_jobs("JobId=7 JobName=x TRES=cpu=1,node=1 " + field)["jobs"][0])
    assert (req["gpus"], req["gpu_type"]) == (gpus, gtype)


@pytest.mark.parametrize("text,seconds", [("30", 1800), ("05:30", 330), ("01:00:00", 3600), ("2-00", 172800),
                                          ("1-01:01", 90060), ("0-00:00:10", 10), ("UNLIMITED", None),
                                          ("INFINITE", None)])
def test_time_formats(text, seconds):
    assert slurm_job.time_seconds(text) == seconds


def test_json_output_reads_the_same_fields():
    doc = {"jobs": [{"job_id": 99, "name": "eval", "job_state": ["PENDING"], "partition": "cloud-large",
                     "cpus": {"set": True, "infinite": False, "number": 16},
                     "time_limit": {"set": True, "infinite": False, "number": 90},
                     "memory_per_node": {"set": True, "infinite": False, "number": 32000},
                     "tres_req_str": "cpu=16,mem=32000M,node=1,gres/gpu=4",
                     "current_working_directory": "/scratch/eval", "command": "/scratch/eval/job.sh"}]}
    parsed = slurm_job.parse_scontrol_json(json.dumps(doc))
    assert parsed["errors"] == []
    req = slurm_job.job_request(parsed["jobs"][0])
    assert (req["job_id"], req["state"], req["gpus"], req["cpus"], req["mem_mb"], req["time_limit_s"], req["workdir"]) \
        == ("99", "PENDING", 4, 16, 32000, 5400, "/scratch/eval")
    assert slurm_job.parse_scontrol_json("oops")["errors"]


SCRIPT = """#!/bin/bash -l
#SBATCH --job-name=train   # a trailing comment
#SBATCH --container-image=nvcr.io#nvidia/pytorch:24.05-py3
#SBATCH -c 8
#SBATCH --gres gpu:a100:2

# setup
python3 train.py --out output
#SBATCH --container-image=ignored:after-the-first-command
"""


def test_batch_script_options_stop_at_the_first_command_and_pyxis_image_is_read():
    got = slurm_job.parse_batch_script(SCRIPT)
    assert got["shebang"] == "#!/bin/bash -l"
    assert got["container_image"] == "nvcr.io#nvidia/pytorch:24.05-py3"
    assert ("-c", "8") in got["options"] and ("--gres", "gpu:a100:2") in got["options"]
    assert ("--job-name", "train") in got["options"]
    assert not any(v == "ignored:after-the-first-command" for dummy, v in got["options"])
    assert got["body"] == SCRIPT
    assert slurm_job.parse_batch_script("#!/bin/sh\necho hi\n")["container_image"] is None
