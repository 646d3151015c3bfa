"""The engine log knowledge (_engine_log): known failures from real-looking lines, readiness, load progress, and
the NVFP4 MoE dispatch as the runbook's assert-native step reads it. Also: the engine double's own logs."""
import io
import json
import os
import sys
import threading
import time

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils._engines import log as el

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.join(ROOT, "tests", "doubles", "engine"))

from kimi_engine_double import flags  # noqa: E402
from kimi_engine_double.server import EngineDouble  # noqa: E402

# One real-looking line per known failure (vLLM / SGLang / NCCL / Triton / huggingface_hub / docker shapes).
FAILURE_LINES = {
    "weights_shm": [  # seed 003, NVIDIA's Kimi K2 Thinking guide on TensorRT-LLM
        " 1: [nvl72136-T14:452151:0:452151] Caught signal 7 (Bus error: nonexistent physical address)",
    ],
    "ulimit_denied": [
        "docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime "
        "create failed: runc create failed: unable to start container process: error during container init: error "
        "setting rlimits for ready process: error setting rlimit type 7: operation not permitted: unknown.",
    ],
    "nccl_shm": [
        "(Worker_TP3 pid=215) ERROR 06-11 10:12:31 [multiproc_executor.py:585] torch.distributed.DistBackendError: NCCL "
        "error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
        "kimi-k26:215:215 [3] NCCL WARN Error: failed to extend /dev/shm/nccl-9SgkEC to 9637892 bytes",
        "Fatal Python error: Bus error",
    ],
    "no_kernel_image": [
        "(Worker_TP0 pid=212) ERROR 06-11 10:02:10 [multiproc_executor.py:585] RuntimeError: CUDA error: no kernel "
        "image is available for execution on the device",
    ],
    "kv_cache_memory": [
        "(EngineCore_DP0 pid=90) ERROR 06-11 10:14:02 [core.py:708] ValueError: To serve at least one request with the "
        "models's max seq len (262144), (17.16 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (0.52 GiB). Based on the available memory, the estimated maximum model length is 7936. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        "[2026-06-11 10:13:00 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ],
    "b12x_cuda13": [
        "(Worker_TP0 pid=212) ERROR 06-11 10:03:10 [multiproc_executor.py:585] RuntimeError: b12x fused MoE requires "
        "CUDA 13",
    ],
    "mla_smem": [
        "(Worker_TP0 pid=212) ERROR 06-11 10:13:40 [multiproc_executor.py:585] triton.runtime.errors.OutOfResources: "
        "out of resource: shared memory, Required: 102400, Hardware limit: 101376. Reducing block sizes or "
        "`num_stages` may help.",
        "CUDA graph capture failed: Required 102400 > limit 101376",
    ],
    "remote_code_blobs": [
        "(EngineCore_DP0 pid=90) ERROR 06-11 10:01:05 [core.py:708] FileNotFoundError: [Errno 2] No such file or "
        "directory: '/hf/hub/models--nvidia--Kimi-K2.6-NVFP4/blobs/tool_declaration_ts.py'",
    ],
    "weights_missing": [
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the local cache and "
        "outgoing traffic has been disabled (HF_HUB_OFFLINE=1). To enable hf.co look-ups and downloads online, set "
        "'local_files_only' to False.",
    ],
    "moe_backend_unsupported": [
        "ValueError: moe_backend='triton' is not supported for NvFP4 MoE. Expected one of ['cutlass', "
        "'flashinfer_trtllm', 'flashinfer_cutlass', 'flashinfer_cutedsl', 'marlin', 'emulation'].",
    ],
    "quantization_mismatch": [
        "ValueError: Quantization method specified in the model config (compressed-tensors) does not match the "
        "quantization method specified in the `quantization` argument (modelopt_fp4).",
    ],
    "no_ninja": ["RuntimeError: Ninja is required to load C++ extensions"],
    "bad_arguments": ["vllm: error: unrecognized arguments: --enable-flashinfer-mla",
                      "launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp8' (choose from 'auto')"],
    "port_in_use": ["ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address "
                    "already in use"],
    "cdi_missing": ["docker: Error response from daemon: CDI device injection failed: unresolvable CDI devices "
                    "nvidia.com/gpu=all."],
    "image_missing": ["docker: Error response from daemon: pull access denied for kimi-k26-nvfp4-vllm, repository does "
                      "not exist or may require 'docker login': denied: requested access to the resource is denied."],
    "container_name_in_use": ['docker: Error response from daemon: Conflict. The container name "/kimi-k26" is already '
                              'in use by container "3f2a9c". You have to remove (or rename) that container to be able '
                              'to reuse that name.'],
    "gpus_busy": ["kimi-k26-launch: the GPUs are still busy after 120s (WAIT_GPU_FREE): 4242, python3, 1024 MiB. "
                  "Stop those processes, or set kimi_serve_kill_orphans=true"],
    "cuda_oom": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity "
                 "of 94.97 GiB of which 1.02 GiB is free."],
    "engine_core_init": ["(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
                         "Failed core proc(s): {'EngineCore_DP0': 1}"],
}

