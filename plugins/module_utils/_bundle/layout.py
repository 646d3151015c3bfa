# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The air-gap bundle: its layout, the releases it knows, what a host needs from it and what it lacks.

playbooks/bundle.yml writes a bundle from these rules on a connected machine; site.yml -e kimi_bundle=<dir> checks
a bundle against them before any host is changed. The manifest (files and sha256) is kimi.deploy.bundle_manifest's;
this module reads only its `components`, which bundle.yml writes:

    {"format": 1, "collection": {"name", "version", "file"},
     "images": {reference: {"file", "id"}},                    # image_archive's .tar.zst, its .json beside it
     "checkpoints": [{"repo_id", "revision"}],                 # hub cache layout under hf/hub
     "apt": {release: {"architecture", "folder", "fingerprint", "packages", "caddy"}},
     "inventory": "inventory/inputs.yml"}
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

COMPONENTS_FORMAT = 1

# Folders inside a bundle.
IMAGES_DIR = "images"
HF_HOME_DIR = "hf"          # an HF_HOME: the hub cache is hf/hub
APT_DIR = "apt"
COLLECTION_DIR = "collection"
INVENTORY_FILE = "inventory/inputs.yml"

# The distribution archives of the releases a bundle knows by name. A release given as a mapping instead names its
# own sources. Each keyring is the file its distribution's keyring package installs on the connected machine.
_DEBIAN = {"uris": ["http://deb.debian.org/debian"], "keyring": "/usr/share/keyrings/debian-archive-keyring.gpg",
           "security": "http://deb.debian.org/debian-security", "components": ["main"],
           "keyring_package": "debian-archive-keyring"}
_UBUNTU = {"uris": ["http://archive.ubuntu.com/ubuntu"], "keyring": "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
           "security": "http://security.ubuntu.com/ubuntu", "components": ["main", "restricted", "universe"],
           "keyring_package": "ubuntu-keyring"}
RELEASES = {
    "bookworm": dict(_DEBIAN, distribution="Debian", version="12"),
    "trixie": dict(_DEBIAN, distribution="Debian", version="13"),
    "jammy": dict(_UBUNTU, distribution="Ubuntu", version="22.04"),
    "noble": dict(_UBUNTU, distribution="Ubuntu", version="24.04"),
}
ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

# Inventory variables carried in the bundle's inventory copy: the collection's inputs. Secrets never are: the options
# the argument specs mark no_log, and any name that says it holds one.
_INPUT_NAME = re.compile(r"^(quant|engine|kimi_|nvidia_host_|ascend_host_|caddy_proxy_)")
_SECRET_NAME = re.compile(r"(token|password|passphrase|secret|_keys?$|_key_|vault|clients)")
# Facts the playbooks set on a host (resolved, read or noted), not inputs.
_NOT_INPUT = re.compile(r"^(kimi_test_|kimi_bundle$|kimi_bundle_needs?$|kimi_deployment$|kimi_replica_members$|"
                        r"kimi_pd_members$|kimi_site_|kimi_weights_report$|kimi_weights_draft_report$)|_offline_needs$")


class BundleError(Exception):
    """A bundle input that cannot be used; the message names it."""


def apt_architecture(arch):
    """Debian's name of an architecture (x86_64 -> amd64)."""
    try:
        return ARCHITECTURES[arch]
    except KeyError:
        raise BundleError("architecture %r is not one a bundle carries (%s)" % (arch, ", ".join(sorted(ARCHITECTURES))))


def release_spec(release):
    """A release by name (one of RELEASES) or as {name, distribution, version, sources}: its name, facts and sources.

    Sources are apt_bundle's: [{uris, suites, components, signed_by}]. A known release gets its archive's suites
    (<name>, -updates and -security).
    """
    if isinstance(release, dict):
        name = release.get("name")
        missing = [k for k in ("name", "distribution", "version", "sources") if not release.get(k)]
        if missing:
            raise BundleError("kimi_bundle_releases: a release given as a mapping needs %s (got %s)" % (
                ", ".join(missing), ", ".join(sorted(release)) or "nothing"))
        return {"name": name, "distribution": release["distribution"], "version": str(release["version"]),
                "sources": list(release["sources"]), "keyring_package": release.get("keyring_package")}
    if release not in RELEASES:
        raise BundleError("kimi_bundle_releases: %r is not a release the collection knows (%s); give it as a mapping "
                          "{name, distribution, version, sources}" % (release, ", ".join(sorted(RELEASES))))
    known = RELEASES[release]
    sources = [{"uris": known["uris"], "suites": [release, release + "-updates"], "components": known["components"],
                "signed_by": known["keyring"]},
               {"uris": [known["security"]], "suites": [release + "-security"], "components": known["components"],
                "signed_by": known["keyring"]}]
    return {"name": release, "distribution": known["distribution"], "version": known["version"], "sources": sources,
            "keyring_package": known["keyring_package"]}


