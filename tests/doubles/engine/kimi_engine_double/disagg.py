"""Prefill/decode disaggregation of the engine double, as the real routers drive it (see README "Disaggregation").

SGLang (`--disaggregation-mode prefill|decode`): SMG (as sglang-router 0.3.2 before it) sends the same request to the
prefill and the decode at once, with `bootstrap_host`/`bootstrap_port`/`bootstrap_room`. The prefill serves a
bootstrap HTTP server on `--disaggregation-bootstrap-port` (GET /route: its parallel info, as sglang/srt/disaggregation/common/conn.py) and
keeps the prompt's KV for the room; the decode asks the prefill's /route, checks the layout, then pulls the room's
KV (the double's stand-in for mooncake/nixl: GET /kv/<room> on the bootstrap server, polled until it is there).

vLLM (`--kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": ...}'`): SMG (its worker's kv_connector
NixlConnector, from its discovery file) or vllm-router sends the request to the prefill first with
`kv_transfer_params: {"do_remote_decode": true, ...}` and `max_tokens: 1`; the prefill answers with
`kv_transfer_params` (`do_remote_prefill`, `remote_engine_id`, `remote_block_ids`, `remote_host`, `remote_port`, ...)
which the router passes to the decode. The side channel (VLLM_NIXL_SIDE_CHANNEL_PORT, default
5600) is an HTTP server here: GET /meta (the handshake: engine id and what the compatibility hash covers) and
GET /kv/<request id> (the double's stand-in for the NIXL read).
"""
import hashlib
import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import flags

SGLANG_BOOTSTRAP_PORT = 8998  # ServerArgs.disaggregation_bootstrap_port
SGLANG_BACKEND = "mooncake"  # ServerArgs.disaggregation_transfer_backend
VLLM_BLOCK_SIZE = 16
# vLLM's KVConnectorFactory registry (0.22.1). Modelled: the side-channel env var and its default.
VLLM_MODELLED = {"NixlConnector": ("VLLM_NIXL_SIDE_CHANNEL_PORT", 5600),
                 "MooncakeConnector": ("VLLM_MOONCAKE_BOOTSTRAP_PORT", 8998),
                 "MooncakeConnectorV1": ("VLLM_MOONCAKE_BOOTSTRAP_PORT", 8998)}
VLLM_OTHER = ("ExampleConnector", "SharedStorageConnector", "P2pNcclConnector", "LMCacheConnectorV1",
              "LMCacheMPConnector", "MultiConnector", "OffloadingConnector", "DecodeBenchConnector",
              "MoRIIOConnector", "ExampleHiddenStatesConnector")
VLLM_ROLES = ("kv_producer", "kv_consumer", "kv_both")
NO_ROOM = "Invalid request: Disaggregated request received without bootstrap room id"
KEEP_SECONDS = 300.0  # SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT; VLLM_NIXL_ABORT_REQUEST_TIMEOUT is 480
KEEP_MAX = 1024
_DTYPE_ALIASES = {"bf16": "bfloat16"}


class Problem(Exception):
    """A start-up problem (the double exits 1 with this message)."""


def setup(e):
    """The disaggregation of engine double `e`, or None without PD flags. Raises Problem."""
    if e.engine == "sglang" and (e.args.get("disaggregation_mode") or "null") != "null":
        return SGLangPD(e)
    if e.engine == "vllm" and e.args.get("kv_transfer_config"):
        return VllmPD.from_double(e)
    return None


class _KVStore:
    """What a prefill keeps for its decode: bounded, expiring, taken once (the decode frees it by reading it)."""

    def __init__(self, keep=KEEP_SECONDS, limit=KEEP_MAX):
        self.keep, self.limit, self.items, self.lock = keep, limit, {}, threading.Lock()

    def put(self, key, entry):
        with self.lock:
            now = time.time()
            for k in [k for k, v in self.items.items() if now - v["stored"] > self.keep]:
                del self.items[k]
            while len(self.items) >= self.limit:
                del self.items[min(self.items, key=lambda k: self.items[k]["stored"])]
            self.items[key] = dict(entry, stored=now)

    def take(self, key):
        with self.lock:
            entry = self.items.pop(key, None)
        return entry if entry and time.time() - entry["stored"] <= self.keep else None


