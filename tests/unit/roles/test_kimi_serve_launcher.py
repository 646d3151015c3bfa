"""kimi_serve's launcher and argument files, rendered for every identity from the deployment model and run with
stand-ins for docker and nvidia-smi on PATH: the container gets exactly the image and the argv of the deployment,
and a hand-edited env file that disagrees with the prepared arguments is refused."""
import json
import os
import re
import stat
import subprocess

import jinja2
import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils._model import deployment as dm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEMPLATES = os.path.join(ROOT, "roles", "kimi_serve", "templates")
IDENTITY_KEYS = ["IMAGE", "KV_CACHE_DTYPE", "MOE_BACKEND", "MODEL_NAME", "PORT"]


def render(name, **context):
    # As ansible.builtin.template renders: trim_blocks on, the trailing newline kept.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True, trim_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps  # Ansible's to_json: json.dumps with its keyword arguments
    return env.get_template(name).render(ansible_managed="Managed by test", **context)


def env_values(deployment, tmp_path):
    return {"QUANT": deployment["quant"], "FRAMEWORK": deployment["engine"], "IMAGE": deployment["image"],
            "KV_CACHE_DTYPE": deployment["kv_cache_dtype"], "MOE_BACKEND": deployment["moe_backend"] or "none",
            "MODEL_NAME": deployment["served_model_name"], "PORT": str(deployment["port"]),
            "HF_HOME": str(tmp_path / "hf"), "WAIT_GPU_FREE": "2", "KILL_ORPHANS": "0", "CONTAINER_NAME": "kimi-k26",
            "ARGS_DIR": str(tmp_path / "etc"), "MEMLOCK_UNLIMITED": "1", "NOFILE": "1048576"}


def prepare(tmp_path, deployment, busy=""):
    values = env_values(deployment, tmp_path)
    (tmp_path / "etc").mkdir(exist_ok=True)
    entries = [{"name": k, "value": v} for k, v in values.items()]
    args = render("engine.args.j2", kimi_deployment=deployment, kimi_serve_env_file="/etc/kimi-k26.env",
                  _kimi_serve_env=entries, _kimi_serve_identity_keys=IDENTITY_KEYS)
    (tmp_path / "etc" / ("%s.args" % deployment["identity"])).write_text(args)
    (tmp_path / "etc" / "container.env").write_text("\n")
    launcher = tmp_path / "kimi-k26-launch"
    launcher.write_text(render("kimi-k26-launch.j2", kimi_serve_service_name="kimi-k26",
                               kimi_serve_env_file="/etc/kimi-k26.env",
                               _kimi_serve_platform=deployment["platform_traits"]))
    devices = deployment["platform_traits"]["device_args"] or []  # Ascend: what npu_facts read (ascend() writes it)
    (tmp_path / "etc" / "devices.args").write_text("# devices\n" + "".join(arg + "\n" for arg in devices))
    launcher.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    # NUL-separated: an argument with a newline inside stays one argument
    docker.write_text('#!/bin/bash\n[ "$1" = run ] && printf "%%s\\0" "$@" > %s/docker-run.argv\nexit 0\n' % tmp_path)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ -f %s/busy ] && cat %s/busy\nexit 0\n" % (tmp_path, tmp_path))
    for tool in (docker, smi):
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    if busy:
        (tmp_path / "busy").write_text(busy)
    return launcher, dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), **values)


def run(launcher, env):
    return subprocess.run([str(launcher)], env=env, capture_output=True, text=True, timeout=60, check=False)


def docker_argv(tmp_path):
    return (tmp_path / "docker-run.argv").read_bytes().decode().split("\0")[:-1]  # bytes: no newline translation


@pytest.mark.parametrize("quant, engine", [("int4", "sglang"), ("int4", "vllm"), ("nvfp4", "vllm")])
def test_the_container_gets_exactly_the_deployments_image_and_argv(tmp_path, quant, engine):
    deployment = dm.resolve({"quant": quant, "engine": engine}, [], require_revision=False)
    launcher, env = prepare(tmp_path, deployment)
    proc = run(launcher, env)
    assert proc.returncode == 0, proc.stderr
    argv = docker_argv(tmp_path)
    image_at = argv.index(deployment["image"])
    assert argv[image_at + 1:] == deployment["argv"]
    options = argv[:image_at]
    for flag in ("--rm", "--ipc", "--network"):
        assert flag in options
    assert options[options.index("--restart") + 1] == "no"
    assert options[options.index("--device") + 1] == "nvidia.com/gpu=all"
    assert "%s/hub:/root/.cache/huggingface/hub:ro" % env["HF_HOME"] in options
    assert "HF_HUB_OFFLINE=1" in options and "memlock=-1:-1" in options


