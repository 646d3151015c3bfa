"""Platforms are data: no file outside a platform's own places names a platform (module_utils/_model/platforms.py says
what differs; the roles, templates and playbooks read its fields). A new platform is a data entry, a host role and a
facts module, and this test lists where those live."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCANNED = ("roles", "playbooks", "plugins")
EXTENSIONS = (".yml", ".yaml", ".j2", ".py", ".sh", ".cfg")
# A platform's own places: its data entry, its host role, its facts module and what reads its facts' shapes, and the
# engine builds (data entries that say which platform each build runs on) with their generated flag tables.
ALLOWED = (
    "plugins/module_utils/_model/platforms.py",
    "plugins/module_utils/_model/accelerators.py",  # the families of each platform and the identity recommended for each
    "plugins/module_utils/_model/gpu.py", "plugins/module_utils/_model/npu.py",
    "plugins/modules/gpu_facts.py", "plugins/modules/npu_facts.py", "plugins/filter/npu_smi_info.py",
    "roles/nvidia_host/", "roles/ascend_host/",
    "plugins/module_utils/_engines/",
    "plugins/module_utils/_model/checkpoints.py",  # the checkpoints' own config values (W4A8's quant_method)
)
NAME = re.compile(r"\b(nvidia|ascend)\b")
# Not a platform test: a path, repository, image or URL (nvidia/Kimi-K2.6-NVFP4, nvcr.io/nvidia/...), a command
# quoted for an operator in prose (`nvidia-smi -q`) or a value in documentation markup (C(ascend), a transfer backend's
# name), a comment.
QUOTED = re.compile(r"`[^`]*`|\b[CV]\([^)]*\)")
PATHLIKE = re.compile(r"\S*/\S*")


def named_places():
    hits = []
    for top in SCANNED:
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            if "__pycache__" in folder:
                continue
            for name in files:
                path = os.path.relpath(os.path.join(folder, name), ROOT)
                if not name.endswith(EXTENSIONS) or path.startswith(ALLOWED):
                    continue
                with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
                    for number, line in enumerate(handle, 1):
                        code = line.strip()
                        if code.startswith("#"):
                            continue
                        code = PATHLIKE.sub(" ", QUOTED.sub(" ", code))
                        if NAME.search(code):
                            hits.append("%s:%d: %s" % (path, number, line.strip()))
    return hits


def test_no_file_outside_a_platforms_own_places_names_a_platform():
    assert named_places() == []


def test_the_check_finds_a_platform_test():
    assert NAME.search("when: kimi_deployment.platform == 'ascend'")
    assert not NAME.search(PATHLIKE.sub(" ", "default: nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3"))
    assert not NAME.search("nvidia_host_image_archives: []")  # a host role's variable is its interface
    assert not NAME.search(QUOTED.sub(" ", "backend (SGLang C(ascend) on Ascend NPUs)"))


def test_each_platform_names_what_exists():
    """What an entry names exists where the roles read it: its host role with the task files site.yml, the bundle and
    kimi_serve include, its exporter's image variable and temperature threshold among the roles' defaults."""
    import yaml

    from ansible_collections.kimi.deploy.plugins.module_utils._model import platforms as _platforms

    def defaults(role):
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as handle:
            return yaml.safe_load(handle)

    assert set(_platforms.ORDER) == set(_platforms.PLATFORMS)
    for entry in _platforms.entries():
        tasks = os.path.join(ROOT, "roles", entry["host_role"], "tasks")
        assert all(os.path.isfile(os.path.join(tasks, name)) for name in ("main.yml", "facts.yml", "offline_needs.yml"))
        assert entry["exporter"]["image_variable"] in defaults("kimi_metrics"), entry["name"]
        assert entry["exporter"]["temperature_threshold"] in defaults("kimi_monitoring"), entry["name"]
        with open(os.path.join(tasks, "facts.yml")) as handle:
            assert entry["facts_module"] + ":" in handle.read(), entry["name"]
        with open(os.path.join(ROOT, "plugins", "modules", entry["facts_module"].split(".")[-1] + ".py")) as handle:
            module = handle.read()
        assert entry["facts"] in module and entry["summary_fact"] in module, entry["name"]
