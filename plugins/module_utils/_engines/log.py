# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the engines' logs say, as data: the one place in kimi.deploy that knows engine log lines.

- READY_LINES: the line each engine prints once it serves (the runbook's readiness signal);
- is_progress / short: lines worth showing while a ~595 GB model loads (weight shards, "Loading weights took",
  KV cache, CUDA graph capture, ...), shortened to one display line;
- KNOWN_FAILURES and diagnose(): the runbook's start-up failures, each mapped to its cause and the fix (in terms of
  the collection's variables);
- COMPILE_LINES and compile_phase(): the kernel compile phase (compiling, compiled, or found in the cache);
- moe_dispatch(): which NVFP4 MoE path vLLM dispatched (native FP4 vs the Marlin fallback), read from its log the
  way the runbook's assert-native step does;
- systemd's own lines about an automatic restart of the unit;
- LogWatch: the same, fed incrementally from a journal (kimi.deploy.serve_ready).

The line shapes are the real engines' (vLLM 0.22.1, SGLang 0.5.12.post1, TensorRT-LLM's uvicorn lines and its Bus error
of seed 003, NCCL, Triton, huggingface_hub); the engine
double (tests/doubles/engine) prints the same ones.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import re

ENGINES = ("sglang", "trtllm", "vllm")

# The readiness lines (runbook step 5). vLLM's comes from uvicorn: "(APIServer pid=1) INFO:     Application startup
# complete." SGLang's: "[2026-06-11 10:12:31] The server is fired up and ready to roll!"
READY_LINES = {
    "sglang": ("The server is fired up and ready to roll!",),
    "vllm": ("Application startup complete.",),
    # trtllm-serve runs uvicorn too (seed 003: "INFO:     Application startup complete.", then GET /health is 200).
    "trtllm": ("Application startup complete.",),
}

# Lines worth showing while the engine loads: real shapes, e.g.
#   Loading safetensors checkpoint shards:  45% Completed | 29/64 [02:10<02:50,  4.50s/it]
#   (Worker_TP0 pid=212) INFO 06-11 10:12:00 [default_loader.py:267] Loading weights took 612.34 seconds
#   [2026-06-11 10:02:00 TP0] Load weight begin. avail mem=94.50 GB
#   (Worker_TP0 pid=212) INFO 06-11 10:12:40 [gpu_model_runner.py:2653] Model loading took 71.47 GiB and 640.1 seconds
#   [2026-06-11 10:13:00 TP0] KV Cache is allocated. #tokens: 232000, KV size: 8.21 GB
#   (EngineCore_DP0 pid=90) INFO 06-11 10:13:10 [kv_cache_utils.py:1087] GPU KV cache size: 232,032 tokens
#   [2026-06-11 10:13:20 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=6.1 GB
#   Capturing batches (bs=160 avail_mem=5.13 GB):  45%|####5     | 10/22 [00:05<00:06,  1.90it/s]
#   Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 45%|####5     | 30/67 [00:09<00:11,  3.21it/s]
#   (Worker_TP0 pid=212) INFO 06-11 10:14:02 [gpu_model_runner.py:3480] Graph capturing finished in 25 secs, took 1.2 GiB
#   (EngineCore_DP0 pid=90) INFO 06-11 10:14:03 [core.py:210] init engine (profile, create kv cache, warmup model) took 80.1 seconds
PROGRESS_RE = re.compile(
    r"Loading (?:safetensors checkpoint shards|weights|model)"
    r"|Load weight (?:begin|end)"
    r"|Starting to load model"
    r"|Model loading took"
    r"|KV Cache is allocated|GPU KV cache size|Maximum concurrency for"
    r"|Capture cuda graph (?:begin|end)|Capturing (?:batches|CUDA graphs)|Graph capturing finished"
    r"|torch\.compile takes|Compiling a graph"
    r"|init engine \(profile"
    r"|Uvicorn running on|Starting vLLM API server|Waiting for application startup"
    r"|End of prefill warmup|Waiting for (?:the )?GPUs|GPUs (?:are )?free",
    re.IGNORECASE)

