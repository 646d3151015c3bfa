"""The engine double's life cycle (start-up checks, weight load, readiness) and its OpenAI-compatible API."""
import base64
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import answers, disagg, flags, hfcache, kernels, metrics, png, rendezvous, slots, speculative, trtllm
from .chat_format import cf

READY_LINE = {"sglang": "The server is fired up and ready to roll!", "vllm": "Application startup complete.",
              "trtllm": "Application startup complete."}
DEFAULT_PORT = {"sglang": 30000, "vllm": 8000, "trtllm": 8000}
DEFAULT_HOST = {"sglang": "127.0.0.1", "vllm": "0.0.0.0", "trtllm": "localhost"}
SIGBUS_LINE = "Caught signal 7 (Bus error: nonexistent physical address)"
# vLLM's NVFP4 MoE oracle (fused_moe/oracle/nvfp4.py): --moe-backend value -> NvFp4MoeBackend, the list it logs,
# and the Marlin weight-only warning (quantization/utils/marlin_utils_fp4.py).
NVFP4_MOE_BACKENDS = {"cutlass": "VLLM_CUTLASS", "flashinfer_trtllm": "FLASHINFER_TRTLLM",
                      "flashinfer_cutlass": "FLASHINFER_CUTLASS", "flashinfer_cutedsl": "FLASHINFER_CUTEDSL",
                      "flashinfer_b12x": "FLASHINFER_B12X", "marlin": "MARLIN", "humming": "HUMMING",
                      "emulation": "EMULATION"}
NVFP4_MOE_AVAILABLE = ["FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED", "FLASHINFER_CUTLASS",
                       "VLLM_CUTLASS", "MARLIN", "HUMMING", "EMULATION"]
NVFP4_MOE_AUTO = "FLASHINFER_CUTLASS"  # what auto picks on sm_120 (TRTLLM and CuTe DSL are sm_100 only)
MARLIN_FP4_WARNING = ("Your GPU does not have native support for FP4 computation but FP4 quantization is being used. "
                      "Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade "
                      "performance for compute-heavy workloads.")
# Which parsers read which Kimi format, and the markup each writes: the collection's _chat_format.py (chat_format.py
# loads it). Any other parser name the engine accepts (its flag list refuses unknown ones) reads another model's
# format: the model's markup is left in the content, as the real engines leave it. SGLang's `auto` picks the parser
# from the checkpoint.
# The reasoning parsers that take text without their opening marker as reasoning from its start (the serving layer may
# feed the opener as the generation prefix): on another format's output, everything ends up in reasoning_content.
# vLLM 0.33.0 parser/kimi_k2.py (initial_state REASONING when thinking), reasoning/kimi_k3_reasoning_parser.py (a
# missing open marker: reasoning from offset 0); SGLang 0.5.23 KimiK3Detector (force_reasoning=True).
STARTS_IN_REASONING = {"vllm": ("kimi_k2", "kimi_k3"), "sglang": ("kimi_k3",)}


def reads(engine, fmt, kind, parser):
    """Whether a parser named `parser` on `engine` reads format `fmt`'s `kind` (tool, reasoning; False without one)."""
    return cf.reads(fmt, kind, parser) or (bool(parser) and engine.startswith("sglang") and parser == "auto")


# vLLM 0.33.0: the request's reasoning_effort values (renderers/params.py ReasoningEffort), the ones the Kimi K3
# renderer takes (renderers/kimi_k3.py _K3_THINKING_EFFORTS; "none" turns thinking off) and its refusal of the rest.
VLLM_REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
K3_EFFORTS = ("low", "high", "max")
K3_EFFORT_ERROR = "Kimi K3 supports thinking_effort values: low, high, max (parameter=thinking_effort, value=%s)"
# SGLang 0.5.23 (entrypoints/openai/protocol.py ReasoningEffortTier): other tiers are accepted and, on K3, ignored with
# a warning (serving_chat.py: "using the encoder default").
SGLANG_REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max")
# What each effort adds to the reasoning (the double's stand-in for thinking longer); no effort: the encoder's
# default, played as high.
EFFORT_MORE = {"low": "", "high": " Let me check that once more.", "max": " Let me check that once more. "
               "Then I will look at it from another side before I answer."}
# vLLM: a named tool choice on K3 needs the XTML structural tag, on unless VLLM_ENFORCE_STRICT_TOOL_CALLING is off
# (tool_parsers/kimi_k3_tool_parser.py adjust_request).
K3_NAMED_ERROR = ("Named tool choice for Kimi K3 requires strict tool calling (VLLM_ENFORCE_STRICT_TOOL_CALLING) so "
                  "the XTML structural tag can force the call. Otherwise use `tool_choice` set to \"auto\", "
                  "\"required\", or \"none\". (parameter=tool_choice, value=%s)")


AUTO_TOOL_ERROR = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


