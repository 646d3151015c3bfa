"""kimi.deploy.serve_verify against the engine double (a real process on loopback), as Ansible runs the module, and
its checks one by one against canned replies."""
import io
import json
import os
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from module_runner import run_module

from ansible_collections.kimi.deploy.plugins.modules import serve_verify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "serve_verify.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))

from kimi_engine_double import png  # noqa: E402
from kimi_engine_double.process import DoubleProcess, free_port  # noqa: E402

NAME = "kimi-k2.6"
ALL = ["health", "models", "text", "text_no_thinking", "tool", "vision"]
API_KEY = "sk-kimi-test-7c1e0a9b"


def engine_argv(engine, model, tools=True, auto_tool_choice=True):
    argv = (["--model-path", model] if engine == "sglang" else [model]) + [
        "--served-model-name", NAME, "--reasoning-parser", "kimi_k2", "--trust-remote-code"]
    if tools:
        argv += ["--tool-call-parser", "kimi_k2"]
    if engine == "vllm":
        argv += ["--mm-encoder-tp-mode", "data"] + (["--enable-auto-tool-choice"] if auto_tool_choice else [])
    return argv


@pytest.fixture(scope="module")
def doubles(tmp_path_factory):
    """Engine doubles by (engine, variant), started once per module."""
    root = tmp_path_factory.mktemp("serve_verify")
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "kimi_k25", "max_position_embeddings": 262144,
                                                   "quantization_config": {"quant_method": "compressed-tensors"}}))
    (model / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 4096)
    started = {}

    def get(engine, variant="ok"):
        if (engine, variant) not in started:
            env = {"KIMI_DOUBLE_BROKEN_TOOLS": "1"} if variant == "broken_tools" else {}
            argv = engine_argv(engine, str(model), auto_tool_choice=variant != "no_auto_tool_choice")
            log = root / ("%s-%s.log" % (engine, variant))
            started[(engine, variant)] = DoubleProcess(engine, argv, log, env).start()
        return started[(engine, variant)]
    yield get
    for proc in started.values():
        proc.stop()


def run_verify(check_mode=False, **params):
    return run_module(MODULE, params, check_mode=check_mode, keep_stdout=True)


def by_name(out):
    return dict((c["name"], c) for c in out["checks"])


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_all_checks_pass_against_the_double(doubles, engine):
    out = run_verify(url=doubles(engine).url, served_model_name=NAME)
    assert out["passed"] is True and out["changed"] is False and out["failed_checks"] == []
    assert [c["name"] for c in out["checks"]] == ALL
    checks = by_name(out)
    for check in out["checks"]:
        assert check["ok"] and isinstance(check["latency_s"], float) and check["latency_s"] >= 0
    assert checks["models"]["detail"] == "lists kimi-k2.6"
    assert checks["tool"]["detail"].startswith("get_weather(") and '"city": "Paris"' in checks["tool"]["detail"]
    assert "red" in checks["vision"]["detail"].lower()
    assert checks["text_no_thinking"]["detail"] == "content: The capital of France is Paris."  # the double knows


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_broken_tools_fail_the_tool_check(doubles, engine):
    out = run_verify(url=doubles(engine, "broken_tools").url, served_model_name=NAME)
    assert out["failed"] and out["passed"] is False and out["failed_checks"] == ["tool"]
    tool = by_name(out)["tool"]
    assert not tool["ok"] and "no tool_calls in the reply (finish_reason=stop)" in tool["detail"]
    assert "get_weather" in tool["detail"]  # the tool call came back as text
    assert out["msg"].startswith("1 of 6 checks failed against http://127.0.0.1:")
    assert "tool: no tool_calls" in out["msg"]


