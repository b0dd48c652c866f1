"""The command runner: both front ends (subprocess and AnsibleModule.run_command) give the
child LANG=C, check the exit status against the accepted codes, and fail the same way."""
import sys

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common import cmd


def py(code):
    """argv of a small Python child."""
    return [sys.executable, "-c", code]


@pytest.fixture(params=["subprocess", "module"])
def runner(request):
    """cmd.run, or cmd.module_run bound to a real AnsibleModule."""
    if request.param == "subprocess":
        return cmd.run
    with patch_module_args({}):
        module = AnsibleModule(argument_spec={})
    return lambda argv, **kwargs: cmd.module_run(module, argv, **kwargs)


def test_the_child_runs_under_lang_c(runner, monkeypatch):
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    res = runner(py("import os; print(os.environ['LANG'], os.environ['LC_ALL'])"))
    assert res == (0, "C C\n", "")
    assert (res.rc, res.out, res.err) == (0, "C C\n", "")


def test_a_failure_names_the_command_the_status_and_the_end_of_stderr(runner):
    argv = py("import sys\nfor n in range(30): sys.stderr.write('line %d\\n' % n)\nsys.exit(3)")
    with pytest.raises(cmd.CommandError) as caught:
        runner(argv)
    err = caught.value
    assert (err.argv, err.rc, err.timeout) == (argv, 3, None)
    assert str(err).startswith(cmd.command_text(argv) + " failed (rc=3): ")
    assert "line 29" in str(err) and "line 10" in str(err)
    assert "line 9\n" not in str(err)  # only the last lines; the whole stderr stays on err.err
    assert err.err.startswith("line 0\n")


def test_stdout_is_named_when_stderr_is_empty(runner):
    with pytest.raises(cmd.CommandError, match=r"failed \(rc=1\): said so on stdout$"):
        runner(py("import sys; print('said so on stdout'); sys.exit(1)"))


def test_only_the_accepted_codes_come_back(runner):
    exit_3 = py("import sys; print('no table'); sys.exit(3)")
    assert runner(exit_3, ok=(0, 3)) == (3, "no table\n", "")
    assert runner(exit_3, ok=cmd.ANY_STATUS).rc == 3
    with pytest.raises(cmd.CommandError, match=r"failed \(rc=0\)"):
        runner(py("pass"), ok=(1,))


def test_a_timeout_raises_the_same_error_naming_the_timeout(runner):
    argv = py("import time; time.sleep(20)")
    with pytest.raises(cmd.CommandError) as caught:
        runner(argv, timeout=0.5)
    assert caught.value.timeout == 0.5 and caught.value.rc is None
    assert str(caught.value) == "%s did not finish within 0.5 s" % cmd.command_text(argv)


@pytest.mark.parametrize("data", ["text\nno newline at the end", b"text\nno newline at the end"])
def test_stdin_data_reaches_the_child_unchanged(runner, data):
    res = runner(py("import sys; sys.stdout.write(repr(sys.stdin.read()))"), data=data)
    assert res.out == repr("text\nno newline at the end")


def test_a_command_that_cannot_start_raises(runner, tmp_path):
    argv = [str(tmp_path / "no-such-tool"), "--version"]
    with pytest.raises(cmd.CommandError) as caught:
        runner(argv)
    assert caught.value.rc is None
    assert str(caught.value) == "%s could not be run: No such file or directory" % cmd.command_text(argv)


def test_the_message_quotes_arguments():
    assert cmd.command_text(["dpkg-query", "-W", "-f=${Status} x"]) == "dpkg-query -W '-f=${Status} x'"
