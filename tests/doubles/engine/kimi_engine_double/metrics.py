"""The engine double's /metrics: the engines' own Prometheus text (names, HELP, labels and latency buckets of the
pinned vLLM, SGLang and TensorRT-LLM versions; README "Metrics" names the source files), written as prometheus_client
writes it."""

# /metrics: the latency histograms' bucket bounds as the pinned versions declare them (README "Metrics" names the
# files). vLLM 0.22.1 and TensorRT-LLM share TTFT and e2e bounds (TRT-LLM's collector was adapted from vLLM's).
_VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
              80.0, 160.0, 640.0, 2560.0]
_VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
_VLLM_E2E = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
             960.0, 1920.0, 7680.0]
LATENCY_BUCKETS = {
    "vllm": {"ttft": _VLLM_TTFT, "itl": _VLLM_ITL, "e2e": _VLLM_E2E},
    "sglang": {"ttft": [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400],
               "itl": [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                       0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000],
               "e2e": [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
                       2400]},
    "trtllm": {"ttft": _VLLM_TTFT, "itl": _VLLM_ITL, "e2e": _VLLM_E2E},  # itl: trtllm_time_per_output_token_seconds
}
VLLM_HISTOGRAMS = {"ttft": ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
                   "itl": ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
                   "e2e": ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.")}
SGLANG_HISTOGRAMS = {
    "ttft": ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    "itl": ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    "e2e": ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds")}
TRTLLM_HISTOGRAMS = {
    "ttft": ("trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    "itl": ("trtllm_time_per_output_token_seconds", "Histogram of time per output token in seconds."),
    "e2e": ("trtllm_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.")}
# Speculative decoding (README "Speculative decoding"): vLLM's counters (v1/spec_decode/metrics.py; per_pos has a
# `position` label "0".."k-1") and SGLang's scheduler gauges (observability/metrics_collector.py).
SPEC_VLLM_COUNTERS = (("drafts", "vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
                      ("draft_tokens", "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
                      ("accepted", "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."))
SPEC_VLLM_PER_POS = ("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.")
SPEC_SGLANG_GAUGES = (("accept_length", "sglang:spec_accept_length",
                       "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)."),
                      ("accept_rate", "sglang:spec_accept_rate",
                       "Speculative acceptance rate (accepted drafts / proposed drafts in batch)."))
VLLM_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vllm/v1/engine FINISH_REASON_STRINGS


def sglang_tokenizer_labels(model_name):
    """The labels of SGLang's tokenizer-side series (counters, latency histograms). The real TokenizerMetricsCollector
    also carries engine_type="unified"; the double leaves it out because test_engine_double.py pins the label set
    `{model_name="..."}` (dashboards and alerts never select on it)."""
    return (("model_name", model_name),)


def knob(env, name, kind):
    """KIMI_DOUBLE_KV_USAGE (kind usage: a float 0..1) / KIMI_DOUBLE_QUEUE (kind queue: an int >= 0); unset or
    empty: 0; None for a bad value."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return 0.0 if kind == "usage" else 0
    try:
        value = float(raw) if kind == "usage" else int(raw)
    except ValueError:
        return None
    if kind == "usage":
        return value if 0.0 <= value <= 1.0 else None
    return value if value >= 0 else None


def go_float(value):
    """prometheus_client's floatToGoString: how a sample value or an `le` bound is written."""
    value = float(value)
    if value == float("inf"):
        return "+Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = ("%s.%s%s" % (text[0], text[1:dot], text[dot + 1:])).rstrip("0.")
        return "%se+0%d" % (mantissa, dot - 1)  # Go switches to exponents sooner than Python
    return text


class Histogram:
    """A Prometheus histogram's state: a count per bucket (cumulated when written), the sum."""

    def __init__(self, bounds):
        self.bounds, self.counts, self.sum = [float(b) for b in bounds], [0] * (len(bounds) + 1), 0.0

    def observe(self, value, times=1, total=None):
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))
        self.counts[index] += times
        self.sum += value * times if total is None else total

    def copy(self):
        other = Histogram([])
        other.bounds, other.counts, other.sum = list(self.bounds), list(self.counts), self.sum
        return other


class Exposition:
    """Prometheus text format 0.0.4 as prometheus_client writes it: `# HELP`/`# TYPE` per family, a counter's family
    named with `_total`, a histogram's cumulative `_bucket{le=...}` (`+Inf` last), `_count` and `_sum`, and a
    `_created` sample after a counter or histogram when the process is not in multiprocess mode (vLLM's one API
    server; SGLang and TensorRT-LLM set PROMETHEUS_MULTIPROC_DIR and have none)."""

    def __init__(self):
        self.lines = []

    @staticmethod
    def _labels(pairs):
        def escape(value):
            return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return "{%s}" % ",".join('%s="%s"' % (k, escape(v)) for k, v in pairs)

    def _family(self, name, doc, kind):
        self.lines += ["# HELP %s %s" % (name, doc), "# TYPE %s %s" % (name, kind)]

    def gauge(self, name, doc, labels, value):
        """One child (labels a tuple of pairs, value a number) or several (lists of each)."""
        self._family(name, doc, "gauge")
        children = list(zip(labels, value)) if isinstance(value, list) else [(labels, value)]
        for pairs, one in children:
            self.lines.append("%s%s %s" % (name, self._labels(pairs), go_float(one)))

    def counter(self, name, doc, labels, values, created=None):
        """One child (labels a tuple of pairs, values a number) or several (lists of each)."""
        self._family(name + "_total", doc, "counter")
        children = list(zip(labels, values)) if isinstance(values, list) else [(labels, values)]
        for pairs, value in children:
            self.lines.append("%s_total%s %s" % (name, self._labels(pairs), go_float(value)))
            if created is not None:
                self.lines.append("%s_created%s %s" % (name, self._labels(pairs), go_float(created)))

    def histogram(self, name, doc, labels, hist, created=None):
        """One child (labels a tuple of pairs, hist a Histogram) or several (lists of each)."""
        self._family(name, doc, "histogram")
        for pairs, one in (list(zip(labels, hist)) if isinstance(hist, list) else [(labels, hist)]):
            total = 0
            for bound, count in zip(one.bounds + [float("inf")], one.counts):
                total += count
                self.lines.append("%s_bucket%s %s" % (name, self._labels(pairs + (("le", go_float(bound)),)),
                                                      go_float(total)))
            self.lines.append("%s_count%s %s" % (name, self._labels(pairs), go_float(total)))
            self.lines.append("%s_sum%s %s" % (name, self._labels(pairs), go_float(one.sum)))
            if created is not None:
                self.lines.append("%s_created%s %s" % (name, self._labels(pairs), go_float(created)))

    def text(self):
        return "".join(line + "\n" for line in self.lines)


def offload_tier(engine, args):
    """Whether the double was started with the engine's KV host tier (kimi.deploy's kimi_kv_offload host): vLLM's
    --kv-offloading-size, SGLang's --enable-hierarchical-cache, TensorRT-LLM's kv_cache_config.host_cache_size."""
    if engine == "vllm":
        return bool(args.get("kv_offloading_size"))
    if engine == "sglang":
        return bool(args.get("enable_hierarchical_cache"))
    return bool(((args.llm_args or {}).get("kv_cache_config") or {}).get("host_cache_size"))


def render(engine, name, c, hist, queue, usage, created, iter_stats, spec=None, offload=False, engines=None):
    """The engine's own Prometheus text for a snapshot of the double's state: c its counters, hist its latency
    histograms, queue and usage the KIMI_DOUBLE_QUEUE and KIMI_DOUBLE_KV_USAGE gauges, created the start time (vLLM's
    _created samples), iter_stats whether TensorRT-LLM's iteration stats are on (its gauges come from them), spec the
    speculative-decoding state (speculative.Speculative.snapshot) or None, offload whether the KV host tier is on (its
    hit series: the double caches nothing, so every prompt token is a miss), engines vLLM's data-parallel engines on
    this server ([(counters, histograms)] per engine index, --data-parallel-size: one child each, as its logger makes
    one per engine; None: one engine, c and hist)."""
    out = Exposition()
    if engine == "vllm":  # vllm/v1/metrics/loggers.py (PrometheusStatLogger): one child per engine index
        engines = engines or [(c, hist)]
        labels = (("model_name", name), ("engine", "0"))
        each = [(("model_name", name), ("engine", str(i))) for i in range(len(engines))]
        # the running requests spread over the engines as the front end's balancer spreads them; the queue knob on
        # the first (a drain sums every child)
        running = [c["running"] // len(engines) + (1 if i < c["running"] % len(engines) else 0)
                   for i in range(len(engines))]
        out.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", each, running)
        out.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", each,
                  [queue] + [0] * (len(engines) - 1))
        out.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", each,
                  [usage] * len(engines))
        out.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", each,
                    [e["prompt_tokens"] for e, _hist in engines], created)
        out.counter("vllm:generation_tokens", "Number of generation tokens processed.", each,
                    [e["generation_tokens"] for e, _hist in engines], created)
        out.counter("vllm:request_success", "Count of successfully processed requests.",
                    [pairs + (("finished_reason", r),) for pairs in each for r in VLLM_FINISH_REASONS],
                    [e["finished"].get(r, 0) for e, _hist in engines for r in VLLM_FINISH_REASONS], created)
        for kind, (metric, doc) in VLLM_HISTOGRAMS.items():
            out.histogram(metric, doc, each, [h[kind] for _c, h in engines], created)
        if offload:  # v1/metrics/loggers.py: the KV connector's prefix-cache counters, in tokens
            out.counter("vllm:external_prefix_cache_queries",
                        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of "
                        "number of queried tokens.", each, [e["prompt_tokens"] for e, _hist in engines], created)
            out.counter("vllm:external_prefix_cache_hits",
                        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
                        "number of cached tokens.", each, [0] * len(engines), created)
        if spec:  # v1/spec_decode/metrics.py SpecDecodingProm: only with a speculative config, children made at start
            stats = spec["stats"]
            for key, metric, doc in SPEC_VLLM_COUNTERS:
                out.counter(metric, doc, labels, stats[key], created)
            metric, doc = SPEC_VLLM_PER_POS
            out.counter(metric, doc, [labels + (("position", str(pos)),) for pos in range(len(stats["per_pos"]))],
                        list(stats["per_pos"]), created)
        return out.text()
    if engine == "sglang":  # sglang/srt/observability/metrics_collector.py, prometheus_client multiprocess
        # (labels sorted, no _created); the scheduler's gauges (its TP0 rank), the tokenizer's counters and
        # histograms, those only once a request finished (a child is made at its first observation).
        sched = (("engine_type", "unified"), ("model_name", name), ("moe_ep_rank", "0"), ("pp_rank", "0"),
                 ("tp_rank", "0"))
        out.gauge("sglang:num_running_reqs", "The number of running requests.", sched, c["running"])
        out.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched, queue)
        out.gauge("sglang:token_usage", "The token usage.", sched, usage)
        if spec and spec["gauges"]:  # the scheduler's, set at each decode log interval (here: each answer)
            for key, metric, doc in SPEC_SGLANG_GAUGES:
                out.gauge(metric, doc, sched, spec["gauges"][key])
        if c["requests"]:
            tok = sglang_tokenizer_labels(name)
            out.counter("sglang:prompt_tokens", "Number of prefill tokens processed.", tok, c["prompt_tokens"])
            out.counter("sglang:generation_tokens", "Number of generation tokens processed.", tok,
                        c["generation_tokens"])
            out.counter("sglang:num_requests", "Number of requests processed.", tok, c["requests"])
            if offload:  # the cached prompt tokens by where they were found (device, host: the hierarchical cache)
                out.counter("sglang:cached_tokens", "Number of cached prompt tokens.",
                            [tok + (("cache_source", source),) for source in ("device", "host")], [0, 0])
            for kind, (metric, doc) in SGLANG_HISTOGRAMS.items():
                out.histogram(metric, doc, tok, hist[kind])
        return out.text()
    # TensorRT-LLM: tensorrt_llm/metrics/collector.py (MetricsCollector, labels model_name and engine_type both
    # "undefined" as openai_server.py sets them; multiprocess). The gauges come from the iteration stats, only
    # with enable_iter_perf_stats; the per-request series once a request finished.
    labels = (("engine_type", "undefined"), ("model_name", "undefined"))
    if iter_stats:
        out.gauge("trtllm_num_requests_running", "Number of active requests", labels, c["running"])
        out.gauge("trtllm_num_requests_waiting", "Number of queued requests", labels, queue)
        out.gauge("trtllm_kv_cache_utilization", "KV cache utilization", labels, usage)
        if offload:  # the block-reuse hit rate over every tier (the double: kept to the host tier's runs)
            out.gauge("trtllm_kv_cache_hit_rate", "KV cache hit rate", labels, 0.0)
    if c["requests"]:
        reasons = sorted(c["finished"])
        out.counter("trtllm_request_success", "Count of successfully processed requests.",
                    [(labels[0], ("finished_reason", r), labels[1]) for r in reasons],
                    [c["finished"][r] for r in reasons])
        out.counter("trtllm_prompt_tokens", "Cumulative number of prompt (input) tokens processed.", labels,
                    c["prompt_tokens"])
        out.counter("trtllm_generation_tokens", "Cumulative number of generation (output) tokens produced.",
                    labels, c["generation_tokens"])
        for kind, (metric, doc) in TRTLLM_HISTOGRAMS.items():
            out.histogram(metric, doc, labels, hist[kind])
    return out.text()
