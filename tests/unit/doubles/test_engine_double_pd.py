"""Prefill/decode disaggregation of the engine double (kimi_engine_double/disagg.py): by hand, and behind the real
router (SMG 1.13.0 for SGLang and vLLM, from .venv-router, see requirements-router.txt; vLLM's workers from its
discovery file, as the collection runs it). No Docker needed."""
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

import test_engine_double
from test_engine_double import VLLM_LINE, call, chat, free_port

from kimi_engine_double.disagg import NO_ROOM  # noqa: E402  (test_engine_double puts the double on sys.path)

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures: HF cache, in-process doubles

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROUTER_VENV = os.path.join(REPO, ".venv-router")
NIXL = {"kv_connector": "NixlConnector"}


# ---- helpers ---------------------------------------------------------------------------------------------
def sglang_pair(start, prefill_extra=(), decode_extra=(), env=None):
    """A prefill and a decode SGLang double (both from SGLANG_LINE: fp8_e4m3 KV, TP 8); returns them and the
    prefill's bootstrap port."""
    port = free_port()
    prefill = start("sglang", ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port)]
                    + list(prefill_extra), env=env)
    decode = start("sglang", ["--disaggregation-mode", "decode"] + list(decode_extra), env=env)
    return prefill, decode, port


def vllm_pair(start, prefill_role="kv_producer", decode_role="kv_consumer", prefill_line=None, decode_conf=None):
    """A prefill and a decode vLLM double with NixlConnector, each with its own side channel port."""
    pconf = json.dumps(dict(NIXL, kv_role=prefill_role))
    dconf = json.dumps(dict(NIXL, kv_role=decode_role, **(decode_conf or {})))
    prefill = start("vllm", ["--kv-transfer-config", pconf], line=prefill_line,
                    env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())})
    decode = start("vllm", ["--kv-transfer-config", dconf], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())})
    return prefill, decode


def bootstrap(host="127.0.0.1", port=8998, room=12345):
    return {"bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": room}


def as_prefill(text="Hello there"):
    """What vllm-router 0.1.17 sends the prefill (observed): max_tokens 1, min_tokens 1, kv_transfer_params."""
    return chat(text, max_tokens=1, min_tokens=1, stream=False, kv_transfer_params={
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None, "remote_block_ids": None,
        "remote_host": None, "remote_port": None})


def message(body):
    return body.get("message") or body.get("error", {}).get("message") if isinstance(body, dict) else str(body)


# ---- SGLang by hand --------------------------------------------------------------------------------------
def test_sglang_prefill_serves_its_parallel_info_on_the_bootstrap_port(start):
    prefill, _decode, port = sglang_pair(start, ["--page-size", "64"])
    base = "http://127.0.0.1:%d" % port
    status, info = call(base + "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1")
    assert status == 200
    assert info == {"attn_tp_size": 8, "attn_cp_size": 1, "dp_size": 1, "pp_size": 1, "page_size": 64,
                    "kv_cache_dtype": "fp8_e4m3", "follow_bootstrap_room": True, "transfer_backend": "mooncake"}
    assert call(base + "/route") == (400, "Missing inputs for bootstrap server.")
    assert call(base + "/health") == (200, "OK")
    assert "CommonKVBootstrapServer started successfully on 127.0.0.1:%d" % port in prefill.out.getvalue()


