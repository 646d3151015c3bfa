"""The support matrix (model x quant x engine x version x hardware) of the README, made from the model and engine data.

    python3 tools/support_matrix.py           # print the Markdown
    python3 tools/support_matrix.py --write   # rewrite the README's block (make readme)
    python3 tools/support_matrix.py --check   # exit 1 when the README's block is not what the data says

Input: the models (plugins/module_utils/_model/models.py: each one's checkpoints per quant, the first release of each
engine build that serves it, its chat format and thinking), the engine builds
(plugins/module_utils/_engines/registry.ENGINES: each build's versions, pinned images, quants and the
accelerator families each quant runs on, multi-node mode, disaggregation, speculative decoding), the families
(_gpu.ARCH_FAMILIES, _npu.CHIP_FAMILIES), the PD routers (_routers) and the recommendation
(_accelerators.RECOMMENDED). Output: the Markdown between the README's
`<!-- support-matrix:start -->` and `<!-- support-matrix:end -->` markers. tests/unit/tools/test_support_matrix.py
compares the two, so a new engine release without `make readme` fails the unit tests.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
START = "<!-- support-matrix:start -->"
END = "<!-- support-matrix:end -->"

# ansible_collections.kimi.deploy from this checkout: the link `make setup` makes (made here too, as tests/conftest.py
# does), so the engine data is imported as the collection's own modules import it.
COLLECTIONS = os.path.join(ROOT, ".collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "kimi", "deploy")
if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink("../../..", LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# pylint: disable=wrong-import-position
from ansible_collections.kimi.deploy.plugins.module_utils._model.accelerators import (  # noqa: E402
    PLATFORM_TITLES, PLATFORMS, RECOMMENDED)
from ansible_collections.kimi.deploy.plugins.module_utils._model.models import (  # noqa: E402
    DEFAULT_MODEL, MODEL_NAMES, QUANTS, model)
from ansible_collections.kimi.deploy.plugins.module_utils._engines.registry import ENGINES  # noqa: E402
from ansible_collections.kimi.deploy.plugins.module_utils._model.gpu import ARCH_FAMILIES  # noqa: E402
from ansible_collections.kimi.deploy.plugins.module_utils._model.npu import CHIP_FAMILIES  # noqa: E402
from ansible_collections.kimi.deploy.plugins.module_utils._engines.routers import ROUTERS  # noqa: E402

# family -> (platform, label), in the tables' order (newest first within a platform).
FAMILIES = {}
for _low, _high, _family, _human in sorted(ARCH_FAMILIES, reverse=True):
    FAMILIES[_family] = ("nvidia", "%s sm_%d" % (_human, round(_low * 10)))
for _pattern, _family, _human in CHIP_FAMILIES:
    FAMILIES[_family] = ("ascend", _human)


MULTI_NODE = {"pipeline": "yes, pipeline parallel across hosts", "tensor": "yes, tensor parallel across hosts",
              "data": "yes, data parallel across hosts", None: "no"}


def version_key(version):
    return tuple(int(part) for part in re.findall(r"\d+", version))


def builds():
    """The engine builds, NVIDIA first, each platform's in engine-name order."""
    return sorted(ENGINES, key=lambda key: (PLATFORMS.index(ENGINES[key]["platform"]), ENGINES[key]["name"], key))


def versions(key):
    """A build's versions: the default first, then the others, oldest first."""
    spec = ENGINES[key]
    return [spec["default_version"]] + sorted((v for v in spec["versions"] if v != spec["default_version"]),
                                              key=version_key)


def families(key, quant):
    """The families a build serves `quant` on (its data's `families`; None: every family of its platform)."""
    spec = ENGINES[key]
    listed = spec["quants"][quant]["families"]
    return [f for f, (platform, _label) in FAMILIES.items()
            if platform == spec["platform"] and (listed is None or f in listed)]


