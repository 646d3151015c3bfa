"""kimi.deploy.serve_bench with real parts: the module runs as Ansible runs it (a subprocess on its arguments), the
real aiperf 0.13.0 from .venv-bench drives the engine double (a process on loopback) through a small TLS proxy that
checks the API key (a private CA, as Caddy's internal one), and the fake hub's tokenizer files make the prompts.
The double answers at once: the figures are meaningless, the pipeline is what is tested.

Skipped only when .venv-bench/bin/aiperf is missing (make bench-client). About 60 s: six module runs with aiperf
(one 3-level sweep, five of one level) and a few without."""
import glob
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "plugins", "modules", "serve_bench.py")
AIPERF = os.path.join(ROOT, ".venv-bench", "bin", "aiperf")
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "modules"))
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "hub"))

import fake_hub  # noqa: E402
from kimi_engine_double.process import DoubleProcess  # noqa: E402
from module_runner import run_module  # noqa: E402

from ansible_collections.kimi.deploy.plugins.module_utils import _bench  # noqa: E402
from ansible_collections.kimi.deploy.plugins.modules import serve_bench  # noqa: E402

pytestmark = pytest.mark.skipif(not os.access(AIPERF, os.X_OK),
                                reason="no .venv-bench/bin/aiperf (make bench-client)")

NAME = "kimi-k2.6"
API_KEY = "sk-kimi-bench-3f9a1c7e5b20d4"
TOKENIZER_FILES = ("tokenizer_config.json", "tokenization_kimi.py", "tiktoken.model", "config.json")


# ---- a TLS proxy that checks the key (what Caddy does in front of the engine) -------------------------------------
class KeyProxy(object):
    """HTTPS on 127.0.0.1 in front of `upstream`: 401 without `Bearer <key>`, else the request is forwarded and the
    answer streamed back (chunked when the engine sends no length, as a streaming answer)."""

    def __init__(self, upstream, key, certfile, keyfile):
        self.seen = []  # (method, path, key ok)
        self.fail = None  # fail(n) true: the n-th chat request (from 1) gets a 503, as an overloaded upstream
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ok = self.headers.get("Authorization") == "Bearer " + key
                proxy.seen.append((self.command, self.path, ok))
                n = len(proxy.chat_requests())
                if ok and proxy.fail and self.path == "/v1/chat/completions" and proxy.fail(n):
                    ok, status, data = False, 503, b'{"error": {"message": "upstream overloaded", "code": 503}}'
                else:
                    status, data = 401, b'{"error": "unauthorized"}'
                if not ok:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                conn = http.client.HTTPConnection(upstream[0], upstream[1], timeout=60)
                headers = dict((k, v) for k, v in self.headers.items()
                               if k.lower() not in ("host", "authorization", "connection", "content-length"))
                conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                length = answer.getheader("Content-Length")
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length", "server", "date"):
                        self.send_header(k, v)
                if length is not None:
                    self.send_header("Content-Length", length)
                    self.end_headers()
                    self.wfile.write(answer.read())
                else:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while True:
                        piece = answer.read1(65536)
                        if not piece:
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                conn.close()

            do_GET = do_POST = _handle

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certfile, keyfile)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = "https://localhost:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def chat_requests(self):
        return [s for s in self.seen if s[1] == "/v1/chat/completions"]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def make_ca(folder):
    """A private CA and a certificate for localhost / 127.0.0.1 signed by it (openssl). Returns (ca, cert, key)."""
    ca_key, ca, key, csr, cert, ext = (os.path.join(folder, n) for n in
                                       ("ca.key", "ca.crt", "srv.key", "srv.csr", "srv.crt", "ext.cnf"))
    with open(ext, "w") as handle:
        handle.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                     "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                     "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    for argv in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
                  "-subj", "/CN=kimi bench test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
                 ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=localhost"],
                 ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
                  "-days", "2", "-extfile", ext]):
        subprocess.run(["openssl"] + argv, check=True, capture_output=True)
    return ca, cert, key


