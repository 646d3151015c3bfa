"""The kimi_weights role's preflight through real ansible-playbook on this machine (local connection): the published
example token, a refused setting reported under the role variable's name, the disk rule, and the plan made once."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
HUB_DIR = os.path.join(ROOT, "tests", "doubles", "hub")
if HUB_DIR not in sys.path:
    sys.path.insert(0, HUB_DIR)
import fake_hub  # noqa: E402  pylint: disable=wrong-import-position

KIMI = "moonshotai/Kimi-K2.6"
DRAFT = "AQ-MedAI/Kimi-K26-eagle3"
OTHER_DRAFT = "acme/llama-8b-eagle3"  # an EAGLE-3 draft of a model with hidden size 4096
SHA = "0123456789abcdef0123456789abcdef01234567"
EXAMPLE_TOKEN = "hf_example_not_a_real_token"  # inventories/example's vault_kimi_hf_token
LOCAL = ["-e", "ansible_connection=local", "-e", "ansible_python_interpreter=" + sys.executable]


def playbook(*args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ["PATH"])
    env = {k: v for k, v in env.items() if not k.startswith("HF_")}
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook")] + list(args), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())  # undo YAML line folding


def write_play(tmp_path, hosts, tasks, check=False, draft=None):
    """A play on `hosts` that runs `tasks` (YAML lines), with the checkpoint given as the resolved deployment (and a
    speculative EAGLE-3 draft, repo `draft` pinned to kimi_test_draft_revision)."""
    speculative = "null"
    if draft:
        speculative = ("{method: eagle3, draft: {repo_id: %s, revision: '{{ kimi_test_draft_revision }}', "
                       "revision_variable: kimi_speculative_draft_revision}}" % draft)
    play = tmp_path / "play.yml"
    play.write_text("\n".join([
        "- hosts: %s" % hosts,
        "  gather_facts: false",
        "  vars:",
        "    kimi_deployment: {quant: int4, checkpoint: {repo_id: %s, revision: '{{ kimi_test_revision }}'}, "
        "speculative: %s}" % (KIMI, speculative),
        "  tasks:"] + ["    " + line for line in tasks]) + "\n")
    return str(play)


PREFLIGHT = ["- ansible.builtin.include_role: {name: kimi.deploy.kimi_weights, tasks_from: preflight}"]


def test_preflight_refuses_the_example_inventorys_published_token(tmp_path):
    """The token comes from the example inventory's vault, as it does for someone who copied the example."""
    play = write_play(tmp_path, "kimi_servers", PREFLIGHT)
    rc, out = playbook("-i", "inventories/example/hosts.yml", "--vault-password-file",
                       "inventories/example/vault-password.example", play, *LOCAL,
                       "-e", "kimi_test_revision=" + SHA, "-e", "kimi_weights_hf_home=%s" % (tmp_path / "hf"),
                       "-e", "kimi_weights_endpoint=http://127.0.0.1:1")
    assert rc != 0
    assert "kimi_weights_hf_token is the example token published in this repository" in out, out
    assert EXAMPLE_TOKEN not in out
    assert "Plan the download" not in out  # refused before the host is asked anything
    assert not (tmp_path / "hf").exists()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    handle = fake_hub.start_fake_hub([KIMI + ":shards=2,shard_size=1MiB", DRAFT + ":kind=eagle3,shard_size=1MiB",
                                      OTHER_DRAFT + ":kind=eagle3,hidden_size=4096,shard_size=1MiB"],
                                     cache_dir=str(tmp_path_factory.mktemp("hub")))
    yield handle
    handle.stop()


def role_vars(hub, tmp_path, **extra):
    args = {"kimi_test_revision": hub.commits[KIMI], "kimi_weights_endpoint": hub.url,
            "kimi_weights_hf_home": str(tmp_path / "hf"), "kimi_weights_owner": str(os.getuid()),
            "kimi_weights_group": str(os.getgid())}
    args.update(extra)
    out = []
    for name, value in args.items():
        out += ["-e", "%s=%s" % (name, value)]
    return out


@pytest.mark.parametrize("name, value, message", [
    ("kimi_weights_connections", 0, "kimi_weights_connections: connections must be between 1 and 64, got 0"),
    ("kimi_weights_chunk_size", 4096, "kimi_weights_chunk_size: chunk_size must be between 1048576 and"),
    ("kimi_weights_hf_home", "relative/hf", "kimi_weights_hf_home: hf_home='relative/hf' must be an absolute path"),
    ("kimi_weights_endpoint", "huggingface.co", "kimi_weights_endpoint: endpoint must be an http(s) URL"),
])
def test_a_refused_setting_is_reported_under_the_role_variable(hub, tmp_path, name, value, message):
    hub.reset()
    rc, out = playbook("-i", "localhost,", write_play(tmp_path, "all", PREFLIGHT), *LOCAL, *role_vars(hub, tmp_path, **{name: value}))
    assert rc != 0 and message in out, out
    assert hub.requests() == []