# The compile phase (kernel caches, issue 39): the lines each engine logs when it compiles or autotunes kernels at
# start-up, and when it found them in its cache instead. readiness reports the phase (compiling, compiled, cached).
#   vLLM compilation/backends.py: "Using cache directory: <VLLM_CACHE_ROOT>/torch_compile_cache/<hash>/rank_0_0 for
#   vLLM's torch.compile", "Compiling a graph for dynamic shape takes 41.20 s" (a miss) or "Directly load the compiled
#   graph(s) for dynamic shape from the cache, took 3.012 s" (a hit); compilation/monitor.py: "torch.compile takes
#   45.30 s in total".
#   SGLang deep_gemm_wrapper/compile_utils.py: "Entering DeepGEMM JIT Pre-Compile session. It may take a long time
#   (typically 10-20 mins) ..." (a miss, logged by the first rank of the node); a hit logs nothing of its own.
#   FlashInfer's autotuner (TensorRT-LLM's PyTorch backend, vLLM's FlashInfer MoE): "[Autotuner]: Autotuning process
#   starts ..." / "[Autotuner]: Autotuning process ends".
# "[engine double]" lines are the engine double's own (it says when it found its cache).
COMPILE_LINES = {
    "vllm": {"compiling": r"Compiling a graph for dynamic shape|\[Autotuner\]: Autotuning process starts",
             "compiled": r"torch\.compile takes [0-9.]+ s in total|\[Autotuner\]: Autotuning process ends",
             "cached": r"Directly load the compiled graph\(s\)|kernel cache found \[engine double\]"},
    "sglang": {"compiling": r"Entering DeepGEMM JIT Pre-Compile session",
               "compiled": r"DeepGEMM JIT kernels compiled \[engine double\]",
               "cached": r"kernel cache found \[engine double\]"},
    "trtllm": {"compiling": r"\[Autotuner\]: Autotuning process starts",
               "compiled": r"\[Autotuner\]: Autotuning process ends",
               "cached": r"kernel cache found \[engine double\]"},
}
_COMPILE_RES = dict((engine, tuple((phase, re.compile(pattern)) for phase, pattern in sorted(phases.items())))
                    for engine, phases in COMPILE_LINES.items())


def compile_phase(engine, line):
    """"compiling", "compiled" or "cached" when the line marks that phase of the engine's kernel compile, else None."""
    for phase, regex in _COMPILE_RES[engine]:
        if regex.search(line):
            return phase
    return None


# Log prefixes a display line can do without: vLLM "(Worker_TP0 pid=212) INFO 06-11 10:12:00 [file.py:267] ",
# SGLang "[2026-06-11 10:12:00 TP0] " / "[2026-06-11 10:12:00] ".
_PROCESS_PREFIX = re.compile(r"^\([A-Za-z0-9_]+ pid=\d+\) ")
_VLLM_PREFIX = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ")
_SGLANG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[^\]]*)?\] ")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Failure(object):
    """One known start-up failure: a regex over log lines, what it means and what fixes it."""

    def __init__(self, name, pattern, cause, fix, generic=False):
        self.name = name
        self.regex = re.compile(pattern)
        self.cause = cause
        self.fix = fix
        self.generic = generic  # only reported when nothing more specific matched (its root cause is "above")


