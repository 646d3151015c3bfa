# TEST DOUBLE of NVIDIA's nvidia-container-runtime (kimi.deploy test suite). Python 3 stdlib only.
# The real one is a runc shim that edits the OCI spec (legacy/CDI modes) and then execs the low-level
# runtime. This double makes no edit: it execs the first of runc/crun it finds, with the same argv.
import os
import sys

SEARCH = ["/usr/bin/runc", "/usr/sbin/runc", "/usr/local/bin/runc", "/usr/local/sbin/runc", "/usr/bin/crun"]


def main():
    if sys.argv[1:2] in (["--version"], ["-v"]):
        sys.stdout.write("NVIDIA Container Runtime version 1.18.0 (TEST DOUBLE)\n")
    for path in SEARCH + [os.path.join(d, "runc") for d in os.environ.get("PATH", "").split(os.pathsep) if d]:
        if os.access(path, os.X_OK):
            os.execv(path, [path] + sys.argv[1:])
    sys.stderr.write("nvidia-container-runtime: error running runtime: no low-level runtime (runc, crun) found\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