def test_the_disk_rule_fails_the_preflight_with_the_numbers(hub, tmp_path):
    rc, out = playbook("-i", "localhost,", write_play(tmp_path, "all", PREFLIGHT), *LOCAL,
                       *role_vars(hub, tmp_path, kimi_weights_min_free_bytes=10 ** 18))
    assert rc != 0
    assert "not enough disk space for hf_home=%s" % (tmp_path / "hf") in out, out
    assert "min_free_bytes=1000000.0 TB must stay free after the download" in out
    assert not (tmp_path / "hf").exists()


def listings(hub):
    return [r for r in hub.requests() if "/tree/" in r["path"]]


@pytest.mark.parametrize("tasks, plans", [
    (PREFLIGHT + ["- ansible.builtin.include_role: {name: kimi.deploy.kimi_weights}"], 1),  # site.yml's shape
    (["- ansible.builtin.include_role: {name: kimi.deploy.kimi_weights}"], 1),  # the role on its own plans first
])
def test_the_role_lists_the_repo_once_per_run(hub, tmp_path, tasks, plans):
    hub.reset()
    rc, out = playbook("--check", "-i", "localhost,", write_play(tmp_path, "all", tasks), *LOCAL, *role_vars(hub, tmp_path))
    assert rc == 0, out
    assert len(listings(hub)) == plans, out
    files = len(hub.repos[KIMI].files)
    assert "%s@%s: %d files, 0.0 GB; %d files to fetch" % (KIMI, hub.commits[KIMI][:12], files, files) in out, out
    assert "GB free on %s, 10.7 GB stay free" % tmp_path in out


def test_the_role_fetches_the_speculative_draft_beside_the_checkpoint(hub, tmp_path):
    """kimi_speculative: the draft is planned, downloaded and verified like the checkpoint, each repo listed once, and
    its config is checked against the checkpoint's."""  # noqa: D401
    hub.reset()
    tasks = PREFLIGHT + ["- ansible.builtin.include_role: {name: kimi.deploy.kimi_weights}",
                         "- ansible.builtin.debug: {msg: 'draft at {{ kimi_weights_draft_report.snapshot_path }}'}"]
    rc, out = playbook("-i", "localhost,", write_play(tmp_path, "all", tasks, draft=DRAFT), *LOCAL,
                       *role_vars(hub, tmp_path, kimi_test_draft_revision=hub.commits[DRAFT]))
    assert rc == 0, out[-3000:]
    listed = [r["path"].split("/tree/")[0] for r in listings(hub)]
    # the plan, then the download, for each: the draft is handled as the checkpoint is
    assert sorted(set(listed)) == sorted(["/api/models/" + KIMI, "/api/models/" + DRAFT]), listed
    assert listed.count("/api/models/" + DRAFT) == listed.count("/api/models/" + KIMI), listed
    snapshot = tmp_path / "hf" / "hub" / ("models--" + DRAFT.replace("/", "--")) / "snapshots" / hub.commits[DRAFT]
    assert "draft at %s" % snapshot in out
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(f.path for f in hub.repos[DRAFT].files)
    assert "%s@%s in %s" % (DRAFT, hub.commits[DRAFT][:12], snapshot) in out  # its own download line


def test_a_draft_for_another_model_is_refused_before_the_serve_stage(hub, tmp_path):
    hub.reset()
    tasks = ["- ansible.builtin.include_role: {name: kimi.deploy.kimi_weights}"]
    rc, out = playbook("-i", "localhost,", write_play(tmp_path, "all", tasks, draft=OTHER_DRAFT), *LOCAL,
                       *role_vars(hub, tmp_path, kimi_test_draft_revision=hub.commits[OTHER_DRAFT]))
    assert rc != 0
    assert ("kimi_speculative_draft=%s@%s cannot serve with %s: %s has hidden_size 4096 and Kimi-K2.6 has 7168: it was "
            "trained for another target" % (OTHER_DRAFT, hub.commits[OTHER_DRAFT][:12], KIMI, OTHER_DRAFT)) in out, out[-3000:]
    assert "The serve stage did not run: the current deployment keeps serving" in out
