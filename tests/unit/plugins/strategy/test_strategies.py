"""plugins/strategy (shipped): kimi_linear runs the tasks that need no connection in the controller with the same results as
Ansible's linear strategy, and keeps compiled Jinja code; kimi_mitogen_linear's scan of a module's imports also lists
the collection's own module_utils, followed transitively, so Mitogen's async child imports them before it detaches
(else the job hangs, "started")."""
import importlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE_UTILS = "ansible_collections.kimi.deploy.plugins.module_utils."


def load(name):
    """The plugin as ansible-playbook imports it: from the collection (this checkout, linked under .collections)."""
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    return importlib.import_module("ansible_collections.kimi.deploy.plugins.strategy." + name)


@pytest.fixture(scope="module")
def linear():
    return load("kimi_linear")


@pytest.fixture(scope="module")
def strategy():
    pytest.importorskip("ansible_mitogen", reason="mitogen is in requirements-demo.txt")
    return load("kimi_mitogen_linear")


def scan(strategy, name):
    path = os.path.join(ROOT, "plugins", "modules", name + ".py")
    return {entry[0]: entry for entry in strategy.scan("ansible_module_" + name, path, ())}


def test_the_scan_lists_the_collection_module_utils_a_module_imports(strategy):
    found = scan(strategy, "serve_ready")
    # `from ...module_utils._engines import log` and `from ...module_utils._files import atomic_write`
    for name in ("_engines.log", "_files"):
        assert MODULE_UTILS + name in found
        assert found[MODULE_UTILS + name][1].endswith("plugins/module_utils/%s.py" % name.replace(".", "/"))
    assert found[MODULE_UTILS + "_engines"][2] is True  # the package itself, with its __init__.py
    # a name imported from a module is not a module
    assert MODULE_UTILS + "_files.atomic_write" not in found


def test_the_scan_follows_imports_of_imports(strategy):
    # hf_snapshot imports _hf.cache, which imports _files; hf_snapshot itself does not
    with open(os.path.join(ROOT, "plugins", "modules", "hf_snapshot.py")) as handle:
        assert "module_utils._files" not in handle.read()
    found = scan(strategy, "hf_snapshot")
    assert {MODULE_UTILS + "_hf.cache", MODULE_UTILS + "_files"} <= set(found)


def test_the_strategy_patches_mitogens_scan(strategy):
    import ansible_mitogen.module_finder
    assert ansible_mitogen.module_finder.scan is strategy.scan


def render(template, conditional):
    from ansible.template import Templar, trust_as_template
    templar = Templar(variables={"x": 2, "names": ["a", "b"]})
    return templar.template(trust_as_template(template)), templar.evaluate_conditional(trust_as_template(conditional))


def cached_files(folder):
    return sorted(os.path.join(d, f) for d, _dirs, files in os.walk(folder) for f in files)


def test_compiled_jinja_is_kept_and_read_back_with_the_same_results(linear, tmp_path, monkeypatch):
    """Templates and conditionals compile once into the cache folder; a second compile reads the code back (a file
    removed from the folder is written again) and renders the same."""
    monkeypatch.setenv("KIMI_JINJA_CODE_CACHE", str(tmp_path / "code"))
    template, conditional = "{{ (x * 3) ~ '-' ~ (names | join(',')) }}", "x == 2 and 'b' in names"
    assert render(template, conditional) == ("6-a,b", True)
    files = cached_files(str(tmp_path / "code"))
    assert len(files) == 2 and oct(os.stat(str(tmp_path / "code")).st_mode & 0o777) == "0o700"
    assert render(template, conditional) == ("6-a,b", True)
    assert cached_files(str(tmp_path / "code")) == files
    for path in files:  # a damaged file is compiled again, and replaced
        with open(path, "wb") as handle:
            handle.write(b"\x00garbage")
    assert render(template, conditional) == ("6-a,b", True)
    os.remove(files[0])
    assert render(template, conditional) == ("6-a,b", True)
    assert cached_files(str(tmp_path / "code")) == files


def test_a_cache_folder_others_may_write_is_not_used(linear, tmp_path, monkeypatch):
    """Its files run as code: a folder that is not private to the user is left alone, and templates still render."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv("KIMI_JINJA_CODE_CACHE", str(folder))
    assert linear.code_cache_dir() is None
    assert render("{{ x + 40 }}", "x > 1") == (42, True)
    assert cached_files(str(folder)) == []
    monkeypatch.setenv("KIMI_JINJA_CODE_CACHE", "")
    assert linear.code_cache_dir() is None


PLAY = """
- hosts: local
  gather_facts: false
  vars:
    numbers: [1, 2, 3]
  tasks:
    - name: Note which process templates a set_fact
      ansible.builtin.set_fact:
        templated_by: "{{ lookup('pipe', 'echo $PPID') }}"
    - name: Add up in a loop
      ansible.builtin.set_fact:
        total: "{{ (total | default(0) | int) + item }}"
      loop: "{{ numbers }}"
    - name: A module whose conditional is false
      ansible.builtin.command: echo never
      when: numbers | length > 5
      register: skipped_module
    - name: A module whose conditional is true
      ansible.builtin.command: echo ran
      when: numbers | length == 3
      register: ran_module
      changed_when: false
    - name: A module in a loop, one item skipped
      ansible.builtin.command: echo {{ item }}
      loop: [a, b]
      when: item == 'b'
      register: looped
      changed_when: false
    - name: A failing assert, ignored
      ansible.builtin.assert:
        that: numbers | length == 4
        fail_msg: four numbers expected
      ignore_errors: true
      register: failed_assert
    - name: Include a file per item
      ansible.builtin.include_tasks: included.yml
      loop: [x, y]
      loop_control:
        loop_var: letter
    - name: Set a fact on another host
      ansible.builtin.set_fact:
        delegated: true
      delegate_to: other
      delegate_facts: true
    - name: A conditional that fails
      ansible.builtin.command: echo never
      when: no_such_variable.attribute
      ignore_errors: true
      register: broken_conditional
    - name: Write what the run saw
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'total': total, 'letters': letters, 'delegated': hostvars['other'].delegated,
                      'skipped_module': skipped_module.skipped, 'ran': ran_module.stdout,
                      'looped': looped.results | map(attribute='skipped', default=False) | list,
                      'looped_out': looped.results | map(attribute='stdout', default='') | list,
                      'failed_assert': [failed_assert.failed, failed_assert.msg],
                      'broken_conditional': broken_conditional.failed,
                      'templated_by': templated_by} | to_json }}"