# Ordered: most specific first. diagnose() reports them in this order, so its first entry is the likeliest cause.
KNOWN_FAILURES = (
    Failure(
        "weights_shm",
        r"Caught signal 7 \(Bus error",
        "TensorRT-LLM ran out of /dev/shm while loading the weights (seed 003: 'Caught signal 7 (Bus error: "
        "nonexistent physical address)' after 'Loading weights'); the container shares the host's /dev/shm (--ipc host)",
        "give the host a /dev/shm that holds the weights (NVIDIA's Kimi guide: 640G; e.g. mount -o remount,size=640G "
        "/dev/shm, and in /etc/fstab), which site.yml's preflight checks against kimi_serve_shm_min_bytes"),
    Failure(
        "nccl_shm",
        r"unhandled system error|ncclSystemError|NCCL WARN .*(?:/dev/shm|shared memory)|(?<![-\w(])Bus error|SIGBUS",
        "NCCL could not set up its shared-memory transport between the GPU workers (unhandled system error / SIGBUS):"
        " the container's /dev/shm is Docker's default 64 MB",
        "run the container with --ipc=host (the kimi_serve unit does; an ad-hoc docker run needs it too), or a large"
        " --shm-size"),
    Failure(
        "no_kernel_image",
        r"no kernel image is available for execution on the device|no kernel image is available",
        "the engine image has no kernels for this GPU architecture (it predates the GPU, e.g. Blackwell sm_120)",
        "use an image tag built for this GPU: the pinned full CUDA-13 tag (lmsysorg/sglang:v0.5.12.post1-cu130,"
        " vllm/vllm-openai:v0.22.1); check kimi_engine_image"),
    Failure(
        "kv_cache_memory",
        r"larger than the available KV cache memory|No available memory for the cache blocks"
        r"|Not enough memory\. Please try to increase --mem-fraction-static",
        "the KV cache for the requested context does not fit in the memory left after the weights",
        "lower kimi_context_length, use an fp8 KV cache (kimi_kv_cache_dtype: fp8 on vLLM, fp8_e4m3 on SGLang) or"
        " raise kimi_mem_fraction (vLLM --gpu-memory-utilization caps the whole footprint: 0.95 works; SGLang's"
        " mem-fraction-static must stay <= 0.85)"),
    Failure(
        "b12x_cuda13",
        r"b12x fused MoE requires CUDA 13",
        "the native FP4 MoE path (--moe-backend flashinfer_b12x) needs CUDA 13, which this image lacks",
        "build and serve the patched CUDA-13 NVFP4 image (the kimi_image role; kimi_engine_image), or use"
        " kimi_moe_backend: marlin"),
    Failure(
        "mla_smem",
        r"out of resource: shared memory|Required:? *\d+,? *(?:> *)?(?:Hardware )?limit:? *\d+",
        "the TRITON_MLA decode kernel needs more shared memory than the GPU has (Required 102400 > limit 101376) at"
        " CUDA-graph capture: the image lacks the num_stages patch",
        "serve the patched CUDA-13 NVFP4 image the kimi_image role builds (kimi_engine_image)"),
    Failure(
        "remote_code_blobs",
        r"FileNotFoundError.*[/\\]blobs[/\\][^/\\'\"\s]+\.py",
        "offline trust_remote_code resolves the model's Python modules under blobs/ (symlinked snapshot files;"
        " transformers >= 5.10), where no such file name exists",
        "materialize the remote code in the snapshot: set kimi_weights_materialize (e.g. ['*.py']) and re-run the"
        " kimi_weights role (hf_snapshot materialize)"),
    Failure(
        "weights_missing",
        r"LocalEntryNotFoundError|couldn't connect to 'https://huggingface\.co' to load|does not appear to have a file"
        r" named config\.json",
        "the checkpoint is not in the Hugging Face cache the engine reads (HF_HUB_OFFLINE=1)",
        "download it with the kimi_weights role (same revision), and check HF_HOME in the env file (a bare value,"
        " no inline # comment)"),
    Failure(
        "moe_backend_unsupported",
        r"is not supported for NvFP4 MoE|NvFp4 MoE backend '[A-Z0-9_]+' does not support the deployment",
        "the requested --moe-backend cannot run the NVFP4 MoE layers here",
        "use kimi_moe_backend: marlin (the safe pick on sm_120) or flashinfer_b12x with the CUDA-13 image"),
    Failure(
        "quantization_mismatch",
        r"does not match the quantization method specified",
        "--quantization disagrees with the checkpoint's quantization_config",
        "serve the checkpoint of the chosen quant (int4: moonshotai/Kimi-K2.6, nvfp4: nvidia/Kimi-K2.6-NVFP4); check"
        " quant and the env file's QUANT"),
    Failure(
        "no_ninja",
        r"Ninja is required to load C\+\+ extensions|No such file or directory: 'ninja'|ninja: not found",
        "a JIT kernel build needs ninja and nvcc, which a -runtime image lacks",
        "use the FULL image tag, never -runtime (kimi_engine_image)"),
    Failure(
        "bad_arguments",
        r"error: unrecognized arguments:|error: argument [^ ]+: invalid choice",
        "the engine refused its command line: the image's engine version does not take these options",
        "use the pinned image the collection's flags are checked against (kimi_engine_image) and check"
        " kimi_engine_extra_args"),
    Failure(
        "port_in_use",
        r"(?i)address already in use",
        "the engine port is taken (a leftover or ad-hoc engine, or another service)",
        "free the port (docker ps; a leftover kimi-k26 container) or change kimi_engine_port"),
    Failure(
        "cdi_missing",
        r"unresolvable CDI devices|CDI device injection failed",
        "Docker has no CDI spec for the GPUs (--device nvidia.com/gpu=all)",
        "generate it with nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (the nvidia_host role does), after"
        " every driver change"),
    Failure(
        "ulimit_denied",
        r"error setting rlimits? .*operation not permitted",
        "the container's ulimits are above what this host (or the container it runs in) allows",
        "lower kimi_serve_nofile, or set kimi_serve_memlock_unlimited=false"),
    Failure(
        "image_missing",
        r"pull access denied|manifest unknown|repository does not exist or may require 'docker login'",
        "the engine image is not on the host and cannot be pulled",
        "check kimi_engine_image (a full, existing tag); a locally built image (the kimi_image role) must be built"
        " first"),
    Failure(
        "container_name_in_use",
        r'The container name "[^"]+" is already in use',
        "a container of the same name exists (an ad-hoc docker run, perhaps with a restart policy)",
        "remove it (docker rm -f kimi-k26); the launcher removes leftovers before each start"),
    Failure(
        "gpus_busy",
        r"GPUs are still busy after \d+ ?s \(WAIT_GPU_FREE\)",
        "the GPUs were still in use when the launcher's wait for them (WAIT_GPU_FREE) ran out",
        "stop what holds them (nvidia-smi --query-compute-apps), raise WAIT_GPU_FREE, or let the launcher kill orphans"
        " (kimi_serve_kill_orphans: true)"),
    Failure(
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError",
        "a GPU ran out of memory",
        "check that no other process holds the GPUs (nvidia-smi --query-compute-apps; WAIT_GPU_FREE,"
        " kimi_serve_kill_orphans); SGLang: keep kimi_mem_fraction <= 0.85; vLLM: lower kimi_context_length or use"
        " an fp8 KV cache"),
    Failure(
        "engine_core_init",
        r"Engine core initialization failed",
        "the engine's workers failed at initialization, before the weight load: usually the GPUs were not free"
        " (a previous engine still tearing down, or an orphan process holding GPU memory)",
        "wait for the GPUs to be free before a start (the launcher's WAIT_GPU_FREE), kill orphans"
        " (kimi_serve_kill_orphans, or nvidia-smi --query-compute-apps and kill -9), then restart",
        generic=True),
)