HOSTILE = ["64\n--host=0.0.0.0", "64\r--host=0.0.0.0", "a\u2028--port=9", "$(reboot)", "`id`", "it's \"quoted\"",
           "tab\there", "back\\slash", "\u00e9t\u00e9", "# not a comment", "--host=0.0.0.0 --port=1", "*", "~"]


@pytest.mark.parametrize("value", HOSTILE)
def test_no_value_can_change_the_engines_argv_even_past_validation(tmp_path, value):
    """The carrier alone: an argument the validation would refuse, written into the deployment behind its back, still
    reaches the container as one argument, byte for byte; nothing is split off it or expanded."""
    deployment = dm.resolve({"quant": "int4", "engine": "sglang"}, [], require_revision=False)
    deployment = dict(deployment, argv=deployment["argv"] + ["--max-running-requests", value])
    launcher, env = prepare(tmp_path, deployment)
    proc = run(launcher, env)
    assert proc.returncode == 0, proc.stderr
    argv = docker_argv(tmp_path)
    assert argv[argv.index(deployment["image"]) + 1:] == deployment["argv"]
    assert "--host=0.0.0.0" not in argv and argv.count("--host") == deployment["argv"].count("--host") == 1


def test_an_args_file_that_is_not_json_lines_is_refused(tmp_path):
    deployment = dm.resolve({"quant": "int4", "engine": "sglang"}, [], require_revision=False)
    launcher, env = prepare(tmp_path, deployment)
    args_file = tmp_path / "etc" / "int4-sglang.args"
    args_file.write_text(args_file.read_text() + "--host=0.0.0.0\n")  # a hand edit in the old one-per-line form
    proc = run(launcher, env)
    assert proc.returncode == 1 and "is not one JSON string per line" in proc.stderr
    assert not (tmp_path / "docker-run.argv").exists()


def test_a_half_edited_env_file_is_refused(tmp_path):
    deployment = dm.resolve({"quant": "int4", "engine": "sglang"}, [], require_revision=False)
    launcher, env = prepare(tmp_path, deployment)
    env["KV_CACHE_DTYPE"] = "auto"
    proc = run(launcher, env)
    assert proc.returncode == 1
    assert "KV_CACHE_DTYPE=auto in /etc/kimi-k26.env, but" in proc.stderr and "prepared for KV_CACHE_DTYPE=fp8_e4m3" in proc.stderr
    assert not (tmp_path / "docker-run.argv").exists()


def test_an_identity_that_is_not_prepared_is_refused_naming_the_prepared_ones(tmp_path):
    deployment = dm.resolve({"quant": "int4", "engine": "sglang"}, [], require_revision=False)
    launcher, env = prepare(tmp_path, deployment)
    env["FRAMEWORK"] = "vllm"
    proc = run(launcher, env)
    assert proc.returncode == 1
    assert "identity int4-vllm is not prepared on this host" in proc.stderr and "int4-sglang" in proc.stderr


def test_busy_gpus_are_waited_for_then_refused_without_kill_orphans(tmp_path):
    deployment = dm.resolve({"quant": "int4", "engine": "sglang"}, [], require_revision=False)
    launcher, env = prepare(tmp_path, deployment, busy="4242, /usr/bin/python3, 70000 MiB\n")
    proc = run(launcher, env)
    assert proc.returncode == 1
    assert "waiting for the GPUs to be free" in proc.stdout
    assert "the GPUs are still busy after 2s (WAIT_GPU_FREE): 4242" in proc.stderr
    assert "kimi_serve_kill_orphans=true" in proc.stderr
    assert not (tmp_path / "docker-run.argv").exists()


