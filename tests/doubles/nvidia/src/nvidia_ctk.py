# TEST DOUBLE of NVIDIA Container Toolkit's nvidia-ctk (kimi.deploy test suite). Python 3 stdlib only.
# The GPUs come from the same GPU profile as the nvidia-smi double ($KIMI_DOUBLE_GPU_PROFILE or
# /etc/kimi-double/gpu-profile.json).
#
#   nvidia-ctk --version
#   nvidia-ctk cdi generate [--output=FILE] [--format=yaml|json] [--device-name-strategy=index|uuid]...
#   nvidia-ctk cdi list [--spec-dir=DIR]...
#   nvidia-ctk runtime configure --runtime=docker [--config=FILE] [--set-as-default] [--cdi.enabled] [--dry-run]
#   nvidia-ctk config [--config-file=FILE] [--in-place]      (writes a default config.toml; --set is not supported)
#
# The generated CDI spec is harmless: every device node is bound to /dev/null. A container that gets
# the devices sees NVIDIA_VISIBLE_DEVICES=void (as with the real spec) plus KIMI_DOUBLE_CDI=1,
# KIMI_DOUBLE_GPU_<minor>=<uuid> per GPU and, for "all", KIMI_DOUBLE_GPUS=<count>.
import datetime
import json
import os
import sys

VERSION = "1.18.0"
COMMIT = "kimi-double-0000000000000000000000000000000"
DEFAULT_PROFILE = "/etc/kimi-double/gpu-profile.json"
CDI_VERSION = "0.5.0"
DEFAULT_SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
HOST_BINARIES = ["/usr/bin/nvidia-smi", "/usr/bin/nvidia-persistenced"]
CONTROL_DEVICES = ["/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl"]
DEFAULT_CONFIG_TOML = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""


class CtkError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# logrus-style logging: "INFO[0000] msg" on a terminal, key=value lines otherwise (as logrus does)
# ------------------------------------------------------------------------------------------------