# systemd's own journal lines about the unit (journalctl -u includes them): an automatic restart (only Restart=
# restarts log it), a main process that died (also logged when a deliberate stop ends with a non-zero status, so it
# only counts after the latest start), and the start itself ("Started kimi-k26.service - ...", "Starting ...").
SYSTEMD_RESTART_RE = re.compile(r"Scheduled restart job, restart counter is at \d+")
SYSTEMD_FAILED_RE = re.compile(r"Failed with result '[^']+'|Main process exited, code=\w+, status=(?!0/)")
SYSTEMD_START_RE = re.compile(r"^Start(?:ing|ed) \S")

# vLLM's NVFP4 MoE dispatch (vllm/model_executor/layers/fused_moe/oracle/nvfp4.py and marlin_utils_fp4.py):
#   (Worker_TP0 pid=212) INFO 06-11 10:03:10 [nvfp4.py:288] Using 'MARLIN' NvFp4 MoE backend out of potential
#   backends: ['FLASHINFER_TRTLLM', ...].
#   (Worker_TP0 pid=212) WARNING 06-11 10:13:00 [marlin_utils_fp4.py:196] Your GPU does not have native support for
#   FP4 computation but FP4 quantization is being used. Weight-only FP4 compression will be used leveraging the
#   Marlin kernel. This may degrade performance for compute-heavy workloads.
MOE_BACKEND_RE = re.compile(r"Using '([A-Z0-9_]+)' NvFp4 MoE backend")
MARLIN_FALLBACK_RE = re.compile(r"does not have native support for FP4 computation")
# vLLM's NvFp4MoeBackend value -> the --moe-backend (kimi_moe_backend) value that selects it.
MOE_BACKEND_OPTIONS = {
    "MARLIN": "marlin",
    "FLASHINFER_B12X": "flashinfer_b12x",
    "FLASHINFER_CUTEDSL": "flashinfer_cutedsl",
    "FLASHINFER_CUTEDSL_BATCHED": "flashinfer_cutedsl",
    "FLASHINFER_CUTLASS": "flashinfer_cutlass",
    "FLASHINFER_TRTLLM": "flashinfer_trtllm",
    "VLLM_CUTLASS": "cutlass",
    "B12X": "b12x",
    "HUMMING": "humming",
    "EMULATION": "emulation",
}
NOT_NATIVE = ("MARLIN", "EMULATION")


