#!/usr/bin/env python
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Lower vLLM's TRITON_MLA grouped-decode num_stages from 2 to 1 in an installed vLLM, so that CUDA-graph capture
fits sm_120 (RTX PRO 6000 Blackwell) shared memory. Run by the NVFP4 image's Dockerfile (mode `patch`) and, on the
built image, by kimi.deploy.kimi_image (mode `prove`).

What and why
  Kimi-K2.6's MLA on sm_120 can only use vLLM's TRITON_MLA attention backend. Its decode runs the Triton kernel
  _fwd_grouped_kernel_stage1, launched by _decode_grouped_att_m_fwd in
      vllm/v1/attention/ops/triton_decode_attention.py          (vLLM 0.22.1-0.33.0, APPLIES_TO; upstream path)
  with num_stages=2 on CUDA (the ROCm branch already uses 1). Two pipeline stages keep two K/V tiles in shared
  memory, more than sm_120's 101376 bytes per block for Kimi's 576-wide latent heads, so CUDA-graph capture fails
  with "out of resource: shared memory, Required: 102400, Hardware limit: 101376" (the runbook's vLLM 0.22.1).
  Triton 3.6 compiling the kernel for sm_120 with Kimi's shapes and fp8 KV needs 120832 bytes with 2 stages and
  86016 with 1 (bench/results/triton-mla-decode-smem-2026-11-23.json). One stage fits. The function reads:
      num_stages = 2                      <- the CUDA default: this line becomes `num_stages = 1`
      if is_hip_:
          ...
          num_stages = 1
      _fwd_grouped_kernel_stage1[grid](..., num_stages=num_stages, ...)

How
  The file is found through the installed package (importlib finds `vllm` without running it), never a guessed
  site-packages path. The code is parsed (ast) and the edit is made only when the function, its default assignment
  `num_stages = 2` and the grouped kernel's launch with `num_stages=num_stages` are all there; the file is then
  parsed again and the new value asserted. Anything else exits 3 with "PATCH FAILED", the file and what was looked
  for: a silent no-op patch would ship an image that dies at graph capture.

Usage
  kimi_vllm_patch.py patch [--expect-vllm 0.22.1] [--require-cuda-major 13] [--record FILE]
  kimi_vllm_patch.py prove [--expect-num-stages 1]
      imports the patched module as vLLM does and prints one JSON line: module file, vLLM and CUDA versions and the
      num_stages the launch uses; exit 0 only when it is the expected value.
  kimi_vllm_patch.py check FILE      analyse a file's text only (no vLLM needed), print JSON
"""

import argparse
import ast
import glob
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import sys
import tempfile
import textwrap

PACKAGE = "vllm"
MODULE = "vllm.v1.attention.ops.triton_decode_attention"
RELATIVE_PATH = "v1/attention/ops/triton_decode_attention.py"
FUNCTION = "_decode_grouped_att_m_fwd"
KERNEL = "_fwd_grouped_kernel_stage1"
VARIABLE = "num_stages"
UPSTREAM_VALUE = 2
PATCHED_VALUE = 1
MARKER = "# kimi.deploy: sm_120 shared memory, TRITON_MLA graph capture (was %d)" % UPSTREAM_VALUE
# The vLLM releases this patch applies to: the file of each was read from its PyPI wheel (2026-11-24), and each has
# the one `    num_stages = 2` default in _decode_grouped_att_m_fwd (line 497 in 0.22.1-0.23.0, 522 in 0.24.0-0.30.0, 521
# in 0.31.0-0.33.0), with no sm_120 or shared-memory check beside it: upstream lowers it only on ROCm or for
# BLOCK_DMODEL >= 1024, and MLA's is 512. So every one of them still needs the patch on sm_120.
APPLIES_TO = ("0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
              "0.30.0", "0.31.0", "0.32.0", "0.33.0")
LINE_RE = re.compile(r"^(?P<indent>[ \t]*)%s[ \t]*=[ \t]*(?P<value>\d+)[ \t]*(#.*)?$" % VARIABLE)
EXIT_PATCH_FAILED = 3


class PatchError(Exception):
    """The code is not what the patch expects."""


def analyse(source, filename):
    """Where the default num_stages of FUNCTION is set and how the grouped kernel's launch uses it.

    Returns {"function_line", "line" (1-based line of the default assignment), "value", "launch_line"}; raises
    PatchError naming the file and what was looked for.
    """
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise PatchError("%s does not parse as Python (%s)" % (filename, exc))
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == FUNCTION]
    if len(functions) != 1:
        raise PatchError("%s: looked for one top-level function %s(), found %d" % (filename, FUNCTION, len(functions)))
    function = functions[0]
    defaults = [node for node in function.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == VARIABLE]
    if len(defaults) != 1:
        raise PatchError("%s: looked for one assignment `%s = <int>` in the body of %s() (line %d), found %d"
                         % (filename, VARIABLE, FUNCTION, function.lineno, len(defaults)))
    default = defaults[0]
    value = default.value.value if isinstance(default.value, ast.Constant) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise PatchError("%s:%d: looked for `%s = <int>` in %s(), found `%s`"
                         % (filename, default.lineno, VARIABLE, FUNCTION, ast.unparse(default)))
    launches = [node for node in ast.walk(function)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == KERNEL]
    if len(launches) != 1:
        raise PatchError("%s: looked for one launch %s[grid](...) in %s(), found %d"
                         % (filename, KERNEL, FUNCTION, len(launches)))
    launch = launches[0]
    keyword = [kw for kw in launch.keywords if kw.arg == VARIABLE]
    if not keyword or not (isinstance(keyword[0].value, ast.Name) and keyword[0].value.id == VARIABLE):
        raise PatchError("%s:%d: looked for the keyword `%s=%s` in the launch of %s, found %s"
                         % (filename, launch.lineno, VARIABLE, VARIABLE, KERNEL,
                            ast.unparse(keyword[0]) if keyword else "no %s keyword" % VARIABLE))
    if default.lineno > launch.lineno:
        raise PatchError("%s:%d: `%s = ...` comes after the launch of %s (line %d)"
                         % (filename, default.lineno, VARIABLE, KERNEL, launch.lineno))
    return {"function_line": function.lineno, "line": default.lineno, "value": default.value.value,
            "launch_line": launch.lineno}


def patch_text(source, filename):
    """The patched text and the analysis before and after; PatchError unless the upstream code is there."""
    before = analyse(source, filename)
    if before["value"] != UPSTREAM_VALUE:
        raise PatchError("%s:%d: looked for `%s = %d` (vLLM's CUDA default) in %s(), found `%s = %d`%s"
                         % (filename, before["line"], VARIABLE, UPSTREAM_VALUE, FUNCTION, VARIABLE, before["value"],
                            " (this file was patched already: build FROM the vLLM release image, not a patched one)"
                            if MARKER in source else " (upstream changed it: check whether the patch is still needed)"))
    lines = source.splitlines(True)
    index = before["line"] - 1
    match = LINE_RE.match(lines[index].rstrip("\r\n"))
    if not match or int(match.group("value")) != UPSTREAM_VALUE:
        raise PatchError("%s:%d: looked for the line `%s = %d` alone, found %r"
                         % (filename, before["line"], VARIABLE, UPSTREAM_VALUE, lines[index]))
    ending = lines[index][len(lines[index].rstrip("\r\n")):]
    lines[index] = "%s%s = %d  %s%s" % (match.group("indent"), VARIABLE, PATCHED_VALUE, MARKER, ending)
    patched = "".join(lines)
    after = analyse(patched, filename)
    if after["value"] != PATCHED_VALUE or after["line"] != before["line"]:
        raise PatchError("%s: after the edit, %s() sets %s = %s at line %s (wanted %d at line %d)"
                         % (filename, FUNCTION, VARIABLE, after["value"], after["line"], PATCHED_VALUE, before["line"]))
    return patched, before, after


def installed_file():
    """The kernel file of the installed vLLM, found through the package (its __init__ is not run)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("the package %s is not installed for %s (looked for it with importlib.util.find_spec)"
                         % (PACKAGE, sys.executable))
    path = os.path.join(list(spec.submodule_search_locations)[0], RELATIVE_PATH)
    if not os.path.isfile(path):
        raise PatchError("%s is missing: looked for %s/%s in the installed %s" % (path, PACKAGE, RELATIVE_PATH,
                                                                                  PACKAGE))
    return path


def vllm_version():
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def cuda_version():
    """The CUDA version of the image's PyTorch (what vLLM's kernels are built for), else the CUDA base's
    CUDA_VERSION; None when neither says."""
    if importlib.util.find_spec("torch") is not None:
        import torch  # pylint: disable=import-outside-toplevel,import-error
        if torch.version.cuda:
            return str(torch.version.cuda)
    return os.environ.get("CUDA_VERSION") or None


def write_atomically(path, text):
    """Replace path's content keeping its mode; drop its compiled copies so nothing stale is imported."""
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=".kimi-patch.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    stem = os.path.splitext(os.path.basename(path))[0]
    for cached in glob.glob(os.path.join(os.path.dirname(path), "__pycache__", stem + ".*.pyc")):
        os.unlink(cached)


def command_patch(args):
    version = vllm_version()
    if version and version.split("+")[0] not in APPLIES_TO:
        raise PatchError("this image has %s %s; the patch is verified on %s only (the releases whose file it was read "
                         "from): check that release's %s and add it to APPLIES_TO"
                         % (PACKAGE, version or "(not installed)", ", ".join(APPLIES_TO), RELATIVE_PATH))
    if args.expect_vllm and (version or "").split("+")[0] != args.expect_vllm:
        raise PatchError("this image has %s %s, the collection's engine flags are pinned to %s (looked for it with "
                         "importlib.metadata): build FROM the %s release image"
                         % (PACKAGE, version or "(not installed)", args.expect_vllm, args.expect_vllm))
    cuda = cuda_version()
    if args.require_cuda_major:
        if not cuda or cuda.split(".")[0] != str(args.require_cuda_major):
            raise PatchError("this image's CUDA is %s (torch.version.cuda, else CUDA_VERSION); NVFP4's native FP4 MoE "
                             "needs CUDA %d (\"b12x fused MoE requires CUDA 13\"): build FROM the vLLM image built for "
                             "CUDA %d" % (cuda or "unknown", args.require_cuda_major, args.require_cuda_major))
    path = installed_file()
    with open(path, encoding="utf-8", newline="") as handle:
        source = handle.read()
    patched, before, after = patch_text(source, path)
    write_atomically(path, patched)
    with open(path, encoding="utf-8", newline="") as handle:
        check = analyse(handle.read(), path)
    if check["value"] != PATCHED_VALUE:
        raise PatchError("%s: read back %s = %s after writing it" % (path, VARIABLE, check["value"]))
    record = {"file": path, "module": MODULE, "function": FUNCTION, "line": after["line"],
              "before": "%s = %d" % (VARIABLE, before["value"]), "after": "%s = %d" % (VARIABLE, after["value"]),
              "launch_line": after["launch_line"], "vllm": version, "cuda": cuda}
    if args.record:
        with open(args.record, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2, sort_keys=True)
            handle.write("\n")
    print("kimi.deploy patched %s:%d: %s -> %s (vLLM %s, CUDA %s)" % (
        path, after["line"], record["before"], record["after"], version, cuda))
    return 0


def command_prove(args):
    """Import the module as vLLM imports it and read the value its launch uses back from the loaded function."""
    module = importlib.import_module(MODULE)
    function = getattr(module, FUNCTION, None)
    if function is None:
        raise PatchError("%s has no function %s (imported from %s)" % (MODULE, FUNCTION, module.__file__))
    source = textwrap.dedent(inspect.getsource(function))
    found = analyse(source, "%s:%s()" % (module.__file__, FUNCTION))
    proof = {"module": MODULE, "file": module.__file__, "function": FUNCTION, VARIABLE: found["value"],
             "expected": args.expect_num_stages, "vllm": vllm_version(), "cuda": cuda_version(),
             "patched": found["value"] == args.expect_num_stages}
    print(json.dumps(proof, sort_keys=True))
    return 0 if proof["patched"] else 1


def command_check(args):
    with open(args.file, encoding="utf-8", newline="") as handle:
        print(json.dumps(analyse(handle.read(), args.file), sort_keys=True))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    patch = sub.add_parser("patch", help="edit the installed vLLM in place")
    patch.add_argument("--expect-vllm", default="", help="the vLLM version the image must have, e.g. 0.22.1")
    patch.add_argument("--require-cuda-major", type=int, default=0, help="the CUDA major version the image must have")
    patch.add_argument("--record", default="", help="write what was patched to this JSON file")
    prove = sub.add_parser("prove", help="import the patched module and print the value it uses")
    prove.add_argument("--expect-num-stages", type=int, default=PATCHED_VALUE)
    check = sub.add_parser("check", help="analyse a file's text only")
    check.add_argument("file")
    args = parser.parse_args(argv)
    try:
        return {"patch": command_patch, "prove": command_prove, "check": command_check}[args.command](args)
    except PatchError as exc:
        print("PATCH FAILED: %s" % exc, file=sys.stderr)
        return EXIT_PATCH_FAILED


if __name__ == "__main__":
    sys.exit(main())