class Logger(object):
    COLORS = {"debug": 37, "info": 36, "warning": 33, "error": 31}

    def __init__(self, stream=None, quiet=False, debug=False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.debug_enabled = debug

    def log(self, level, msg):
        if self.quiet and level in ("info", "debug"):
            return
        if level == "debug" and not self.debug_enabled:
            return
        if self.stream.isatty():
            text = "\x1b[%dm%s\x1b[0m[0000] %-44s \n" % (self.COLORS[level], level.upper()[:4], msg)
        else:
            now = datetime.datetime.now().astimezone().replace(microsecond=0).isoformat()
            if now.endswith("+00:00"):
                now = now[:-6] + "Z"
            text = 'time="%s" level=%s msg=%s\n' % (now, level, _logfmt_quote(msg))
        self.stream.write(text)
        self.stream.flush()

    def info(self, msg):
        self.log("info", msg)

    def warning(self, msg):
        self.log("warning", msg)

    def error(self, msg):
        self.log("error", msg)


def _logfmt_quote(msg):
    if msg and all(c.isalnum() or c in "-._/@^+" for c in msg):
        return msg
    return json.dumps(msg)


# ------------------------------------------------------------------------------------------------
# Tiny flag parser in the urfave/cli style: --name=value, --name value, -name value, repeatable
# ------------------------------------------------------------------------------------------------

def parse_flags(argv, with_value, booleans):
    values, rest = {}, []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "-":
            rest.append(arg)
            i += 1
            continue
        name, value = arg.lstrip("-"), None
        if "=" in name:
            name, value = name.split("=", 1)
        if name in with_value:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise CtkError("flag needs an argument: -%s" % name)
                value = argv[i]
            values.setdefault(with_value[name], []).append(value)
        elif name in booleans:
            values[booleans[name]] = value is None or value.lower() in ("true", "1")
        else:
            raise CtkError("flag provided but not defined: -%s" % name)
        i += 1
    return values, rest


# ------------------------------------------------------------------------------------------------
# GPU profile
# ------------------------------------------------------------------------------------------------

def profile_path():
    return os.environ.get("KIMI_DOUBLE_GPU_PROFILE") or DEFAULT_PROFILE


def load_gpus():
    """The GPUs NVML would report, or CtkError as nvidia-ctk reports a missing driver."""
    if os.environ.get("KIMI_DOUBLE_NO_DRIVER", "") not in ("", "0"):
        raise CtkError("failed to create device CDI specs: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND")
    try:
        with open(profile_path()) as handle:
            profile = json.load(handle)
    except (IOError, OSError, ValueError):
        raise CtkError("failed to create device CDI specs: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND")
    if (profile.get("kimi_gpu_driver") or {}).get("loaded", True) is False:
        raise CtkError("failed to create device CDI specs: failed to initialize NVML: ERROR_DRIVER_NOT_LOADED")
    gpus = sorted((g for g in profile.get("kimi_gpus") or [] if g.get("platform") != "ascend"),
                  key=lambda g: int(g.get("index", 0)))
    return profile, gpus


# ------------------------------------------------------------------------------------------------
# cdi generate
# ------------------------------------------------------------------------------------------------

def build_spec(gpus, strategies, vendor, klass, log, driver_version):
    device_specs = []
    all_nodes, all_env = [], []
    for g in gpus:
        minor = int(g.get("minor_number", g.get("index", 0)))
        node = "/dev/nvidia%d" % minor
        log.info("Selecting %s as %s" % (node, node))
        edits = {"deviceNodes": [{"path": node, "hostPath": "/dev/null"}],
                 "env": ["KIMI_DOUBLE_GPU_%d=%s" % (minor, g["uuid"])]}
        all_nodes += edits["deviceNodes"]
        all_env += edits["env"]
        for strategy in strategies:
            name = str(g.get("index", minor)) if strategy == "index" else g["uuid"]
            if strategy == "type-index":
                name = "gpu%s" % g.get("index", minor)
            device_specs.append({"name": name, "containerEdits": edits})
    if not device_specs:
        raise CtkError("failed to create device CDI specs: no NVIDIA devices found")
    log.info("Using driver version %s" % driver_version)
    common_nodes = []
    for path in CONTROL_DEVICES:
        log.info("Selecting %s as %s" % (path, path))
        common_nodes.append({"path": path, "hostPath": "/dev/null"})
    mounts = []
    for path in HOST_BINARIES:
        if os.path.exists(path):
            log.info("Selecting %s as %s" % (path, path))
            mounts.append({"hostPath": path, "containerPath": path, "options": list(MOUNT_OPTIONS)})
    if os.path.isfile(profile_path()):
        mounts.append({"hostPath": os.path.abspath(profile_path()), "containerPath": DEFAULT_PROFILE,
                       "options": list(MOUNT_OPTIONS)})
    device_specs.append({"name": "all", "containerEdits": {
        "deviceNodes": all_nodes, "env": all_env + ["KIMI_DOUBLE_GPUS=%d" % len(gpus)]}})
    common = {"env": ["NVIDIA_VISIBLE_DEVICES=void", "KIMI_DOUBLE_CDI=1"], "deviceNodes": common_nodes}
    if mounts:
        common["mounts"] = mounts
    return {"cdiVersion": CDI_VERSION, "kind": "%s/%s" % (vendor, klass), "devices": device_specs,
            "containerEdits": common}


def _yaml_scalar(value):
    """Plain when go-yaml would write it plain, double-quoted when it would read back as another type."""
    text = str(value)
    try:
        float(text)
        numeric = True
    except ValueError:
        numeric = False
    if (not text or numeric or text.lower() in ("true", "false", "null", "yes", "no", "on", "off", "y", "n", "~")
            or text[0] in "-?:,[]{}#&*!|>'\"%@` " or ": " in text or " #" in text or text != text.strip()):
        return json.dumps(text)
    return text


def _yaml(value, indent):
    """Block YAML in the go-yaml style nvidia-ctk writes (lists not indented under their key)."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                lines.append("%s%s:" % (pad, key))
                lines += _yaml(item, indent + (2 if isinstance(item, dict) else 0))
            else:
                lines.append("%s%s: %s" % (pad, key, _yaml_scalar(item)))
    else:
        for item in value:
            if isinstance(item, dict):
                sub = _yaml(item, indent + 2)
                sub[0] = pad + "- " + sub[0][indent + 2:]
                lines += sub
            else:
                lines.append("%s- %s" % (pad, _yaml_scalar(item)))
    return lines


def render_spec(spec, fmt):
    if fmt == "json":
        return json.dumps(spec, separators=(",", ":")) + "\n"
    return "---\n" + "\n".join(_yaml(spec, 0)) + "\n"


def cmd_cdi_generate(argv, log):
    flags, rest = parse_flags(argv, {
        "output": "output", "format": "format", "device-name-strategy": "strategy", "mode": "mode",
        "discovery-mode": "mode", "vendor": "vendor", "cdi-vendor": "vendor", "class": "class", "cdi-class": "class",
        "driver-root": "driver_root", "dev-root": "dev_root", "nvidia-ctk-path": "ctk_path",
        "nvidia-cdi-hook-path": "hook_path", "ldconfig-path": "ldconfig", "library-search-path": "lib_path",
        "csv.file": "csv", "csv.ignore-pattern": "csv_ignore", "device-id": "device_id",
        "disable-hook": "disable_hook", "enable-hook": "enable_hook", "feature-flag": "feature_flag"},
        {"no-all-device": "no_all"})
    if rest:
        raise CtkError("unexpected arguments: %s" % " ".join(rest))
    output = (flags.get("output") or [os.environ.get("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH", "")])[-1]
    fmt = (flags.get("format") or [os.environ.get("NVIDIA_CTK_CDI_OUTPUT_FORMAT", "yaml")])[-1].lower()
    explicit_format = "format" in flags
    if fmt not in ("yaml", "json"):
        raise CtkError("invalid output format: %s" % fmt)
    mode = (flags.get("mode") or ["auto"])[-1].lower()
    if mode not in ("auto", "nvml", "csv", "wsl", "management", "gds", "mofed", "imex", "nvswitch", "gdrcopy"):
        raise CtkError("invalid discovery mode: %s" % mode)
    strategies = []
    for raw in flags.get("strategy") or ["index", "uuid"]:
        for strategy in raw.split(","):
            if strategy not in ("index", "uuid", "type-index"):
                raise CtkError("invalid device name strategy: %s" % strategy)
            if strategy not in strategies:
                strategies.append(strategy)
    ext = os.path.splitext(output)[1].lower()
    implied = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(ext)
    if implied and not explicit_format:
        fmt = implied
    elif implied and implied != fmt:
        log.warning('Requested output format "%s" does not match format implied by output file name: "%s"'
                    % (fmt, implied))
    try:
        profile, gpus = load_gpus()
        ids = flags.get("device_id")
        if ids:
            wanted = set(x for raw in ids for x in raw.split(","))
            gpus = [g for g in gpus if str(g.get("index")) in wanted or g.get("uuid") in wanted]
        log.info("Auto-detected mode as 'nvml'" if mode == "auto" else "Using mode '%s'" % mode)
        spec = build_spec(gpus, strategies, (flags.get("vendor") or ["nvidia.com"])[-1],
                          (flags.get("class") or ["gpu"])[-1], log, profile["kimi_gpu_driver"]["version"])
    except CtkError as exc:
        raise CtkError("failed to generate CDI spec: %s" % exc)
    if flags.get("no_all"):
        spec["devices"] = [d for d in spec["devices"] if d["name"] != "all"]
    log.info("Generated CDI spec with version %s" % spec["cdiVersion"])
    text = render_spec(spec, fmt)
    if not output:
        sys.stdout.write(text)
        return 0
    if ext == ".yml":
        output = output[:-4] + ".yaml"
    elif ext not in (".yaml", ".json"):
        output = output + "." + fmt
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    tmp = os.path.join(directory, ".%s.tmp" % os.path.basename(output))
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, output)
    return 0


# ------------------------------------------------------------------------------------------------
# cdi list
# ------------------------------------------------------------------------------------------------

def _unquote(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def parse_spec_devices(path):
    """(kind, [device names]) of a CDI spec file. JSON fully; YAML by a line scan that is enough for
    specs written by nvidia-ctk (top-level kind, and name keys of the top-level devices list)."""
    with open(path) as handle:
        text = handle.read()
    if path.endswith(".json"):
        data = json.loads(text)
        return data.get("kind"), [d.get("name") for d in data.get("devices") or []]
    kind, names, section = None, [], None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or line.strip() == "---":
            continue
        if not line.startswith((" ", "-")):
            key, _sep, value = line.partition(":")
            section = key.strip()
            if section == "kind":
                kind = _unquote(value)
            continue
        if section != "devices":
            continue
        stripped = line[2:] if line.startswith(("- ", "  ")) else None
        if stripped is not None and stripped.startswith("name:") and not line.startswith("   "):
            names.append(_unquote(stripped[len("name:"):]))
    return kind, names


def cmd_cdi_list(argv, log):
    flags, rest = parse_flags(argv, {"spec-dir": "spec_dir"}, {})
    if rest:
        raise CtkError("unexpected arguments: %s" % " ".join(rest))
    dirs = flags.get("spec_dir")
    if not dirs:
        env = os.environ.get("NVIDIA_CTK_CDI_SPEC_DIRS")
        dirs = env.split(",") if env else DEFAULT_SPEC_DIRS
    devices = {}
    errors = []
    for directory in dirs:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith((".yaml", ".json")):
                continue
            path = os.path.join(directory, entry)
            try:
                kind, names = parse_spec_devices(path)
            except (IOError, OSError, ValueError) as exc:
                errors.append("%s: %s" % (path, exc))
                continue
            if not kind:
                errors.append("%s: invalid CDI Spec: missing kind" % path)
                continue
            for name in names:
                devices["%s=%s" % (kind, name)] = path
    if errors:
        log.warning("The following registry errors were reported:")
        for error in errors:
            log.warning(error)
    log.info("Found %d CDI devices" % len(devices))
    for name in sorted(devices):
        sys.stdout.write(name + "\n")
    return 0


# ------------------------------------------------------------------------------------------------
# runtime configure, config
# ------------------------------------------------------------------------------------------------

def cmd_runtime_configure(argv, log):
    value_flags = {"runtime": "runtime", "config": "config", "nvidia-runtime-name": "name",
                   "runtime-name": "name", "nvidia-runtime-path": "path", "runtime-path": "path",
                   "config-source": "source", "executable-path": "exe"}
    bool_flags = {"dry-run": "dry_run", "set-as-default": "default", "cdi.enabled": "cdi", "enable-cdi": "cdi"}
    flags, rest = parse_flags(argv, value_flags, bool_flags)
    if rest:
        raise CtkError("unexpected arguments: %s" % " ".join(rest))
    runtime = (flags.get("runtime") or ["docker"])[-1]
    if runtime != "docker":
        raise CtkError("unrecognized runtime '%s' (the kimi double only configures docker)" % runtime)
    path = (flags.get("config") or ["/etc/docker/daemon.json"])[-1]
    name = (flags.get("name") or ["nvidia"])[-1]
    try:
        with open(path) as handle:
            raw = handle.read()
        log.info("Loading config from %s" % path)
        config = json.loads(raw) if raw.strip() else {}
    except (IOError, OSError):
        log.info("Config file does not exist; using empty config")
        config = {}
    runtime_path = (flags.get("path") or ["nvidia-container-runtime"])[-1]
    config.setdefault("runtimes", {})[name] = {"args": [], "path": runtime_path}
    if flags.get("default"):
        config["default-runtime"] = name
    if flags.get("cdi"):
        config.setdefault("features", {})["cdi"] = True
    text = json.dumps(config, indent=4, sort_keys=True)
    if flags.get("dry_run"):
        sys.stdout.write(text + "\n")
        return 0
    _write_file(path, text)
    log.info("Wrote updated config to %s" % path)
    log.info("It is recommended that docker daemon be restarted.")
    return 0


def _write_file(path, text):
    """Write a config file, creating its directory like the real tool does."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    with open(path, "w") as handle:
        handle.write(text)


def cmd_config(argv, log):
    flags, rest = parse_flags(argv, {"config-file": "file", "config": "file", "output": "output", "o": "output",
                                     "set": "set"}, {"in-place": "in_place", "i": "in_place"})
    if rest:
        raise CtkError("unexpected arguments: %s" % " ".join(rest))
    if flags.get("set"):
        raise CtkError("--set is not implemented by the kimi double")
    source = (flags.get("file") or ["/etc/nvidia-container-runtime/config.toml"])[-1]
    text = DEFAULT_CONFIG_TOML
    if os.path.isfile(source):
        with open(source) as handle:
            text = handle.read()
    target = source if flags.get("in_place") else (flags.get("output") or [""])[-1]
    if not target:
        sys.stdout.write(text)
        return 0
    _write_file(target, text)
    return 0


USAGE = """NAME:
   NVIDIA Container Toolkit CLI - Tools to configure the NVIDIA Container Toolkit (TEST DOUBLE)

USAGE:
   nvidia-ctk [global options] command [command options]

VERSION:
   %s
commit: %s

COMMANDS:
   runtime  A collection of runtime-related utilities for the NVIDIA Container Toolkit
   cdi      Provide tools for interacting with Container Device Interface specifications
   config   Interact with the NVIDIA Container Toolkit configuration
""" % (VERSION, COMMIT)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet = debug = False
    while argv and argv[0].startswith("-"):
        flag = argv.pop(0)
        if flag in ("--version", "-v"):
            sys.stdout.write("NVIDIA Container Toolkit CLI version %s\ncommit: %s\n" % (VERSION, COMMIT))
            return 0
        if flag in ("--help", "-h"):
            sys.stdout.write(USAGE)
            return 0
        if flag in ("--quiet", "-q"):
            quiet = True
        elif flag in ("--debug", "-d"):
            debug = True
        else:
            sys.stderr.write("Incorrect Usage: flag provided but not defined: %s\n\n" % flag)
            return 1
    log = Logger(quiet=quiet, debug=debug or os.environ.get("NVIDIA_CTK_DEBUG") == "true")
    commands = {("cdi", "generate"): cmd_cdi_generate, ("cdi", "list"): cmd_cdi_list,
                ("runtime", "configure"): cmd_runtime_configure}
    try:
        if argv[:1] == ["config"]:
            return cmd_config(argv[1:], log)
        handler = commands.get(tuple(argv[:2]))
        if handler is None:
            if not argv:
                sys.stdout.write(USAGE)
                return 0
            raise CtkError("No help topic for '%s'" % " ".join(argv[:2]))
        return handler(argv[2:], log)
    except CtkError as exc:
        log.error(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
