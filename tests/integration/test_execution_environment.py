"""The AWX / Automation Platform execution environment and ansible-navigator: `make ee` (ansible-builder create)
writes a build context holding the collection and what it needs on the controller; the collection's own
meta/execution-environment.yml, read by ansible-builder's introspection from the installed tarball, lists the same;
ansible-navigator runs the playbooks from the controller (here without the image: no registry reaches this machine)."""
import os
import re
import subprocess
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], ANSIBLE_NOCOLOR="1", NO_COLOR="1")
ENV.pop("ANSIBLE_CONFIG", None)


def run(*cmd, cwd=ROOT, timeout=300):
    proc = subprocess.run(list(cmd), cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_make_ee_writes_a_context_with_the_collection_and_its_needs():
    rc, out = run("make", "--no-print-directory", "ee")
    assert rc == 0, out
    context = os.path.join(ROOT, "build", "ee", "context")
    containerfile = open(os.path.join(context, "Containerfile")).read()
    assert "ARG EE_BASE_IMAGE=\"registry.fedoraproject.org/fedora-minimal:41\"" in containerfile
    assert "ansible-core==2.21.5" in containerfile and "ansible-runner==2.4.3" in containerfile
    build = os.path.join(context, "_build")
    python = open(os.path.join(build, "requirements.txt")).read()
    assert "aiperf==0.13.0" in python and "transformers>=4.56,<5" in python
    system = open(os.path.join(build, "bindep.txt")).read()
    assert "openssh-clients [platform:rpm]" in system
    galaxy = open(os.path.join(build, "requirements.yml")).read()
    assert "collections/kimi-deploy.tar.gz" in galaxy and "community.docker" in galaxy
    with tarfile.open(os.path.join(build, "collections", "kimi-deploy.tar.gz")) as tar:
        names = tar.getnames()
    for name in ("meta/execution-environment.yml", "requirements-bench.txt", "bindep.txt", "playbooks/site.yml",
                 "roles/kimi_serve/meta/argument_specs.yml"):
        assert name in names, name
    assert not [n for n in names if re.match(r"(tests|molecule|\.venv[^/]*)/", n)]


def test_the_installed_collection_declares_its_controller_needs_to_ansible_builder(tmp_path):
    """What ansible-builder's introspection finds in the installed collection (meta/execution-environment.yml)."""
    rc, out = run("ansible-galaxy", "collection", "build", "--force", "--output-path", str(tmp_path), ".")
    assert rc == 0, out
    tarball = [p for p in os.listdir(tmp_path) if p.endswith(".tar.gz")][0]
    rc, out = run("ansible-galaxy", "collection", "install", "--offline", "--no-deps", "--force",
                  "-p", str(tmp_path / "c"), str(tmp_path / tarball))
    assert rc == 0, out
    rc, out = run("ansible-builder", "introspect", "--sanitize", str(tmp_path / "c"))
    assert rc == 0, out
    assert re.search(r"aiperf==0\.13\.0\s+# from collection kimi\.deploy", out), out
    assert re.search(r"openssh-clients \[platform:rpm\]\s+# from collection kimi\.deploy", out), out


def test_ansible_navigator_runs_the_plan_and_site_yml_check(tmp_path):
    rc, out = run("ansible-navigator", "run", "playbooks/plan.yml", "--ee", "false", "--mode", "stdout",
                  "-e", "quant=int4", "-e", "engine=sglang", "-e", "@tests/fixtures/gpus/rtx-pro-6000-x8.json")
    assert rc == 0, out[-3000:]
    assert "identity: int4-sglang (quant=int4, engine=sglang 0.5.12.post1)" in out
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    kimi_servers:\n      hosts:\n        localhost:\n"
                         "          ansible_connection: local\n"
                         "          ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n")
    rc, out = run("ansible-navigator", "run", "site.yml", "--check", "--ee", "false", "--mode", "stdout",
                  "-i", str(inventory), "-e", "quant=int4", "-e", "engine=sglang",
                  "-e", "@tests/fixtures/gpus/rtx-pro-6000-x8.json")
    assert rc != 0  # site.yml's preflight, reached through navigator, refuses the unpinned checkpoint
    assert "kimi_int4_revision is not set" in " ".join(out.split()), out[-3000:]
