"""Every host of a batch writes its record into the same new folder at the same moment."""
import os
import threading

from ansible_collections.hybridgpu.fleet.plugins.module_utils.validate import wave_record

WRITERS = 8


def _write(folder, n, start, errors):
    start.wait()
    try:
        wave_record.atomic_write(os.path.join(folder, "validate-n%d.json" % n), "{}\n")
    except OSError as exc:
        errors.append(exc)


def test_hosts_writing_into_one_new_folder_at_once(tmp_path):
    for round_no in range(20):
        folder = str(tmp_path / ("r%d" % round_no) / "validation" / "t")
        start = threading.Barrier(WRITERS)
        errors = []
        threads = [threading.Thread(target=_write, args=(folder, n, start, errors)) for n in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert sorted(os.listdir(folder)) == sorted("validate-n%d.json" % n for n in range(WRITERS))
