"""The engines' kernel compile at start-up, as the double plays it (KIMI_DOUBLE_COMPILE_SECONDS=<s>, issue 39).

With the knob above 0: when the engine's cache folder (the variable the real engine reads, CACHES below; the
collection's engine data names the same one, `kernel_cache.primary`, and a unit test keeps them equal) holds no file,
the double "compiles" for that long, logging the real engine's compile lines, and writes files there; when it holds
files, it logs that it found them and goes on at once. Without the knob (or 0) nothing is compiled, read or written.
"""
import os
import time

# engine -> the variables that move its first cache, first set wins, and the real default when none is set.
# vLLM: vllm/envs.py VLLM_CACHE_ROOT (~/.cache/vllm), torch.compile's cache under <root>/torch_compile_cache;
# SGLang: sglang/srt/environ.py SGLANG_DG_CACHE_DIR (~/.cache/deep_gemm), DeepGEMM's JIT kernels; its Ascend build
# keeps torch.compile's (TORCHINDUCTOR_CACHE_DIR); TensorRT-LLM: Triton's TRITON_CACHE_DIR (~/.triton/cache).
CACHES = {
    "vllm": (("VLLM_CACHE_ROOT",), "~/.cache/vllm", "torch_compile_cache/kimi0double/rank_0_0"),
    "sglang": (("SGLANG_DG_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"), "~/.cache/deep_gemm", "cache"),
    "trtllm": (("TRITON_CACHE_DIR",), "~/.triton/cache", "kimi0double"),
}
KNOB = "KIMI_DOUBLE_COMPILE_SECONDS"
FILES = 3  # the kernels a "compile" writes


class Problem(Exception):
    pass


def seconds(env):
    raw = env.get(KNOB) or "0"
    try:
        value = float(raw)
    except ValueError:
        raise Problem("engine double: bad %s=%r (use seconds, e.g. 5)" % (KNOB, raw))
    if value < 0:
        raise Problem("engine double: bad %s=%r (use seconds >= 0)" % (KNOB, raw))
    return value


def folder(engine, env):
    """The engine's cache folder: the first of its variables that is set, else the real default."""
    names, default, _sub = CACHES[engine]
    for name in names:
        if env.get(name):
            return env[name]
    return os.path.expanduser(default)


def files_in(path):
    count = 0
    for _root, _dirs, names in os.walk(path):
        count += len(names)
    return count


def compile_kernels(engine, env, log, stop, worker):
    """Run the compile phase. Returns (phase, seconds) - ("off"|"cached"|"compiled"|"stopped", time spent)."""
    delay = seconds(env)
    if delay <= 0:
        return "off", 0.0
    root = folder(engine, env)
    _names, _default, sub = CACHES[engine]
    where = os.path.join(root, sub)
    t0 = time.time()
    found = files_in(root) if os.path.isdir(root) else 0
    if engine == "vllm":
        log("Using cache directory: %s for vLLM's torch.compile" % where, "backends.py:548", proc=worker)
    if found:
        if engine == "vllm":
            log("Directly load the compiled graph(s) for dynamic shape from the cache, took %.3f s"
                % (time.time() - t0), "backends.py:226", proc=worker)
            log("torch.compile takes %.2f s in total" % (time.time() - t0), "monitor.py:34", proc=worker)
        log("kernel cache found [engine double]: %d files in %s, no compile" % (found, root))
        return "cached", time.time() - t0
    if engine == "vllm":
        log("Compiling a graph for dynamic shape takes %.2f s" % delay, "backends.py:215", proc=worker)
    elif engine == "sglang":
        log("Entering DeepGEMM JIT Pre-Compile session. It may take a long time (typically 10-20 mins) if you have "
            "not run `sglang.compile_deep_gemm`. It is recommended to run `sglang.compile_deep_gemm` with same args "
            "as `sglang.launch_server` for pre-compilation to reduce the overhead if you have not run it before.",
            level="WARNING")
    else:
        log("[Autotuner]: Autotuning process starts ...")
    if stop.wait(delay):
        return "stopped", time.time() - t0
    try:
        os.makedirs(where, exist_ok=True)
        for index in range(FILES):
            with open(os.path.join(where, "kernel-%d.bin" % index), "wb") as handle:
                handle.write(b"engine double kernel %d\n" % index)
    except OSError as exc:
        raise Problem("engine double: cannot write the kernel cache %s: %s" % (where, exc))
    if engine == "vllm":
        log("torch.compile takes %.2f s in total" % (time.time() - t0), "monitor.py:34", proc=worker)
    elif engine == "sglang":
        log("DeepGEMM JIT kernels compiled [engine double] in %.2f s: %d files in %s"
            % (time.time() - t0, FILES, where))
    else:
        log("[Autotuner]: Autotuning process ends")
    return "compiled", time.time() - t0