def test_vllm_without_auto_tool_choice_fails_the_tool_check(doubles):
    out = run_verify(url=doubles("vllm", "no_auto_tool_choice").url, served_model_name=NAME, checks=["tool", "text"])
    assert out["failed_checks"] == ["tool"]
    assert "answered 400" in by_name(out)["tool"]["detail"]
    assert "--enable-auto-tool-choice" in by_name(out)["tool"]["detail"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_wrong_model_name_fails_the_models_check(doubles, engine):
    out = run_verify(url=doubles(engine).url, served_model_name="kimi-k2.5", checks=["health", "models", "text"])
    checks = by_name(out)
    assert checks["health"]["ok"] and not checks["models"]["ok"]
    assert checks["models"]["detail"] == "GET /v1/models lists ['kimi-k2.6'], not 'kimi-k2.5'"
    assert not checks["text"]["ok"] and "answered 404" in checks["text"]["detail"]
    assert out["failed_checks"] == ["models", "text"]
    assert "models: GET /v1/models lists ['kimi-k2.6'], not 'kimi-k2.5'" in out["msg"]


def test_check_mode_still_verifies(doubles):
    out = run_verify(check_mode=True, url=doubles("sglang").url, served_model_name=NAME, checks=["health", "models"])
    assert out["passed"] and out["changed"] is False and len(out["checks"]) == 2


def test_nothing_listening_fails_every_check_with_the_reason():
    out = run_verify(url="http://127.0.0.1:%d" % free_port(), checks=["health", "models"], timeout=5)
    assert out["failed_checks"] == ["health", "models"]
    assert all("cannot reach http://127.0.0.1:" in c["detail"] for c in out["checks"])


def test_bad_options_are_refused():
    assert "url must be an http(s) URL" in run_verify(url="127.0.0.1:30000")["msg"]
    assert "max_tokens must be at least 16" in run_verify(max_tokens=1)["msg"]
    assert "value of checks must be one or more of" in run_verify(checks=["speed"])["msg"]


# ---- a key-checking proxy in front of the engine (Caddy's role), to show the key is sent and never returned ----
class KeyProxy:
    def __init__(self, upstream, key):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self):
                outer.seen.append(self.headers.get("Authorization"))
                if self.headers.get("Authorization") != "Bearer " + key:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                req = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        status, data = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, data = e.code, e.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

        self.seen = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.1,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_api_key_goes_to_the_proxy_and_never_into_the_result(doubles):
    proxy = KeyProxy(doubles("vllm").url, API_KEY)
    try:
        out = run_verify(url=proxy.url, served_model_name=NAME, api_key=API_KEY)
        assert out["passed"] and set(proxy.seen) == {"Bearer " + API_KEY} and len(proxy.seen) == 6
        assert API_KEY not in out["_stdout"]
        denied = run_verify(url=proxy.url, served_model_name=NAME, checks=["health", "models"])
        assert denied["failed_checks"] == ["health", "models"]
        assert by_name(denied)["health"]["detail"].startswith("GET /health answered 401")
        wrong = run_verify(url=proxy.url, served_model_name=NAME, api_key="sk-wrong", checks=["health"])
        assert wrong["failed_checks"] == ["health"] and "sk-wrong" not in wrong["_stdout"]
        # no_key: the same request without the key must be refused; seen with the key's header only before
        refused = run_verify(url=proxy.url, served_model_name=NAME, api_key=API_KEY, checks=["models", "no_key"])
        assert refused["passed"] and by_name(refused)["no_key"]["detail"].endswith("without a key answered 401")
        assert proxy.seen[-1] is None or proxy.seen[-1] == ""
        open_engine = run_verify(url=doubles("vllm").url, served_model_name=NAME, checks=["no_key"])
        assert open_engine["failed_checks"] == ["no_key"]
        assert "answered 200, not 401" in by_name(open_engine)["no_key"]["detail"]
    finally:
        proxy.close()


# ---- the checks one by one, against canned replies -----------------------------------------------------------
class CannedOpener:
    """A urllib opener stand-in: answers each request from reply(path, body) -> (status, dict)."""

    def __init__(self, reply):
        self.reply = reply
        self.requests = []

    def answer(self, req, body):
        """(status, doc) for a request; a subclass may read its headers too."""
        return self.reply(req.full_url.split("/", 3)[3], body)

    def open(self, req, timeout=None):
        body = json.loads(req.data.decode()) if req.data else None
        self.requests.append((req.get_method(), req.full_url, body, dict(req.header_items())))
        status, doc = self.answer(req, body)
        data = json.dumps(doc).encode()
        if status >= 400:
            raise urllib.error.HTTPError(req.full_url, status, "error", {}, io.BytesIO(data))

        class Response:
            def getcode(self):
                return status

            def read(self):
                return data
        return Response()