class _SideServer:
    """The prefill's side HTTP server (SGLang's bootstrap server, vLLM's NIXL side channel)."""

    def __init__(self, pd, host, port):
        handler = type("SideHandler", (_SideHandler,), {"pd": pd})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.1,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _SideHandler(BaseHTTPRequestHandler):
    pd = None

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        code, body = self.pd.side_get(url.path, dict(urllib.parse.parse_qsl(url.query)))
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _get_json(url, timeout):
    """(status, body) of a GET; raises OSError when the peer cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except urllib.error.URLError as err:
        raise OSError(str(err.reason)) from err


def _timeout(env):
    try:
        return float(env.get("KIMI_DOUBLE_KV_TRANSFER_TIMEOUT") or 10)
    except ValueError:
        return 10.0


class _Context:
    """One request's part in the disaggregation (between begin and end)."""

    def __init__(self, req, error=None):
        self.req, self.error, self.role, self.key, self.log_ids = req, error, None, None, ""


class SGLangPD:
    """--disaggregation-mode prefill|decode (SGLang)."""

    def __init__(self, e):
        self.e, args = e, e.args
        self.mode = args.get("disaggregation_mode")
        self.backend = args.get("disaggregation_transfer_backend") or SGLANG_BACKEND
        self.bootstrap_port = int(args.get("disaggregation_bootstrap_port") or SGLANG_BOOTSTRAP_PORT)
        self.layout = {"page_size": int(args.get("page_size") or 1),
                       "kv_cache_dtype": args.get("kv_cache_dtype") or "auto", "transfer_backend": self.backend}
        self.kv, self.server = _KVStore(), None

    def start(self):
        if self.mode != "prefill":
            self.e.log("Disaggregation decode: transfer backend %s, page size %d, kv_cache_dtype %s [engine double]"
                       % (self.backend, self.layout["page_size"], self.layout["kv_cache_dtype"]))
            return
        try:
            self.server = _SideServer(self, self.e.host, self.bootstrap_port)
        except OSError as err:
            where = (err.errno, self.e.host, self.bootstrap_port, err.strerror)
            raise Problem("OSError: [Errno %s] error while attempting to bind on address (%r, %d): %s "
                          "(the disaggregation bootstrap server)" % where)
        self.bootstrap_port = self.server.port
        self.e.log("CommonKVBootstrapServer started successfully on %s:%d (transfer backend %s) [engine double]"
                   % (self.e.host, self.bootstrap_port, self.backend))

    def close(self):
        if self.server:
            self.server.close()

    def parallel_info(self):
        """GET /route with every rank -1: PrefillServerInfo (+ transfer_backend, the double's extension)."""
        a = self.e.args
        return {"attn_tp_size": int(a.get("tensor_parallel_size") or 1) // int(a.get("data_parallel_size") or 1),
                "attn_cp_size": 1, "dp_size": int(a.get("data_parallel_size") or 1),
                "pp_size": int(a.get("pipeline_parallel_size") or 1), "page_size": self.layout["page_size"],
                "kv_cache_dtype": self.layout["kv_cache_dtype"], "follow_bootstrap_room": True,
                "transfer_backend": self.backend}

    def side_get(self, path, query):
        if path == "/health":
            return 200, "OK"
        if path == "/route":
            ranks = [v for k, v in query.items() if k in ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank",
                                                          "target_pp_rank", "engine_rank", "target_dp_group")]
            if not ranks:
                return 400, "Missing inputs for bootstrap server."
            if all(v == "-1" for v in ranks):
                return 200, self.parallel_info()
            return 200, {"rank_ip": self.e.host, "rank_port": self.bootstrap_port}
        if path.startswith("/kv/"):
            entry = self.kv.take(path[len("/kv/"):])
            return (200, entry) if entry else (404, "no KV for bootstrap_room=%s [engine double]" % path[4:])
        return 404, "Not Found"

    def begin(self, req, headers):
        room = req.get("bootstrap_room") if isinstance(req, dict) else None
        if room is None:
            return _Context(req, self.e.error(400, NO_ROOM, "BadRequestError"))
        ctx = _Context(req)
        ctx.role, ctx.key = self.mode, str(room)
        rid = req.get("rid") or uuid.uuid4().hex
        if self.mode == "prefill":  # the prefill makes the first token only; the decode does the rest
            ctx.req = dict(req, max_completion_tokens=1, max_tokens=1)
            return ctx
        addr = "%s:%s" % (req.get("bootstrap_host"), req.get("bootstrap_port"))
        reason, entry = self._fetch(addr, ctx.key)
        if reason:
            msg = ("Decode transfer failed for request rank=0 decode_req.req.rid=%r decode_req.req.bootstrap_room=%s "
                   "with exception KVTransferError(bootstrap_room=%s): %s" % (rid, room, room, reason))
            self.e.log(msg, level="ERROR")
            ctx.error = self.e.error(500, msg, "InternalServerError")
            return ctx
        self.e.log("Decode: bootstrap_room=%s KV received from %s (%d tokens) [engine double]"
                   % (room, addr, entry["tokens"]))
        return ctx

    def _fetch(self, addr, room):
        """(reason, None) when the KV cannot be had from the prefill at addr, else (None, entry)."""
        base = "http://%s" % addr
        try:
            route = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
            code, info = _get_json(base + route, timeout=min(_timeout(self.e.env), 5))
        except (OSError, ValueError) as err:
            return "Could not fetch prefill parallel info from bootstrap_addr: %s (%s)" % (addr, err), None
        if code != 200 or not isinstance(info, dict):
            return ("Could not fetch prefill parallel info from bootstrap_addr: %s (HTTP %s: %s)"
                    % (addr, code, str(info)[:200])), None
        for key, label in (("page_size", "Page size"), ("kv_cache_dtype", "KV cache dtype"),
                           ("transfer_backend", "Transfer backend")):
            theirs, mine = info.get(key), self.layout[key]
            if key == "kv_cache_dtype":
                theirs, mine = _DTYPE_ALIASES.get(theirs, theirs), _DTYPE_ALIASES.get(mine, mine)
            if theirs != mine:
                return ("%s mismatch: prefill %s=%r (bootstrap_addr %s), decode %s=%r"
                        % (label, key, info.get(key), addr, key, self.layout[key])), None
        deadline = time.time() + _timeout(self.e.env)
        while True:
            try:
                code, entry = _get_json("%s/kv/%s" % (base, room), timeout=2)
            except (OSError, ValueError) as err:
                return "Failed to get kvcache from prefill instance %s, it might be dead (%s)" % (addr, err), None
            if code == 200 and isinstance(entry, dict):
                return None, entry
            if time.time() >= deadline:
                return ("Request %s timed out after %.1fs in KVPoll.WaitingForInput: the prefill at %s has no KV for "
                        "bootstrap_room=%s [engine double]" % (room, _timeout(self.e.env), addr, room)), None
            time.sleep(0.05)

    def end(self, ctx, plan):
        if ctx.role != "prefill":
            return
        tokens = plan["usage"]["prompt_tokens"]
        self.kv.put(ctx.key, {"bootstrap_room": ctx.key, "tokens": tokens})
        self.e.log("Prefill done: bootstrap_room=%s, %d tokens, KV kept for the decode [engine double]"
                   % (ctx.key, tokens))