def hardware(key, quant):
    platform = ENGINES[key]["platform"]
    names = families(key, quant)
    if platform == "nvidia" and len(names) == sum(1 for p, _label in FAMILIES.values() if p == platform):
        return "NVIDIA sm_%d and newer" % round(min(low for low, _high, _family, _human in ARCH_FAMILIES) * 10)
    return ", ".join(("NVIDIA " if platform == "nvidia" else "") + FAMILIES[f][1] for f in names)


def model_names():
    """The models, the default first, then in name order."""
    return [DEFAULT_MODEL] + [name for name in MODEL_NAMES if name != DEFAULT_MODEL]


def serves(name, key, version):
    """Whether release `version` of build `key` serves model `name` (its entry's first release for the build)."""
    first = (model(name)["engines"].get(key) or {}).get("min")
    return first is not None and version_key(version) >= version_key(first)


def checkpoint(name, quant):
    repo = model(name)["checkpoints"][quant]["repo_id"]
    return "`%s` (`%s`)" % (quant, repo) if repo else "`%s` (no published checkpoint)" % quant


def first_release(name, key):
    """What a model's entry says of a build: the first release serving it, or no."""
    first = (model(name)["engines"].get(key) or {}).get("min")
    if first is None:
        return "no"
    return "every pinned release" if first == "0" else "%s and newer" % first


def recommended_on(key, quant):
    """The families on which quant=auto engine=auto resolves to this build and quant."""
    spec = ENGINES[key]
    return [FAMILIES[f][1] for f in FAMILIES if FAMILIES[f][0] == spec["platform"] and f in RECOMMENDED
            and RECOMMENDED[f]["quant"] == quant and RECOMMENDED[f]["engine"] == spec["name"]]


def image(key, version, quant):
    release = ENGINES[key]["versions"][version]
    pinned = release["images"][quant]
    if isinstance(pinned, dict):
        text = ", ".join("`%s` on the %s" % (pinned[f], FAMILIES[f][1]) for f in FAMILIES if f in pinned)
    else:
        text = "`%s`" % pinned
    if quant in release.get("local_build", ()):
        text += ", built by kimi_image FROM `%s`" % release["build_bases"][quant]
    return text


def verified(key, version):
    where = ENGINES[key]["versions"][version]["verified"]
    if not where:
        return "flags checked only"
    return "yes: %s" % where.split(": ", 1)[0]


def router(key):
    """The router of a disaggregated deployment, with its version; from the engine image where it has no package."""
    entry = ROUTERS[key]
    where = " (the engine image's)" if entry["install"] == "image" else ""
    return "yes, behind %s %s%s" % (entry["title"], entry["version"], where)


def refused():
    """Per platform: the quant and engine pairs no build serves there."""
    lines = []
    for platform in PLATFORMS:
        served = {}
        for key in builds():
            if ENGINES[key]["platform"] == platform:
                for quant in ENGINES[key]["quants"]:
                    served.setdefault(quant, set()).add(ENGINES[key]["name"])
        names = sorted(set(ENGINES[key]["name"] for key in builds() if ENGINES[key]["platform"] == platform))
        parts = ["`%s` on `%s`" % (quant, name) for quant in QUANTS if quant in served
                 for name in names if name not in served[quant]]
        unserved = ["`%s`" % quant for quant in QUANTS if quant not in served]
        if unserved:
            parts.append("%s on any engine" % ", ".join(unserved))
        parts += ["`engine=%s`" % name for name in sorted(set(spec["name"] for spec in ENGINES.values()))
                  if name not in names]
        lines.append("- %s: %s" % (PLATFORM_TITLES[platform], ", ".join(parts)))
    return lines