# What the issue asks each to point at (cause / fix words).
EXPECTED_FIX_WORDS = {
    "nccl_shm": "--ipc=host", "no_kernel_image": "CUDA-13", "kv_cache_memory": "kimi_context_length",
    "b12x_cuda13": "kimi_image", "mla_smem": "kimi_image", "remote_code_blobs": "kimi_weights_materialize",
    "weights_missing": "kimi_weights", "engine_core_init": "WAIT_GPU_FREE", "gpus_busy": "kimi_serve_kill_orphans",
}

MARLIN_LINES = [
    "(Worker_TP0 pid=212) INFO 06-11 10:03:10 [nvfp4.py:288] Using 'MARLIN' NvFp4 MoE backend out of potential "
    "backends: ['FLASHINFER_TRTLLM', 'FLASHINFER_CUTEDSL', 'FLASHINFER_CUTEDSL_BATCHED', 'FLASHINFER_CUTLASS', "
    "'VLLM_CUTLASS', 'MARLIN', 'HUMMING', 'EMULATION'].",
    "(Worker_TP0 pid=212) WARNING 06-11 10:13:00 [marlin_utils_fp4.py:196] Your GPU does not have native support for "
    "FP4 computation but FP4 quantization is being used. Weight-only FP4 compression will be used leveraging the "
    "Marlin kernel. This may degrade performance for compute-heavy workloads.",
]
B12X_LINE = ("(Worker_TP0 pid=212) INFO 06-11 10:03:10 [nvfp4.py:288] Using 'FLASHINFER_B12X' NvFp4 MoE backend out of "
             "potential backends: ['FLASHINFER_TRTLLM', 'FLASHINFER_CUTEDSL', 'FLASHINFER_CUTEDSL_BATCHED', "
             "'FLASHINFER_CUTLASS', 'VLLM_CUTLASS', 'MARLIN', 'HUMMING', 'EMULATION'].")


def test_every_known_failure_has_a_real_line_and_a_fix():
    assert sorted(FAILURE_LINES) == sorted(f.name for f in el.KNOWN_FAILURES)
    for failure in el.KNOWN_FAILURES:
        assert failure.cause and failure.fix


@pytest.mark.parametrize("name,line", [(n, line) for n, lines in sorted(FAILURE_LINES.items()) for line in lines])
def test_each_known_failure_is_diagnosed(name, line):
    found = el.diagnose(["[2026-06-11 10:00:00 TP0] Load weight begin. avail mem=94.50 GB", line])
    assert [f["name"] for f in found] == [name]
    assert sorted(found[0]) == ["cause", "fix", "line", "name"]
    assert found[0]["line"] == el.short(line, 500)
    if name in EXPECTED_FIX_WORDS:
        assert EXPECTED_FIX_WORDS[name] in found[0]["fix"]


def test_generic_engine_core_failure_gives_way_to_its_root_cause():
    kv, core = FAILURE_LINES["kv_cache_memory"][0], FAILURE_LINES["engine_core_init"][0]
    assert [f["name"] for f in el.diagnose([kv, "Traceback (most recent call last):", core])] == ["kv_cache_memory"]
    only_core = el.diagnose([core])
    assert [f["name"] for f in only_core] == ["engine_core_init"]
    assert "not free" in only_core[0]["cause"] and "kimi_serve_kill_orphans" in only_core[0]["fix"]