def test_sglang_one_request_through_prefill_and_decode_by_hand(start):
    prefill, decode, port = sglang_pair(start, env={"KIMI_DOUBLE_KV_TRANSFER_TIMEOUT": "1"})
    room = 7044280451946417117
    body = chat("What is 2+2?", **bootstrap(port=port, room=room))
    answer = {}
    # like sglang-router: both at once, the decode may ask before the prefill has the KV
    thread = threading.Thread(target=lambda: answer.update(zip(("status", "body"), decode.post(body))))
    thread.start()
    time.sleep(0.2)
    status, prefilled = prefill.post(body)
    thread.join(10)
    assert status == 200 and prefilled["choices"][0]["finish_reason"] == "length"
    assert answer["status"] == 200, answer
    assert answer["body"]["choices"][0]["message"]["content"] == "4"
    assert "Prefill done: bootstrap_room=%d, 3 tokens, KV kept for the decode" % room in prefill.out.getvalue()
    assert ("Decode: bootstrap_room=%d KV received from 127.0.0.1:%d (3 tokens)" % (room, port)
            in decode.out.getvalue())
    status, body = decode.post(chat("again", **bootstrap(port=port, room=room)))
    assert status == 500 and "bootstrap_room=%d" % room in message(body)  # the KV was taken once


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_sglang_request_without_bootstrap_room_is_400(start, side):
    pair = dict(zip(("prefill", "decode"), sglang_pair(start)[:2]))
    status, body = pair[side].post(chat())
    assert status == 400 and body["message"] == NO_ROOM and body["object"] == "error"


def test_sglang_wrong_room_fails_naming_room_and_prefill(start):
    _prefill, decode, port = sglang_pair(start, env={"KIMI_DOUBLE_KV_TRANSFER_TIMEOUT": "0.3"})
    status, body = decode.post(chat(**bootstrap(port=port, room=42)))
    text = message(body)
    assert status == 500 and body["object"] == "error" and body["code"] == 500
    assert text.startswith("Decode transfer failed for request rank=0 decode_req.req.rid=")
    assert "KVTransferError(bootstrap_room=42): Request 42 timed out after 0.3s" in text
    assert "the prefill at 127.0.0.1:%d has no KV for bootstrap_room=42" % port in text
    assert text in decode.out.getvalue()


def test_sglang_prefill_down_fails_naming_the_bootstrap_address(start):
    decode = start("sglang", ["--disaggregation-mode", "decode"])
    port = free_port()
    status, body = decode.post(chat(**bootstrap(port=port, room=7)))
    assert status == 500
    assert "Could not fetch prefill parallel info from bootstrap_addr: 127.0.0.1:%d" % port in message(body)


@pytest.mark.parametrize("decode_extra,text", [
    (["--kv-cache-dtype", "auto"], "KV cache dtype mismatch: prefill kv_cache_dtype='fp8_e4m3' (bootstrap_addr "
                                   "127.0.0.1:%d), decode kv_cache_dtype='auto'"),
    (["--page-size", "64"], "Page size mismatch: prefill page_size=1 (bootstrap_addr 127.0.0.1:%d), decode "
                            "page_size=64"),
    (["--disaggregation-transfer-backend", "nixl"], "Transfer backend mismatch: prefill transfer_backend='mooncake'"
                                                    " (bootstrap_addr 127.0.0.1:%d), decode transfer_backend='nixl'"),
])
def test_sglang_layout_mismatch_fails_naming_both_values(start, decode_extra, text):
    prefill, decode, port = sglang_pair(start, decode_extra=decode_extra)
    body = chat(**bootstrap(port=port, room=99))
    assert prefill.post(body)[0] == 200
    status, answer = decode.post(body)
    assert status == 500 and text % port in message(answer)


def test_sglang_bootstrap_port_in_use_fails_start_up(start):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        r = start("sglang", ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port",
                             str(busy.getsockname()[1])], wait_ready=False)
        r.thread.join(10)
    assert r.code == 1 and "(the disaggregation bootstrap server)" in r.err.getvalue()


def test_without_pd_flags_nothing_changes(start):
    assert start("sglang").double.disagg is None and start("vllm").double.disagg is None
    status, body = start("sglang").post(chat(**bootstrap()))  # bootstrap fields are ignored without PD
    assert status == 200 and "kv_transfer_params" not in body