def clean(line):
    """A journal line as a person would read it: the last carriage-return segment (tqdm bars), no ANSI colours."""
    line = _ANSI.sub("", line or "").rstrip()
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line.rstrip()


def short(line, width=150):
    """One display line: without the engine's log prefix (process, level, time, source file), at most width chars."""
    line = clean(line)
    line = _PROCESS_PREFIX.sub("", line, count=1)
    line = _VLLM_PREFIX.sub("", line, count=1)
    line = _SGLANG_PREFIX.sub("", line, count=1)
    line = " ".join(line.split())
    return line if len(line) <= width else line[:width - 3] + "..."


def is_ready(engine, line):
    """The line is the engine's readiness line."""
    return any(ready in line for ready in READY_LINES[engine])


def is_progress(line):
    """The line is worth showing while the engine loads."""
    return bool(PROGRESS_RE.search(line))


def diagnose(lines):
    """[{name, cause, fix, line}] for the known failures in lines, most specific first, one per failure (its first
    line). A generic failure ("Engine core initialization failed") is only reported when nothing else matched."""
    found = []
    for failure in KNOWN_FAILURES:
        for line in lines:
            if failure.regex.search(line):
                found.append({"name": failure.name, "cause": failure.cause, "fix": failure.fix,
                              "line": short(line, 500), "generic": failure.generic})
                break
    specific = [f for f in found if not f["generic"]]
    return [dict((k, v) for k, v in f.items() if k != "generic") for f in (specific or found)]