class EngineDouble:
    """One engine double process: `run(stop)` goes through start-up and serves until `stop` is set."""

    def __init__(self, engine, args, env=None, out=None, err=None):
        self.engine, self.args = engine, args
        self.env = dict(os.environ) if env is None else env
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.model = args.model
        names = args.get("served_model_name")
        if isinstance(names, str):
            names = [names]
        if engine == "trtllm" and not names and os.path.isdir(self.model):
            names = [os.path.basename(os.path.normpath(self.model))]  # OpenAIServer: a directory's name
        self.names = names or [self.model]
        self.host = args.get("host") or args.defaults.get("host") or DEFAULT_HOST[engine]
        port = args.get("port")
        self.port = int(port if port is not None else (args.defaults.get("port") or DEFAULT_PORT[engine]))
        self.state = "starting"
        self.bound = threading.Event()  # set once the HTTP socket listens (self.port is then the real port)
        self.ready = threading.Event()
        self.httpd = None
        self.loaded = None
        self.lock = threading.Lock()
        self.counters = {"requests": 0, "prompt_tokens": 0, "generation_tokens": 0, "running": 0, "finished": {}}
        self.chats = 0  # chat requests received, for KIMI_DOUBLE_ERROR_RATE
        self.answered = 0  # chat requests answered, for KIMI_DOUBLE_GARBAGE_AFTER
        self.tool_calls = 0  # tool calls made, for KIMI_DOUBLE_TOOL_ERROR_RATE
        # what /metrics observed of the requests served: TTFT, inter-token latency (TRT-LLM: per-request TPOT), e2e
        self.latency = {kind: metrics.Histogram(buckets) for kind, buckets in metrics.LATENCY_BUCKETS[engine].items()}
        # vLLM's data-parallel engines behind this one API server (--data-parallel-size, or its local share on a
        # head): each request goes to one, in turn, and /metrics has one child per engine index
        local = args.get("data_parallel_size_local") or args.get("data_parallel_size") if engine == "vllm" else None
        self.engines = [({"requests": 0, "prompt_tokens": 0, "generation_tokens": 0, "running": 0, "finished": {}},
                         {kind: metrics.Histogram(buckets) for kind, buckets in metrics.LATENCY_BUCKETS[engine].items()})
                        for _index in range(max(int(local or 1), 1))]
        self.observed = 0  # answers observed in the latency histograms, for the engine index
        self.rendezvous = None  # a replica over several hosts (--nnodes > 1)
        self.disagg = None  # prefill/decode disaggregation (disagg.py)
        self.speculative = None  # speculative decoding (speculative.py)
        self.compile_phase = None  # the kernel compile at start-up (kernels.py): off, cached, compiled, stopped
        self.slots = None  # KIMI_DOUBLE_SLOTS: at most n requests generate at once, the rest wait FIFO (slots.py)
        self.token_seconds = 0.0  # KIMI_DOUBLE_TOKEN_SECONDS: the time each generated token takes
        self.created = int(time.time())

    # ---- logging, in each engine's style -------------------------------------------------------------
    def log(self, msg, where="api_server.py", level="INFO", proc="APIServer"):
        now = time.localtime()
        if self.engine == "vllm":
            line = "(%s pid=%d) %s %s [%s] %s" % (proc, os.getpid(), level, time.strftime("%m-%d %H:%M:%S", now),
                                                  where, msg)
        elif self.engine == "trtllm":
            line = "[%s] [TRT-LLM] [%s] %s" % (time.strftime("%m/%d/%Y-%H:%M:%S", now), level[:1], msg)
        else:
            line = "[%s] %s" % (time.strftime("%Y-%m-%d %H:%M:%S", now), msg)
        print(line, file=self.out, flush=True)

    def fail(self, msg):
        print(("(APIServer pid=%d) ERROR " % os.getpid() if self.engine == "vllm" else "") + msg,
              file=self.err, flush=True)
        return 1

    # ---- start-up -------------------------------------------------------------------------------------
    def startup_problems(self):
        problems = flags.startup_problems(self.args)
        crash = self.env.get("KIMI_DOUBLE_CRASH", "")
        if crash and crash != "startup" and not (crash.startswith("after:") and _is_number(crash[6:])):
            problems.append("engine double: bad KIMI_DOUBLE_CRASH=%r (use startup or after:<seconds>)" % crash)
        for name, kind in (("KIMI_DOUBLE_KV_USAGE", "usage"), ("KIMI_DOUBLE_QUEUE", "queue"),
                           ("KIMI_DOUBLE_ERROR_RATE", "usage")):
            if metrics.knob(self.env, name, kind) is None:
                problems.append("engine double: bad %s=%r (use %s)" % (
                    name, self.env.get(name), "a number from 0 to 1" if kind == "usage" else "a whole number >= 0"))
        problems += answers.knob_problems(self.env)
        try:
            n, self.token_seconds = slots.knobs(self.env)
            self.slots = slots.Slots(n) if n else None
        except ValueError as e:
            problems.append(str(e))
        try:
            kernels.seconds(self.env)
        except kernels.Problem as e:
            problems.append(str(e))
        if crash == "startup":
            problems.append("RuntimeError: Engine core initialization failed. See root cause above. "
                            "[engine double: KIMI_DOUBLE_CRASH=startup]")
        return problems

    def architecture_problem(self, config):
        """A checkpoint of a format this release cannot parse is an architecture it does not register: the release that
        brought Kimi-K3's model class brought its kimi_k3 parsers with it (vLLM 0.27.0, SGLang 0.5.23), so a flag list
        offering no tool parser of the format stands for the model registry lacking the class. The real error, at
        start-up (vLLM's model registry; SGLang's model loader says the same)."""
        fmt = cf.checkpoint_format(config)
        spec = next((o for name, o in (flags.load_flags(self.engine).get("options") or {}).items()
                     if name in ("--tool-call-parser", "--tool_parser") and isinstance(o, dict)), None)
        offered = (spec or {}).get("valid_values") or (spec or {}).get("choices") or []
        if not offered or any(cf.reads(fmt, "tool", name) for name in offered):
            return None
        return ("ValueError: Model architectures %s are not supported for now. Supported architectures: "
                "[... the %s %s registry, without it ...] [engine double: %s has no parser of the %s chat format]" % (
                    config.get("architectures"), self.engine, flags.version(self.engine), self.engine, fmt))

    def quantization_problem(self, config):
        wanted = self.args.get("quantization")
        have = (config.get("quantization_config") or {}).get("quant_method")
        if wanted and have and wanted != have and not (wanted.startswith("modelopt") and have.startswith("modelopt")):
            return ("ValueError: Quantization method specified in the model config (%s) does not match the "
                    "quantization method specified in the `quantization` argument (%s)." % (have, wanted))
        return None

    def worker(self):
        tp = str(self.args.get("tensor_parallel_size") or "1")
        return "Worker_TP0" if tp not in ("1", "") else "EngineCore_DP0"

    def nvfp4_moe_backend(self):
        """vLLM on an NVFP4 (ModelOpt FP4) checkpoint: the NvFp4MoeBackend the oracle picks for --moe-backend, a
        ValueError line for a backend NVFP4 cannot use, None otherwise (INT4, SGLang)."""
        quant = self.args.get("quantization") or ((self.loaded or {}).get("config", {}).get("quantization_config")
                                                  or {}).get("quant_method") or ""
        if self.engine != "vllm" or not str(quant).startswith("modelopt"):
            return None
        wanted = self.args.get("moe_backend") or "auto"
        if wanted == "auto":
            return NVFP4_MOE_AUTO
        if wanted not in NVFP4_MOE_BACKENDS:
            return ("ValueError: moe_backend='%s' is not supported for NvFP4 MoE. Expected one of %s."
                    % (wanted, list(NVFP4_MOE_BACKENDS)))
        return NVFP4_MOE_BACKENDS[wanted]

    def uvicorn(self, line):
        prefix = "(APIServer pid=%d) " % os.getpid() if self.engine == "vllm" else ""
        print("%sINFO:     %s" % (prefix, line), file=self.out, flush=True)

    def trtllm_config(self):
        """trtllm-serve: the YAML config over the CLI's llm_args, checked like TorchLlmArgs(extra='forbid')."""
        table = flags.load_flags("trtllm")

        def warn(msg, level="I"):
            self.log(msg, level=level)

        llm, path = trtllm.effective_llm_args(self.args, table, warn)
        self.args.llm_args = llm
        trtllm.fill_args(self.args, llm)
        if path:
            self.log("Loaded the LLM API options from %s: %s" % (path, ", ".join(
                sorted(k for k in llm if k in trtllm.read_config(path)))))
        shown = ("tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size", "enable_attention_dp",
                 "max_batch_size", "max_num_tokens", "max_seq_len", "trust_remote_code", "revision", "backend",
                 "kv_cache_config")
        self.log("%s(model=%r, %s)" % (
            (table.get("llm_args") or {}).get("class", "TorchLlmArgs"), self.model,
            ", ".join("%s=%r" % (k, llm.get(k)) for k in shown if k in llm)))

    def run(self, stop):
        """Whole life cycle; returns the process exit code (0 after a clean stop)."""
        try:
            return self._run(stop)
        finally:
            if self.disagg:
                self.disagg.close()
            if self.rendezvous:
                self.rendezvous.close()
            if self.httpd:
                self.httpd.shutdown()
                self.httpd.server_close()

    def _run(self, stop):
        version = flags.version(self.engine)
        if self.engine == "trtllm":
            print("[TensorRT-LLM] TensorRT-LLM version: %s [KIMI ENGINE DOUBLE: a test stand-in, no GPU, no model]"
                  % version, file=self.out, flush=True)
            try:
                self.trtllm_config()
            except trtllm.ConfigError as e:
                return self.fail(str(e))
            self.log("Using LLM with PyTorch backend" if (self.args.get("backend") or "pytorch") == "pytorch"
                     else "Using LLM with %s backend" % self.args.get("backend"))
        elif self.engine == "vllm":
            self.log("vLLM API server version %s [KIMI ENGINE DOUBLE: a test stand-in, no GPU, no model]"
                     % version)
            self.log("non-default args: %s" % dict(sorted(self.args.values.items())), "utils.py")
        else:
            self.log("sglang %s [KIMI ENGINE DOUBLE: a test stand-in, no GPU, no model]" % version)
            self.log("server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.args.values.items())))
        problems = self.startup_problems()
        if problems:
            return self.fail("\n".join(problems))
        try:  # speculative decoding: checked with the engine's arguments, before anything loads
            self.speculative, notes = speculative.configure(self.engine, self.args, self.model, self.env)
        except speculative.Problem as e:
            return self.fail(str(e))
        for note, level in notes:
            self.log(note, ("speculative.py" if level == "WARNING" else "core.py") if self.engine == "vllm"
                     else "server_args.py", level=level, proc="APIServer" if level == "WARNING" else "EngineCore_DP0")
        try:
            self.disagg = disagg.setup(self)
        except disagg.Problem as e:
            return self.fail(str(e))
        try:
            conf = rendezvous.settings(self.engine, self.args, self.env)
        except ValueError as e:
            return self.fail("ValueError: %s" % e)
        if conf:  # distributed init comes before the weights, as in the real engines
            self.rendezvous = rendezvous.Rendezvous(conf, self.log)
            problem = self.rendezvous.join(stop)
            if problem == "stopped":
                return self._stopped()
            if problem:
                return self.fail(problem)
        t0 = time.time()
        self.log("Loading weights from %s" % self.model, "default_loader.py" if self.engine == "vllm" else "")
        loader = self.loader()
        if loader:
            self.log("Weight loader: %s [engine double: the weights are read as the default loader reads them]" % loader)
        try:
            self.loaded = hfcache.load(self.model, self.args.get("revision"), self.env,
                                       trust_remote_code=self.args.flag("trust_remote_code"))
        except hfcache.LoadError as e:
            return self.fail(str(e))
        problem = self.architecture_problem(self.loaded["config"]) or self.quantization_problem(self.loaded["config"])
        if problem:
            return self.fail(problem)
        if self.engine == "trtllm":
            quant = (self.loaded["config"].get("quantization_config") or {}).get("quant_method")
            if quant:
                self.log("Found quantization_config in config.json: quant_method=%s%s" % (
                    quant, " -> quant_algo=NVFP4 (ModelOpt checkpoint)" if str(quant).startswith("modelopt") else ""))
            free = trtllm.shm_problem(self.loaded["bytes"], self.env)
            if free is not None:
                print(SIGBUS_LINE, file=self.err, flush=True)
                print("[engine double] %d weight bytes x KIMI_DOUBLE_SHM_BYTES_PER_WEIGHT_BYTE=%s > %d bytes free in "
                      "/dev/shm" % (self.loaded["bytes"], self.env.get("KIMI_DOUBLE_SHM_BYTES_PER_WEIGHT_BYTE"), free),
                      file=self.err, flush=True)
                return 128 + 7
        moe = self.nvfp4_moe_backend()
        if moe and moe.startswith("ValueError"):
            return self.fail(moe)
        if moe:  # vLLM's NvFp4 MoE oracle, once per worker (the double logs TP0's)
            self.log("Using '%s' NvFp4 MoE backend out of potential backends: %s." % (moe, NVFP4_MOE_AVAILABLE),
                     "nvfp4.py:288", proc=self.worker())
        self.log("Loading weights took %.2f seconds: %d files, %d bytes read from %s" % (
            time.time() - t0, self.loaded["files"], self.loaded["bytes"], self.loaded["snapshot"]),
            "default_loader.py")
        if moe == "MARLIN":  # marlin_utils_fp4.prepare_nvfp4_moe_layer_for_marlin, after the weights are loaded
            self.log(MARLIN_FP4_WARNING, "marlin_utils_fp4.py:196", level="WARNING", proc=self.worker())
        if self.speculative:  # the draft, from the offline cache like the target, after it
            try:
                self.speculative.load_draft(self.model, self.loaded["config"], self.env, self.log, proc=self.worker())
            except speculative.Problem as e:
                return self.fail(str(e))
            self.log(self.speculative.start_line(), "gpu_model_runner.py", proc=self.worker())
        # The kernel compile (KIMI_DOUBLE_COMPILE_SECONDS): skipped when the engine's cache folder has the kernels.
        try:
            self.compile_phase, _spent = kernels.compile_kernels(self.engine, self.env, self.log, stop, self.worker())
        except kernels.Problem as e:
            return self.fail(str(e))
        if self.compile_phase == "stopped":
            return self._stopped()
        delay = float(self.env.get("KIMI_DOUBLE_START_DELAY") or 0)
        try:
            if self.disagg:  # the bootstrap server / side channel comes up with the engine, before the API
                self.disagg.start()
        except disagg.Problem as e:
            return self.fail(str(e))
        if conf and conf["rank"] > 0:  # vLLM --headless, SGLang's other ranks: no HTTP server, only the replica's work
            return self._member_loop(stop)
        if self.engine == "sglang":  # SGLang listens early and answers /health with 503 until warmed up
            if not self._bind():
                return 1
            self.log("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (self.host, self.port))
            if stop.wait(delay):
                return self._stopped()
            self.log("End of prefill warmup [engine double]")
        else:  # vLLM only binds once the engine is up: connection refused until then
            if stop.wait(delay):
                return self._stopped()
            if not self._bind():
                return 1
            for line in ("Started server process [%d]" % os.getpid(), "Waiting for application startup."):
                self.uvicorn(line)
        self.state = "ready"
        self.ready.set()
        if self.engine in ("vllm", "trtllm"):
            self.uvicorn(READY_LINE[self.engine])
            if self.engine == "trtllm":
                self.uvicorn("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (self.host, self.port))
        else:
            self.log(READY_LINE["sglang"])
        crash = self.env.get("KIMI_DOUBLE_CRASH", "")
        crash_at = time.time() + float(crash[6:]) if crash.startswith("after:") else None
        while not stop.wait(0.2):
            if crash_at and time.time() >= crash_at:
                self.state = "dead"
                return self.fail("RuntimeError: engine double: simulated crash (KIMI_DOUBLE_CRASH=%s): "
                                 "EngineCore encountered a fatal error." % crash)
            if self.rendezvous and self.rendezvous.lost.is_set():  # a member went away: the head's engine dies
                self.state = "dead"
                return self.fail(self.rendezvous.lost_message)
        return self._stopped()

    def _member_loop(self, stop):
        """A rank other than 0 serves no HTTP; it fails when the head goes away, as its NCCL communicator would."""
        self.state = "ready"
        self.log("Rank %d of %d running headless: the head serves the API [engine double]" % (
            self.rendezvous.conf["rank"], self.rendezvous.conf["me"]["nnodes"]))
        while not stop.wait(0.2):
            if self.rendezvous.lost.is_set():
                self.state = "dead"
                return self.fail(self.rendezvous.lost_message)
        return self._stopped()

    def _stopped(self):
        self.log("Shutting down [engine double]")
        return 0

    def _bind(self):
        handler = type("Handler", (_Handler,), {"engine": self})
        try:
            self.httpd = ThreadingHTTPServer((self.host, self.port), handler)
        except OSError as e:
            self.fail("OSError: [Errno %s] %s: (%r, %d)" % (e.errno, e.strerror, self.host, self.port))
            return False
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.1,), daemon=True).start()
        self.bound.set()
        return True

    # ---- answers --------------------------------------------------------------------------------------
    def max_model_len(self):
        raw = self.args.get("max_model_len") or self.args.get("context_length") or self.args.get("max_seq_len")
        if raw:
            raw = str(raw).lower()
            mult = {"k": 1000, "m": 1000000}.get(raw[-1:], 1)
            try:
                return int(float(raw.rstrip("km")) * mult) if raw not in ("auto", "-1") else 262144
            except ValueError:
                pass
        return int(((self.loaded or {}).get("config") or {}).get("max_position_embeddings") or 262144)

    def models(self):
        if self.engine == "trtllm":  # ModelList(data=[ModelCard(id=self.model)])
            return {"object": "list", "data": [{"id": n, "object": "model", "created": self.created,
                                                "owned_by": "tensorrt_llm"} for n in self.names]}
        owner = self.engine
        return {"object": "list", "data": [
            {"id": n, "object": "model", "created": self.created, "owned_by": owner,
             "root": self.model, "parent": None, "max_model_len": self.max_model_len()} for n in self.names]}

    def sglang_info(self, model_only):
        """SGLang's /model_info (model and tokenizer path, is_generation) and /server_info (its server arguments and
        version; a router reads served_model_name and the parallel sizes there), with the values this double was given
        (http_server.py, 0.5.x)."""
        model = {"model_path": self.model, "tokenizer_path": self.args.get("tokenizer_path") or self.model,
                 "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                 "has_image_understanding": True, "has_audio_understanding": False}
        if model_only:
            return model
        info = dict(self.args.defaults or {}, **self.args.values)
        types = {spec.get("dest"): spec.get("type") for spec in (flags.load_flags("sglang").get("options") or {}).values()
                 if isinstance(spec, dict)}
        info = {k: _typed(types.get(k), v) for k, v in info.items()}  # ServerArgs holds ints as ints: a router parses
        info.update(model, served_model_name=self.names[0], host=self.host, port=self.port,
                    tp_size=int(self.args.get("tp_size") or 1), dp_size=int(self.args.get("dp_size") or 1),
                    disaggregation_mode=self.args.get("disaggregation_mode") or "null",
                    version=flags.version(self.engine))
        if self.slots:  # the engine's running-batch limit, as SGLang reports --max-running-requests (a router sums it)
            info["max_running_requests"] = self.slots.n
        return info

    def metrics(self):
        """The engine's own Prometheus text (0.0.4), names, HELP, labels and buckets as the pinned versions print
        them (see README "Metrics"). Gauges: running requests, waiting requests (KIMI_DOUBLE_QUEUE), KV-cache use
        (KIMI_DOUBLE_KV_USAGE); counters of the requests answered and their tokens; the latency histograms of those
        requests."""
        with self.lock:
            c = dict(self.counters, finished=dict(self.counters["finished"]))
            hist = {kind: h.copy() for kind, h in self.latency.items()}
            engines = [(dict(ec, finished=dict(ec["finished"])), {kind: h.copy() for kind, h in eh.items()})
                       for ec, eh in self.engines]
            spec = self.speculative.snapshot() if self.speculative else None
        queue = metrics.knob(self.env, "KIMI_DOUBLE_QUEUE", "queue") or 0  # a bad value stopped the start-up
        waiting = self.waiting()  # KIMI_DOUBLE_SLOTS: the requests waiting for a slot are queued, not running
        queue, c["running"] = queue + waiting, max(c["running"] - waiting, 0)
        usage = metrics.knob(self.env, "KIMI_DOUBLE_KV_USAGE", "usage") or 0.0
        return metrics.render(self.engine, self.names[0], c, hist, queue, usage, self.created,
                              bool((self.args.llm_args or {}).get("enable_iter_perf_stats")), spec,
                              metrics.offload_tier(self.engine, self.args), engines)

    def waiting(self):
        """The requests waiting for a slot (KIMI_DOUBLE_SLOTS; 0 without it)."""
        return self.slots.waiting() if self.slots else 0

    def loader(self):
        """The weight loader the arguments ask for, in words (None: the engine's default): vLLM --load-format and
        --safetensors-load-strategy, SGLang --load-format and --weight-loader-prefetch-checkpoints, and either's
        --model-loader-extra-config."""
        parts = []
        for dest in ("load_format", "safetensors_load_strategy", "weight_loader_prefetch_checkpoints",
                     "model_loader_extra_config"):
            value = self.args.get(dest)
            if value not in (None, "", "auto", False):
                parts.append("%s=%s" % (dest, json.dumps(value, sort_keys=True) if isinstance(value, dict) else value))
        return ", ".join(parts) or None

    def record_latency(self, plan, started, first, ended):
        """Observe one answered request in the latency histograms, as the engines do when it finishes: TTFT
        (first - started), e2e (ended - started) and the decode time spread over the tokens after the first
        (vLLM/SGLang: one inter-token observation per token; TensorRT-LLM: one time-per-output-token per request)."""
        tokens = plan["usage"]["completion_tokens"]
        ttft, e2e = max(first - started, 1e-6), max(ended - started, 1e-6)
        decode = max(e2e - ttft, 0.0)
        with self.lock:
            per_engine = self.engines[self.observed % len(self.engines)][1]
            self.observed += 1
            for latency in (self.latency, per_engine):
                latency["ttft"].observe(ttft)
                latency["e2e"].observe(e2e)
                if tokens > 1 and self.engine == "trtllm":
                    latency["itl"].observe(decode / (tokens - 1))
                elif tokens > 1:
                    latency["itl"].observe(decode / (tokens - 1), times=tokens - 1, total=decode)

    def log_speculation(self, spec, running, tokens):
        """After an answer with speculative decoding: vLLM's `SpecDecoding metrics` line (its stat logger logs it every
        interval), SGLang's decode batch line with `accept len` / `accept rate` (every decode log interval)."""
        if self.engine == "vllm":
            return self.log(spec, "metrics.py")
        queue = (metrics.knob(self.env, "KIMI_DOUBLE_QUEUE", "queue") or 0) + self.waiting()
        usage = metrics.knob(self.env, "KIMI_DOUBLE_KV_USAGE", "usage") or 0.0
        self.log("Decode batch, #running-req: %d, #token: %d, token usage: %.2f, accept len: %.2f, accept rate: %.2f, "
                 "#queue-req: %d [engine double]" % (
                     running, tokens, usage, spec["accept_length"], spec["accept_rate"], queue))

    def iteration_stats(self):
        """trtllm /metrics: the JSON iteration stats since the last call ([] unless enable_iter_perf_stats)."""
        if not (self.args.llm_args or {}).get("enable_iter_perf_stats"):
            return []
        c, waiting = self.counters, self.waiting()
        queue = (metrics.knob(self.env, "KIMI_DOUBLE_QUEUE", "queue") or 0) + waiting
        used = int(round((metrics.knob(self.env, "KIMI_DOUBLE_KV_USAGE", "usage") or 0.0) * 1000))  # of 1000 blocks
        return [{"iter": c["requests"], "iterLatencyMS": 1.0, "numActiveRequests": max(c["running"] - waiting, 0),
                 "numQueuedRequests": queue, "maxNumActiveRequests": self.slots.n if self.slots else int(
                     self.args.get("max_batch_size") or 2048),
                 "gpuMemUsage": 0, "cpuMemUsage": 0, "timestamp": time.strftime("%m-%d-%Y %H:%M:%S"),
                 "kvCacheStats": {"freeNumBlocks": 1000 - used, "maxNumBlocks": 1000, "usedNumBlocks": used,
                                  "tokensPerBlock": 32}}]

    def error(self, code, message, etype, param=None):
        if self.engine == "vllm":
            return code, {"error": {"message": message, "type": etype, "param": param, "code": code}}
        return code, {"object": "error", "message": message, "type": etype, "param": param, "code": code}

    def fails_now(self):
        """KIMI_DOUBLE_ERROR_RATE=<f>: every request whose running share of failures falls behind f fails (0.25: the
        4th, 8th, ...), as an engine whose request handler raises answers 500; deterministic, so tests count them."""
        rate = metrics.knob(self.env, "KIMI_DOUBLE_ERROR_RATE", "usage") or 0.0
        with self.lock:
            self.chats += 1
            return int(self.chats * rate) > int((self.chats - 1) * rate)

    def chat(self, req):
        """Return (status, body) for non-streaming, or (200, plan) where plan drives streaming too."""
        if not isinstance(req, dict) or not isinstance(req.get("messages"), list) or not req["messages"]:
            return self.error(400, "messages: a non-empty list is required", "BadRequestError", "messages")
        model = req.get("model") or self.names[0]
        if model not in self.names:
            return self.error(404, "The model `%s` does not exist." % model, "NotFoundError", "model")
        prompt, colours = "", []
        for msg in req["messages"]:
            content = msg.get("content") if isinstance(msg, dict) else None
            parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            for part in parts:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text":
                    prompt += " " + str(part.get("text") or "")
                elif part.get("type") == "image_url":
                    url = (part.get("image_url") or {}).get("url", "")
                    try:
                        colours.append(_image_colour(url))
                    except ValueError as e:
                        return self.error(400, "Failed to load image: %s" % e, "BadRequestError")
        last = ""
        for msg in req["messages"]:
            if isinstance(msg, dict) and msg.get("role") == "user":
                c = msg.get("content")
                last = c if isinstance(c, str) else " ".join(
                    str(p.get("text", "")) for p in c or [] if isinstance(p, dict) and p.get("type") == "text")
        fmt = self.chat_format()
        kwargs = req.get("chat_template_kwargs") or {}
        # K3 always thinks: its renderer (vLLM renderers/kimi_k3.py, SGLang's K3 encoder) has no template switch, so
        # chat_template_kwargs thinking=false is not read; only reasoning_effort "none" (below) leaves reasoning out.
        thinking = fmt == "k3" or kwargs.get("thinking", kwargs.get("enable_thinking", True)) is not False
        effort, refused = self.reasoning_effort(req, fmt)
        if refused:
            return refused
        if effort == "none":  # both engines: reasoning_effort none turns thinking off
            thinking, effort = False, None
        tools = req.get("tools") or []
        choice = req.get("tool_choice", "auto" if tools else "none")
        with self.lock:
            self.answered += 1
            answered = self.answered
        after = self.env.get("KIMI_DOUBLE_GARBAGE_AFTER", "")
        garbage = after.isdigit() and answered > int(after)
        calls, results = [], answers.tool_results(req["messages"])
        tool_parser = self.args.get("tool_call_parser") or self.args.get("tool_parser")
        tools_parsed = False
        if tools and choice != "none" and not results:
            named = isinstance(choice, dict) or choice == "required"  # vLLM: guided decoding, no parser needed
            if self.engine == "vllm" and not named and not (tool_parser and self.args.flag("enable_auto_tool_choice")):
                return self.error(400, AUTO_TOOL_ERROR, "BadRequestError")
            if self.engine == "vllm" and fmt == "k3" and isinstance(choice, dict) and reads(
                    self.engine, fmt, "tool", tool_parser) and self.env.get(
                    "VLLM_ENFORCE_STRICT_TOOL_CALLING", "True").lower() not in ("true", "1"):
                return self.error(400, K3_NAMED_ERROR % json.dumps(choice), "BadRequestError", "tool_choice")
            calls = [self.tool_call(tool, i, garbage, fmt)
                     for i, tool in enumerate(answers.choose_tools(tools, last, choice))]
            tools_parsed = (reads(self.engine, fmt, "tool", tool_parser) or (self.engine == "vllm" and named)) and \
                self.env.get("KIMI_DOUBLE_BROKEN_TOOLS") != "1"
            if calls and not tools_parsed:  # the model's raw tool-call markup ends up as text, as without a parser
                answer, calls = cf.tool_markup(fmt, calls), []
            else:
                answer = "" if calls else answers.direct_answer(last, prompt) or "No tool is needed: %s" % last.strip()
            reasoning = ("The user needs %s; I should call the tool." % ", ".join(c["function"]["name"] for c in calls)
                         if calls else "I can answer this without a tool.")
        elif results:
            answer = "The tool returned: %s" % "; ".join(results)
            reasoning = "The tool answered; I will report what it returned."
        elif colours:
            answer = "The image is %s." % colours[-1]
            reasoning = "The user sent an image. Looking at it, it is mostly %s." % colours[-1]
        else:
            known = answers.direct_answer(last, prompt)
            answer = known if known is not None else \
                "Hello from the %s engine double (%s). You said: %s" % (
                    "Kimi-K3" if fmt == "k3" else "Kimi-K2.6", self.engine, last.strip()[:200])
            reasoning = "The user wrote a message. I will answer briefly."
        if fmt == "k3" and reasoning:  # K3 thinks as long as reasoning_effort asks
            reasoning += EFFORT_MORE[effort or "high"]
        if garbage:
            answer, reasoning = answers.garbage(), answers.garbage() if reasoning else ""
        if not thinking:
            reasoning = ""
        # token accounting: one word = one token; max_tokens cuts reasoning first, then the answer
        budget = req.get("max_completion_tokens") or req.get("max_tokens")
        r_words, a_words = reasoning.split(), answer.split()
        finish = "tool_calls" if calls else "stop"
        if isinstance(budget, int) and budget < len(r_words) + len(a_words) + 8 * len(calls):
            r_words, a_words = r_words[:budget], a_words[:max(0, budget - len(r_words))]
            reasoning, answer, calls, finish = " ".join(r_words), " ".join(a_words), [], "length"
        reasoning_parser = self.args.get("reasoning_parser")
        if reasoning and not reads(self.engine, fmt, "reasoning", reasoning_parser):
            # no parser, or another model's: the think block stays in the text
            raw = cf.generated(fmt, reasoning, answer, calls)  # all the model wrote
            if fmt == "k2":
                answer, reasoning = "%s%s%s%s" % (cf.K2_THINK_OPEN, reasoning, cf.K2_THINK_CLOSE, answer), ""
            elif calls and tools_parsed:  # K3's tool parser alone unwraps the response channel; the think one is lost
                reasoning = ""
            else:
                answer, reasoning, calls = raw, "", []
            if reasoning_parser in STARTS_IN_REASONING.get(self.engine, ()) and thinking:
                # that parser takes the whole text for reasoning: no close marker of its own ever comes
                answer, reasoning, calls = "", raw, []
            if not calls and finish == "tool_calls":
                finish = "stop"
        # a wrong reasoning parser: the template opened the think block (K2.6's in the prompt, K3's as the generation
        # prefix), so content has the reasoning and the closing marker
        if reasoning and self.env.get("KIMI_DOUBLE_THINK_LEAK") == "1":
            answer, reasoning = "%s%s%s" % (reasoning, cf.FORMATS[fmt]["think"][1], answer), ""
        completion = len(r_words) + len(a_words) + 8 * len(calls)
        usage = {"prompt_tokens": len(prompt.split()) + 256 * len(colours), "completion_tokens": completion}
        usage["total_tokens"] = usage["prompt_tokens"] + completion
        with self.lock:
            reason = "length" if finish == "length" else "stop"  # the engine's reason: a tool call stops
            for counters in (self.counters, self.engines[self.counters["requests"] % len(self.engines)][0]):
                counters["requests"] += 1
                counters["prompt_tokens"] += usage["prompt_tokens"]
                counters["generation_tokens"] += completion
                counters["finished"][reason] = counters["finished"].get(reason, 0) + 1
            spec = self.speculative.observe(completion) if self.speculative else None
            running = self.counters["running"]
        if spec is not None:
            self.log_speculation(spec, running, usage["prompt_tokens"] + completion)
        return 200, {"model": model, "reasoning": reasoning, "content": answer, "tool_calls": calls,
                     "finish": finish, "usage": usage}

    def tool_call(self, tool, index, garbage=False, fmt="k2"):
        """One call of `tool`: its arguments valid, or broken the KIMI_DOUBLE_TOOL_ERROR_RATE share of the time, or
        not JSON once the answers are garbage. Its id: K2's native functions.NAME:N, else the engine's own (vLLM
        make_tool_call_id's random one; SGLang's call_ + hex), as K3's parsers leave the id to the engine."""
        call = self._tool_call(tool, index, garbage)
        if fmt != "k2":
            call["id"] = ("chatcmpl-tool-" if self.engine == "vllm" else "call_") + uuid.uuid4().hex[:24]
        return call

    def _tool_call(self, tool, index, garbage):
        if garbage:
            return answers.tool_call(tool, index, arguments="{{{ the the")
        rate = float(self.env.get("KIMI_DOUBLE_TOOL_ERROR_RATE") or 0)
        with self.lock:
            self.tool_calls += 1
            turn = self.tool_calls
        if int(turn * rate) > int((turn - 1) * rate):
            schema = dict(((tool.get("function") or {}).get("parameters") or {}), type="object")
            return answers.tool_call(tool, index, answers.broken_arguments(schema, int(turn * rate)))
        return answers.tool_call(tool, index)

    def chat_format(self):
        """The format the served checkpoint writes (its config.json: K3's model_type kimi_k3, else K2's)."""
        return cf.checkpoint_format(((self.loaded or {}).get("config")))

    def reasoning_effort(self, req, fmt):
        """(effort, None) or (None, an error answer): reasoning_effort as the engine takes it for this format. K2's
        templates ignore it; K3's renderer maps low/high/max to its thinking effort and none to no thinking."""
        effort = req.get("reasoning_effort")
        if effort is None or fmt != "k3":
            return None, None
        if self.engine == "vllm":
            if effort not in VLLM_REASONING_EFFORTS:  # the request model's Literal: FastAPI's validation answer
                allowed = ", ".join("'%s'" % e for e in VLLM_REASONING_EFFORTS[:-1]) + " or 'max'"
                message = ("1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'reasoning_effort'), "
                           "'msg': \"Input should be %s\", 'input': %r, 'ctx': {'expected': \"%s\"}}"
                           % (allowed, effort, allowed))
                return None, self.error(400, message, "Bad Request", "body.reasoning_effort")
            if effort != "none" and effort not in K3_EFFORTS:
                return None, self.error(400, K3_EFFORT_ERROR % effort, "BadRequestError", "thinking_effort")
            return effort, None
        if self.engine.startswith("sglang"):
            if isinstance(effort, bool) or not (effort in SGLANG_REASONING_EFFORTS or isinstance(effort, (int, float))):
                return None, self.error(400, "1 validation error for ChatCompletionRequest\nreasoning_effort: invalid "
                                        "value %r" % (effort,), "BadRequestError")
            if effort != "none" and effort not in K3_EFFORTS:
                self.log("Kimi K3 does not support reasoning_effort=%r; using the encoder default." % (effort,),
                         "serving_chat.py", level="WARNING")
                return None, None
        return effort, None

    def completion_body(self, plan):
        message = {"role": "assistant", "content": plan["content"] or (None if plan["tool_calls"] else "")}
        if plan["reasoning"]:
            message["reasoning_content"] = plan["reasoning"]
            if self.engine == "vllm":
                message["reasoning"] = plan["reasoning"]  # vLLM >= 0.12 name; reasoning_content kept too
        message["tool_calls"] = list(plan["tool_calls"])
        return dict({"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
                     "model": plan["model"], "choices": [{"index": 0, "message": message, "logprobs": None,
                                                          "finish_reason": plan["finish"]}], "usage": plan["usage"]},
                    **plan.get("extra", {}))  # e.g. vLLM's kv_transfer_params of a prefill

    def stream_chunks(self, plan, include_usage):
        cid, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())

        def chunk(delta, finish=None):
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": plan["model"],
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        yield chunk({"role": "assistant", "content": ""})
        for word in _pieces(plan["reasoning"]):
            delta = {"reasoning_content": word}
            if self.engine == "vllm":
                delta["reasoning"] = word
            yield chunk(delta)
        for word in _pieces(plan["content"]):
            yield chunk({"content": word})
        for index, call in enumerate(plan["tool_calls"]):
            yield chunk({"tool_calls": [dict(call, index=index)]})
        yield chunk({}, plan["finish"])
        if include_usage:
            yield {"id": cid, "object": "chat.completion.chunk", "created": created, "model": plan["model"],
                   "choices": [], "usage": plan["usage"]}


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def _typed(kind, value):
    """A server argument as SGLang's ServerArgs holds it: the int / float options as numbers (`--context-length 256k`
    is human_readable_int), the rest as given (SMG's ServerInfo reads context_length, max_running_requests... as
    numbers, and drops the whole /server_info when one is a string)."""
    if not isinstance(value, str) or kind not in ("int", "float") and not str(kind).endswith("human_readable_int"):
        return value
    try:
        if kind == "float":
            return float(value)
        if kind == "int":
            return int(value)
        mult = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3}.get(value[-1:].lower(), 1)
        return int(float(value[:-1] if mult > 1 else value) * mult)
    except ValueError:
        return value


