"""When each instance was out of the fleet gateway, read from the router's own worker list, and how many requests the
gateway sent it meanwhile (molecule/fleet's verify; stdlib only, runs on the controller).

    python3 gateway_windows.py LOAD_JSON GATEWAY SINCE HOST...

LOAD_JSON: gateway_load.py's output, whose "listed" holds the router's worker URLs as they changed ([{at, workers}];
workers null while the router did not answer). Each HOST's worker URL in the router is http://HOST:30000 (its
kimi_fleet_address, the container name); its engine's access log is read with `docker exec HOST journalctl -u kimi-k26
-o short-unix --since @SINCE`, and only the requests from GATEWAY's address (as HOST resolves it) count: the converge's
own verify and accuracy requests come from the host's own address. The access log is written when an answer ends: a
request the router sent just before a removal may end after it, by up to the slowest answer the load saw (its client
latency) plus the list's poll interval - the grace; a worker put back is seen up to one reading (POLL) after the router
has it again. stdout: {host: {"url", "windows": [[out, back or null]], "during":
requests from the gateway while out, past the grace and before the last reading, "late": when each request from the gateway inside a window ended,
in seconds after the window began, "before" / "after": from the gateway before the first window and after the last,
"total"}, "grace": seconds}.
"""
import json
import re
import subprocess
import sys

POLL = 0.2  # gateway_load.py's reading of the router's list
ACCESS = re.compile(r'^(?P<at>[0-9]+\.[0-9]+) .*INFO: +(?P<ip>[0-9.]+):[0-9]+ - "POST /v1/chat/completions ')


def windows(listed, url):
    """[[out, back]] intervals in which the router's list lacked url (back None: still out at the end)."""
    out, result, seen = None, [], False
    for record in sorted(listed, key=lambda r: r["at"]):
        if record["workers"] is None:  # the router did not answer: no information
            continue
        present = url in record["workers"]
        if present:
            seen = True
            if out is not None:
                result.append([out, record["at"]])
                out = None
        elif seen and out is None:
            out = record["at"]
    if out is not None:
        result.append([out, None])
    return result


def docker(host, *cmd):
    return subprocess.run(["docker", "exec", host] + list(cmd), check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout


def main():
    with open(sys.argv[1]) as f:
        load = json.load(f)
    listed = load["listed"]
    grace = max([r["seconds"] for r in load["records"]] + [0.0]) + POLL
    gateway, since, hosts = sys.argv[2], sys.argv[3], sys.argv[4:]
    report = {}
    for host in hosts:
        gateway_ip = docker(host, "getent", "ahostsv4", gateway).split()[0]
        journal = docker(host, "journalctl", "-u", "kimi-k26", "--no-pager", "-o", "short-unix", "--since", "@" + since)
        url = "http://%s:30000" % host
        spans = windows(listed, url)
        times = [float(m.group("at")) for m in map(ACCESS.match, journal.splitlines())
                 if m and m.group("ip") == gateway_ip]
        late = [round(t - start, 3) for t in times for start, end in spans if start <= t < (end or float("inf"))]
        # the list is read every POLL seconds: the router put a worker back up to one reading before it was seen
        spans_seen = [(start, (end or float("inf")) - start - POLL - 0.1) for start, end in spans]
        during = sum(1 for t in times for start, length in spans_seen if grace < t - start < length)
        report[host] = {"url": url, "windows": spans, "during": during, "late": late,
                        "total": len(times),
                        "before": sum(1 for t in times if spans and t < spans[0][0]),
                        "after": sum(1 for t in times if spans and spans[-1][1] and t > spans[-1][1])}
    report["grace"] = round(grace, 3)
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
