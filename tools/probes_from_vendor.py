"""Convert the vendor verifier's test set into a kimi.deploy probe file (make probes-from-vendor IN=... OUT=...).

MoonshotAI/K2-Vendor-Verifier publishes its tool-call test set as JSONL, one OpenAI chat-completion request body a
line (messages, tools, tool_choice, ...). Each line becomes a case of category `vendor`: its messages as they are, its
tools under the file's `tools` (a tool whose name comes back with another schema gets its own key, the same name),
and no expected tool - its calls are scored on their schema, as the verifier scores them. A line whose tools use a
JSON-schema keyword the gate does not check (anyOf, $ref, ...) is left out and counted, never half-checked. The
output is for kimi_verify_probe_file; this repository ships none of their data.

    python3 tools/probes_from_vendor.py samples.jsonl my-probes.yml [--limit 200]
"""
import argparse
import json
import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy as acc  # noqa: E402


def convert(lines, limit=None, origin="the vendor verifier's test set"):
    """(probe file dict, how many lines were left out and why)."""
    tools, cases, skipped = {}, [], {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        request = json.loads(line)
        offered, keys = request.get("tools") or [], []
        try:
            for tool in offered:
                function = tool.get("function") or {}
                name, schema = function.get("name"), function.get("parameters") or {"type": "object"}
                acc.check_schema(schema, "line %d: tool %s" % (number, name))
                key = next((k for k, t in tools.items() if t["name"] == name and t["parameters"] == schema), None)
                if key is None:
                    key = name if name not in tools else "%s@%d" % (name, number)
                    tools[key] = {"name": name, "description": function.get("description", ""), "parameters": schema}
                keys.append(key)
        except acc.ProbeError as exc:
            why = str(exc).split(": ", 2)[-1].split(" (")[0]
            skipped[why] = skipped.get(why, 0) + 1
            continue
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        if not messages:
            skipped["no messages"] = skipped.get("no messages", 0) + 1
            continue
        cases.append({"id": "vendor-%04d" % number, "category": "vendor",
                      "source": "K2-Vendor-Verifier: line %d of %s" % (number, origin), "messages": messages, "tools": keys,
                      "variants": [{"thinking": True, "stream": bool(request.get("stream"))}]})
        if limit and len(cases) >= limit:
            break
    return {"version": acc.FORMAT_VERSION, "tools": tools, "cases": cases}, skipped


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("jsonl", help="the vendor verifier's test set (JSONL)")
    parser.add_argument("output", help="the probe file to write (YAML)")
    parser.add_argument("--limit", type=int, help="at most this many cases")
    args = parser.parse_args(argv)
    with open(args.jsonl) as handle:
        doc, skipped = convert(handle, args.limit, os.path.basename(args.jsonl))
    acc.load(doc, args.output)  # what the gate will load
    with open(args.output, "w") as handle:
        yaml.safe_dump(doc, handle, sort_keys=False, allow_unicode=True, width=120)
    print("%s: %d cases, %d tools%s" % (args.output, len(doc["cases"]), len(doc["tools"]), "".join(
        "; left out %d (%s)" % (n, why) for why, n in sorted(skipped.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
