"""Platforms are data: no file outside a platform's own places names a platform (module_utils/_model/platforms.py says
what differs; the roles, templates and playbooks read its fields). A new platform is a data entry, a host role and a
facts module, and this test lists where those live."""
import importlib
import os
import re

from ansible_collections.kimi.deploy.plugins.module_utils._model import platforms as _platforms
from ansible_collections.kimi.deploy.plugins.module_utils._model import site as _site

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
    "plugins/module_utils/_model/models.py",  # the models' data: checkpoints, and parsers and releases per engine build
)


def kind(entry):
    """A platform's accelerator kind, in identifiers: gpu, npu."""
    return entry["unit"].lower()


def identifiers():
    """What names a platform in code, from its entry: its name, the keys of its facts and its accelerator kind (npu),
    but not the default platform's kind: gpu is the collection's word for any accelerator (kimi_gpus, `gpus`
    arguments), older than the other platforms."""
    names = set()
    for entry in _platforms.entries():
        names.update((entry["name"], entry["facts"], entry["summary_fact"]))
        if entry["name"] != _platforms.DEFAULT:
            names.update((kind(entry), kind(entry) + "s"))
    return sorted(names)


NAME = re.compile(r"\b(%s)\b" % "|".join(identifiers()))
# Not a platform test: a path, repository, image or URL (nvidia/Kimi-K2.6-NVFP4, nvcr.io/nvidia/...), a command
# quoted for an operator in prose (`nvidia-smi -q`) or a value in documentation markup (C(ascend), a transfer backend's
# name), a comment.
QUOTED = re.compile(r"`[^`]*`|\b[CV]\([^)]*\)")
PATHLIKE = re.compile(r"\S*/\S*")
# An exporter's product name, as its entry's exporter title gives it (npu-exporter): the roles' docs name both.
TOOLS = re.compile("|".join(re.escape(tool) for entry in _platforms.entries()
                            for tool in re.findall(r"\(([^)]*)\)", entry["exporter"]["title"])))


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
                        code = TOOLS.sub(" ", PATHLIKE.sub(" ", QUOTED.sub(" ", code)))
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
    # a platform's facts and its accelerator kind name it too
    assert NAME.search('ACCELERATOR_FACTS = ("ascend_npus", "nvidia_gpus")')
    assert NAME.search("when: ansible_facts.nvidia_gpu_summary.count > 0")
    assert NAME.search("when: kimi_deployment.hardware.unit == 'npu'")
    assert not NAME.search(TOOLS.sub(" ", "Runs dcgm-exporter or npu-exporter"))
    assert not NAME.search("kimi_gpus: the gpus argument")  # gpu is any accelerator


def test_each_platforms_identifiers_are_consistent_and_complete():
    """The fields that name a platform follow from its name and its accelerator kind (its unit: GPU, NPU), and no
    two platforms share one; every entry has every field, each described in platforms.py; the kind has its facts
    module and summary; and the model reads every platform's facts, the last of ORDER first."""
    entries = _platforms.entries()
    assert len(set(_platforms.ORDER)) == len(_platforms.ORDER) and set(_platforms.ORDER) == set(_platforms.PLATFORMS)
    assert _platforms.DEFAULT == _platforms.ORDER[0]
    fields = set(entries[0]) - {"name"}
    for entry in entries:
        name, unit = entry["name"], kind(entry)
        assert set(entry) - {"name"} == fields, name
        assert re.match(r"[a-z]+$", name) and re.match(r"[a-z]+$", unit), name
        assert entry["units"] == entry["unit"] + "s", name
        assert name.lower() in entry["title"].lower() and entry["units"] in entry["title"], name
        assert entry["facts"] == "%s_%ss" % (name, unit), name
        assert entry["summary_fact"] == "%s_%s_summary" % (name, unit), name
        assert entry["host_role"] == "%s_host" % name, name
        assert entry["facts_module"] == "kimi.deploy.%s_facts" % unit, name
        assert entry["exporter"]["temperature_threshold"] == "kimi_monitoring_alert_%s_temperature" % unit, name
        summary = importlib.import_module("ansible_collections.kimi.deploy.plugins.module_utils._model." + unit)
        assert callable(getattr(summary, "summarize_%ss" % unit, None)), name
    for field in ("unit", "title", "facts", "summary_fact", "host_role", "facts_module"):
        assert len(set(entry[field] for entry in entries)) == len(entries), field
    assert set(kind(entry) for entry in entries) >= {"gpu", "npu"}
    assert [field for field in sorted(fields) if not re.search(r"\b%s\b" % field, _platforms.__doc__)] == []
    assert _site.ACCELERATOR_FACTS == tuple(_platforms.PLATFORMS[name]["facts"] for name in reversed(_platforms.ORDER))


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