def image_file(name):
    """The archive of an image inside the bundle: images/<reference with / and : made safe>.tar.zst."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")
    return "%s/%s.tar.zst" % (IMAGES_DIR, safe)


def repo_folder(repo_id):
    """The hub cache folder of a model repo (huggingface_hub's models--org--name)."""
    return "%s/hub/models--%s" % (HF_HOME_DIR, repo_id.replace("/", "--"))


def apt_folder(release, architecture):
    return "%s/%s-%s" % (APT_DIR, release, architecture)


def package_name(spec):
    """The name of a package spec (name, name=version, name:arch)."""
    return re.split(r"[=:<>]", spec.strip(), 1)[0]


def needs(deployment, images, apt_packages, release, architecture):
    """What one host needs from a bundle.

    deployment: the host's kimi_deployment (or None for a host that runs no engine, a monitoring host); images: the
    other images its roles run (the host check's, the exporters'); apt_packages: the Debian packages its roles
    install; release and architecture: the host's (ansible_distribution_release, ansible_architecture).
    """
    wanted_images = []
    checkpoints = []
    disaggregated = False
    if deployment:
        wanted_images.append(deployment["image"])
        ckpt = deployment["checkpoint"]
        checkpoints.append({"repo_id": ckpt["repo_id"], "revision": ckpt["revision"]})
        spec = deployment.get("speculative") or {}
        draft = spec.get("draft") if isinstance(spec, dict) else None
        if isinstance(draft, dict) and draft.get("repo_id"):
            checkpoints.append({"repo_id": draft["repo_id"], "revision": draft.get("revision")})
        disaggregated = isinstance(deployment.get("pd"), dict)
    for image in images or []:
        if image and image not in wanted_images:
            wanted_images.append(image)
    return {"images": wanted_images, "checkpoints": checkpoints,
            "apt": {"release": release, "architecture": apt_architecture(architecture),
                    "packages": sorted(set(package_name(p) for p in apt_packages or []))},
            "disaggregated": disaggregated}


def lacks(components, need):
    """What the bundle lacks for a host's needs, one sentence per thing; [] when it has it all."""
    components = components or {}
    out = []
    have_images = components.get("images") or {}
    for image in need["images"]:
        if image not in have_images:
            out.append("the image %s (it has %s)" % (image, ", ".join(sorted(have_images)) or "no image"))
    have_ckpts = set((c.get("repo_id"), c.get("revision")) for c in components.get("checkpoints") or [])
    for ckpt in need["checkpoints"]:
        if (ckpt["repo_id"], ckpt["revision"]) not in have_ckpts:
            held = sorted("%s@%s" % (r, (v or "?")[:12]) for r, v in have_ckpts if r == ckpt["repo_id"])
            where = "it has " + ", ".join(held) if held else "not in it"
            out.append("the checkpoint %s@%s (%s)" % (ckpt["repo_id"], (ckpt["revision"] or "unpinned")[:12], where))
    apt = need["apt"]
    repos = components.get("apt") or {}
    repo = repos.get(apt["release"])
    if repo is None or repo.get("architecture") != apt["architecture"]:
        out.append("an apt repository for %s/%s (it has %s; add the release to kimi_bundle_releases)" % (
            apt["release"], apt["architecture"],
            ", ".join("%s/%s" % (k, v.get("architecture")) for k, v in sorted(repos.items())) or "none"))
    else:
        have = set(package_name(p) for p in repo.get("packages") or [])
        missing = [p for p in apt["packages"] if p not in have]
        if missing:
            out.append("the packages %s in its %s/%s repository" % (
                ", ".join(missing), apt["release"], apt["architecture"]))
    if need["disaggregated"]:
        out.append("the PD router's wheels: a bundle does not carry disaggregated deployments yet (serve them "
                   "online, or with kimi_router_wheelhouse on the host)")
    return out


def path_of(kind, value, architecture=None, bundle=None):
    """Where a thing lives in a bundle: image (a reference), checkpoint (a repo id) or apt (a release); archive: the
    host roles' {name, src} of an image's archive in the bundle folder `bundle`."""
    if kind == "image":
        return image_file(value)
    if kind == "archive":
        if not bundle:
            raise BundleError("an image archive needs the bundle's folder")
        return {"name": value, "src": "%s/%s" % (bundle.rstrip("/"), image_file(value))}
    if kind == "checkpoint":
        return repo_folder(value)
    if kind == "apt":
        return apt_folder(value, apt_architecture(architecture or "x86_64"))
    if kind == "architecture":
        return apt_architecture(value)
    raise BundleError("a bundle holds image, archive, checkpoint, apt and architecture paths, not %r" % (kind,))


def secret_names(argument_specs):
    """The option names marked no_log in argument spec documents ({argument_specs: {entry: {options}}})."""
    names = set()

    def walk(options):
        for name, spec in (options or {}).items():
            if not isinstance(spec, dict):
                continue
            if spec.get("no_log"):
                names.add(name)
            walk(spec.get("options"))
    for doc in argument_specs or []:
        for entry in ((doc or {}).get("argument_specs") or {}).values():
            walk((entry or {}).get("options"))
    return names


def inputs(host_vars, secrets):
    """The collection's non-secret inputs of one host, for the bundle's inventory copy."""
    out = {}
    for name in sorted(host_vars):
        if not _INPUT_NAME.match(name) or _NOT_INPUT.search(name):
            continue
        if name in secrets or _SECRET_NAME.search(name):
            continue
        out[name] = host_vars[name]
    return out