# ---- fixtures -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The engine double serving a fake Kimi-K2.6 checkpoint, the key-checking TLS proxy in front of it, and the
    tokenizer files copied aside as the kimi_switch role's bench entry point fetches them."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed for the test CA")
    root = tmp_path_factory.mktemp("serve_bench")
    model = fake_hub.write_repo("moonshotai/Kimi-K2.6:shards=1,shard_size=4096", str(root / "model"), cache_dir=None)
    tokenizer = root / "tokenizer"
    tokenizer.mkdir()
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(model, name), str(tokenizer / name))
    engine = DoubleProcess("vllm", [model, "--served-model-name", NAME, "--reasoning-parser", "kimi_k2",
                                    "--trust-remote-code"], root / "engine.log").start()
    ca, cert, key = make_ca(str(root))
    proxy = KeyProxy(("127.0.0.1", engine.port), API_KEY, cert, key)
    yield {"root": root, "engine": engine, "proxy": proxy, "ca": ca, "tokenizer": str(tokenizer)}
    proxy.stop()
    engine.stop()


def params(site, result_dir, **extra):
    args = {"url": site["proxy"].url, "model": NAME, "api_key": API_KEY, "ca_file": site["ca"],
            "tokenizer": site["tokenizer"], "aiperf": AIPERF, "result_dir": str(result_dir), "host": "gpu-01",
            "identity": "int4-vllm", "levels": [1, 2, 4], "requests_per_level": 6, "input_tokens": 128,
            "output_tokens": 64, "timeout": 300}
    args.update(extra)
    return args


