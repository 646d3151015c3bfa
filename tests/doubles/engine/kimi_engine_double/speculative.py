"""Speculative decoding in the engine double: the flags in their valid forms only, the draft loaded from the offline
Hugging Face cache like the target (and checked against it), and the acceptance metrics with the engines' own names.

Sources (README "Speculative decoding"):
- SGLang 0.5.12.post1 `sglang/srt/server_args.py` (PyPI wheel; 0.5.23 alike): `--speculative-algorithm` values (checked
  by flags.startup_problems from the JSON's valid_values), DFLASH without a draft path raises (lines 3600-3603), topk 1
  forces num_draft_tokens = num_steps + 1 with a warning (3828-3835), pipeline parallel asserts (7250-7253);
  `observability/metrics_collector.py`: the gauges sglang:spec_accept_length / sglang:spec_accept_rate.
- vLLM 0.22.1 / 0.33.0 `vllm/config/speculative.py` (SpeculativeConfig, a pydantic dataclass, extra keys forbidden),
  `vllm/utils/argparse_utils.py` (the dotted --speculative-config.key form), `v1/worker/gpu/model_runner.py`
  (EAGLE3 and pipeline parallel), `v1/spec_decode/metrics.py` (the counters and the "SpecDecoding metrics" line).
"""
import json
import re
import time

from . import flags, hfcache

ACCEPT_RATE = 0.6  # the double's fixed share of drafted tokens accepted (deterministic metrics)

# ---- vLLM -------------------------------------------------------------------------------------------------
# The keys of SpeculativeConfig the double takes (a real key outside these is refused too: the double is stricter).
VLLM_KEYS = ("method", "model", "num_speculative_tokens", "revision", "prompt_lookup_max", "prompt_lookup_min",
             "draft_tensor_parallel_size", "quantization", "code_revision")
VLLM_DRAFTLESS = ("ngram", "ngram_gpu", "suffix", "extract_hidden_states", "custom_class")
VLLM_AUX_HIDDEN = ("eagle3", "dflash")  # they read the target's aux hidden states: no pipeline parallel
# The metric names and HELP texts are in metrics.py (SPEC_VLLM_*, SPEC_SGLANG_GAUGES).
# ---- SGLang -----------------------------------------------------------------------------------------------
SGLANG_EAGLE = ("EAGLE", "EAGLE3", "STANDALONE")
SGLANG_PP_ASSERT = ("AssertionError: Pipeline parallelism is not compatible with overlap schedule, speculative "
                    "decoding")
SGLANG_TOPK1_WARNING = ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                        "speculative_eagle_topk == 1")
_SHA = re.compile(r"^[0-9a-f]{40}$")


class Problem(Exception):
    """A speculative-decoding setting the real engine refuses: exit 1 with this message."""


def _first(args, dests, default=None):
    for dest in dests:
        if args.get(dest) is not None:
            return args.get(dest)
    return default


