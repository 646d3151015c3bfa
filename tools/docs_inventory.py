"""Write the Sphinx inventory of the Ansible documentation labels that kimi.deploy's pages link to.

antsibull-docs' pages name a few labels of Ansible's own documentation (the common return values, the configuration
settings, action plugins, and community.docker's modules). Sphinx resolves them through intersphinx inventories,
which it would download from docs.ansible.com; the docs build (tools/build_docs.sh) runs offline, so this writes an
inventory holding just those labels, with their URLs on docs.ansible.com, in Sphinx's inventory format (version 2).

Usage: python tools/docs_inventory.py DIR   (writes DIR/ansible_devel.inv)
"""
import os
import sys
import zlib

# label -> (page under https://docs.ansible.com/projects/ansible/devel/, anchor, title)
LABELS = {
    "common_return_values": ("reference_appendices/common_return_values.html", "common-return-values",
                             "Return Values"),
    "ansible_configuration_settings": ("reference_appendices/config.html", "ansible-configuration-settings",
                                       "Ansible Configuration Settings"),
    "action_plugins": ("plugins/action.html", "action-plugins", "Action plugins"),
    "ansible_collections.community.docker.docker_image_info_module": (
        "collections/community/docker/docker_image_info_module.html",
        "ansible-collections-community-docker-docker-image-info-module", "community.docker.docker_image_info module"),
}


def inventory():
    header = ("# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n"
              "# The remainder of this file is compressed using zlib.\n").encode()
    lines = "".join("%s std:label -1 %s#%s %s\n" % (name, page, anchor, title)
                    for name, (page, anchor, title) in sorted(LABELS.items()))
    return header + zlib.compress(lines.encode())


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: docs_inventory.py DIR\n")
        return 2
    with open(os.path.join(argv[1], "ansible_devel.inv"), "wb") as f:
        f.write(inventory())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
