"""Offline stand-in for get-pip.py, for ansible-test's virtualenv bootstrap.

ansible-test downloads get-pip.py from a CI file host that this network cannot reach, and runs it as
`GET_PIP=<script> python quiet_pip.py <pip install options> pip==X`. This does the same job from the
interpreter's bundled ensurepip wheel, then installs the requested pip from the configured index.
"""
import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
# get-pip.py's own options that `pip install` does not know.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
# ansible-test runs this with a trimmed environment: keep the system CA bundle (a TLS-inspecting proxy may sit
# between this host and the package index).
bundle = os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
if os.path.exists(bundle) and not any(a.startswith("--cert") for a in args):
    args = ["--cert", bundle] + args
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
