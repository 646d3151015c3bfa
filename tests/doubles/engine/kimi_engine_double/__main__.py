"""`python3 -m kimi_engine_double {vllm|sglang|trtllm} ...` (the same as the shims `vllm` / `-m sglang.launch_server` /
`trtllm-serve`)."""
import sys

from .main import serve, trtllm_cli, vllm_cli

if __name__ == "__main__":
    if sys.argv[1:2] == ["sglang"]:
        sys.exit(serve("sglang", sys.argv[2:]))
    if sys.argv[1:2] == ["vllm"]:
        sys.exit(vllm_cli(sys.argv[2:]))
    if sys.argv[1:2] == ["trtllm"]:
        sys.exit(trtllm_cli(sys.argv[2:]))
    sys.exit("usage: python3 -m kimi_engine_double {vllm|sglang|trtllm} ARGS...")
