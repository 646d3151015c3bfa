#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_bundle
short_description: Build a signed flat apt repository of some packages and their whole dependency closure, for an air-gapped host
description:
  - On a connected machine, writes to O(path) a flat apt repository that holds O(packages) and every package they
    depend on, for the target release O(release) and O(architecture) - which may differ from this machine's - so an
    offline host of that release installs them from it with C(deb [signed-by=KEY] file:/PATH ./).
  - apt resolves the closure in a private apt root (a temporary folder) - a deb822 C(.sources) file per entry of
    O(sources), Signed-By a copy of its keyring, an empty dpkg status, only O(architecture), no locking. With
    nothing installed, the closure goes down to C(libc6), so the repository serves a minimal host of that release.
    Recommends and Suggests are left out.
  - The C(.deb) files are downloaded into O(cache_dir) (a second run downloads nothing) and hard-linked into
    C(<path>/pool/) (copied where a link cannot be made). C(Packages) and C(Packages.gz) come from
    C(apt-ftparchive packages), C(Release) from C(apt-ftparchive release) (Origin C(kimi.deploy bundle); Suite,
    Codename and Label O(release); Architectures O(architecture); Date the newest Date of the sources' Release files,
    so an offline host whose clock is behind does not find it "not valid yet"). C(InRelease) and C(Release.gpg) are
    signed with the key in O(signing_home); the public key is written beside them as
    C(kimi-bundle-archive-keyring.asc) (armored) and C(kimi-bundle-archive-keyring.gpg) (binary).
  - The repository is built in C(<path>.tmp-XXXX) beside O(path) and swapped in - the old folder is renamed aside,
    the new one renamed in, the old one removed - so a reader sees the old or the new repository, never half of one.
    Packages that left the closure leave the pool with it.
  - Nothing is written, and RV(ignore:changed=false), when O(path) already holds exactly the closure (the same file
    names and sha256), C(Packages) and C(Packages.gz) match the signed C(Release), C(InRelease) and C(Release.gpg)
    verify with the signing key, the Release fields are as wanted and the public key files are the key's. The
    C(apt-get update) of the private root runs every time.
  - Every program runs from an argument list, never through a shell.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  path:
    description:
      - The repository folder to write, for example C(<bundle>/apt/trixie). Replaced as a whole on a change; its
        parent is created when missing.
    type: path
    required: true
  release:
    description:
      - The target release's name, written as Suite, Codename and Label of the repository's C(Release) file, for
        example V(trixie). It does not choose what apt reads - O(sources) does.
      - It also names the default O(cache_dir).
    type: str
    required: true
  architecture:
    description: The target's Debian architecture; apt resolves for it alone (and C(all)).
    type: str
    default: amd64
  sources:
    description:
      - The apt repositories the closure comes from, one deb822 entry each. Each must be signed, and O(sources[].signed_by)
        is its keyring.
    type: list
    elements: dict
    required: true
    suboptions:
      uris:
        description: The repository's URIs, for example C(http://deb.debian.org/debian) or C(file:/srv/repo).
        type: list
        elements: str
        required: true
      suites:
        description:
          - The suites, for example C([trixie, trixie-updates]); a flat repository has C(['./']).
          - Flat suites (ending in C(/)) and named ones go in separate entries.
        type: list
        elements: str
        required: true
      components:
        description:
          - The components, for named suites. Default V([main]); a flat suite takes none (leave it out or give V([])).
        type: list
        elements: str
      signed_by:
        description:
          - The keyring file on this host that signs the repository - binary (C(.gpg)) or armored (C(.asc)), whatever
            its name (the private root names its copy by the format, as apt requires). Not a GnuPG keybox.
          - Missing, the error names the Debian package that ships the distributions' keyrings - C(debian-archive-keyring),
            C(ubuntu-keyring).
        type: path
        required: true
  packages:
    description:
      - The packages to bundle, as C(apt-get install) takes them - C(name), C(name=version) (exact), C(name/release)
        or C(name:arch). No globs or patterns.
      - A package the sources do not have fails the run, naming it and O(release).
    type: list
    elements: str
    required: true
  signing_home:
    description:
      - A private GnuPG home (mode 0700, created when missing) that holds the bundle's signing key, outside O(path) -
        the private key never goes into the bundle.
      - When it holds no secret key, an ed25519 signing key without passphrase and without expiry is generated,
        with user ID O(key_name). A key present is reused - the one named O(key_name), else the only one.
      - Its gpg-agent is stopped at the end of the run.
    type: path
    required: true
  key_name:
    description: User ID of the key generated in O(signing_home); among several keys there, the one to use.
    type: str
    default: kimi.deploy air-gap bundle
  cache_dir:
    description:
      - Where the downloaded C(.deb) files stay between runs (the private root's archives folder); outside O(path).
        Runs that share it are serialised by a lock in it.
      - Default C(~/.cache/kimi-deploy/apt/<release>-<architecture>) of the user the module runs as.
    type: path
notes:
  - Needs C(apt-get) (apt), C(apt-ftparchive) (apt-utils), C(gpg), C(gpgv) and C(gpgconf) on the host, and network
    access to O(sources). Meant for C(delegate_to) the controller or a build host, usually as root.
  - As root, apt downloads as its C(_apt) user; when a source is a C(file:) URI (which C(_apt) may not be able to
    read), the private root downloads as root instead.
  - The host's own apt configuration (C(/etc/apt/apt.conf.d), for example a proxy) applies; its sources, pins,
    keyrings and dpkg status do not.
  - A failure caused by one option's value returns that option's name in C(option).
requirements:
  - apt, apt-utils, gpg, gpgv on the host
attributes:
  check_mode:
    support: full
    description:
      - Updates the private root's indexes (in a temporary folder), resolves the closure and reports what would be
        added and removed; writes nothing - no O(path), no O(cache_dir), no key in O(signing_home).
  diff_mode:
    support: none
    description: No diff; RV(added), RV(removed) and RV(reasons) say what changes.
  platform:
    support: full
    platforms: posix
    description: Debian and Ubuntu hosts (apt).
seealso:
  - module: kimi.deploy.bundle_manifest
"""

EXAMPLES = r"""
- name: The trixie packages of the air-gapped site, with their dependencies
  kimi.deploy.apt_bundle:
    path: /srv/bundle/apt/trixie
    release: trixie
    sources:
      - uris: [http://deb.debian.org/debian]
        suites: [trixie, trixie-updates]
        signed_by: /usr/share/keyrings/debian-archive-keyring.gpg
      - uris: [http://deb.debian.org/debian-security]
        suites: [trixie-security]
        signed_by: /usr/share/keyrings/debian-archive-keyring.gpg
    packages: [caddy, docker.io, prometheus-node-exporter, python3-venv, zstd]
    signing_home: /var/lib/kimi-deploy/bundle-gnupg
  delegate_to: localhost
  register: apt_bundle

- name: A vendor's flat repository (armored key), one pinned version
  kimi.deploy.apt_bundle:
    path: /srv/bundle/apt/noble-nvidia
    release: noble
    sources:
      - uris: [https://nvidia.github.io/libnvidia-container/stable/deb/amd64]
        suites: ['./']
        signed_by: /etc/kimi/nvidia-container-toolkit.asc
    packages: [libnvidia-container-tools=1.18.0-1]
    signing_home: /var/lib/kimi-deploy/bundle-gnupg
  delegate_to: localhost

- name: What would change
  kimi.deploy.apt_bundle:
    path: /srv/bundle/apt/trixie
    release: trixie
    sources: "{{ kimi_bundle_trixie_sources }}"
    packages: "{{ kimi_bundle_trixie_packages }}"
    signing_home: /var/lib/kimi-deploy/bundle-gnupg
  check_mode: true
  delegate_to: localhost

# On the offline host, after copying /srv/bundle/apt/trixie to /opt/bundle/apt/trixie:
#   deb [signed-by=/opt/bundle/apt/trixie/kimi-bundle-archive-keyring.gpg] file:/opt/bundle/apt/trixie ./
"""

RETURN = r"""
path:
  description: The repository folder.
  returned: always
  type: str
  sample: /srv/bundle/apt/trixie
release:
  description: O(release).
  returned: always
  type: str
  sample: trixie
architecture:
  description: O(architecture).
  returned: always
  type: str
  sample: amd64
fingerprint:
  description: The signing key's fingerprint, 40 hex digits; null in check mode when the key would be generated.
  returned: success
  type: str
  sample: 3D1F6A9C0E5B7D2F48A1C6E0B9D7F3A25C4E8B10
key_generated:
  description: Whether this run generated the signing key (in check mode, would generate).
  returned: success
  type: bool
packages:
  description: The closure - every package in the repository, by name.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Package name.
      type: str
    version:
      description: Version, with its epoch.
      type: str
    architecture:
      description: O(architecture) or C(all).
      type: str
    filename:
      description: Path in the repository, C(pool/<name>_<version without epoch>_<architecture>.deb).
      type: str
    size:
      description: Bytes.
      type: int
    sha256:
      description: SHA256 of the file.
      type: str
  sample:
    - {name: caddy, version: 2.6.2-5+b11, architecture: amd64, filename: pool/caddy_2.6.2-5+b11_amd64.deb,
       size: 13543056, sha256: 0f1e...}
requested:
  description: O(packages) as given.
  returned: always
  type: list
  elements: str
bytes:
  description: The size of all the packages.
  returned: success
  type: int
added:
  description: Pool files written (in check mode, that would be) because the repository lacked them or held other bytes.
  returned: success
  type: list
  elements: str
removed:
  description: Pool files no longer in the closure, removed with the old repository (in check mode, that would be).
  returned: success
  type: list
  elements: str
reasons:
  description: Why the repository is (or would be) rewritten beside the pool's changes - missing, other key, Release fields, indexes.
  returned: success
  type: list
  elements: str
cache_dir:
  description: The cache folder in effect.
  returned: success
  type: str
changed:
  description: Whether the repository was (in check mode, would be) written.
  returned: always
  type: bool
option:
  description: On a failure caused by the value of one option, that option's name.
  returned: on such a failure
  type: str
  sample: packages
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kimi.deploy.plugins.module_utils._bundle.apt import (
    DEFAULT_KEY_NAME, AptBundle, AptBundleError, find_tools)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            release=dict(type="str", required=True),
            architecture=dict(type="str", default="amd64"),
            sources=dict(type="list", elements="dict", required=True, options=dict(
                uris=dict(type="list", elements="str", required=True),
                suites=dict(type="list", elements="str", required=True),
                components=dict(type="list", elements="str"),
                signed_by=dict(type="path", required=True),
            )),
            packages=dict(type="list", elements="str", required=True),
            signing_home=dict(type="path", required=True),
            key_name=dict(type="str", default=DEFAULT_KEY_NAME),
            cache_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    base = {"path": p["path"], "release": p["release"], "architecture": p["architecture"], "requested": p["packages"]}

    def run(argv, cwd=None, env=None):
        return module.run_command(argv, cwd=cwd, environ_update=env, expand_user_and_vars=False)

    try:
        tools = find_tools(module.get_bin_path)
        result = AptBundle(p, run, tools, check_mode=module.check_mode).run()
    except AptBundleError as exc:
        extra = {"option": exc.option} if exc.option else {}
        module.fail_json(msg=str(exc), **dict(base, **extra))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