def test_diagnosis_order_is_most_specific_first_and_one_entry_per_failure():
    lines = [FAILURE_LINES["cuda_oom"][0], FAILURE_LINES["nccl_shm"][0], FAILURE_LINES["nccl_shm"][1]]
    found = el.diagnose(lines)
    assert [f["name"] for f in found] == ["nccl_shm", "cuda_oom"]
    assert "unhandled system error" in found[0]["line"]


def test_healthy_lines_are_not_failures():
    lines = ["(APIServer pid=1) INFO 06-11 10:00:00 [utils.py:233] non-default args: {'model': 'moonshotai/Kimi-K2.6'}",
             "kimi-k26:215:215 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via SHM/direct/direct",
             "D-Bus error while talking to logind", "INFO:     127.0.0.1:51234 - \"GET /health HTTP/1.1\" 200",
             "The server is fired up and ready to roll!"]
    assert el.diagnose(lines) == []


@pytest.mark.parametrize("engine,line,ready", [
    ("sglang", "[2026-06-11 10:12:31] The server is fired up and ready to roll!", True),
    ("vllm", "(APIServer pid=1) INFO:     Application startup complete.", True),
    ("vllm", "[2026-06-11 10:12:31] The server is fired up and ready to roll!", False),
    ("sglang", "(APIServer pid=1) INFO:     Application startup complete.", False),
    ("vllm", "(APIServer pid=1) INFO:     Waiting for application startup.", False),
])
def test_ready_lines(engine, line, ready):
    assert el.is_ready(engine, line) is ready


@pytest.mark.parametrize("line,shown", [
    ("Loading safetensors checkpoint shards:  45% Completed | 29/64 [02:10<02:50,  4.50s/it]",
     "Loading safetensors checkpoint shards: 45% Completed | 29/64 [02:10<02:50, 4.50s/it]"),
    ("(Worker_TP0 pid=212) INFO 06-11 10:12:00 [default_loader.py:267] Loading weights took 612.34 seconds",
     "Loading weights took 612.34 seconds"),
    ("[2026-06-11 10:02:00 TP0] Load weight begin. avail mem=94.50 GB", "Load weight begin. avail mem=94.50 GB"),
    ("[2026-06-11 10:13:20 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=6.1 GB",
     "Capture cuda graph begin. This can take up to several minutes. avail mem=6.1 GB"),
    ("Capturing batches (bs=1 avail_mem=5.13 GB):  10%|#  | 2/22 [00:01<00:10]\rCapturing batches (bs=160 "
     "avail_mem=5.13 GB):  45%|####5     | 10/22 [00:05<00:06,  1.90it/s]",
     "Capturing batches (bs=160 avail_mem=5.13 GB): 45%|####5 | 10/22 [00:05<00:06, 1.90it/s]"),
    ("(EngineCore_DP0 pid=90) INFO 06-11 10:13:10 [kv_cache_utils.py:1087] GPU KV cache size: 232,032 tokens",
     "GPU KV cache size: 232,032 tokens"),
    ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 45%|####5     | 30/67 [00:09<00:11,  3.21it/s]",
     "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 45%|####5 | 30/67 [00:09<00:11, 3.21it/s]"),
])
def test_load_progress_lines_and_their_display(line, shown):
    assert el.is_progress(line)
    assert el.short(line) == shown


def test_launcher_gpu_wait_is_progress_not_failure():
    line = "kimi-k26-launch: waiting for the GPUs to be free (115s left): 4242, python3, 1024 MiB"
    assert el.is_progress(line) and el.diagnose([line]) == []
    killing = "kimi-k26-launch: the GPUs are still busy after 120s, killing (KILL_ORPHANS=1): 4242, python3, 1024 MiB"
    assert el.diagnose([killing]) == []


def test_not_progress_and_width():
    assert not el.is_progress("INFO:     127.0.0.1:51234 - \"GET /health HTTP/1.1\" 503")
    assert not el.is_progress("(APIServer pid=1) INFO 06-11 10:00:00 [utils.py:233] non-default args: {}")
    assert len(el.short("Loading weights took " + "x" * 400)) == 150
    assert el.short("\x1b[32mINFO\x1b[0m 06-11 10:00:00 [a.py:1] Loading weights took 1 s") == "Loading weights took 1 s"


