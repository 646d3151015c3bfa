# TEST DOUBLE of NVIDIA's nvidia-persistenced (kimi.deploy test suite). Python 3 stdlib only.
#
# Like the real daemon: forks into the background (the parent exits once the child is ready, so
# systemd Type=forking works), writes and locks /var/run/nvidia-persistenced/nvidia-persistenced.pid,
# creates the RPC socket path, drops privileges to --user/--group, logs to syslog, and runs until
# SIGTERM/SIGINT. It "registers" the GPUs of the GPU profile ($KIMI_DOUBLE_GPU_PROFILE or
# /etc/kimi-double/gpu-profile.json) and fails as the real one does when there is no driver.
# $KIMI_DOUBLE_PERSISTENCED_RUNDIR moves the runtime directory (for unprivileged tests).
import errno
import fcntl
import grp
import json
import os
import pwd
import signal
import socket
import sys
import syslog
import time

NAME = "nvidia-persistenced"
DEFAULT_PROFILE = "/etc/kimi-double/gpu-profile.json"
DRIVER_VERSION = "@DRIVER_VERSION@"

USAGE = """
nvidia-persistenced:  version %s

  The NVIDIA Persistence Daemon.

  A tool for maintaining persistent driver state, specifically for use by the NVIDIA Linux driver.
  (TEST DOUBLE used by the kimi.deploy test suite.)

  Copyright (C) 2013-2025 NVIDIA Corporation.

nvidia-persistenced [options]

  -v, --version          Print the utility version and exit.
  -h, --help             Print usage information for the command line options and exit.
  -V, --verbose          Controls how much information is printed.
  -u USERNAME, --user=USERNAME
  -g GROUPNAME, --group=GROUPNAME
  --persistence-mode, --no-persistence-mode
  -f, --foreground       Run in the foreground.

"""


def rundir():
    return os.environ.get("KIMI_DOUBLE_PERSISTENCED_RUNDIR") or "/var/run/nvidia-persistenced"


class Log(object):
    def __init__(self, verbose, foreground):
        self.verbose = verbose
        self.foreground = foreground
        syslog.openlog(NAME, syslog.LOG_PID, syslog.LOG_DAEMON)

    def __call__(self, msg, level=syslog.LOG_INFO, verbose_only=False):
        if verbose_only and not self.verbose:
            return
        syslog.syslog(level, msg)
        if self.foreground:
            sys.stderr.write("%s: %s\n" % (NAME, msg))
            sys.stderr.flush()


def parse(argv):
    opts = {"user": None, "group": None, "persistence": True, "verbose": False, "foreground": False}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, value = (arg.split("=", 1) + [None])[:2] if arg.startswith("--") else (arg, None)
        if key in ("-v", "--version"):
            sys.stdout.write(USAGE.split("nvidia-persistenced [options]", maxsplit=1)[0])
            sys.exit(0)
        elif key in ("-h", "--help"):
            sys.stdout.write(USAGE)
            sys.exit(0)
        elif key in ("-V", "--verbose"):
            opts["verbose"] = True
        elif key in ("-f", "--foreground"):
            opts["foreground"] = True
        elif key == "--persistence-mode":
            opts["persistence"] = True
        elif key == "--no-persistence-mode":
            opts["persistence"] = False
        elif key in ("-u", "--user", "-g", "--group", "--nvidia-cfg-path"):
            if value is None:
                i += 1
                if i >= len(argv):
                    sys.stderr.write("\nERROR: Missing argument for option '%s'.\n\n" % key)
                    sys.exit(1)
                value = argv[i]
            if key in ("-u", "--user"):
                opts["user"] = value
            elif key in ("-g", "--group"):
                opts["group"] = value
        else:
            sys.stderr.write("\nERROR: Unrecognized option '%s'.\n\n" % arg)
            sys.exit(1)
        i += 1
    return opts


def load_gpus():
    if os.environ.get("KIMI_DOUBLE_NO_DRIVER", "") not in ("", "0"):
        return None
    try:
        with open(os.environ.get("KIMI_DOUBLE_GPU_PROFILE") or DEFAULT_PROFILE) as handle:
            profile = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    if (profile.get("kimi_gpu_driver") or {}).get("loaded", True) is False:
        return None
    return sorted((g for g in profile.get("kimi_gpus") or [] if g.get("platform") != "ascend"),
                  key=lambda g: int(g.get("index", 0)))