def params(**kw):
    p = {"url": "http://engine:30000/", "served_model_name": NAME, "api_key": None, "validate_certs": True,
         "ca_path": None, "use_proxy": False, "checks": ALL, "timeout": 10, "max_tokens": 2048}
    p.update(kw)
    return p


def chat_reply(content, reasoning=None, finish="stop", tool_calls=None):
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls or []}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return 200, {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def test_text_accepts_an_answer_only_in_reasoning_but_thinking_off_needs_content():
    opener = CannedOpener(lambda path, body: chat_reply("", reasoning="Paris is the capital of France."))
    checks = serve_verify.Verifier(params(checks=["text", "text_no_thinking"]), opener).run()
    assert checks[0]["ok"] and checks[0]["detail"].startswith("answer only in the reasoning (finish_reason=stop)")
    assert not checks[1]["ok"] and checks[1]["detail"].startswith("no content with thinking off")
    sent = opener.requests[1][2]
    assert sent["chat_template_kwargs"] == {"thinking": False} and sent["max_tokens"] == 2048
    assert opener.requests[0][1] == "http://engine:30000/v1/chat/completions"


def test_thinking_off_fails_when_the_model_still_thinks():
    """An always-thinking model (Kimi-K3) ignores thinking=false: content and reasoning both come back."""
    opener = CannedOpener(lambda path, body: chat_reply("Paris.", reasoning="The user asks about France."))
    checks = serve_verify.Verifier(params(checks=["text", "text_no_thinking"]), opener).run()
    assert checks[0]["ok"] and checks[0]["detail"] == "content: Paris."
    assert not checks[1]["ok"] and checks[1]["detail"].startswith("reasoning with thinking off")


def test_empty_text_answer_fails():
    checks = serve_verify.Verifier(params(checks=["text"]), CannedOpener(lambda p, b: chat_reply(None))).run()
    assert not checks[0]["ok"] and "empty answer" in checks[0]["detail"]


@pytest.mark.parametrize("arguments,detail", [
    ("{\"city\": ", "function.arguments is not valid JSON"),
    ("{\"town\": \"Paris\"}", "function.arguments lacks the required city"),
    ("[1, 2]", "function.arguments lacks the required city"),
])
def test_tool_arguments_must_be_json_with_the_required_key(arguments, detail):
    call = {"id": "functions.get_weather:0", "type": "function",
            "function": {"name": "get_weather", "arguments": arguments}}
    opener = CannedOpener(lambda path, body: chat_reply(None, finish="tool_calls", tool_calls=[call]))
    checks = serve_verify.Verifier(params(checks=["tool"]), opener).run()
    assert not checks[0]["ok"] and checks[0]["detail"].startswith(detail)
    sent = opener.requests[0][2]
    assert sent["tools"][0]["function"]["parameters"]["required"] == ["city"] and sent["tool_choice"] == "auto"


def test_vision_sends_a_red_png_and_needs_the_colour_in_the_answer():
    seen = {}

    def reply(path, body):
        url = body["messages"][0]["content"][1]["image_url"]["url"]
        seen["url"] = url
        return chat_reply("", reasoning="The image is entirely red, so", finish="length")
    checks = serve_verify.Verifier(params(checks=["vision"], max_tokens=64), CannedOpener(reply)).run()
    assert not checks[0]["ok"]
    assert "no answer in content (finish_reason=length)" in checks[0]["detail"] and "raise max_tokens" in checks[0]["detail"]
    assert seen["url"].startswith("data:image/png;base64,")
    checks = serve_verify.Verifier(params(checks=["vision"]), CannedOpener(lambda p, b: chat_reply("It is blue."))).run()
    assert not checks[0]["ok"] and "does not name it: It is blue." in checks[0]["detail"]
    checks = serve_verify.Verifier(params(checks=["vision"]), CannedOpener(lambda p, b: chat_reply("Red."))).run()
    assert checks[0]["ok"]


def test_the_png_is_a_valid_solid_colour_image():
    data = serve_verify.make_png(64, 64, (220, 20, 20))
    width, height, rows = png.decode(data)
    assert (width, height) == (64, 64) and png.dominant_colour(data) == "red"
    assert rows[0][0][:3] == (220, 20, 20) and rows[-1][-1][:3] == (220, 20, 20)


def test_authorization_header_only_with_a_key():
    opener = CannedOpener(lambda path, body: (200, {}))
    serve_verify.Verifier(params(checks=["health"]), opener).run()
    assert "Authorization" not in opener.requests[0][3]
    serve_verify.Verifier(params(checks=["health"], api_key=API_KEY), opener).run()
    assert opener.requests[1][3]["Authorization"] == "Bearer " + API_KEY


def test_https_options_build_a_tls_context(tmp_path):
    verifier = serve_verify.Verifier(params(url="https://kimi.example", validate_certs=False))
    handlers = [h for h in verifier.opener.handlers if h.__class__.__name__ == "HTTPSHandler"]
    assert handlers and handlers[0]._context.verify_mode == 0 and handlers[0]._context.check_hostname is False


def test_metrics_reads_every_path_with_the_metrics_key_and_is_refused_with_the_client_key():
    class MetricsProxy(CannedOpener):
        """Prometheus text to the metrics key only, except at `leaky`, which answers anyone."""

        def __init__(self, leaky=""):
            CannedOpener.__init__(self, None)
            self.leaky = leaky

        def answer(self, req, body):
            path = "/" + req.full_url.split("/", 3)[3]
            if dict(req.header_items()).get("Authorization") == "Bearer mk-metrics" or path == self.leaky:
                return 200, "# TYPE up gauge\nup 1\n"
            return 401, {"error": "no"}

    p = params(checks=["metrics"], api_key="ck-client", metrics_key="mk-metrics",
               metrics_paths=["/metrics", "/metrics/node"], metrics_wait=0)
    [ok] = serve_verify.Verifier(p, MetricsProxy()).run()
    assert ok["ok"] and ok["detail"] == "/metrics, /metrics/node: 200 with the metrics key, 401 with a client key"
    [bad] = serve_verify.Verifier(p, MetricsProxy("/metrics/node")).run()
    assert not bad["ok"] and bad["detail"].startswith("/metrics/node with a client key: 200, not 401.")
    [missing] = serve_verify.Verifier(dict(p, metrics_key=None), MetricsProxy()).run()
    assert "needs metrics_paths and metrics_key" in missing["detail"]


VLLM_SPEC = {"kind": "counters", "drafts": "vllm:spec_decode_num_drafts_total",
             "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
             "accepted": "vllm:spec_decode_num_accepted_tokens_total"}


def test_speculative_reads_the_engines_counters_after_a_long_answer():
    """The check asks for an answer, then reads the engine's metrics path (no key: the engine's own port), and
    reports vLLM's acceptance rate and mean accepted length; an engine that drafted nothing fails it."""
    counters = ('vllm:spec_decode_num_drafts_total{engine="0",model_name="kimi-k2.6"} 20.0\n'
                'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="kimi-k2.6"} 60.0\n'
                'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="kimi-k2.6"} 39.0\n')

    def engine(text):
        def reply(path, body):
            if path == "v1/chat/completions":
                return chat_reply("one, two, three")
            if path == "metrics":
                return 200, text
            return 404, {}
        return CannedOpener(reply)

    p = params(checks=["speculative"], speculative_metrics=VLLM_SPEC, engine_metrics_path="/metrics")
    verifier = serve_verify.Verifier(p, engine(counters))
    [ok] = verifier.run()
    assert ok["ok"] and ok["detail"] == "acceptance rate 65%, mean accepted length 2.95 over 20 drafts", ok
    assert verifier.speculative == {"accept_rate": 0.65, "mean_accepted_length": 2.95, "drafts": 20}
    method, url, body, headers = verifier.opener.requests[0]
    assert method == "POST" and body["chat_template_kwargs"] == {"thinking": False}
    assert verifier.opener.requests[1][1] == "http://engine:30000/metrics"
    [off] = serve_verify.Verifier(p, engine("vllm:num_requests_running 0\n")).run()
    assert not off["ok"] and "the engine is not speculating" in off["detail"], off
    [unset] = serve_verify.Verifier(dict(p, speculative_metrics=None), engine(counters)).run()
    assert not unset["ok"] and "needs speculative_metrics" in unset["detail"]