def _whole(value):
    """An int from an int or a string of digits (pydantic's lax mode), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r"^[-+]?\d+$", value.strip()):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _literal(values):
    shown = ["%r" % v for v in values]
    return shown[0] if len(shown) == 1 else "%s or %s" % (", ".join(shown[:-1]), shown[-1])


def _pydantic(errors, title="SpeculativeConfig"):
    """pydantic_core's ValidationError text: `N validation error(s) for T`, then per error its location line (none for
    a model-level ValueError) and the indented message."""
    lines = ["pydantic_core._pydantic_core.ValidationError: %d validation error%s for %s"
             % (len(errors), "" if len(errors) == 1 else "s", title)]
    for loc, msg, kind, value in errors:
        if loc:
            lines.append(loc)
        lines.append("  %s [type=%s, input_value=%r, input_type=%s]" % (msg, kind, value, type(value).__name__))
    return "\n".join(lines)


def _value_error(msg, conf):
    return _pydantic([(None, "Value error, " + msg, "value_error", conf)]).replace(
        "input_value=%r, input_type=dict" % (conf,), "input_value=ArgsKwargs((), %r), input_type=ArgsKwargs" % (conf,))


def _tensor_parallel(args):
    return _whole(_first(args, ("tensor_parallel_size", "tp_size"), 1)) or 1


def _pipeline_parallel(args):
    return _whole(_first(args, ("pipeline_parallel_size", "pp_size"), 1)) or 1


def vllm_methods(table):
    """The `method`s this vLLM version accepts: --spec-method's choices (0.22.1, 0.33.0), else the valid_values that
    the flag list gives --speculative-config (0.20.2); () when the list names none (then any is taken)."""
    options = table["options"]
    spec_method = options.get("--spec-method") or {}
    if spec_method.get("choices"):
        return tuple(c for c in spec_method["choices"] if c != "None")
    return tuple((options.get("--speculative-config") or {}).get("valid_values") or ())


def _vllm_config(args, table):
    """The --speculative-config dict, with the --spec-method / --spec-model / --spec-tokens shorthands (0.22.1+) over
    it; None when speculation is off."""
    raw = args.get("speculative_config")
    conf = json.loads(raw) if isinstance(raw, str) else raw
    short = {"method": args.get("spec_method"), "model": args.get("spec_model"),
             "num_speculative_tokens": args.get("spec_tokens")}
    short = {k: v for k, v in short.items() if v not in (None, "None")}
    if conf is None and not short:
        return None
    if conf is None:
        conf = {}
    if not isinstance(conf, dict):
        raise Problem("TypeError: vllm.config.speculative.SpeculativeConfig() argument after ** must be a mapping, "
                      "not %s" % type(conf).__name__)
    return dict(conf, **short)


class Speculative:
    """One engine's speculative decoding: its settings (configure), the draft (load_draft), and what it accepted
    (observe, snapshot for /metrics)."""

    def __init__(self, engine, method, draft, revision, tokens, describe):
        self.engine, self.method, self.draft, self.revision = engine, method, draft, revision
        self.tokens = tokens  # vLLM: num_speculative_tokens (k); SGLang: num_draft_tokens (verified per forward)
        self.describe = describe  # the knobs, for the start-up line
        self.draft_arch = None  # the architecture family the draft must be (eagle3, dflash) or None
        self.draft_from_target = False  # SGLang EAGLE3 without a draft path: the target's path is used
        self.snapshot_sha = None
        self.stats = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * (tokens or 0)}
        self.gauges = None  # SGLang: the last interval's accept_length and accept_rate
        self.interval = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * (tokens or 0),
                         "since": time.monotonic()}

    # ---- start-up ---------------------------------------------------------------------------------------
    def load_draft(self, target_model, target_config, env, log, proc="EngineCore_DP0"):
        """Resolve the draft in the offline cache like the target, read it, and check it fits the target: its hidden
        size and vocabulary (else the weight-loading shape error a real engine dies with), its architecture. Raises
        Problem."""
        if not self.draft:
            return None
        t0 = time.time()
        if self.engine == "vllm":
            log("Loading drafter model...", "gpu_model_runner.py", proc=proc)
        else:
            log("Load draft model weights begin: %s (revision %s)" % (self.draft, self.revision or "main"))
        try:
            loaded = hfcache.load(self.draft, self.revision, env)
        except hfcache.LoadError as e:
            text = str(e)
            raise Problem(text[:-1] + "; it is the speculative draft]" if text.endswith("]")
                          else "%s [engine double: the speculative draft %s]" % (text, self.draft))
        problem = draft_mismatch(target_model, target_config, self.draft, loaded, self.draft_arch,
                                 self.draft_from_target)
        if problem:
            raise Problem(problem)
        snapshot = loaded["snapshot"]
        sha = snapshot.rstrip("/").rsplit("/", 1)[-1]
        self.snapshot_sha = sha if _SHA.match(sha) else None
        if self.engine == "sglang" and self.method == "DFLASH" and self.tokens is None:
            self.tokens = int(loaded["config"].get("block_size") or 16)  # the draft's block is verified per forward
            self.describe = "num_steps=1, eagle_topk=1, num_draft_tokens=%d (the draft's block_size)" % self.tokens
        log("Loading weights took %.2f seconds: %d files, %d bytes read from %s (draft)" % (
            time.time() - t0, loaded["files"], loaded["bytes"], snapshot),
            "default_loader.py", proc=proc)
        return loaded

    def start_line(self):
        if self.draft:
            draft = " with draft %s@%s" % (self.draft, (self.snapshot_sha or self.revision or "local")[:12])
        elif self.method in ("EAGLE", "FROZEN_KV_MTP", "mtp"):
            draft = " with the target's own MTP layers"
        else:
            draft = " (no draft model)"
        return "Speculative decoding: %s%s (%s) [engine double]" % (self.method, draft, self.describe)

    # ---- serving ----------------------------------------------------------------------------------------
    def observe(self, generated):
        """Account one answered request of `generated` tokens, deterministically (ACCEPT_RATE of the drafted tokens
        accepted). Returns what to log: vLLM's SpecDecoding metrics line, or SGLang's (accept_length, accept_rate)."""
        if self.engine == "vllm":
            k = self.tokens
            drafts = max(1, generated // (k + 1))
            draft_tokens = drafts * k
            accepted = int(round(ACCEPT_RATE * draft_tokens))
            per_pos, left = [], accepted
            for _pos in range(k):  # the accepted tokens fill the first positions of the drafts
                per_pos.append(min(drafts, left))
                left -= per_pos[-1]
            for bucket in (self.stats, self.interval):
                bucket["drafts"] += drafts
                bucket["draft_tokens"] += draft_tokens
                bucket["accepted"] += accepted
                bucket["per_pos"] = [a + b for a, b in zip(bucket["per_pos"], per_pos)]
            return self._vllm_log_line()
        verified = self.tokens or 2  # tokens verified per forward (drafts + the bonus one)
        forwards = max(1, generated // verified)
        proposed = forwards * (verified - 1)
        accepted = int(round(ACCEPT_RATE * proposed))
        self.stats["drafts"] += forwards
        self.stats["draft_tokens"] += proposed
        self.stats["accepted"] += accepted
        self.gauges = {"accept_length": 1.0 + accepted / float(forwards),
                       "accept_rate": accepted / float(proposed) if proposed else 0.0}
        return dict(self.gauges)

    def _vllm_log_line(self):
        """vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log over the interval since the last line."""
        iv = self.interval
        elapsed = max(time.monotonic() - iv["since"], 1e-6)
        drafts, drafted, accepted = iv["drafts"], iv["draft_tokens"], iv["accepted"]
        rates = ", ".join("%.3f" % (p / float(drafts)) for p in iv["per_pos"])
        line = ("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, Drafted "
                "throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, "
                "Avg Draft acceptance rate: %.1f%%" % (
                    1 + accepted / float(drafts), accepted / elapsed, drafted / elapsed, accepted, drafted, rates,
                    accepted / float(drafted) * 100 if drafted else float("nan")))
        self.interval = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * self.tokens,
                         "since": time.monotonic()}
        return line

    def snapshot(self):
        """What /metrics writes (metrics.render's `spec`)."""
        return {"engine": self.engine, "tokens": self.tokens, "stats": dict(self.stats, per_pos=list(
            self.stats["per_pos"])), "gauges": dict(self.gauges) if self.gauges else None}


def configure(engine, args, model, env=None, table=None):
    """The engine's speculative settings from its arguments, or None when speculation is off. Returns (Speculative,
    [(message, level)] to log). Raises Problem for what the real engine refuses at start-up."""
    if engine == "vllm":
        return _configure_vllm(args, model, table or flags.load_flags("vllm"))
    if engine == "sglang":
        return _configure_sglang(args, model)
    return None, []


def _configure_sglang(args, model):
    algo = args.get("speculative_algorithm")
    if not algo:
        return None, []
    algo = str(algo).upper()  # SpeculativeAlgorithm.from_string (values checked against valid_values before)
    notes = []
    if algo == "NEXTN":
        algo = "EAGLE"  # NEXTN is rewritten to EAGLE
    if _pipeline_parallel(args) > 1:  # server_args.py 7250-7253 (0.5.12.post1)
        raise Problem(SGLANG_PP_ASSERT)
    draft = args.get("speculative_draft_model_path")
    revision = args.get("speculative_draft_model_revision")
    if algo == "DFLASH" and not draft:  # server_args.py 3600-3603
        raise Problem("ValueError: DFLASH requires --speculative-draft-model-path.")

    def number(dest):
        value = args.get(dest)
        if value is None:
            return None
        whole = _whole(value)
        if whole is None:
            raise Problem("argument --%s: invalid int value: %r" % (dest.replace("_", "-"), value))
        return whole
    dests = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    steps, topk, verified = (number(d) for d in dests)
    from_target = False
    if algo in SGLANG_EAGLE:
        if algo != "EAGLE" and not draft:
            # The real one silently loads the target's path as the draft; the double says so, then fails at the
            # draft's load (Kimi-K2.6's config is not an EAGLE-3 draft).
            notes.append(("speculative_draft_model_path is not set: %s uses the target's model path %s as the "
                          "draft [engine double: the real one does this silently]" % (algo, model), "WARNING"))
            draft, revision, from_target = model, args.get("revision"), True
        if steps is None and topk is None and verified is None:  # _auto_choose_speculative_params
            steps, topk, verified = 3, 1, 4
            notes.append(("Auto choose speculative_num_steps=3, speculative_eagle_topk=1, "
                          "speculative_num_draft_tokens=4 (DeepSeek-like target)", "INFO"))
        steps = 3 if steps is None else steps
        topk = 1 if topk is None else topk
        verified = steps + 1 if verified is None else verified
        if topk == 1 and verified != steps + 1:  # server_args.py 3828-3835
            notes.append((SGLANG_TOPK1_WARNING, "WARNING"))
            verified = steps + 1
        describe = "num_steps=%d, eagle_topk=%d, num_draft_tokens=%d" % (steps, topk, verified)
    elif algo == "DFLASH":
        describe = "num_steps=1, eagle_topk=1, num_draft_tokens=%s" % (verified or "the draft's block_size")
    else:  # NGRAM, FROZEN_KV_MTP, ...: the target drafts (n-grams of the prompt, or its own layers)
        verified = verified or (12 if algo == "NGRAM" else 4)
        describe = "num_draft_tokens=%d" % verified
        draft = draft if algo != "NGRAM" else None
    spec = Speculative("sglang", algo, draft, revision, verified, describe)
    spec.draft_arch = {"EAGLE3": "eagle3", "DFLASH": "dflash"}.get(algo)
    spec.draft_from_target = from_target
    return spec, notes


def _configure_vllm(args, model, table):
    conf = _vllm_config(args, table)
    if conf is None:
        return None, []
    if "tensor_parallel_size" in conf:  # SpeculativeConfig._verify_args
        raise Problem(_value_error("'tensor_parallel_size' is not a valid argument in the speculative_config. Please "
                                   "pass 'draft_tensor_parallel_size' instead.", conf))
    errors = []
    for key in conf:
        if key not in VLLM_KEYS:
            errors.append((key, "Unexpected keyword argument", "unexpected_keyword_argument", conf[key]))
    methods = vllm_methods(table)
    method = conf.get("method")
    if method is not None and methods and method not in methods:
        errors.append(("method", "Input should be %s" % _literal(methods), "literal_error", method))
    ints = {}
    for key in ("num_speculative_tokens", "draft_tensor_parallel_size", "prompt_lookup_max", "prompt_lookup_min"):
        if conf.get(key) is None:
            continue
        value = _whole(conf[key])
        if value is None:
            errors.append((key, "Input should be a valid integer%s" % (
                ", unable to parse string as an integer" if isinstance(conf[key], str) else ""),
                "int_parsing" if isinstance(conf[key], str) else "int_type", conf[key]))
        elif value < 1 and key == "num_speculative_tokens":  # Field(gt=0)
            errors.append((key, "Input should be greater than 0", "greater_than", value))
        elif value < 1:  # Field(ge=1)
            errors.append((key, "Input should be greater than or equal to 1", "greater_than_equal", value))
        else:
            ints[key] = value
    for key in ("model", "revision", "quantization", "code_revision"):
        if conf.get(key) is not None and not isinstance(conf[key], str):
            errors.append((key, "Input should be a valid string", "string_type", conf[key]))
    if errors:
        raise Problem(_pydantic(errors))
    notes = []
    draft, k = conf.get("model"), ints.get("num_speculative_tokens")
    # SpeculativeConfig.__post_init__
    if method is None:
        method = "ngram" if draft in ("ngram", "[ngram]") else (
            "custom_class" if draft and "/" not in draft and re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$", draft)
            else "draft_model")
    if method.endswith("_mtp"):
        notes.append(("method `%s` is deprecated and replaced with mtp." % method, "WARNING"))
        method = "mtp"
    if draft is None and k is not None:
        if method == "mtp":
            draft = model  # the target's own MTP layers: nothing more to load
        elif method in VLLM_DRAFTLESS:
            draft = method
        else:
            raise Problem(_value_error("num_speculative_tokens was provided but without speculative model.", conf))
    if method in ("ngram", "ngram_gpu"):
        low, high = ints.get("prompt_lookup_min"), ints.get("prompt_lookup_max")
        low, high = (5, 5) if low is None and high is None else (low or high, high or low)
        if low > high:
            raise Problem(_value_error("prompt_lookup_min=%d must be <= prompt_lookup_max=%d" % (low, high), conf))
        describe = "prompt_lookup_min=%d, prompt_lookup_max=%d" % (low, high)
    else:
        describe = ""
    loads_draft = draft is not None and method not in VLLM_DRAFTLESS and method != "mtp"
    if loads_draft:
        draft_tp = ints.get("draft_tensor_parallel_size")
        if draft_tp is not None and draft_tp not in (1, _tensor_parallel(args)):
            raise Problem(_value_error("speculative_draft_tensor_parallel_size=%d cannot be other value than 1 or "
                                       "target model tensor_parallel_size" % draft_tp, conf))
    if k is None:
        raise Problem(_value_error("num_speculative_tokens must be provided with speculative model unless the draft "
                                   "model config contains an n_predict parameter.", conf))
    if method in VLLM_AUX_HIDDEN and _pipeline_parallel(args) > 1:  # v1/worker/gpu/model_runner.py
        raise Problem("ValueError: EAGLE3 with pipeline parallel is not supported.%s" % (
            " [engine double: method dflash reads the target's aux hidden states too]" if method == "dflash" else ""))
    spec = Speculative("vllm", method, draft if loads_draft else None, conf.get("revision"), k,
                       ", ".join(x for x in ("num_speculative_tokens=%d" % k, describe) if x))
    spec.draft_arch = method if method in ("eagle3", "dflash") else None
    notes.append(("Initializing a V1 LLM engine (v%s) with config: model=%r, speculative_config=SpeculativeConfig("
                  "method=%r, model=%r, num_spec_tokens=%d) [engine double: the speculative part]" % (
                      flags.version("vllm"), model, method, draft if method not in VLLM_DRAFTLESS else None, k),
                  "INFO"))
    return spec, notes


def _hidden_and_vocab(config):
    text = config.get("text_config") or {}
    return (text.get("hidden_size") or config.get("hidden_size"), text.get("vocab_size") or config.get("vocab_size"))


def draft_mismatch(target_model, target_config, draft, loaded, arch, from_target=False):
    """Why the draft cannot serve with the target, in the words of the real failure, or None: its architecture (an
    EAGLE-3 / DFlash draft), its hidden size (its config's target_hidden_size, else hidden_size) and vocab_size against
    the target's text_config (else top-level) values. A target without them is not compared."""
    config = loaded["config"]
    where = "%s@%s" % (draft, loaded["snapshot"].rstrip("/").rsplit("/", 1)[-1][:12])
    archs = config.get("architectures") or []
    if arch and not (any(arch in a.lower() for a in archs) or (arch == "eagle3" and "eagle_config" in config)):
        return ("ValueError: the speculative draft %s is not an %s draft: its config.json has architectures %s "
                "(expected e.g. %s)%s" % (
                    where, arch.upper(), archs, "['LlamaForCausalLMEagle3']" if arch == "eagle3"
                    else "['DFlashDraftModel']", " [engine double: --speculative-draft-model-path is unset, so the "
                    "target's path was loaded as the draft]" if from_target else ""))
    t_hidden, t_vocab = _hidden_and_vocab(target_config or {})
    d_hidden = config.get("target_hidden_size") or config.get("hidden_size")
    d_vocab = config.get("vocab_size")
    layers = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or \
        config.get("target_layer_ids") or [0, 0, 0]
    cls = archs[0] if archs else "DraftModel"
    if t_hidden and d_hidden and int(d_hidden) != int(t_hidden):
        own = config.get("hidden_size") or d_hidden
        return ("RuntimeError: Error(s) in loading state_dict for %s: size mismatch for fc.weight: copying a param "
                "with shape torch.Size([%d, %d]) from checkpoint, the shape in current model is torch.Size([%d, %d]). "
                "[engine double: the draft %s has hidden size %d, the target %s has %d]" % (
                    cls, own, len(layers) * int(d_hidden), own, len(layers) * int(t_hidden), where, int(d_hidden),
                    target_model, int(t_hidden)))
    if t_vocab and d_vocab and int(d_vocab) != int(t_vocab):
        own = int(config.get("hidden_size") or d_hidden or 0)
        return ("RuntimeError: Error(s) in loading state_dict for %s: size mismatch for embed_tokens.weight: copying "
                "a param with shape torch.Size([%d, %d]) from checkpoint, the shape in current model is "
                "torch.Size([%d, %d]). [engine double: the draft %s has vocab_size %d, the target %s has %d]" % (
                    cls, int(d_vocab), own, int(t_vocab), own, where, int(d_vocab), target_model, int(t_vocab)))
    return None
