"""Real Debian packages listed in debian-packages.txt are copied from the host's download
cache into the lab repository (the download itself runs in `lab up`, not here)."""
import os
import subprocess

import pytest
from lab_packages_support import PACKAGES, build_module  # noqa: F401 (fixture)  pylint: disable=unused-import


def _fake_deb(cache, name, version, arch="amd64", marker="one"):
    """A minimal binary package, as `apt-get download` would leave it in the cache."""
    root = cache.parent / ("stage-%s-%s" % (name, marker))
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr" / "share" / name).mkdir(parents=True)
    (root / "usr" / "share" / name / "marker").write_text(marker + "\n")
    (root / "DEBIAN" / "control").write_text(
        "Package: %s\nVersion: %s\nArchitecture: %s\nMaintainer: x <x@x.invalid>\n"
        "Depends: adduser\nDescription: fake %s\n" % (name, version, arch, name))
    cache.mkdir(exist_ok=True)
    target = cache / ("%s_%s_%s.deb" % (name, version, arch))
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(target)],
                   check=True, stdout=subprocess.DEVNULL)
    return target


@pytest.fixture
def listed(tmp_path):
    lst = tmp_path / "debian-packages.txt"
    lst.write_text("# comment\nprometheus-node-exporter  # host metrics\n\nprometheus-node-exporter\n")
    return lst


def test_list_file_parsing(build_module, listed):
    assert build_module.debian_names(str(listed)) == ["prometheus-node-exporter"]
    assert build_module.debian_names(str(listed) + ".absent") == []
    # The committed list carries the node exporter (host metrics on owned nodes).
    assert "prometheus-node-exporter" in build_module.debian_names(
        os.path.join(PACKAGES, "debian-packages.txt"))


def test_cached_deb_is_in_the_index(tmp_path, build_module, listed):
    cache, out = tmp_path / "cache", tmp_path / "apt"
    _fake_deb(cache, "prometheus-node-exporter", "1.5.0-1+b6")
    # A package whose name only starts with a listed name is not taken.
    _fake_deb(cache, "prometheus-node-exporter-collectors", "0+git20230210-1", arch="all")
    res = build_module.build_all(str(out), debian_cache=str(cache), debian_list=str(listed))
    deb = "prometheus-node-exporter_1.5.0-1+b6_amd64.deb"
    assert res["built"] and deb in res["debs"]
    assert not any(d.startswith("prometheus-node-exporter-collectors") for d in res["debs"])
    assert (out / deb).read_bytes() == (cache / deb).read_bytes()
    packages = (out / "Packages").read_text()
    assert "Package: prometheus-node-exporter\n" in packages
    assert "Filename: ./%s\n" % deb in packages
    assert "Package: prometheus-node-exporter-collectors" not in packages
    assert "Package: nccl-tests\n" in packages  # the lab's own packages are still there
    assert "Architectures: all amd64\n" in (out / "Release").read_text()


def test_cache_change_rebuilds_and_removal_drops_it(tmp_path, build_module, listed):
    cache, out = tmp_path / "cache", tmp_path / "apt"
    _fake_deb(cache, "prometheus-node-exporter", "1.5.0-1")
    assert build_module.build_all(str(out), debian_cache=str(cache), debian_list=str(listed))["built"]
    assert not build_module.build_all(str(out), debian_cache=str(cache), debian_list=str(listed))["built"]
    # Same file name, other bytes: the content hash notices.
    old = cache / "prometheus-node-exporter_1.5.0-1_amd64.deb"
    old.unlink()
    _fake_deb(cache, "prometheus-node-exporter", "1.5.0-1", marker="two")
    assert build_module.build_all(str(out), debian_cache=str(cache), debian_list=str(listed))["built"]
    assert (out / old.name).read_bytes() == old.read_bytes()
    # Built without the Debian packages: the copied .deb leaves the repository and index.
    assert build_module.build_all(str(out))["built"]
    assert not (out / old.name).exists()
    assert "prometheus-node-exporter" not in (out / "Packages").read_text()
    assert "Architectures: all\n" in (out / "Release").read_text()


def test_listed_but_not_cached_is_an_error(tmp_path, build_module, listed):
    with pytest.raises(RuntimeError, match="prometheus-node-exporter"):
        build_module.build_all(str(tmp_path / "apt"), debian_cache=str(tmp_path / "empty"),
                               debian_list=str(listed))


def test_fetch_skips_what_the_cache_has(tmp_path, build_module):
    cache = tmp_path / "cache"
    _fake_deb(cache, "prometheus-node-exporter", "1.5.0-1")
    # Nothing missing: no apt-get is run (env without PATH would make it fail).
    assert build_module.fetch_debian(str(cache), ["prometheus-node-exporter"], env={}) == []
