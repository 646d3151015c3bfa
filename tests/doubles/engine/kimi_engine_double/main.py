"""Process entry points: `vllm serve <model> [options]`, `python3 -m sglang.launch_server [options]` and
`trtllm-serve <model> [options]`."""
import signal
import sys
import threading

from . import flags, trtllm
from .server import EngineDouble

VLLM_SUBCOMMANDS = ("chat", "complete", "serve", "bench", "collect-env", "run-batch")


def serve(engine, argv):
    """Parse argv like the real engine, then run the double until SIGTERM/SIGINT. Returns the exit code."""
    try:
        args = flags.parse(engine, argv)
    except flags.UsageError as e:
        flags.usage_exit(engine, str(e))
    except flags.UnknownVersion as e:
        print(e, file=sys.stderr)
        return 1
    if args.get("help"):
        print("usage: %s [options] -- engine double of %s %s; options: see the pinned flag list"
              % (flags.PROGS[engine], engine, flags.version(engine)))
        return 0
    ints = ("port", "tensor_parallel_size")
    if engine == "sglang":  # type=int in SGLang's ServerArgs.add_cli_args
        ints += ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    for dest in ints:
        value = args.get(dest)
        if value is not None and not str(value).lstrip("-").isdigit():
            flags.usage_exit(engine, "argument --%s: invalid int value: %r" % (dest.replace("_", "-"), value))
    return _run(engine, args)


def _run(engine, args):
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return EngineDouble(engine, args).run(stop)


def trtllm_cli(argv):
    """The `trtllm-serve` console script (a click group whose default command is `serve`)."""
    try:
        table = flags.load_flags("trtllm")
    except flags.UnknownVersion as e:
        print(e, file=sys.stderr)
        return 1
    try:
        args = trtllm.parse(argv, table)
    except trtllm.ClickError as e:
        if e.code == 0 or (not e.usage and not str(e)):  # --help, or the group without arguments
            print(trtllm.help_text(table, e.group), file=sys.stdout if e.code == 0 else sys.stderr)
            return e.code
        if e.code == 1:
            print(e, file=sys.stderr)
            return 1
        print(trtllm.format_error(e, table), file=sys.stderr)
        return 2
    return _run("trtllm", args)


def vllm_cli(argv):
    """The `vllm` console script: only `serve` does anything in the double."""
    if argv[:1] in (["--version"], ["-v"]):
        print(flags.version("vllm"))
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm [-h] [-v] {%s} ... (engine double)" % ",".join(VLLM_SUBCOMMANDS))
        return 0 if argv else 2
    if argv[0] in VLLM_SUBCOMMANDS and argv[0] != "serve":
        print("vllm %s: not provided by the engine double" % argv[0], file=sys.stderr)
        return 1
    if argv[0] != "serve":
        print("usage: vllm [-h] [-v] {%s} ..." % ",".join(VLLM_SUBCOMMANDS), file=sys.stderr)
        print("vllm: error: argument subparser: invalid choice: %r (choose from %s)"
              % (argv[0], ", ".join(repr(c) for c in VLLM_SUBCOMMANDS)), file=sys.stderr)
        return 2
    return serve("vllm", argv[1:])