"""

INCLUDED = """
- name: Collect the item
  ansible.builtin.set_fact:
    letters: "{{ (letters | default([])) + [letter] }}"
"""


def run_play(tmp_path, strategy_name):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "included.yml").write_text(INCLUDED)
    (tmp_path / "hosts").write_text("local ansible_connection=local ansible_python_interpreter=%s\nother\n"
                                    % sys.executable)
    out = tmp_path / ("%s.json" % strategy_name)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STRATEGY=strategy_name, ANSIBLE_NOCOLOR="1",
               KIMI_JINJA_CODE_CACHE=str(tmp_path / "code"))
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                             str(tmp_path / "hosts"), str(tmp_path / "play.yml"), "-e", "out=%s" % out],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output
    seen = json.loads(out.read_text())
    return proc.pid, seen.pop("templated_by"), seen, output


def test_tasks_that_need_no_connection_run_in_the_controller_with_linears_results(tmp_path):
    """The same play under Ansible's linear and kimi_linear: the same registered results, loops, includes, delegated
    facts and errors; under kimi_linear a set_fact is templated by ansible-playbook itself (no forked worker), under
    linear by a worker."""
    linear_pid, linear_templater, linear_seen, linear_output = run_play(tmp_path, "linear")
    kimi_pid, kimi_templater, kimi_seen, output = run_play(tmp_path, "kimi.deploy.kimi_linear")
    assert kimi_seen == linear_seen
    assert kimi_seen == {
        "total": 6, "letters": ["x", "y"], "delegated": True, "skipped_module": True, "ran": "ran",
        "looped": [True, False], "looped_out": ["", "b"], "failed_assert": [True, "four numbers expected"],
        "broken_conditional": True}
    assert int(kimi_templater) == kimi_pid
    assert int(linear_templater) != linear_pid
    recap = [line for line in output.splitlines() if line.startswith("local ")]
    assert recap == [line for line in linear_output.splitlines() if line.startswith("local ")]
    assert "ok=12 " in recap[0] and "skipped=1 " in recap[0] and "ignored=2 " in recap[0], output


def test_a_task_run_in_the_controller_is_copied_with_its_blocks_but_not_their_other_tasks(linear):
    """The copy run in the controller has its own enclosing blocks (their fields finalized on the copy, inherited
    conditionals kept) but shares the blocks' other tasks with the play: Task.copy() duplicated them all, for every
    task run inline (~4 s of a no-op converge)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.block import Block
    from ansible.playbook.task import Task
    from ansible.template import Templar

    outer = Block()
    inner = Block(parent_block=outer)
    outer.block = [inner]
    tasks = [Task(block=inner) for _number in range(40)]
    inner.block = tasks
    inner.when = ["flag"]
    copy = linear.inline_copy(tasks[7])
    assert copy is not tasks[7] and copy._uuid == tasks[7]._uuid
    assert copy._parent is not inner and copy._parent.when == ["flag"]
    assert copy._parent._parent is not outer
    assert all(mine is theirs for mine, theirs in zip(copy._parent.block, tasks))
    assert copy._parent._parent.block[0] is inner
    # TaskExecutor finalizes the copy's block in place: the play's blocks and tasks stay as they were.
    templar = Templar(loader=DataLoader())
    copy._parent.post_validate(getattr(templar, "_engine", templar))
    assert copy._parent._finalized
    assert not (inner._finalized or outer._finalized or any(task._finalized for task in tasks))


def test_the_controller_collects_young_objects_less_often_during_a_play(linear):
    """The play runs with the controller's garbage-collection threshold raised (Python's 700 made ~1300 collections
    in a no-op converge of the demo host); what the play's run returns is still the strategy's own."""
    import gc

    class Base(object):
        def run(self, iterator, play_context):
            return gc.get_threshold()

    class Strategy(linear.ControllerSpeedups, Base):
        pass

    before = gc.get_threshold()
    try:
        assert Strategy().run(None, None) == linear.GC_THRESHOLD
        assert linear.GC_THRESHOLD[0] > before[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