def rows():
    """(model, key, quant, version) of every release that serves a model's checkpoint: the model's quant is one the
    build serves, the release has an image for it, and the model's entry names a first release at or below it."""
    found = []
    for name in model_names():
        for key in builds():
            for quant in model(name)["checkpoints"]:
                if quant not in ENGINES[key]["quants"]:
                    continue
                found += [(name, key, quant, version) for version in versions(key)
                          if quant in ENGINES[key]["versions"][version]["images"] and serves(name, key, version)]
    order = model_names()
    return sorted(found, key=lambda row: (order.index(row[0]), PLATFORMS.index(ENGINES[row[1]]["platform"]), row[2],
                                          builds().index(row[1]), versions(row[1]).index(row[3])))


def render():
    """The README's support-matrix block (without the markers), as Markdown."""
    lines = [
        "| `kimi_model` | quant (checkpoint) | `engine` (build) | version | image | hardware | verified | "
        "`auto` picks it on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, key, quant, version in rows():
        spec = ENGINES[key]
        default = version == spec["default_version"]
        # auto serves the default version of the default model (its recommendation is Kimi-K2.6's)
        picks = recommended_on(key, quant) if default and name == DEFAULT_MODEL else []
        lines.append("| `%s` | %s | `%s` (%s) | %s | %s | %s | %s | %s |" % (
            name, checkpoint(name, quant), spec["name"], spec["title"],
            "**%s** (default)" % version if default else version, image(key, version, quant),
            hardware(key, quant), verified(key, version) if name == DEFAULT_MODEL else "flags checked only",
            ", ".join(picks)))
    lines += [
        "",
        "Refused before any host changes (the error says why, with its source):",
        "",
    ] + refused() + [
        "",
        "| `kimi_model` | chat format (parsers) | thinking | %s |" % " | ".join(
            "`%s` (%s)" % (ENGINES[key]["name"], ENGINES[key]["title"]) for key in builds()),
        "|---|---|---|%s" % ("---|" * len(builds())),
    ]
    for name in model_names():
        entry = model(name)
        parsers = sorted(set(n for kinds in entry["parsers"].values() for names in kinds.values() for n in names[:1]))
        efforts = entry["reasoning_efforts"]
        lines.append("| `%s` (%s) | %s (%s) | %s | %s |" % (
            name, entry["title"], entry["chat_format"], ", ".join("`%s`" % p for p in parsers),
            entry["thinking"] + (", reasoning_effort %s" % "/".join(efforts) if efforts else ""),
            " | ".join(first_release(name, key) for key in builds())))
    lines += [
        "",
        "| `engine` (build) | one replica over several hosts | prefill/decode disaggregation | speculative decoding |",
        "|---|---|---|---|",
    ]
    for key in builds():
        spec = ENGINES[key]
        lines.append("| `%s` (%s) | %s | %s | %s |" % (
            spec["name"], spec["title"], MULTI_NODE[spec["multi_node"]],
            router(spec["disaggregation"]["router"]) if spec["disaggregation"] else "no",
            "yes" if spec["speculative"] else "no"))
    return "\n".join(lines) + "\n"


def replace_block(text, block):
    """`text` with the part between the markers replaced by `block`; ValueError when the markers are missing."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError("README.md has no %s ... %s block" % (START, END))
    return text[:start + len(START)] + "\n" + block + text[end:]


def read_block(text):
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError("README.md has no %s ... %s block" % (START, END))
    return text[start + len(START):end].lstrip("\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite the README's block")
    group.add_argument("--check", action="store_true", help="exit 1 when the README's block is out of date")
    parser.add_argument("--readme", default=README, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    block = render()
    if not (args.write or args.check):
        sys.stdout.write(block)
        return 0
    with open(args.readme, encoding="utf-8") as handle:
        text = handle.read()
    if args.check:
        if read_block(text) != block:
            sys.stderr.write("%s: the support matrix is out of date: run make readme\n" % args.readme)
            return 1
        return 0
    new = replace_block(text, block)
    if new != text:
        with open(args.readme + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(new)
        os.replace(args.readme + ".tmp", args.readme)
        print("%s: support matrix rewritten" % args.readme)
    else:
        print("%s: support matrix up to date" % args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