@pytest.mark.parametrize("lines,path,backend,option", [
    (MARLIN_LINES, "marlin", "MARLIN", "marlin"),
    ([B12X_LINE], "native_fp4", "FLASHINFER_B12X", "flashinfer_b12x"),
    (MARLIN_LINES[1:], "marlin", "MARLIN", "marlin"),  # only the fallback warning
    ([B12X_LINE.replace("FLASHINFER_B12X", "FLASHINFER_CUTEDSL")], "native_fp4", "FLASHINFER_CUTEDSL",
     "flashinfer_cutedsl"),
])
def test_moe_dispatch(lines, path, backend, option):
    got = el.moe_dispatch(["Loading weights took 612.34 seconds"] + lines + ["Application startup complete."])
    assert (got["path"], got["backend"], got["moe_backend"], got["native_fp4"]) == (path, backend, option,
                                                                                    path == "native_fp4")
    assert "NvFp4 MoE backend" in got["line"] or "native support for FP4" in got["line"]


def test_moe_dispatch_none_without_nvfp4_lines():
    assert el.moe_dispatch(["Loading weights took 612.34 seconds", "Application startup complete."]) is None


def test_systemd_restart_lines():
    assert el.restart_line(["kimi-k26.service: Scheduled restart job, restart counter is at 2."])
    assert el.restart_line(["kimi-k26.service: Main process exited, code=exited, status=1/FAILURE"])
    assert el.restart_line(["kimi-k26.service: Failed with result 'exit-code'."])
    assert el.restart_line(["Stopping kimi-k26.service - Kimi-K2.6...", "Started kimi-k26.service - Kimi-K2.6.",
                            "kimi-k26.service: Main process exited, code=exited, status=0/SUCCESS"]) is None


def test_log_watch_incremental():
    watch = el.LogWatch("vllm", tail_lines=3)
    watch.feed(["(APIServer pid=1) INFO 06-11 10:00:00 [api_server.py:1] vLLM API server version 0.22.1", ""])
    watch.feed(MARLIN_LINES[:1] + ["(Worker_TP0 pid=212) INFO 06-11 10:12:00 [default_loader.py:267] Loading weights "
                                   "took 612.34 seconds"])
    assert watch.progress_line == "Loading weights took 612.34 seconds" and watch.ready_line is None
    watch.feed(MARLIN_LINES[1:] + ["(APIServer pid=1) INFO:     Application startup complete."])
    assert watch.ready_line == "INFO: Application startup complete."
    assert watch.moe_dispatch["path"] == "marlin" and watch.diagnosis == []
    assert len(watch.tail) == 3 and watch.lines_seen == 5
    watch.feed([FAILURE_LINES["engine_core_init"][0]])
    assert [f["name"] for f in watch.diagnosis] == ["engine_core_init"]
    watch.feed([FAILURE_LINES["cuda_oom"][0]])  # a root cause arriving later still wins
    assert [f["name"] for f in watch.diagnosis] == ["cuda_oom"]
    with pytest.raises(ValueError):
        el.LogWatch("tgi")


def test_log_watch_starts_over_at_systemd_start_line_but_keeps_an_automatic_restart():
    watch = el.LogWatch("sglang")
    watch.feed(["[2026-06-11 10:00:00] The server is fired up and ready to roll!", FAILURE_LINES["cuda_oom"][0],
                "kimi-k26.service: Main process exited, code=exited, status=143/n/a",
                "Started kimi-k26.service - Kimi-K2.6 engine."])
    assert watch.ready_line is None and watch.diagnosis == [] and watch.restart is None
    watch.feed(["kimi-k26.service: Main process exited, code=exited, status=1/FAILURE",
                "kimi-k26.service: Scheduled restart job, restart counter is at 1.", "Stopped kimi-k26.service.",
                "Starting kimi-k26.service...", "Started kimi-k26.service."])
    assert watch.restart == "kimi-k26.service: Scheduled restart job, restart counter is at 1."
    assert len(watch.tail) == 9


# ---- the engine double speaks the same lines ---------------------------------------------------------------
def make_model(tmp_path, quant):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "kimi_k25",
                                                   "quantization_config": {"quant_method": quant}}))
    (model / "model.safetensors").write_bytes(b"\0" * 1024)
    return str(model)


