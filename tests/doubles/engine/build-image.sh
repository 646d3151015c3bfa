#!/usr/bin/env bash
# Build the engine-double images FROM a local BASE_IMAGE (a Debian image with python3). No pulls. The three engines
# (SGLang, vLLM, TensorRT-LLM), and the two stand-ins for the NVFP4 image's vLLM CUDA-13 base (with and without the
# code the patch edits). Every tests/fixtures/engine_flags/engine_flags_*.json goes into the images' flags directory.
# Also the two metrics-exporter doubles (tests/doubles/exporters: dcgm-exporter, npu-exporter), from their own context.
#   usage: tests/doubles/engine/build-image.sh BASE_IMAGE [--force]
# Skips the build when all the images already carry the same content key (source files + base image id).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
flags_src="$here/../../fixtures/engine_flags"
# The chat formats the double speaks are the collection's own (kimi_engine_double/chat_format.py loads this file).
chat_format="$here/../../../plugins/module_utils/_chat_format.py"
exporters="$here/../exporters"
SGLANG_IMAGE=kimi-double/sglang:v0.5.12.post1-cu130
VLLM_IMAGE=kimi-double/vllm-openai:v0.22.1
CU130_IMAGE=kimi-double/vllm-openai:v0.22.1-cu130
NOPATTERN_IMAGE=kimi-double/vllm-openai:v0.22.1-cu130-nopattern
TRTLLM_IMAGE=kimi-double/tensorrt-llm:1.3.0rc17
VLLM_K3_IMAGE=kimi-double/vllm-openai:v0.33.0        # the releases that serve Kimi-K3
SGLANG_K3_IMAGE=kimi-double/sglang:v0.5.23-cu130
VLLM_ASCEND_IMAGE=kimi-double/vllm-ascend:v0.20.2rc1-a3
SGLANG_ASCEND_IMAGE=kimi-double/sglang-ascend:v0.5.13.post1-cann9.0.0-a3
DCGM_EXPORTER_IMAGE=kimi-double/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04
NPU_EXPORTER_IMAGE=kimi-double/npu-exporter:v26.1.0-ubuntu22.04
ASCENDHUB=swr.cn-south-1.myhuaweicloud.com/ascendhub
ALL_IMAGES=("$SGLANG_IMAGE" "$VLLM_IMAGE" "$CU130_IMAGE" "$NOPATTERN_IMAGE" "$TRTLLM_IMAGE" "$VLLM_ASCEND_IMAGE"
            "$SGLANG_ASCEND_IMAGE" "$VLLM_K3_IMAGE" "$SGLANG_K3_IMAGE" "$DCGM_EXPORTER_IMAGE" "$NPU_EXPORTER_IMAGE")
base="${1:-}"
force="${2:-}"
if [[ -z "$base" || "$base" == -* ]]; then
  echo "usage: $0 BASE_IMAGE [--force]   (BASE_IMAGE: a local Debian image with python3)" >&2
  exit 2
fi
if ! base_id="$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null)"; then
  echo "build-image.sh: base image '$base' not found locally; build it first (no pulls are made)" >&2
  exit 1
fi
flag_files=()
while IFS= read -r f; do flag_files+=("$f"); done < <(cd "$flags_src" && ls engine_flags_*.json | LC_ALL=C sort)
if [[ ! -f "$flags_src/engine_flags_trtllm-1.3.0rc17.json" ]]; then
  echo "build-image.sh: warning: no engine_flags_trtllm-1.3.0rc17.json: $TRTLLM_IMAGE will exit 1 at start" >&2
fi
key="$( { cd "$here" && find Dockerfile build-image.sh kimi_engine_double shims ../vllm_base ../exporters -type f \
          ! -path '*__pycache__*' ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum
        sha256sum < "$chat_format"  # by content, not by this checkout's path
        cd "$flags_src" && sha256sum "${flag_files[@]}"
        echo "$base_id"; } | sha256sum | cut -c1-16)"
label() { docker image inspect -f '{{index .Config.Labels "kimi.double.content-key"}}' "$1" 2>/dev/null || true; }
current=1
for image in "${ALL_IMAGES[@]}"; do [[ "$(label "$image")" == "$key" ]] || current=0; done
if [[ "$force" != "--force" && $current == 1 ]]; then
  echo "engine double images up to date (content key $key, base $base): ${ALL_IMAGES[*]}"
  exit 0
fi
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
tar -C "$here" --exclude=__pycache__ --exclude='*.pyc' -cf - Dockerfile kimi_engine_double shims | tar -C "$ctx" -xf -
cp "$chat_format" "$ctx/kimi_engine_double/_chat_format.py"
mkdir "$ctx/vllm_base"
tar -C "$here/../vllm_base/site" --exclude=__pycache__ --exclude='*.pyc' -cf - . | tar -C "$ctx/vllm_base" -xf -
mkdir "$ctx/exporters"
tar -C "$exporters" -cf - Dockerfile gpu_exporter.py | tar -C "$ctx/exporters" -xf -
mkdir "$ctx/flags"
(cd "$flags_src" && cp "${flag_files[@]}" "$ctx/flags/")
for pair in "sglang $SGLANG_IMAGE lmsysorg/sglang:v0.5.12.post1-cu130" "vllm $VLLM_IMAGE vllm/vllm-openai:v0.22.1" \
            "vllm-cu130 $CU130_IMAGE vllm/vllm-openai:v0.22.1-cu130" \
            "vllm-cu130-nopattern $NOPATTERN_IMAGE vllm/vllm-openai:v0.22.1-cu130(without-the-patched-code)" \
            "trtllm $TRTLLM_IMAGE nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc17" \
            "vllm-ascend $VLLM_ASCEND_IMAGE quay.io/ascend/vllm-ascend:v0.20.2rc1-a3" \
            "sglang-ascend $SGLANG_ASCEND_IMAGE quay.io/ascend/sglang:v0.5.13.post1-cann9.0.0-a3" \
            "vllm-k3 $VLLM_K3_IMAGE vllm/vllm-openai:v0.33.0" "sglang-k3 $SGLANG_K3_IMAGE lmsysorg/sglang:v0.5.23-cu130" \
            "dcgm-exporter $DCGM_EXPORTER_IMAGE nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04" \
            "npu-exporter $NPU_EXPORTER_IMAGE $ASCENDHUB/npu-exporter:v26.1.0-ubuntu22.04"; do
  read -r target image real <<<"$pair"
  old="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
  kind=engine context="$ctx" what="no GPU, no model"
  case "$target" in *-exporter) kind=exporter context="$ctx/exporters" what="no GPU, no NPU, made-up metrics" ;; esac
  echo "building $image (target $target, FROM $base, content key $key)"
  DOCKER_BUILDKIT=0 docker build --pull=false -q --target "$target" --build-arg "BASE_IMAGE=$base" \
    --label "kimi.double=$kind" --label "kimi.double.content-key=$key" --label "kimi.double.stands-in-for=$real" \
    --label "org.opencontainers.image.description=TEST DOUBLE of $real for kimi.deploy tests: $what" \
    -t "$image" "$context" >/dev/null 2>"$ctx/build.err" || { cat "$ctx/build.err" >&2; exit 1; }
  new="$(docker image inspect -f '{{.Id}}' "$image")"
  if [[ -n "$old" && "$old" != "$new" ]]; then
    docker image rm "$old" >/dev/null 2>&1 || true  # the superseded double, if nothing uses it
  fi
  echo "built $image ($new)"
done
