"""The summary and plan lines (plugins/module_utils/_model/report.py) and the dpkg_packages filter."""
import json
import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.kimi.deploy.plugins.filter.dpkg_packages import dpkg_packages
from ansible_collections.kimi.deploy.plugins.filter.site_summary import site_summary_filter
from ansible_collections.kimi.deploy.plugins.module_utils._model.deployment import resolve
from ansible_collections.kimi.deploy.plugins.module_utils._model.report import plan_lines, stage_times

REV = "0123456789abcdef0123456789abcdef01234567"


GPUS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpus", "rtx-pro-6000-x8.json")


@pytest.fixture
def deployment():
    with open(GPUS) as f:
        gpus = json.load(f)["kimi_gpus"]
    return resolve({"quant": "int4", "engine": "sglang", "revisions": {"int4": REV}}, gpus)


MARKS = [{"stage": "start", "at": 100.0}, {"stage": "preflight", "at": "102.5"}, {"stage": "host", "at": 110},
         {"stage": "weights", "at": 111}, {"stage": "image", "at": 111}, {"stage": "serve", "at": 120},
         {"stage": "proxy", "at": 125.25}]
CHECKS = [{"name": "health", "ok": True, "latency_s": 0.004}, {"name": "text", "ok": True, "latency_s": 0.0123}]


def test_summary_names_host_endpoint_checks_and_stage_times(deployment):
    lines = site_summary_filter(deployment, "gpu1", gpus="8 x RTX PRO 6000",
                                serve={"url": "http://127.0.0.1:30000", "checks": CHECKS, "restarted": False},
                                proxy={"endpoint": "https://gpu1:443/v1", "checks": CHECKS, "ca": "/ca.crt"},
                                marks=MARKS, run_tags=["all"])
    assert lines[0] == "gpu1: serving int4-sglang as kimi-k2.6 at https://gpu1:443/v1"
    assert "GPUs: 8 x RTX PRO 6000" in lines
    assert "identity: int4-sglang (quant=int4, engine=sglang 0.5.12.post1) from moonshotai/Kimi-K2.6@" + REV in lines
    assert "verify through the proxy: health ok 4 ms, text ok 12 ms" in lines
    assert "verify on the engine: health ok 4 ms, text ok 12 ms; not restarted" in lines
    stages = lines.index("stages: preflight 2.5 s, host 7.5 s, weights 1.0 s, image not needed, serve 9.0 s, "
                         "proxy 5.2 s (total 25.2 s)")
    # after the stages only the deployment's warnings (here: SGLang's 262144 context above the KV estimate)
    assert lines[stages + 1:] == ["warning: " + w for w in deployment["warnings"]] and deployment["warnings"]
    assert not any(line.startswith("command:") for line in lines)


def test_check_mode_is_the_plan_with_the_command_and_the_files_that_would_change(deployment):
    lines = site_summary_filter(deployment, "gpu1", serve={"changed_files": ["/etc/kimi-k26.env"]},
                                proxy={"endpoint": "https://gpu1:443/v1", "changed_files": ["/etc/caddy/Caddyfile"]},
                                marks=MARKS, check_mode=True)
    assert lines[0] == "gpu1: PLAN (check mode, nothing was changed): int4-sglang as kimi-k2.6"
    assert "command: " + " ".join(deployment["command"]) in lines
    assert "would change: /etc/kimi-k26.env, /etc/caddy/Caddyfile" in lines
    converged = site_summary_filter(deployment, "gpu1", serve={}, proxy={}, marks=MARKS, check_mode=True)
    assert "would change: no file (converged)" in converged


def test_the_image_line_says_where_the_nvfp4_image_came_from():
    with open(GPUS) as f:
        gpus = json.load(f)["kimi_gpus"]
    nvfp4 = resolve({"quant": "nvfp4", "engine": "vllm", "revisions": {"nvfp4": REV}}, gpus)
    built = {"image": nvfp4["image"], "id": "sha256:" + "c" * 64, "source": "built", "base": "vllm/vllm-openai:x",
             "rebuilt_because": ["io.kimi-deploy.recipe"], "duration_s": 42.0,
             "proof": {"patched": True, "num_stages": 1}}
    lines = site_summary_filter(nvfp4, "gpu1", image=built, marks=MARKS)
    assert ("image: kimi-k26-nvfp4-vllm:cu130-mla sha256:cccccccccccc (built in 42.0 s, because io.kimi-deploy.recipe "
            "changed, FROM vllm/vllm-openai:x; patch proved in the image: num_stages 1)") in lines
    current = dict(built, source="current", rebuilt_because=[], proof={})
    assert ("image: kimi-k26-nvfp4-vllm:cu130-mla sha256:cccccccccccc (current, nothing built, FROM "
            "vllm/vllm-openai:x)") in site_summary_filter(nvfp4, "gpu1", image=current, marks=MARKS)
    assert "image: kimi-k26-nvfp4-vllm:cu130-mla (built locally by kimi_image)" in site_summary_filter(
        nvfp4, "gpu1", image=built, marks=MARKS, check_mode=True)
    assert "image: lmsysorg/sglang:v0.5.12.post1-cu130" in site_summary_filter(deployment_int4(gpus), "gpu1", marks=MARKS)


