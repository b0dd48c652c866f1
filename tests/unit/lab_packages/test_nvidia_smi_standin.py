"""The nvidia-smi stand-in prints the real tool's formats for the node's GPU spec."""
import os
import xml.etree.ElementTree as ET
from lab_packages_support import a100_spec, node, real_output  # noqa: F401 (fixtures)  pylint: disable=unused-import


ROWS = 8


def test_csv_header_units_and_values(node):
    res = node.smi("--query-gpu=index,name,memory.total,memory.used,memory.free,power.limit,"
                   "utilization.gpu,clocks.sm,driver_version,count", "--format=csv")
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    assert lines[0] == ("index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
                        "power.limit [W], utilization.gpu [%], clocks.current.sm [MHz], "
                        "driver_version, count")
    assert len(lines) == 1 + ROWS
    first = lines[1].split(", ")
    assert first[:3] == ["0", "NVIDIA A100-SXM4-80GB", "81920 MiB"]
    assert first[3] == "0 MiB"
    assert first[5] == "400.00 W"
    assert first[6] == "0 %"
    assert first[7].endswith(" MHz")
    assert first[8:] == ["535.230.02", "8"]


def test_csv_noheader_nounits_and_id(node):
    res = node.smi("-i", "3", "--query-gpu=index,memory.total,power.draw", "--format=csv,noheader,nounits")
    assert res.returncode == 0
    index, total, draw = res.stdout.strip().split(", ")
    assert (index, total) == ("3", "81920")
    assert float(draw) > 0 and "W" not in draw


def test_csv_header_kept_with_nounits(node):
    # Real output (tesla-p100 fixture): header keeps the unit brackets under nounits.
    res = node.smi("--query-gpu=memory.used", "--format=csv,nounits")
    assert res.stdout.splitlines()[0] == "memory.used [MiB]"
    assert res.stdout.splitlines()[1] == "0"


def test_unknown_field_is_rejected_like_real_tool(node):
    res = node.smi("--query-gpu=name,bogus.field", "--format=csv")
    assert res.returncode == 2
    assert res.stdout.startswith('Field "bogus.field" is not a valid field to query.')


def test_mig_fields_na_on_non_mig_gpu(node, a100_spec):
    spec = dict(a100_spec, model="NVIDIA L40S", count=4, memory_mib=46068, compute_cap="8.9")
    node.write(spec)
    res = node.smi("--query-gpu=name,mig.mode.current,mig.mode.pending,compute_cap", "--format=csv,noheader")
    assert res.stdout.splitlines() == ["NVIDIA L40S, [N/A], [N/A], 8.9"] * 4


def test_mig_enabled_hides_utilization(node, a100_spec):
    node.write(dict(a100_spec, mig="Enabled"))
    res = node.smi("-i", "0", "--query-gpu=mig.mode.current,utilization.gpu", "--format=csv,noheader")
    assert res.stdout == "Enabled, [N/A]\n"


def test_hide_gpus_fault(node, a100_spec):
    a100_spec["faults"]["hide_gpus"] = 2
    node.write(a100_spec)
    res = node.smi("--query-gpu=index,count", "--format=csv,noheader")
    assert res.stdout.splitlines() == ["%d, 6" % i for i in range(6)]
    assert len(node.smi("-L").stdout.splitlines()) == 6


def test_uuids_stable_and_unique(node):
    first = node.smi("--query-gpu=uuid,serial,pci.bus_id", "--format=csv,noheader").stdout
    again = node.smi("--query-gpu=uuid,serial,pci.bus_id", "--format=csv,noheader").stdout
    assert first == again
    uuids = [line.split(", ")[0] for line in first.splitlines()]
    assert len(set(uuids)) == ROWS and all(u.startswith("GPU-") and len(u) == 40 for u in uuids)
    assert first.splitlines()[0].endswith("00000000:10:00.0")


def test_list_form(node):
    lines = node.smi("-L").stdout.splitlines()
    assert len(lines) == ROWS
    assert lines[0].startswith("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-")
    assert lines[0].endswith(")")


def test_table_matches_real_l40s_layout(node, real_output):
    """Same values as the real L40S capture -> the same bytes, bar the timestamp."""
    node.write({
        "model": "NVIDIA L40S", "count": 1, "memory_mib": 46068, "pci_base": "00000000:01:00.0",
        "uuid_seed": "x", "mig": "Disabled", "power_limit_w": 350,
        "state": {"temperature_c": 64, "power_draw_w": 242, "utilization_gpu": 100,
                  "pstate": "P0", "persistence": "Off"},
    }, {"branch": "595", "version": "595.80", "cuda": "13.2"})
    real = real_output("nvidia-smi-table", "l40s_drv595.txt").splitlines()
    ours = node.smi().stdout.splitlines()
    assert ours[1:] == real[1:]
    assert len(ours[0]) == len(real[0])


def test_table_header_fields(node):
    out = node.smi().stdout
    assert "| NVIDIA-SMI 535.230.02             Driver Version: 535.230.02     CUDA Version: 12.2     |" in out
    assert out.count("NVIDIA A100-SXM4-80GB") == ROWS
    assert "No running processes found" in out
    assert all(len(line) == 91 for line in out.splitlines()[1:] if line)


def test_xml_report(node):
    res = node.smi("-q", "-x")
    assert res.returncode == 0
    root = ET.fromstring(res.stdout)
    assert root.tag == "nvidia_smi_log"
    assert root.findtext("driver_version") == "535.230.02"
    assert root.findtext("cuda_version") == "12.2"
    assert root.findtext("attached_gpus") == str(ROWS)
    gpus = root.findall("gpu")
    assert len(gpus) == ROWS
    assert gpus[0].findtext("product_name") == "NVIDIA A100-SXM4-80GB"
    assert gpus[0].findtext("uuid").startswith("GPU-")
    assert gpus[0].findtext("fb_memory_usage/total") == "81920 MiB"
    assert gpus[0].findtext("mig_mode/current_mig") == "Disabled"
    assert gpus[0].get("id") == "00000000:10:00.0"


def test_driver_version_follows_driver_json(node):
    node.write(driver={"branch": "550", "version": "550.163.01", "cuda": "12.4"})
    out = node.smi("--query-gpu=driver_version", "--format=csv,noheader").stdout
    assert out.splitlines() == ["550.163.01"] * ROWS
    assert "CUDA Version: 12.4" in node.smi().stdout


def test_no_driver_and_no_spec(node):
    os.unlink(node.driver_path)
    res = node.smi("-L")
    assert res.returncode == 9 and "couldn't communicate with the NVIDIA driver" in res.stdout
    node.write(driver={"branch": "535", "version": "535.230.02", "cuda": "12.2"})
    os.unlink(node.spec_path)
    res = node.smi("-L")
    assert (res.returncode, res.stdout) == (6, "No devices were found\n")


def test_bad_id(node):
    res = node.smi("-i", "42", "--query-gpu=name", "--format=csv")
    assert res.returncode == 6


def test_compute_apps_header_only(node):
    res = node.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert res.stdout == "pid, process_name, used_memory [MiB]\n"