def test_infiniband_without_its_devices_is_refused_naming_the_fix(tmp_path):
    if os.path.isdir("/dev/infiniband"):
        pytest.skip("this machine has /dev/infiniband")
    deployment = dm.resolve({"quant": "int4", "engine": "sglang"}, [], require_revision=False)
    launcher, env = prepare(tmp_path, deployment)
    env["INFINIBAND"] = "1"
    proc = run(launcher, env)
    assert proc.returncode == 1 and "/dev/infiniband is missing" in proc.stderr
    assert "kimi_serve_replica_ib_hcas=[none]" in proc.stderr
    assert not (tmp_path / "docker-run.argv").exists()
    env["INFINIBAND"] = "0"  # sockets only: no RDMA device asked for
    assert run(launcher, env).returncode == 0
    assert "/dev/infiniband" not in " ".join(docker_argv(tmp_path))


def ascend(tmp_path, deployment, processes=""):
    """The launcher on an Ascend host: the npu-smi double on PATH (A3 profile), devices.args as kimi_serve writes it."""
    launcher, env = prepare(tmp_path, deployment)
    smi = tmp_path / "bin" / "npu-smi"
    smi.write_text("#!/bin/sh\nexec python3 %s \"$@\"\n" % os.path.join(ROOT, "tests", "doubles", "ascend", "npu_smi.py"))
    smi.chmod(0o755)
    (tmp_path / "procs").write_text(processes)
    devices = ["--device", "/dev/davinci0", "--device", "/dev/davinci_manager",
               "-v", "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro"]
    (tmp_path / "etc" / "devices.args").write_text("# devices\n" + "\n".join(devices) + "\n")
    env.update(ACCELERATOR="ascend", SHM_SIZE=str(deployment["container_shm_bytes"]),
               KIMI_DOUBLE_GPU_PROFILE=os.path.join(ROOT, "tests", "fixtures", "gpus", "ascend-a3-x16.json"),
               KIMI_DOUBLE_NPU_PROCS=str(tmp_path / "procs"))
    return launcher, env, devices


@pytest.mark.parametrize("engine, shm", [("vllm", 1024 ** 3), ("sglang", 16 * 1024 ** 3)])
def test_an_ascend_container_gets_the_npus_devices_mounts_and_its_own_shm(tmp_path, engine, shm):
    deployment = dm.resolve({"quant": "w4a8", "engine": engine}, [], require_revision=False)
    launcher, env, devices = ascend(tmp_path, deployment)
    proc = run(launcher, env)
    assert proc.returncode == 0, proc.stderr
    argv = docker_argv(tmp_path)
    image_at = argv.index(deployment["image"])
    assert argv[image_at + 1:] == deployment["argv"]
    options = argv[:image_at]
    assert "nvidia.com/gpu=all" not in options and "--privileged" not in options and "--ipc" not in options
    assert options[options.index("--shm-size") + 1] == str(shm)
    joined = "\n".join(options)
    assert "\n".join(devices) in joined


def test_busy_npus_are_waited_for_from_npu_smis_process_table(tmp_path):
    deployment = dm.resolve({"quant": "w4a8", "engine": "vllm"}, [], require_revision=False)
    launcher, env, _devices = ascend(tmp_path, deployment, processes="3 632268 python3.1 197\n")
    proc = run(launcher, env)
    assert proc.returncode == 1
    assert "waiting for the NPUs to be free" in proc.stdout
    assert "the NPUs are still busy after 2s (WAIT_GPU_FREE): 632268, python3.1, 197 MiB" in proc.stderr
    assert not (tmp_path / "docker-run.argv").exists()


def test_every_file_written_with_a_backup_is_restored_by_rollback_and_cleaned_by_commit():
    """configure.yml keeps the previous content of each file it changes (backup: true); rollback.yml restores and
    commit.yml removes what `_kimi_serve_written` lists. A write left out of that list piles up backups and is not
    restored (devices.args on Ascend hosts was)."""
    role = os.path.join(ROOT, "roles", "kimi_serve")
    with open(os.path.join(role, "tasks", "configure.yml")) as handle:
        tasks = yaml.safe_load(handle)
    backed_up = set()
    for task in tasks:
        for _module, args in task.items():
            if isinstance(args, dict) and args.get("backup") is True:
                backed_up.add(task["register"])
    with open(os.path.join(role, "vars", "main.yml")) as handle:
        written = yaml.safe_load(handle)["_kimi_serve_written"]
    listed = set(name.strip() for name in
                 re.findall(r"(__kimi_serve_\w+) \| default\(\{\}\)", written))
    assert len(backed_up) >= 6 and backed_up == listed, (sorted(backed_up), sorted(listed))