def alive(pid):
    """Running (a zombie waiting for its reaper does not count)."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def files_under(folder):
    return sorted(p for p in glob.glob(os.path.join(str(folder), "**"), recursive=True) if os.path.isfile(p))


def assert_key_nowhere(folder, out):
    for path in files_under(folder):
        with open(path, "rb") as handle:
            assert API_KEY.encode() not in handle.read(), "the API key is in %s" % path
    assert all(API_KEY not in word for word in out["argv"])
    assert API_KEY not in out["_stdout"]


# ---- tests --------------------------------------------------------------------------------------------------------
def test_sweep_through_tls_proxy_writes_summary_plot_and_artifacts(site, tmp_path):
    started = time.time()
    out = run_module(MODULE, params(site, tmp_path / "results"), timeout=400, keep_stdout=True)
    elapsed = time.time() - started
    summary = out["summary"]
    assert out["changed"] is True and not out.get("failed"), out.get("msg")
    assert [lv["concurrency"] for lv in summary["levels"]] == [1, 2, 4]
    for level in summary["levels"]:
        # max(6, 2 x concurrency) requests each, all answered through the proxy
        assert level["requests"] == max(6, 2 * level["concurrency"]) == level["requests_ok"]
        assert level["requests_failed"] == 0 and level["errors"] == []
        for key in ("output_tokens_per_s", "requests_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
                    "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms"):
            assert isinstance(level[key], float) and level[key] >= 0, (key, level)
        assert level["output_tokens_per_s"] > 0 and level["ttft_p99_ms"] >= level["ttft_p50_ms"]
        assert os.path.isfile(os.path.join(str(tmp_path / "results"), level["artifacts"], _bench.SUMMARY_FILE))
    assert summary["client"] == {"name": "aiperf", "version": "0.13.0"}
    assert summary["complete"] is True and summary["client_exit_code"] == 0
    assert (summary["host"], summary["identity"]) == ("gpu-01", "int4-vllm")
    assert summary["config"]["requests"] == {"1": 6, "2": 6, "4": 8}
    # every chat request reached the engine with the key, through TLS verified against the private CA
    chats = site["proxy"].chat_requests()
    assert len(chats) >= 20 and all(ok for _m, _p, ok in chats)
    # files: <host>-<identity>-<UTC>.json (what was returned), .png beside it, aiperf's folder
    stem = out["json_path"][:-len(".json")]
    assert os.path.basename(stem).startswith("gpu-01-int4-vllm-") and stem.endswith("Z")
    with open(out["json_path"]) as handle:
        assert json.load(handle) == summary
    with open(out["png_path"], "rb") as handle:
        assert out["png_path"] == stem + ".png" and handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert out["artifact_dir"] == stem + ".aiperf"
    with open(os.path.join(out["artifact_dir"], "aiperf-config.yaml")) as handle:
        assert '"apiKey": "${KIMI_BENCH_API_KEY}"' in handle.read()
    assert out["argv"] == [AIPERF, "profile", "--config", os.path.join(out["artifact_dir"], "aiperf-config.yaml")]
    assert out["baseline_source"] == "none" and out["ratio"] is None
    assert "no baseline" in out["message"]
    assert_key_nowhere(tmp_path, out)
    print("one 3-level sweep through the module: %.1f s" % elapsed)


def test_next_run_compares_with_the_last_run_and_the_gate_fails_below_min_ratio(site, tmp_path):
    results = tmp_path / "results"
    first = run_module(MODULE, params(site, results, levels=[2]), timeout=200, keep_stdout=True)
    assert first["summary"]["levels"][0]["requests_ok"] == 6 and first["baseline_source"] == "none"
    # another identity's result in the same folder is never the last run
    other = dict(first["summary"], identity="fp8-sglang", timestamp="2099-01-01T00:00:00Z")
    with open(str(results / "gpu-01-fp8-sglang-20990101T000000Z.json"), "w") as handle:
        json.dump(other, handle)
    # a baseline a thousand times faster: the gate must fail, naming host, ratio, min_ratio and the file
    fast = dict(first["summary"], levels=[dict(lv, output_tokens_per_s=lv["output_tokens_per_s"] * 1000)
                                          for lv in first["summary"]["levels"]])
    baseline = tmp_path / "fast-baseline.json"
    baseline.write_text(json.dumps(fast))
    time.sleep(1.1)  # a new second, a new result name
    check = run_module(MODULE, params(site, results, levels=[2]), check_mode=True)
    assert check["baseline"] == first["json_path"] and check["baseline_source"] == "last run"
    # the next run compares itself with the last run of its identity and says so (make demo-bench prints the message)
    second = run_module(MODULE, params(site, results, levels=[2]), timeout=200, keep_stdout=True)
    assert second["baseline_source"] == "last run" and not second.get("failed")
    assert re.search(r"ratio [0-9.]+ against the last run \(%s\)" % re.escape(first["json_path"]), second["message"]), \
        second["message"]
    time.sleep(1.1)
    gated = run_module(MODULE, params(site, results, levels=[2], baseline=str(baseline), min_ratio=0.9),
                       timeout=200, keep_stdout=True)
    assert gated["failed"] is True and gated["baseline_source"] == "given"
    assert gated["ratio"] < 0.01
    assert "host gpu-01" in gated["msg"] and "below min_ratio 0.9" in gated["msg"] and str(baseline) in gated["msg"]
    assert ("ratio %.4g" % gated["ratio"]) in gated["msg"]
    assert gated["comparison"]["common_levels"] == [2]
    assert os.path.isfile(gated["json_path"]) and os.path.isfile(gated["png_path"])  # the evidence is kept
    assert_key_nowhere(tmp_path, gated)


def test_a_wrong_key_fails_with_the_servers_answer(site, tmp_path):
    out = run_module(MODULE, params(site, tmp_path / "r", levels=[1], requests_per_level=2, api_key="sk-wrong"),
                     timeout=200)
    assert out["failed"] is True and "no request was answered" in out["msg"] and "401" in out["msg"]
    level = out["summary"]["levels"][0]
    assert level["requests_ok"] == 0 and level["requests_failed"] == 2 and out["summary"]["complete"] is True


def test_without_the_private_ca_tls_verification_fails(site, tmp_path):
    out = run_module(MODULE, params(site, tmp_path / "r", levels=[1], requests_per_level=2, ca_file=None), timeout=200)
    assert out["failed"] is True and "CERTIFICATE_VERIFY_FAILED" in out["msg"]
    assert out["summary"]["levels"][0]["requests_failed"] == 2


def test_check_mode_runs_nothing_and_writes_nothing(site, tmp_path):
    out = run_module(MODULE, params(site, tmp_path / "r"), check_mode=True)
    assert out["changed"] is False and out["summary"] is None and not os.path.exists(str(tmp_path / "r"))
    assert out["message"].startswith("would run %s profile --config " % AIPERF)
    assert "concurrency 4: 8 requests" in out["message"] and out["baseline_source"] == "none"


def test_bad_inputs_fail_before_anything_runs(site, tmp_path):
    out = run_module(MODULE, params(site, tmp_path / "r", aiperf=str(tmp_path / "nope")))
    assert out["failed"] and "aiperf executable" in out["msg"] and "make bench-client" in out["msg"]
    out = run_module(MODULE, params(site, tmp_path / "r", timeout=30))
    assert out["failed"] and "timeout 30 s is too short for 3 concurrency levels" in out["msg"]
    out = run_module(MODULE, params(site, tmp_path / "r", baseline=str(tmp_path / "missing.json")))
    assert out["failed"] and "missing.json does not exist" in out["msg"]
    assert not os.path.exists(str(tmp_path / "r"))


def test_timeout_kills_aiperf_and_its_children(site, tmp_path):
    """A hung client (a stand-in for aiperf that never ends and has a child) is killed with its process group."""
    fake = tmp_path / "aiperf"
    pids = tmp_path / "pids"
    fake.write_text("#!/bin/sh\nsleep 300 &\necho $$ $! > %s\nwait\n" % pids)
    fake.chmod(0o755)
    # the module's own defaults for what params() leaves out, as AnsibleModule fills them
    spec = {"workload": "chat", "sessions_per_level": 16, "turns": 4, "system_tokens": 2048, "turn_delay_ms": 0}
    bench = serve_bench.Bench(dict(params(site, tmp_path / "r", aiperf=str(fake), timeout=2), baseline=None,
                                   min_ratio=None, ignore_eos=True, label="", hour_cost=None, **spec))
    bench.aiperf = bench.validate()
    os.makedirs(bench.artifact_dir)
    started = time.time()
    code, seconds = bench.run_aiperf(_bench.build_argv(str(fake), bench.config_path))
    assert code is None and 2 <= seconds < 2 + serve_bench.KILL_GRACE_S and time.time() - started < 20
    time.sleep(0.2)
    assert [pid for pid in map(int, pids.read_text().split()) if alive(pid)] == []
    levels = _bench.parse_results(bench.artifact_dir, [(1, 6), (2, 6), (4, 8)])
    summary = _bench.summarize(levels, "int4-vllm", "gpu-01", bench.timestamp, "u", NAME, {}, exit_code=code)
    message = bench.failure(code, summary, _bench.compare(summary, None), None, "none")
    assert "did not finish within timeout 2 s" in message and "killed" in message and "gpu-01" in message


def test_the_fake_tokenizer_loads_offline_in_aiperfs_interpreter(site):
    """The fake hub's tokenizer is a working transformers slow tokenizer with Kimi's special token ids."""
    code = ("import json, sys\nfrom transformers import AutoTokenizer\n"
            "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
            "text = 'To be, or not to be: that is the question. \\u4f60\\u597d\\n'\n"
            "ids = t.encode(text, allow_special_tokens=False)\n"
            "print(json.dumps({'round_trip': t.decode(ids) == text, 'n': len(ids), 'chars': len(text),\n"
            "  'bos': t.bos_token_id, 'eos': t.eos_token_id, 'pad': t.pad_token_id, 'unk': t.unk_token_id,\n"
            "  'im_end': t.convert_tokens_to_ids('<|im_end|>'), 'special': t.encode('<|im_user|>'),\n"
            "  'decoded': t.decode([163584, 163586], skip_special_tokens=False)}))\n")
    python = _bench.interpreter_of(AIPERF)
    env = dict(os.environ, HF_HUB_DISABLE_TELEMETRY="1")
    proc = subprocess.run([python, "-c", code, site["tokenizer"]], capture_output=True, text=True, env=env,
                          timeout=120, check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["round_trip"] and got["n"] < got["chars"]  # merges happen
    assert (got["bos"], got["eos"], got["pad"], got["unk"], got["im_end"]) == (163584, 163585, 163839, 163838, 163586)
    assert got["special"] == [163587] and got["decoded"] == "[BOS]<|im_end|>"