# ---- vLLM by hand -----------------------------------------------------------------------------------------
def test_vllm_one_request_through_prefill_and_decode_by_hand(start):
    prefill, decode = vllm_pair(start)
    status, first = prefill.post(as_prefill("What is 2+2?"))
    params = first["kv_transfer_params"]
    assert status == 200 and first["choices"][0]["finish_reason"] == "length"
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_host"] == "localhost" and params["remote_port"] == prefill.double.disagg.side_port
    assert params["remote_engine_id"] == prefill.double.disagg.engine_id and params["tp_size"] == 8
    assert params["remote_block_ids"] == [1] and params["remote_request_id"].startswith("chatcmpl-")
    status, answer = decode.post(chat("What is 2+2?", kv_transfer_params=params))
    assert status == 200 and answer["choices"][0]["message"]["content"] == "4"
    assert "kv_transfer_params" not in answer
    ids = "remote_engine_id=%s remote_block_ids=[1]" % params["remote_engine_id"]
    assert ids in prefill.out.getvalue() and ids in decode.out.getvalue()
    assert "KV received from localhost:%d" % params["remote_port"] in decode.out.getvalue()
    assert decode.post(chat(kv_transfer_params=params))[0] == 500  # the blocks were read (and freed) once


def test_vllm_plain_requests_still_work_on_pd_instances(start):
    prefill, decode = vllm_pair(start, "kv_both", "kv_both")
    for r in (prefill, decode):
        status, body = r.post(chat())
        assert status == 200 and "kv_transfer_params" not in body


def test_vllm_wrong_request_fails_naming_the_request_and_prefill(start):
    prefill, decode = vllm_pair(start)
    params = dict(prefill.post(as_prefill())[1]["kv_transfer_params"], remote_request_id="chatcmpl-other")
    status, body = decode.post(chat(kv_transfer_params=params))
    text = message(body)
    assert status == 500 and body["error"]["type"] == "InternalServerError"
    assert "from localhost:%d" % params["remote_port"] in text
    assert "holds no blocks [1] for remote_request_id=chatcmpl-other" in text
    assert "kv_load_failure_policy=fail" in text


def test_vllm_prefill_down_fails_naming_the_side_channel(start):
    _prefill, decode = vllm_pair(start)
    port = free_port()
    params = {"do_remote_prefill": True, "remote_engine_id": "e", "remote_block_ids": [1], "remote_host": "127.0.0.1",
              "remote_port": port, "remote_request_id": "chatcmpl-x"}
    status, body = decode.post(chat(kv_transfer_params=params))
    assert status == 500 and "NIXL handshake with 127.0.0.1:%d failed" % port in message(body)
    status, body = vllm_pair(start, decode_conf={"kv_load_failure_policy": "recompute"})[1].post(
        chat(kv_transfer_params=params))
    assert status == 200  # recompute: the decode prefills locally


def test_vllm_kv_dtype_mismatch_fails_the_handshake(start):
    line = [x if x != "fp8" else "auto" for x in VLLM_LINE]
    prefill, decode = vllm_pair(start, prefill_line=line)
    params = prefill.post(as_prefill())[1]["kv_transfer_params"]
    status, body = decode.post(chat(kv_transfer_params=params))
    text = message(body)
    assert status == 500 and "NIXL compatibility hash mismatch. Local: " in text
    assert "kv_cache_dtype 'auto' on the prefill, 'fp8' here" in text


@pytest.mark.parametrize("conf,text", [
    ({"kv_connector": "FooConnector", "kv_role": "kv_both"}, "ValueError: Unsupported connector type: FooConnector"),
    ({"kv_connector": "NixlConnector", "kv_role": "kv_prefill"}, "ValueError: Unsupported kv_role: kv_prefill."),
    ({"kv_connector": "NixlConnector"}, "Please specify kv_role when kv_connector is set"),
])
def test_vllm_refuses_bad_kv_transfer_config_at_start_up(start, conf, text):
    r = start("vllm", ["--kv-transfer-config", json.dumps(conf)], wait_ready=False)
    r.thread.join(10)
    assert r.code == 1 and text in r.err.getvalue()


