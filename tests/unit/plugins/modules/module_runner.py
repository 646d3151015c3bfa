"""Run a module file the way Ansible does (a separate Python process, arguments as ANSIBLE_MODULE_ARGS JSON) and
return its result. Shared by the module tests; the process boundary catches what an in-process call would hide
(exit codes, stray prints, import errors)."""
import json
import os
import subprocess
import sys
import tempfile

COLLECTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 4 + [".collections"]))


def run_module(module_path, params, env=None, check_mode=False, timeout=120, keep_stdout=False):
    """Result dict of the module at `module_path`; `failed` in it agrees with the exit code, or the test fails.
    keep_stdout: also return the raw output as `_stdout` (to prove what it does not contain)."""
    params = dict(params)
    if check_mode:
        params["_ansible_check_mode"] = True
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([os.path.normpath(COLLECTIONS)] + [p for p in sys.path if p])
    args = json.dumps({"ANSIBLE_MODULE_ARGS": params})
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        if len(args) > 4000:  # a long argument (a probe file) goes in a file, as Ansible's own args file does
            handle.write(args)
            handle.flush()
            args = handle.name
        result = subprocess.run([sys.executable, module_path, args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout, check=False)
    try:
        out = json.loads(result.stdout)
    except ValueError:
        raise AssertionError("module printed no JSON (rc %d): %s %s" % (result.returncode, result.stdout, result.stderr))
    assert ("failed" in out) == (result.returncode != 0), out
    if keep_stdout:
        out["_stdout"] = result.stdout
    return out