def double_log(engine, argv, env=None):
    out, err, stop = io.StringIO(), io.StringIO(), threading.Event()
    double = EngineDouble(engine, flags.parse(engine, argv), env=env or {}, out=out, err=err)
    thread = threading.Thread(target=double.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.time() + 10  # until ready or exited
    while time.time() < deadline and not double.ready.wait(0.05) and thread.is_alive():
        pass
    ready = double.ready.is_set()
    stop.set()
    thread.join(10)
    return ready, (out.getvalue() + err.getvalue()).splitlines()


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_double_logs_ready_and_progress_without_failures(tmp_path, engine):
    model = make_model(tmp_path, "compressed-tensors")
    argv = (["--model-path", model] if engine == "sglang" else [model]) + ["--host", "127.0.0.1", "--port", "0"]
    ready, lines = double_log(engine, argv)
    assert ready
    assert any(el.is_ready(engine, line) for line in lines)
    assert any(el.is_progress(line) and "Loading weights took" in line for line in lines)
    assert el.diagnose(lines) == [] and el.moe_dispatch(lines) is None


@pytest.mark.parametrize("backend,path", [("marlin", "marlin"), ("flashinfer_b12x", "native_fp4")])
def test_double_nvfp4_dispatch_is_read_back(tmp_path, backend, path):
    model = make_model(tmp_path, "modelopt")
    ready, lines = double_log("vllm", [model, "--host", "127.0.0.1", "--port", "0", "--tensor-parallel-size", "8",
                                       "--quantization", "modelopt_fp4", "--moe-backend", backend])
    assert ready
    got = el.moe_dispatch(lines)
    assert got["path"] == path and got["moe_backend"] == backend


def test_double_startup_crash_is_diagnosed(tmp_path):
    ready, lines = double_log("vllm", [make_model(tmp_path, "compressed-tensors"), "--port", "0"],
                              env={"KIMI_DOUBLE_CRASH": "startup"})
    assert not ready
    assert [f["name"] for f in el.diagnose(lines)] == ["engine_core_init"]


# ---- the compile phase (kernel caches, issue 39) -----------------------------------------------------------------
def test_compile_phase_of_vllm_a_miss_then_a_hit():
    from ansible_collections.kimi.deploy.plugins.module_utils._engines import log as engine_log
    miss = engine_log.LogWatch("vllm")
    miss.feed(["(Worker_TP0 pid=212) INFO 06-11 10:13:00 [backends.py:548] Using cache directory: "
               "/root/.cache/kimi-kernels/vllm/torch_compile_cache/1517964802/rank_0_0 for vLLM's torch.compile",
               "(Worker_TP0 pid=212) INFO 06-11 10:13:40 [backends.py:215] Compiling a graph for dynamic shape "
               "takes 41.20 s"])
    assert miss.compile["phase"] == "compiling"
    miss.feed(["(Worker_TP0 pid=212) INFO 06-11 10:13:45 [monitor.py:34] torch.compile takes 45.30 s in total"])
    assert miss.compile == {"phase": "compiled", "line": "torch.compile takes 45.30 s in total"}
    hit = engine_log.LogWatch("vllm")
    hit.feed(["(Worker_TP0 pid=212) INFO 06-11 10:13:03 [backends.py:226] Directly load the compiled graph(s) for "
              "dynamic shape from the cache, took 3.012 s",
              "(Worker_TP0 pid=212) INFO 06-11 10:13:04 [monitor.py:34] torch.compile takes 3.50 s in total"])
    assert hit.compile["phase"] == "cached"


def test_compile_phase_of_sglang_and_trtllm():
    from ansible_collections.kimi.deploy.plugins.module_utils._engines import log as engine_log
    sglang = engine_log.LogWatch("sglang")
    sglang.feed(["[2026-06-11 10:13:20 TP0] Entering DeepGEMM JIT Pre-Compile session. It may take a long time "
                 "(typically 10-20 mins) if you have not run `sglang.compile_deep_gemm`."])
    assert sglang.compile["phase"] == "compiling"
    trtllm = engine_log.LogWatch("trtllm")
    trtllm.feed(["[06/11/2026-10:13:20] [TRT-LLM] [I] [Autotuner]: Autotuning process starts ...",
                 "[06/11/2026-10:13:29] [TRT-LLM] [I] [Autotuner]: Autotuning process ends"])
    assert trtllm.compile["phase"] == "compiled"
    assert engine_log.LogWatch("sglang").compile is None  # nothing logged, nothing said