class VllmPD:
    """--kv-transfer-config (vLLM): NixlConnector (and the Mooncake names) with kv_role producer/consumer/both."""

    def __init__(self, e, conf):
        self.e, self.conf = e, conf
        self.connector, self.role = conf["kv_connector"], conf["kv_role"]
        self.engine_id = str(conf.get("engine_id") or uuid.uuid4())
        self.block_size = int(e.args.get("block_size") or VLLM_BLOCK_SIZE)
        self.kv_cache_dtype = e.args.get("kv_cache_dtype") or "auto"
        self.kv, self.server, self.next_block = _KVStore(480.0), None, 1
        self.lock = threading.Lock()
        env_name, default = VLLM_MODELLED.get(self.connector, (None, None))
        self.side_host = e.env.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or "localhost"
        self.side_port = int(e.env.get(env_name) or default) if env_name else None

    @classmethod
    def from_double(cls, e):
        raw = e.args.get("kv_transfer_config")
        try:
            conf = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as err:
            raise Problem("ValueError: --kv-transfer-config: %r is not valid JSON (%s)" % (raw, err))
        if not isinstance(conf, dict):
            raise Problem("ValueError: --kv-transfer-config: expected a JSON object, got %r" % raw)
        if conf.get("kv_role") is not None and conf["kv_role"] not in VLLM_ROLES:
            raise Problem("ValueError: Unsupported kv_role: %s. Supported roles are %s"
                          % (conf["kv_role"], VLLM_ROLES))
        if not conf.get("kv_connector"):
            return None  # nothing to transfer with
        if conf.get("kv_role") is None:
            raise Problem("ValueError: Please specify kv_role when kv_connector is set, supported roles are %s"
                          % (VLLM_ROLES,))
        if conf["kv_connector"] not in VLLM_MODELLED and conf["kv_connector"] not in VLLM_OTHER:
            raise Problem("ValueError: Unsupported connector type: %s" % conf["kv_connector"])
        return cls(e, conf)

    def start(self):
        if self.side_port is None:
            self.e.log("KV connector %s is not modelled by the engine double: no KV transfer [engine double]"
                       % self.connector, "factory.py", level="WARNING", proc="EngineCore_DP0")
            return
        try:
            self.server = _SideServer(self, self.side_host, self.side_port)
        except OSError:
            raise Problem("zmq.error.ZMQError: Address already in use (addr: 'tcp://%s:%d') (the %s side channel; "
                          "set %s per instance on one host)" % (self.side_host, self.side_port, self.connector,
                                                                VLLM_MODELLED[self.connector][0]))
        self.side_port = self.server.port
        self.e.log("Creating v1 connector with name: %s and engine_id: %s, kv_role=%s, side channel %s:%d "
                   "[engine double]" % (self.connector, self.engine_id, self.role, self.side_host, self.side_port),
                   "factory.py", proc="EngineCore_DP0")

    def close(self):
        if self.server:
            self.server.close()

    def meta(self):
        """The handshake: the engine id and what vLLM's compatibility hash covers."""
        a = self.e.args
        return {"engine_id": self.engine_id, "connector": self.connector, "model": self.e.model,
                "kv_cache_dtype": self.kv_cache_dtype, "block_size": self.block_size,
                "tp_size": int(a.get("tensor_parallel_size") or 1), "vllm_version": _vllm_version()}

    def side_get(self, path, query):
        if path == "/meta":
            return 200, self.meta()
        if path.startswith("/kv/"):
            entry = self.kv.take(urllib.parse.unquote(path[len("/kv/"):]))
            return (200, entry) if entry else (404, "no KV kept for request %s [engine double]" % path[4:])
        return 404, "Not Found"

    def begin(self, req, headers):
        params = req.get("kv_transfer_params") if isinstance(req, dict) else None
        ctx = _Context(req)
        if not isinstance(params, dict) or self.side_port is None:
            return ctx
        rid = "chatcmpl-" + (headers.get("X-Request-Id") or uuid.uuid4().hex)
        if params.get("do_remote_decode"):
            if self.role == "kv_consumer":
                ctx.error = self.e.error(400, "kv_transfer_params.do_remote_decode on a kv_consumer: this instance "
                                         "does not produce KV [engine double]", "BadRequestError")
            ctx.role, ctx.key = "prefill", rid
            return ctx
        if not params.get("do_remote_prefill"):
            return ctx
        if self.role == "kv_producer":
            ctx.error = self.e.error(400, "kv_transfer_params.do_remote_prefill on a kv_producer: this instance "
                                     "does not consume KV [engine double]", "BadRequestError")
            return ctx
        needed = ("remote_engine_id", "remote_block_ids", "remote_host", "remote_port")
        if any(params.get(k) is None for k in needed):
            self.e.log("Got invalid KVTransferParams: %s. This request will not utilize KVTransfer" % params,
                       "nixl_connector.py", level="WARNING", proc="EngineCore_DP0")
            return ctx
        reason, entry = self._fetch(params)
        where = "%s:%s" % (params["remote_host"], params["remote_port"])
        ids = "remote_engine_id=%s remote_block_ids=%s" % (params["remote_engine_id"], params["remote_block_ids"])
        if reason:
            msg = "KV load failed for request %s from %s (%s): %s" % (rid, where, ids, reason)
            if self.conf.get("kv_load_failure_policy") == "recompute":
                self.e.log(msg + "; kv_load_failure_policy=recompute: prefilling locally", "nixl_connector.py",
                           level="WARNING", proc="EngineCore_DP0")
                return ctx
            self.e.log(msg, "nixl_connector.py", level="ERROR", proc="EngineCore_DP0")
            ctx.error = self.e.error(500, msg + " (kv_load_failure_policy=fail) [engine double]",
                                     "InternalServerError")
            return ctx
        self.e.log("Request %s: KV received from %s: %s remote_request_id=%s (%d tokens) [engine double]"
                   % (rid, where, ids, params.get("remote_request_id"), entry["tokens"]), "nixl_connector.py",
                   proc="EngineCore_DP0")
        return ctx

    def _fetch(self, params):
        base = "http://%s:%s" % (params["remote_host"], params["remote_port"])
        try:
            code, meta = _get_json(base + "/meta", timeout=5)  # the real handshake waits 5 s (zmq RCVTIMEO)
        except (OSError, ValueError) as err:
            return "NIXL handshake with %s failed: %s" % (base[7:], err), None
        if code != 200 or not isinstance(meta, dict):
            return "NIXL handshake with %s failed: HTTP %s" % (base[7:], code), None
        if meta.get("engine_id") != params["remote_engine_id"]:
            return ("Remote NIXL agent engine ID mismatch. Expected %s, received %s."
                    % (params["remote_engine_id"], meta.get("engine_id"))), None
        mine = self.meta()
        diffs = ["%s %r on the prefill, %r here" % (k, meta.get(k), mine[k])
                 for k in ("vllm_version", "model", "kv_cache_dtype", "block_size") if meta.get(k) != mine[k]]
        if diffs:
            return ("NIXL compatibility hash mismatch. Local: %s, Remote: %s. Prefill and decode instances have "
                    "incompatible configurations [engine double: %s]" % (_hash(mine), _hash(meta), "; ".join(diffs))
                    ), None
        key = params.get("remote_request_id") or ""
        try:
            code, entry = _get_json("%s/kv/%s" % (base, urllib.parse.quote(key, safe="")), timeout=5)
        except (OSError, ValueError) as err:
            return "NIXL transfer from %s failed: %s" % (base[7:], err), None
        if code != 200 or not isinstance(entry, dict) or entry.get("block_ids") != params["remote_block_ids"]:
            return ("NIXL transfer failed: the prefill %s holds no blocks %s for remote_request_id=%s [engine double]"
                    % (base[7:], params["remote_block_ids"], key)), None
        return None, entry

    def end(self, ctx, plan):
        if ctx.role != "prefill" or plan["finish"] != "length":  # request_finished: only a length-capped prefill
            return
        tokens = plan["usage"]["prompt_tokens"]
        with self.lock:
            first = self.next_block
            self.next_block += max(1, math.ceil(tokens / self.block_size))
        blocks = list(range(first, self.next_block))
        self.kv.put(ctx.key, {"request_id": ctx.key, "tokens": tokens, "block_ids": blocks})
        plan["extra"] = {"kv_transfer_params": {
            "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": blocks,
            "remote_engine_id": self.engine_id, "remote_request_id": ctx.key, "remote_host": self.side_host,
            "remote_port": self.side_port, "tp_size": int(self.e.args.get("tensor_parallel_size") or 1)}}
        self.e.log("Request %s prefilled (%d tokens): remote_engine_id=%s remote_block_ids=%s kept for the decode "
                   "on %s:%d [engine double]" % (ctx.key, tokens, self.engine_id, blocks, self.side_host,
                                                 self.side_port), "nixl_connector.py", proc="EngineCore_DP0")


def _vllm_version():
    return flags.version("vllm")


def _hash(meta):
    keys = ("vllm_version", "model", "kv_cache_dtype", "block_size")
    return hashlib.sha256(json.dumps([meta.get(k) for k in keys]).encode()).hexdigest()[:16]