# --- the kernel cache (issue 39) ----------------------------------------------------------------------------------

def kernel_cache_prepare(tmp_path, key="vllm-0.22.1-aaaa"):
    """The launcher with a kernel cache: KERNEL_CACHE is an identity key, as in the role's vars."""
    deployment = dm.resolve({"quant": "int4", "engine": "vllm"}, [], require_revision=False)
    folder = tmp_path / "kernels" / key
    folder.mkdir(parents=True)
    values = env_values(deployment, tmp_path)
    values.update(KERNEL_CACHE=str(folder), KERNEL_CACHE_MOUNT=deployment["kernel_cache"]["container_dir"],
                  KERNEL_CACHE_ENV=",".join("%s=%s" % kv for kv in sorted(deployment["kernel_cache"]["env"].items())))
    (tmp_path / "etc").mkdir(exist_ok=True)
    entries = [{"name": k, "value": v} for k, v in values.items()]
    launcher, env = prepare(tmp_path, deployment)
    args = render("engine.args.j2", kimi_deployment=deployment, kimi_serve_env_file="/etc/kimi-k26.env",
                  _kimi_serve_env=entries, _kimi_serve_identity_keys=IDENTITY_KEYS + ["KERNEL_CACHE"])
    (tmp_path / "etc" / ("%s.args" % deployment["identity"])).write_text(args)
    env.update(values)
    return deployment, launcher, env, folder


def test_the_kernel_cache_of_the_key_is_mounted_where_the_engine_looks(tmp_path):
    deployment, launcher, env, folder = kernel_cache_prepare(tmp_path)
    (tmp_path / "kernels" / "vllm-0.22.1-bbbb").mkdir()  # another key's folder: never mounted
    proc = run(launcher, env)
    assert proc.returncode == 0, proc.stderr
    options = docker_argv(tmp_path)[:docker_argv(tmp_path).index(deployment["image"])]
    mounts = [options[i + 1] for i, word in enumerate(options) if word == "-v"]
    assert "%s:%s:rw" % (folder, deployment["kernel_cache"]["container_dir"]) in mounts
    assert not [m for m in mounts if "bbbb" in m]
    envs = [options[i + 1] for i, word in enumerate(options) if word == "-e"]
    for name, path in deployment["kernel_cache"]["env"].items():
        assert "%s=%s" % (name, path) in envs
    assert "VLLM_CACHE_ROOT=/root/.cache/kimi-kernels/vllm" in envs


def test_an_env_file_naming_another_keys_cache_is_refused(tmp_path):
    _deployment, launcher, env, _folder = kernel_cache_prepare(tmp_path)
    other = tmp_path / "kernels" / "vllm-0.22.1-bbbb"
    other.mkdir()
    env["KERNEL_CACHE"] = str(other)
    proc = run(launcher, env)
    assert proc.returncode == 1 and "KERNEL_CACHE=%s in /etc/kimi-k26.env, but" % other in proc.stderr
    assert not (tmp_path / "docker-run.argv").exists()


def test_a_missing_kernel_cache_folder_is_refused(tmp_path):
    _deployment, launcher, env, folder = kernel_cache_prepare(tmp_path)
    folder.rmdir()
    proc = run(launcher, env)
    assert proc.returncode == 1 and "kernel cache folder %s is missing" % folder in proc.stderr


def test_the_roles_identity_keys_hold_the_kernel_cache():
    with open(os.path.join(ROOT, "roles", "kimi_serve", "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    assert "KERNEL_CACHE" in role_vars["_kimi_serve_identity_keys"]
    names = [entry["name"] for entry in role_vars["_kimi_serve_env"]]
    assert "KERNEL_CACHE" in names and "KERNEL_CACHE_MOUNT" in names and "KERNEL_CACHE_ENV" in names