def _pieces(text):
    words = text.split(" ") if text else []
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _image_colour(url):
    if not url.startswith("data:"):
        raise ValueError("the engine double only reads base64 data: URLs (no network), got %r" % url[:60])
    head, _sep, payload = url.partition(",")
    if ";base64" not in head:
        raise ValueError("data URL is not base64")
    try:
        return png.dominant_colour(base64.b64decode(payload, validate=False))
    except Exception as e:  # any decode problem is a 400, like PIL's "cannot identify image file"
        raise ValueError("cannot identify image file (%s)" % e)


class _Handler(BaseHTTPRequestHandler):
    engine = None  # set per server
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt, *args):  # uvicorn-style access log
        pass

    def _access(self, code):
        line = "INFO:     %s:%d - \"%s %s HTTP/1.1\" %d" % (
            self.client_address[0], self.client_address[1], self.command, self.path, code)
        print(line, file=self.engine.out, flush=True)

    def _send(self, code, body=None, ctype="application/json"):
        data = b"" if body is None else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._access(code)

    def do_GET(self):
        e, path = self.engine, self.path.split("?", 1)[0]
        starting = e.state != "ready"
        if path == "/health" or (path == "/health_generate" and e.engine == "sglang"):
            return self._send(503 if starting else 200)
        if path == "/v1/models":
            return self._send(200, e.models())
        if e.engine == "sglang" and path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info"):
            return self._send(200, e.sglang_info(path.endswith("model_info")))
        if path == "/metrics" and e.engine == "trtllm":  # TRT-LLM: JSON iteration stats
            return self._send(200, e.iteration_stats())
        if path == "/prometheus/metrics" and e.engine == "trtllm" and (e.args.llm_args or {}).get(
                "return_perf_metrics"):
            return self._send(200, e.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        if path == "/metrics" and (e.engine == "vllm" or e.args.flag("enable_metrics")):
            return self._send(200, e.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        if path == "/version" and e.engine in ("vllm", "trtllm"):
            return self._send(200, {"version": flags.version(e.engine)})
        if path == "/v1/chat/completions":
            return self._send(405, {"detail": "Method Not Allowed"})
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        e, path = self.engine, self.path.split("?", 1)[0]
        if path != "/v1/chat/completions":
            return self._send(404 if path not in ("/health", "/v1/models", "/metrics") else 405,
                              {"detail": "Not Found" if path not in ("/health", "/v1/models", "/metrics")
                               else "Method Not Allowed"})
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        except ValueError as exc:
            return self._send(*e.error(400, "JSON decode error: %s" % exc, "BadRequestError"))
        started = time.time()
        with e.lock:
            e.counters["running"] += 1
        try:
            if e.fails_now():
                return self._send(*e.error(500, "EngineCore encountered an issue (KIMI_DOUBLE_ERROR_RATE)",
                                           "InternalServerError"))
            if e.rendezvous and not e.rendezvous.step():  # a replica: every rank takes part (a frozen one stalls it)
                return self._send(*e.error(500, e.rendezvous.lost_message or "a rank went away", "InternalServerError"))
            pd = e.disagg.begin(req, self.headers) if e.disagg else None  # a prefill/decode's part of the request
            if pd and pd.error:
                return self._send(*pd.error)
            code, plan = e.chat(pd.req if pd else req)
            if code != 200:
                return self._send(code, plan)
            if pd:
                e.disagg.end(pd, plan)
            if e.slots:  # KIMI_DOUBLE_SLOTS: wait for a slot (FIFO), hold it while the answer is generated
                e.slots.acquire()
            try:
                self._generate(e, req, plan, started)
            except (BrokenPipeError, ConnectionResetError):  # the client went away: the engine aborts the request
                e.log("Abort request: the client disconnected [engine double]")
            finally:
                if e.slots:
                    e.slots.release()
        finally:
            with e.lock:
                e.counters["running"] -= 1

    def _generate(self, e, req, plan, started):
        """Send the answer, each generated token taking KIMI_DOUBLE_TOKEN_SECONDS (streamed as it goes)."""
        if not req.get("stream"):
            slots.generate(e.token_seconds, plan["usage"]["completion_tokens"])
            first = time.time()  # the whole answer at once: its first token is there when it is made
            self._send(200, e.completion_body(plan))
            return e.record_latency(plan, started, first, time.time())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        first = None
        for i, item in enumerate(e.stream_chunks(plan, include_usage)):
            slots.generate(e.token_seconds, slots.chunk_tokens(item))
            self.wfile.write(("data: %s\n\n" % json.dumps(item)).encode())
            self.wfile.flush()
            if i == 1:  # the chunk after the role chunk carries the first token
                first = time.time()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self._access(200)
        ended = time.time()
        e.record_latency(plan, started, first or ended, ended)
