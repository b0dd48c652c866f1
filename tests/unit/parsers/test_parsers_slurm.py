"""Slurm parsers beyond the real samples (multi-job scontrol, mismatched rows)."""
from ansible_collections.hybridgpu.fleet.plugins.module_utils.parsers import slurm


def test_scontrol_multiple_jobs():
    text = ("JobId=11 JobName=a\n   UserId=u(1) JobState=PENDING Reason=JobHeldUser Priority=0\n\n"
            "JobId=12 JobName=b\n   UserId=u(1) JobState=RUNNING Reason=None NodeList=owned-a100-1\n")
    jobs = slurm.parse_scontrol_jobs(text)["jobs"]
    assert [j["job_id"] for j in jobs] == ["11", "12"]
    assert jobs[0]["reason"] == "JobHeldUser" and jobs[1]["nodelist"] == "owned-a100-1"


def test_squeue_held_reason_and_bad_row():
    text = (" JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n"
            "    77     gpu  train  ann PD 0:00     1 (JobHeldAdmin)\n"
            "    78     gpu\n")
    out = slurm.parse_squeue(text)
    assert out["jobs"][0]["held"] is True and out["jobs"][0]["state"] == "PENDING"
    assert len(out["errors"]) == 1


def test_squeue_empty():
    assert slurm.parse_squeue("")["jobs"] == []
