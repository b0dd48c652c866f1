"""The node side of the key removal (plugins/modules/member_ssh_keys.py): which lines carry a
key, what is kept, how the file is replaced, and what is refused."""
import os
import stat

import pytest

from ansible_collections.hybridgpu.fleet.plugins.modules import member_ssh_keys as m

BODY = "AAAAC3NzaC1lZDI1NTE5AAAAIJxu1Y2IhVgC4b2cJ1CvBy5l4mXl5Y1w6eX0b3e8m1Zq"
OTHER = "AAAAC3NzaC1lZDI1NTE5AAAAIHq8c7l0Zb6V5kP3y2m4n1x0w9v8u7t6s5r4q3p2o1nA"
KEYS = {("ssh-ed25519", BODY)}


@pytest.mark.parametrize("line", [
    "ssh-ed25519 %s member" % BODY,
    "ssh-ed25519 %s" % BODY,
    'from="10.0.0.0/8",no-pty ssh-ed25519 %s member@laptop' % BODY,
    '  command="/bin/true" ssh-ed25519 %s\n' % BODY,
])
def test_a_line_with_the_key_carries_it(line):
    assert m.carries(line, KEYS) == ("ssh-ed25519", BODY)


@pytest.mark.parametrize("line", [
    "ssh-ed25519 %s admin" % OTHER,
    "# ssh-ed25519 %s a comment that names the key" % BODY,
    "ssh-rsa %s same body, other type" % BODY,
    "ssh-ed25519 %sX longer body" % BODY,
    "",
])
def test_other_lines_do_not(line):
    assert m.carries(line, KEYS) is None


def test_a_key_line_must_be_one():
    with pytest.raises(ValueError):
        m.parse_key("not-a-type %s" % BODY)
    with pytest.raises(ValueError):
        m.parse_key("ssh-ed25519 !!notbase64!!")
    assert m.parse_key("ssh-ed25519 %s c" % BODY) == ("ssh-ed25519", BODY)


def home_with(tmp_path, text, mode=0o600):
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    path = ssh / "authorized_keys"
    path.write_text(text)
    os.chmod(str(path), mode)
    return str(tmp_path / "home"), path


def test_only_the_member_s_lines_go_and_the_mode_stays(tmp_path):
    text = "# admins\nssh-ed25519 %s admin\nno-pty ssh-ed25519 %s member\n\nssh-ed25519 %s member again\n" % (OTHER, BODY, BODY)
    home, path = home_with(tmp_path, text, 0o640)
    got, removed, diff = m.clean("ops", home, KEYS, check_mode=True)
    assert got == str(path) and len(removed) == 2 and path.read_text() == text  # check mode writes nothing
    assert diff["after"] == "# admins\nssh-ed25519 %s admin\n\n" % OTHER
    got, removed, diff = m.clean("ops", home, KEYS, check_mode=False)
    assert path.read_text() == "# admins\nssh-ed25519 %s admin\n\n" % OTHER
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o640
    assert [r["key"] for r in removed] == ["ssh-ed25519 ..." + BODY[-16:]] * 2
    assert m.clean("ops", home, KEYS, check_mode=False)[1] == []  # again: nothing to remove
    assert not [n for n in os.listdir(os.path.dirname(str(path))) if n != "authorized_keys"]  # no temporary file left


def test_a_missing_file_has_nothing_to_remove(tmp_path):
    assert m.clean("ops", str(tmp_path), KEYS, check_mode=False) == (None, [], None)


def test_a_linked_file_or_folder_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("ssh-ed25519 %s member\n" % BODY)
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    os.symlink(str(target), str(tmp_path / "home" / ".ssh" / "authorized_keys"))
    with pytest.raises(OSError, match="symbolic link"):
        m.clean("ops", str(tmp_path / "home"), KEYS, check_mode=False)
    (tmp_path / "other").mkdir()
    os.symlink(str(tmp_path / "home" / ".ssh"), str(tmp_path / "other" / ".ssh"))
    with pytest.raises(OSError, match="symbolic link"):
        m.clean("ops", str(tmp_path / "other"), KEYS, check_mode=False)
    assert target.read_text() == "ssh-ed25519 %s member\n" % BODY


@pytest.mark.parametrize("name,ok", [("root", True), ("ops-lead", True), ("_svc", True), ("machine$", True),
                                     ("../etc", False), ("Root", False), ("a b", False), ("", False), ("x" * 33, False)])
def test_account_names(name, ok):
    assert bool(m.USER_NAME.match(name)) is ok