def deployment_int4(gpus):
    return resolve({"quant": "int4", "engine": "sglang", "revisions": {"int4": REV}}, gpus)


def test_stages_left_out_by_tags_are_named_so():
    times = dict(stage_times(MARKS, run_tags=["proxy"], skip_tags=[]))
    assert times["preflight"] == "2.5 s" and times["proxy"] == "5.2 s"
    assert times["serve"] == times["weights"] == times["host"] == "skipped (tags)"
    times = dict(stage_times(MARKS, run_tags=["all"], skip_tags=["host"], local_build=True))
    assert times["host"] == "skipped (tags)" and times["image"] == "0.0 s"
    assert dict(stage_times(MARKS[:3]))["serve"] == "not reached"


def test_plan_lines_end_with_the_command(deployment):
    lines = plan_lines(deployment)
    assert lines[0] == "identity: int4-sglang (quant=int4, engine=sglang 0.5.12.post1)"
    assert "checkpoint: moonshotai/Kimi-K2.6 @ %s (%s)" % (REV, deployment["checkpoint"]["format"]) in lines
    assert lines[-1 - len(deployment["warnings"])].startswith("command: python3 -m sglang.launch_server ")


def test_summary_refuses_what_is_not_a_deployment():
    with pytest.raises(AnsibleFilterError, match="site_summary"):
        site_summary_filter({"identity": "x"}, "gpu1")


def test_dpkg_packages_keeps_installed_and_held_in_package_facts_shape():
    text = "ii |foo|1.0-1|amd64\nhi |nvidia-driver-580-open|580.1|amd64\nrc |gone|3|amd64\nun |x||all\n"
    assert dpkg_packages(text) == {
        "foo": [{"name": "foo", "version": "1.0-1", "arch": "amd64", "source": "dpkg", "held": False}],
        "nvidia-driver-580-open": [{"name": "nvidia-driver-580-open", "version": "580.1", "arch": "amd64",
                                    "source": "dpkg", "held": True}]}
    with pytest.raises(AnsibleFilterError):
        dpkg_packages(None)


def test_running_requests_sums_the_engines_running_and_queued_gauges():
    from ansible_collections.kimi.deploy.plugins.filter.running_requests import running_requests
    vllm = ('# HELP vllm:num_requests_running Number of requests in model execution batches.\n'
            '# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0",model_name="kimi-k2.6"} 2.0\n'
            'vllm:num_requests_running{engine="1",model_name="kimi-k2.6"} 1.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="kimi-k2.6"} 1.0\n'
            'vllm:generation_tokens_total{model_name="kimi-k2.6"} 12345.0\n')
    assert running_requests(vllm) == 4
    assert running_requests('sglang:num_running_reqs{model_name="kimi-k2.6",tp_rank="0"} 0.0\n'
                            'sglang:num_queue_reqs{model_name="kimi-k2.6",tp_rank="0"} 0.0\n') == 0
    # no gauge is not "idle": the drain must not take it for nothing in flight
    assert running_requests("") is None and running_requests(None) is None
    assert running_requests('{"status": "ok"}') is None
    assert running_requests("process_open_fds 12\n") is None
    with pytest.raises(AnsibleFilterError, match="must be the /metrics text"):
        running_requests(["not", "text"])


def test_the_weights_line_says_how_much_each_peer_and_the_hub_sent(deployment):
    weights = {"files": 64, "bytes_total": 595e9, "snapshot_path": "/hf/snap", "bytes_downloaded": 595e9, "verified": True,
               "bytes_from_hub": 2e9, "sources": [{"name": "gpu1", "bytes": 400e9}, {"name": "gpu2", "bytes": 193e9},
                                                  {"name": "gpu3", "bytes": 0}, {"name": "hub", "bytes": 2e9}]}
    lines = site_summary_filter(deployment, "gpu4", weights=weights, marks=MARKS, run_tags=["all"])
    assert ("weights: 64 files, 595.0 GB in /hf/snap (595.00 GB fetched: 400.00 GB from gpu1, 193.00 GB from gpu2, "
            "2.00 GB from the hub, verified: True)") in lines
    alone = dict(weights, sources=[{"name": "hub", "bytes": 595e9}])
    assert "weights: 64 files, 595.0 GB in /hf/snap (595.00 GB fetched, verified: True)" in site_summary_filter(
        deployment, "gpu1", weights=alone, marks=MARKS, run_tags=["all"])


