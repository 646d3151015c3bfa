"""TEST DOUBLE of Huawei's `npu-smi` (not Huawei software): `npu-smi info` as an Atlas 800 A2 or A3 prints it.

Built from published output, field for field:
- Atlas 800 A3 (8 cards x 2 chips "Ascend910", Chip + Phy-ID rows, HBM x / 65536):
  vllm-project/vllm-ascend#2035 (npu-smi 24.1.rc3.7), ModelEngine-Group/unified-cache-management#748 (25.2.1),
  vllm-project/vllm-ascend#12980 (26.0.rc2, with the process table: "| NPU  Chip | Process id | Process name |
  Process memory(MB) |" rows and "No running processes found in NPU N").
- Atlas 800 A2 (8 cards x 1 chip "910B3", Chip row without Phy-ID): vllm-project/vllm-ascend#1130, #1767 (910B2,
  npu-smi 24.1.0.3).
The chips come from a GPU profile with platform: ascend (tests/fixtures/gpus/ascend-*.json, the same files the plan
playbook loads): KIMI_DOUBLE_GPU_PROFILE, else /etc/kimi-double/gpu-profile.json, else the copy the driver double
puts beside the driver's libraries (/usr/local/Ascend/driver/lib64/kimi-double-npus.json), which a container sees
through the same read-only mount the real npu-smi needs (seed 004). Installed as /usr/local/bin/npu-smi with a
python3 shebang. Processes: one line per process,
"<device> <pid> <name> <MiB>", in KIMI_DOUBLE_NPU_PROCS (default /var/lib/kimi-double/npu-processes); the engine
double adds itself there while it "holds" the NPUs, so the launcher's NPU-free wait sees it.
Exit codes: no profile -> 8 with the real tool's "dcmi module initialize failed" text (driver not loaded).
"""
import json
import os
import sys

PROFILES = [os.environ["KIMI_DOUBLE_GPU_PROFILE"]] if os.environ.get("KIMI_DOUBLE_GPU_PROFILE") else [
    "/etc/kimi-double/gpu-profile.json", "/usr/local/Ascend/driver/lib64/kimi-double-npus.json"]
PROCS = os.environ.get("KIMI_DOUBLE_NPU_PROCS", "/var/lib/kimi-double/npu-processes")
LEFT, MID, RIGHT = 27, 15, 52
WIDTH = LEFT + MID + RIGHT + 2


def row(left, mid, right):
    return "| %-*s| %-*s| %-*s|" % (LEFT - 1, left, MID - 1, mid, RIGHT - 1, right)


def full(text):
    return "| %-*s|" % (WIDTH - 1, text)


def rule(char="-", split=True):
    if not split:
        return "+" + char * WIDTH + "+"
    return "+" + char * LEFT + "+" + char * MID + "+" + char * RIGHT + "+"


def load():
    for path in PROFILES:
        try:
            with open(path) as handle:
                profile = json.load(handle)
        except (IOError, OSError, ValueError):
            continue
        chips = [g for g in profile.get("kimi_gpus", []) if g.get("platform") == "ascend"]
        if chips:
            return profile, chips
    return None


def processes():
    out = []
    try:
        with open(PROCS) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
                    out.append((int(parts[0]), int(parts[1]), parts[2], int(parts[3])))
    except (IOError, OSError):
        pass
    return out


def info(profile, chips):
    version = profile.get("kimi_npu_driver", {}).get("npu_smi_version", "25.2.1")
    a3 = any(c.get("chips_per_npu", 1) > 1 for c in chips)
    used = {}
    for device, _pid, _name, mib in processes():
        used[device] = used.get(device, 0) + mib
    lines = [rule("-", False), full("npu-smi %-24s Version: %s" % (version, version)), rule(),
             row("NPU   Name", "Health", "%-12s%-18s%s" % ("Power(W)", "Temp(C)", "Hugepages-Usage(page)")),
             row("Chip  Phy-ID" if a3 else "Chip", "Bus-Id", "%-12s%-18s%s" % ("AICore(%)", "Memory-Usage(MB)",
                                                                               "HBM-Usage(MB)")),
             rule("=")]
    for position, chip in enumerate(chips):
        first = not a3 or chip.get("chip_id", 0) == 0
        hbm = "%-4d / %d" % (3131 + used.get(chip["index"], 0), chip["memory_mib"])
        lines.append(row("%-6d%s" % (chip.get("npu", position), chip["chip"]), chip.get("health", "OK"),
                         "%-12s%-18s%s" % ("166.5" if first else "-", "38", "0    / 0")))
        lines.append(row("%-6d%s" % (chip.get("chip_id", 0), chip["index"] if a3 else ""), chip.get("bus_id", ""),
                         "%-12s%-18s%s" % ("0", "0    / 0", hbm)))
        last_of_card = not a3 or chip.get("chip_id", 0) == chip.get("chips_per_npu", 1) - 1
        lines.append(rule("=") if last_of_card else rule("-", False))
    lines.append(rule())
    lines.append(row("NPU     Chip", "Process id", "%-25s| %s" % ("Process name", "Process memory(MB)")))
    lines.append(rule("="))
    procs = processes()
    for card in sorted(set(c.get("npu", i) for i, c in enumerate(chips))):
        on_card = [c for c in chips if c.get("npu") == card]
        found = [(c, p) for c in on_card for p in procs if p[0] == c["index"]]
        if not found:
            lines.append(full("No running processes found in NPU %d" % card))
        for chip, (_device, pid, name, mib) in found:
            lines.append(row("%-8d%d" % (card, chip.get("chip_id", 0)), str(pid), "%-25s| %d" % (name[:24], mib)))
        lines.append(rule("="))
    return "\n".join(lines)


def main(argv):
    loaded = load()
    if loaded is None:
        print("dcmi module initialize failed. ret is -8005", file=sys.stderr)
        return 8
    profile, chips = loaded
    if argv[:1] == ["info"] and len(argv) == 1:
        print(info(profile, chips))
        return 0
    if argv[:1] in (["-v"], ["--version"], ["-V"]):
        print("npu-smi version: %s" % profile.get("kimi_npu_driver", {}).get("npu_smi_version", "25.2.1"))
        return 0
    print("Usage: npu-smi info (this TEST DOUBLE prints the chip and process tables only)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