def test_vllm_two_instances_on_one_side_channel_port_fail(start):
    port = str(free_port())
    conf = json.dumps(dict(NIXL, kv_role="kv_both"))
    start("vllm", ["--kv-transfer-config", conf], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": port})
    second = start("vllm", ["--kv-transfer-config", conf], env={"VLLM_NIXL_SIDE_CHANNEL_PORT": port},
                   wait_ready=False)
    second.thread.join(10)
    assert second.code == 1 and "Address already in use (addr: 'tcp://localhost:%s')" % port in second.err.getvalue()


# ---- behind the real routers (.venv-router) ----------------------------------------------------------------
# SMG 1.13.0, as the collection runs it (routers.py): SGLang's workers on its command line, vLLM's from its file
# discovery provider's manifest, which gives each worker its KV connector.
SMG = [os.path.join(ROUTER_VENV, "bin", "python"), "-m", "smg.launch_router", "--pd-disaggregation"]


def router_missing():
    exe = SMG[0]
    if not os.access(exe, os.X_OK):
        return "no %s in %s: create it with `python3.12 -m venv .venv-router && .venv-router/bin/pip install -r " \
               "requirements-router.txt`" % (os.path.basename(exe), ROUTER_VENV)
    if subprocess.run([exe, "-c", "import smg"], capture_output=True, check=False).returncode:
        return "smg is not installed in %s (pip install -r requirements-router.txt)" % ROUTER_VENV
    return None


def post_raw(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return json.loads(answer.read()) if answer.status == 200 else None
    except (OSError, ValueError, urllib.error.URLError):
        return None


def vllm_manifest(prefill, decode, connector="NixlConnector"):
    """The discovery file routers.py (_smg_vllm) writes, for the two doubles."""
    def worker(name, r, role):
        return {"id": name, "url": "http://127.0.0.1:%d" % r.double.port, "worker_type": role,
                "kv_connector": connector, "kv_role": "kv_both"}
    return {"version": 1, "workers": [worker("p1", prefill, "prefill"), worker("d1", decode, "decode")]}


def run_smg(tmp_path, workers_argv, count, prefill, decode):
    """SMG in front of the doubles: waits as kimi_router waits (GET /workers lists `count` workers ready), sends one
    chat request and one streamed; returns SMG's log and its Prometheus text."""
    port, metrics = free_port(), free_port()
    argv = SMG + workers_argv + [
        "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics),
        "--worker-startup-check-interval", "1", "--worker-startup-timeout-secs", "20"]
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        router = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=str(tmp_path),
                                  env=dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1"))
    try:
        url = "http://127.0.0.1:%d" % port
        for _attempt in range(300):
            listed = (get_json(url + "/workers") or {}).get("workers") or []
            if len(set(w["url"] for w in listed if w.get("status") == "ready")) >= count:
                break
            assert router.poll() is None, log.read_text(errors="replace")
            time.sleep(0.1)
        else:
            pytest.fail("SMG did not list %d workers ready: %s" % (count, log.read_text(errors="replace")))
        status, text = post_raw(url + "/v1/chat/completions", chat("What is 2+2?"))
        assert status == 200, text + log.read_text(errors="replace")
        assert json.loads(text)["choices"][0]["message"]["content"] == "4", text
        status, text = post_raw(url + "/v1/chat/completions", chat("Stream 3+3", stream=True))
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert status == 200 and events and events[-1] == "[DONE]", (status, text)
        chunks = [json.loads(e) for e in events[:-1]]
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert content == "6", text
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics, timeout=5) as answer:
            prometheus = answer.read().decode()
    finally:
        router.terminate()
        router.wait(15)
    return log.read_text(errors="replace"), prometheus


def handoffs(prefill, decode):
    """The NIXL handoffs the doubles logged: (prefill lines, decode lines), each naming remote_engine_id and
    remote_block_ids (SMG sends no X-Request-Id, so the two sides' request ids differ: match on the ids)."""
    p_log, d_log = prefill.out.getvalue(), decode.out.getvalue()
    prefilled = [line for line in p_log.splitlines() if "prefilled" in line]
    received = [line for line in d_log.splitlines() if "KV received from localhost:%d" % prefill.double.disagg.side_port
                in line]
    return prefilled, received


@pytest.fixture
def smg():
    reason = router_missing()
    if reason:
        pytest.skip(reason)


def test_smg_in_front_of_sglang_prefill_and_decode(start, tmp_path, smg):
    prefill, decode, bport = sglang_pair(start)
    run_smg(tmp_path, ["--prefill", "http://127.0.0.1:%d" % prefill.double.port, str(bport),
                       "--decode", "http://127.0.0.1:%d" % decode.double.port], 2, prefill, decode)
    p_log, d_log = prefill.out.getvalue(), decode.out.getvalue()
    rooms = [line.split("bootstrap_room=")[1].split(",")[0] for line in p_log.splitlines() if "Prefill done" in line]
    assert len(rooms) == 2, p_log  # one room per request, named by both sides
    for room in rooms:
        assert "Decode: bootstrap_room=%s KV received from 127.0.0.1:%d" % (room, bport) in d_log


def test_smg_in_front_of_vllm_prefill_and_decode_hands_the_kv_over_with_nixl(start, tmp_path, smg):
    prefill, decode = vllm_pair(start, "kv_both", "kv_both")
    manifest = tmp_path / "pd-workers.json"
    manifest.write_text(json.dumps(vllm_manifest(prefill, decode)))
    log, prometheus = run_smg(tmp_path, ["--discovery-provider", "file", "--discovery-file", str(manifest)], 2,
                              prefill, decode)
    prefilled, received = handoffs(prefill, decode)
    # the prefill got do_remote_decode (else it logs no "prefilled ... kept for the decode"), and the decode got the
    # prefill's kv_transfer_params: the same engine id and block ids, from the prefill's side channel
    assert len(prefilled) == 2 and len(received) == 2, (prefilled, received, log)
    for line in prefilled:
        ids = line.split(": ", 1)[1].split(" kept")[0]
        assert ids.startswith("remote_engine_id=%s remote_block_ids=" % prefill.double.disagg.engine_id), line
        assert any(ids in r for r in received), (ids, received)
    assert 'smg_pd_kv_connector_mode_total{mode="nixl"} 2' in prometheus, prometheus
    assert 'smg_pd_kv_connector_mode_total{mode="passthrough"}' not in prometheus


@pytest.mark.parametrize("manifest_kind", ["no connector", "plain --prefill/--decode"])
def test_smg_without_the_connector_routes_vllm_as_passthrough_and_no_kv_is_handed_over(
        start, tmp_path, smg, manifest_kind):
    """What the discovery file prevents: SMG answers 200 either way, but without a worker's kv_connector the prefill
    gets no kv_transfer_params and the decode recomputes the prompt. The handoff checks above would fail here."""
    prefill, decode = vllm_pair(start, "kv_both", "kv_both")
    if manifest_kind == "no connector":
        manifest = vllm_manifest(prefill, decode)
        for worker in manifest["workers"]:
            del worker["kv_connector"]
        path = tmp_path / "pd-workers.json"
        path.write_text(json.dumps(manifest))
        workers_argv = ["--discovery-provider", "file", "--discovery-file", str(path)]
    else:
        workers_argv = ["--prefill", "http://127.0.0.1:%d" % prefill.double.port,
                        "--decode", "http://127.0.0.1:%d" % decode.double.port]
    _log, prometheus = run_smg(tmp_path, workers_argv, 2, prefill, decode)
    assert handoffs(prefill, decode) == ([], [])
    assert 'smg_pd_kv_connector_mode_total{mode="passthrough"} 2' in prometheus, prometheus