def test_a_replica_host_that_is_not_the_head_says_its_rank_and_where_the_api_is():
    with open(GPUS.replace("rtx-pro-6000-x8", "h100-x8")) as f:
        gpus = json.load(f)["kimi_gpus"]
    inputs = {"quant": "int4", "engine": "vllm", "revisions": {"int4": REV}, "nodes": 2, "head_address": "10.0.0.11"}
    serve = {"checks": CHECKS, "restarted": True, "replica": ["gpu-a1", "gpu-a2"]}
    worker = site_summary_filter(resolve(dict(inputs, node_rank=1), gpus), "gpu-a2", serve=serve, marks=MARKS)
    assert worker[0] == ("gpu-a2: rank 1 of 2 of a replica running int4-vllm (headless); its head gpu-a1 serves it as "
                         "kimi-k2.6")
    assert ("replica: gpu-a1, gpu-a2 (rank 1 of 2) meeting at 10.0.0.11:29500, tensor parallel 8 x pipeline "
            "parallel 2") in worker
    assert "verify: on the head (health ok 4 ms, text ok 12 ms); restarted with the replica" in worker
    assert not any(line.startswith(("engine:", "verify on the engine")) for line in worker)
    head = site_summary_filter(resolve(dict(inputs, node_rank=0), gpus), "gpu-a1", serve=serve,
                               proxy={"endpoint": "https://gpu-a1:443/v1", "checks": CHECKS}, marks=MARKS)
    assert head[0] == "gpu-a1: serving int4-vllm as kimi-k2.6 at https://gpu-a1:443/v1"
    assert any(line.startswith("engine: http://127.0.0.1:30000") for line in head)


def test_the_npu_smi_info_filter_reads_the_chips_and_refuses_a_cut_table():
    from ansible_collections.kimi.deploy.plugins.filter.npu_smi_info import npu_smi_info
    rows = ("| 0     910B3               | OK            | 97.5        41                0    / 0             |\n"
            "| 0                         | 0000:C1:00.0  | 0           0    / 0          3379 / 65536         |\n")
    assert npu_smi_info(rows)["chips"][0]["bus_id"] == "0000:C1:00.0"
    with pytest.raises(AnsibleFilterError, match="no second row"):
        npu_smi_info(rows.splitlines()[0])
    with pytest.raises(AnsibleFilterError, match="input must be the text"):
        npu_smi_info(None)


def test_a_speculative_deployment_reports_its_draft_download_and_the_acceptance_verify_saw():
    with open(GPUS) as f:
        gpus = json.load(f)["kimi_gpus"]
    dep = resolve({"quant": "int4", "engine": "sglang", "revisions": {"int4": REV}, "speculative": "eagle3",
                   "speculative_draft_revision": "c" * 40}, gpus)
    draft = {"files": 4, "bytes_total": 4.3e9, "snapshot_path": "/hf/hub/models--AQ-MedAI--Kimi-K26-eagle3/snapshots/x",
             "bytes_downloaded": 4.3e9, "verified": True}
    lines = site_summary_filter(dep, "gpu1", serve={"url": "http://127.0.0.1:30000", "checks": CHECKS,
                                                    "speculative": {"accept_rate": 0.6, "mean_accepted_length": 2.8}},
                                draft_weights=draft, marks=MARKS)
    assert ("draft weights: 4 files, 4.3 GB in /hf/hub/models--AQ-MedAI--Kimi-K26-eagle3/snapshots/x (4.30 GB fetched, "
            "verified: True)") in lines
    assert ("speculative: eagle3 (EAGLE3) with AQ-MedAI/Kimi-K26-eagle3@cccccccccccc, 3 steps, topk 1, 4 draft tokens "
            "verified; verify saw acceptance rate 60%, mean accepted length 2.80") in lines
    plain = site_summary_filter(dep, "gpu1", serve={"url": "http://127.0.0.1:30000", "checks": CHECKS}, marks=MARKS)
    assert ("speculative: eagle3 (EAGLE3) with AQ-MedAI/Kimi-K26-eagle3@cccccccccccc, 3 steps, topk 1, 4 draft tokens "
            "verified") in plain