def moe_dispatch(lines):
    """Which NVFP4 MoE path vLLM dispatched, from its log; None when the log says nothing (INT4, SGLang, not yet).

    Returns {path, backend, moe_backend, native_fp4, line}: path "native_fp4" or "marlin" (the weight-only Marlin
    fallback; "emulation" for the emulation backend), backend vLLM's name (MARLIN, FLASHINFER_B12X, ...),
    moe_backend the kimi_moe_backend value that selects it, line the log line it was read from.
    """
    backend = line_of_backend = fallback = None
    for line in lines:
        match = MOE_BACKEND_RE.search(line)
        if match and backend is None:
            backend, line_of_backend = match.group(1), line
        if fallback is None and MARLIN_FALLBACK_RE.search(line):
            fallback = line
    if backend is None and fallback is None:
        return None
    if backend is None:
        backend = "MARLIN"
    if fallback is not None and backend not in NOT_NATIVE:
        path = "marlin"  # the backend was chosen but the layers fell back to weight-only Marlin
    else:
        path = {"MARLIN": "marlin", "EMULATION": "emulation"}.get(backend, "native_fp4")
    return {"path": path, "backend": backend, "moe_backend": MOE_BACKEND_OPTIONS.get(backend, backend.lower()),
            "native_fp4": path == "native_fp4", "line": short(line_of_backend or fallback, 500)}


def restart_line(lines):
    """systemd's line saying the unit crashed or restarted automatically, or None."""
    for line in lines:
        if SYSTEMD_RESTART_RE.search(line) or SYSTEMD_FAILED_RE.search(line):
            return line
    return None


class LogWatch(object):
    """Fed journal lines as they arrive; keeps what a readiness wait needs without keeping the whole log.

    systemd's start line ("Started kimi-k26.service ...") begins a new engine process: what the previous one logged
    (its stop, a non-zero exit status on SIGTERM, its lines) no longer counts, except an automatic restart."""

    KEEP_MOE_LINES = 20

    def __init__(self, engine, tail_lines=30):
        if engine not in ENGINES:
            raise ValueError("engine must be one of %s, got %r" % (", ".join(ENGINES), engine))
        self.engine = engine
        self.tail = collections.deque(maxlen=max(1, tail_lines))
        self.lines_seen = 0
        self.auto_restart = None  # sticky: systemd restarted the unit by itself
        self.new_process()

    def new_process(self):
        self.ready_line = None
        self.progress_line = None
        self.failure_lines = []  # lines that matched a known failure
        self.failures = []  # diagnose() of them
        self.exited = None
        self.moe_lines = []
        self.compile = None  # {phase, line}: the latest compile-phase line of this process (COMPILE_LINES)

    @property
    def restart(self):
        """systemd's line saying the unit restarted by itself or its main process died, or None."""
        return self.auto_restart or self.exited

    def feed(self, lines):
        """Take new lines (strings, newline-free)."""
        changed = False
        for raw in lines:
            line = clean(raw)
            if not line:
                continue
            self.lines_seen += 1
            self.tail.append(line)
            if SYSTEMD_START_RE.match(line):
                changed = changed or bool(self.failure_lines)
                self.new_process()
                continue
            if self.auto_restart is None and SYSTEMD_RESTART_RE.search(line):
                self.auto_restart = short(line, 500)
            if self.exited is None and SYSTEMD_FAILED_RE.search(line):
                self.exited = short(line, 500)
            if self.ready_line is None and is_ready(self.engine, line):
                self.ready_line = short(line, 500)
            if is_progress(line):
                self.progress_line = short(line)
            phase = compile_phase(self.engine, line)
            # After a cache hit, vLLM's "torch.compile takes ... in total" closes the load: the phase stays cached.
            if phase and not (phase == "compiled" and (self.compile or {}).get("phase") == "cached"):
                self.compile = {"phase": phase, "line": short(line)}
                self.progress_line = short(line)
            if (MOE_BACKEND_RE.search(line) or MARLIN_FALLBACK_RE.search(line)) and \
                    len(self.moe_lines) < self.KEEP_MOE_LINES:
                self.moe_lines.append(line)
            if any(f.regex.search(line) for f in KNOWN_FAILURES):
                self.failure_lines.append(line)
                changed = True
        if changed:
            self.failures = diagnose(self.failure_lines)
            self.failure_lines = [f["line"] for f in self.failures]  # keep one line per failure

    @property
    def diagnosis(self):
        return list(self.failures)

    @property
    def moe_dispatch(self):
        return moe_dispatch(self.moe_lines)
