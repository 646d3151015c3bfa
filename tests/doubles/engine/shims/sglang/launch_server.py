"""`python3 -m sglang.launch_server [options]` -> the Kimi engine double (a test stand-in, not SGLang)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from kimi_engine_double.main import serve  # noqa: E402

if __name__ == "__main__":
    sys.exit(serve("sglang", sys.argv[1:]))