def short_bus_id(bus_id):
    domain, bus, devfn = bus_id.split(":")
    return "%s:%s:%s" % (domain[-4:], bus.lower(), devfn.lower())


def report_failure():
    sys.stderr.write("\n%s failed to initialize. Check syslog for more details.\n\n" % NAME)


def fail(log, msg, ready_fd=None):
    """Log why, then tell the waiting parent (which reports it) or report it here (foreground)."""
    log(msg, syslog.LOG_ERR)
    if ready_fd is not None:
        os.write(ready_fd, b"1")
        os._exit(1)
    report_failure()
    sys.exit(1)


def daemon(opts, log, ready_fd):
    gpus = load_gpus()
    if gpus is None:
        fail(log, "Failed to query NVIDIA devices. Please ensure that the NVIDIA device files (/dev/nvidia*) exist, "
             "and that user %d has read and write permissions for those files." % os.getuid(), ready_fd)
    uid, gid = os.getuid(), os.getgid()
    if opts["user"]:
        try:
            entry = pwd.getpwnam(opts["user"])
        except KeyError:
            fail(log, "Failed to find user '%s'." % opts["user"], ready_fd)
        uid, gid = entry.pw_uid, entry.pw_gid
    if opts["group"]:
        try:
            gid = grp.getgrnam(opts["group"]).gr_gid
        except KeyError:
            fail(log, "Failed to find group '%s'." % opts["group"], ready_fd)
    directory = rundir()
    try:
        os.makedirs(directory, 0o755)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            fail(log, "Failed to create directory %s: %s." % (directory, exc.strerror), ready_fd)
    if os.getuid() == 0 and (uid, gid) != (0, 0):
        os.chown(directory, uid, gid)
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    pid_path = os.path.join(directory, NAME + ".pid")
    try:
        pid_fd = os.open(pid_path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.lockf(pid_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (IOError, OSError) as exc:
        fail(log, "Failed to lock PID file: %s" % exc.strerror, ready_fd)
    os.ftruncate(pid_fd, 0)
    os.write(pid_fd, ("%d\n" % os.getpid()).encode())
    log("Started (%d)" % os.getpid())
    sock_path = os.path.join(directory, "socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        server.bind(sock_path)
        server.listen(4)
    except (IOError, OSError) as exc:
        fail(log, "Failed to create the RPC socket %s: %s" % (sock_path, exc), ready_fd)
    for gpu in gpus:
        log("device %s - registered" % short_bus_id(gpu["pci_bus_id"]))
        if opts["persistence"]:
            log("device %s - persistence mode enabled." % short_bus_id(gpu["pci_bus_id"]))
    log("Local RPC services initialized")
    if ready_fd is not None:
        os.write(ready_fd, b"0")
        os.close(ready_fd)

    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stopping:
        time.sleep(0.5)
    log("Received signal %d" % stopping[0])
    server.close()
    log("Socket closed.")
    for gpu in gpus:
        log("device %s - persistence mode disabled." % short_bus_id(gpu["pci_bus_id"]), verbose_only=True)
    for path in (sock_path, pid_path):
        try:
            os.unlink(path)
        except OSError:
            log("The daemon no longer has permission to remove its runtime data directory %s" % directory,
                syslog.LOG_NOTICE)
            break
    log("PID file unlocked.")
    os.close(pid_fd)
    log("PID file closed.")
    log("Shutdown (%d)" % os.getpid())
    return 0


def main():
    opts = parse(sys.argv[1:])
    log = Log(opts["verbose"], opts["foreground"])
    log("Verbose syslog connection opened", verbose_only=True)
    if os.geteuid() != 0 and not os.environ.get("KIMI_DOUBLE_PERSISTENCED_RUNDIR"):
        fail(log, "The daemon must be run as root.")
    if opts["foreground"]:
        return daemon(opts, log, None)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(write_fd)
        status = os.read(read_fd, 1)
        if status != b"0":
            report_failure()
            return 1
        return 0
    # The daemon: no controlling terminal, no inherited stdio (a caller reading our output gets EOF).
    os.close(read_fd)
    os.setsid()
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    code = 1
    try:
        code = daemon(opts, log, write_fd)
    finally:
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
