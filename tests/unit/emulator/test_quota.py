"""Object-count ResourceQuota admission in the emulator store (used by the overflow drill)."""
import os
import sys

import pytest

LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab")
sys.path.insert(0, os.path.abspath(LAB))

from k8s_emulator.resources import BY_PLURAL  # noqa: E402
from k8s_emulator.store import ApiError, Store  # noqa: E402


def test_count_quota_refuses_the_job_over_the_limit_with_403():
    st = Store()
    st.create(BY_PLURAL["namespaces"], None, {"metadata": {"name": "ovf"}})
    st.create(BY_PLURAL["resourcequotas"], "ovf",
              {"metadata": {"name": "jobs"}, "spec": {"hard": {"count/jobs.batch": "1"}}})
    st.create(BY_PLURAL["jobs"], "ovf", {"metadata": {"name": "a"}, "spec": {"template": {"spec": {}}}})
    with pytest.raises(ApiError) as err:
        st.create(BY_PLURAL["jobs"], "ovf", {"metadata": {"name": "b"}, "spec": {"template": {"spec": {}}}})
    assert err.value.code == 403 and err.value.reason == "Forbidden"
    assert 'jobs.batch "b" is forbidden: exceeded quota: jobs' in err.value.message
    assert "used: count/jobs.batch=1, limited: count/jobs.batch=1" in err.value.message
    # other namespaces and other kinds are not limited
    st.create(BY_PLURAL["namespaces"], None, {"metadata": {"name": "free"}})
    st.create(BY_PLURAL["jobs"], "free", {"metadata": {"name": "b"}, "spec": {"template": {"spec": {}}}})
    st.create(BY_PLURAL["configmaps"], "ovf", {"metadata": {"name": "c"}})
