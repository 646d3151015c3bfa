"""Multi-node start-up of the engine double: what torch.distributed's TCP store does when a replica spans hosts.

Rank 0 (the head) listens at the rendezvous address (SGLang --dist-init-addr host:port; vLLM --master-addr and
--master-port) and waits for the other nnodes-1 ranks. Each rank sends what it was started with; the head compares
nnodes, world size (tp x pp), tp, pp, model, revision, KV dtype and quantization, and answers ok or the mismatch. A
rank that is missing after the timeout (KIMI_DOUBLE_RENDEZVOUS_TIMEOUT seconds, else SGLang's --dist-timeout, else
600) fails start-up with torch's message. After start-up every rank keeps its connection: when a member goes away the
others fail like a NCCL communicator does, so a replica restarts together. Each request the head answers is one
forward step over every rank (step()): a rank that is frozen (SIGSTOP) never acknowledges it, so the head's requests
stall while its /health still answers, as a real replica hangs in a collective.
"""
import json
import socket
import threading
import time

DEFAULT_TIMEOUT = 600.0
COMPARED = ("nnodes", "world_size", "tp", "pp", "model", "revision", "kv_cache_dtype", "quantization")


def settings(engine, args, env):
    """The rendezvous of a multi-node start, or None for one host."""
    nnodes = int(args.get("nnodes") or 1)
    if nnodes <= 1:
        return None
    if engine == "sglang":
        addr = args.get("dist_init_addr") or ""
        host, _sep, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("--dist-init-addr must be host:port for --nnodes %d, got %r" % (nnodes, addr))
        port = int(port)
    else:
        host, port = args.get("master_addr") or "127.0.0.1", int(args.get("master_port") or 29501)
    tp = int(args.get("tensor_parallel_size") or 1)
    pp = int(args.get("pipeline_parallel_size") or 1)
    timeout = env.get("KIMI_DOUBLE_RENDEZVOUS_TIMEOUT") or (args.get("dist_timeout") if engine == "sglang" else None)
    return {"host": host, "port": port, "rank": int(args.get("node_rank") or 0), "timeout": float(timeout or DEFAULT_TIMEOUT),
            "me": {"nnodes": nnodes, "world_size": tp * pp, "tp": tp, "pp": pp, "model": args.model,
                   "revision": args.get("revision"), "kv_cache_dtype": args.get("kv_cache_dtype") or "auto",
                   "quantization": args.get("quantization")}}


class Rendezvous:
    """join() once at start-up; then `lost` is set (with `lost_message`) when a member of the replica goes away."""

    def __init__(self, conf, log):
        self.conf = conf
        self.log = log
        self.lost = threading.Event()
        self.lost_message = None
        self.sockets = []
        self.listener = None
        self.step_lock = threading.Lock()  # one forward step at a time, like a collective
        self.acks = threading.Condition()
        self.acked = 0

    def step(self):
        """The head: one forward step over every other rank; blocks until each acknowledged it (a frozen rank never
        does: the request stalls) and returns True, or False when a member went away meanwhile."""
        with self.step_lock:
            with self.acks:
                self.acked = 0
            for conn in list(self.sockets):
                try:
                    conn.sendall(b"s")
                except OSError:
                    return False
            with self.acks:
                while self.acked < len(self.sockets) and not self.lost.is_set():
                    self.acks.wait(0.2)
            return not self.lost.is_set()

    def join(self, stop):
        """None when every rank joined and agrees, else the start-up error (shaped like the real one)."""
        if self.conf["rank"] == 0:
            return self._head(stop)
        return self._member(stop)

    def _mismatch(self, theirs, rank):
        mine = self.conf["me"]
        for key in COMPARED:
            if theirs.get(key) != mine.get(key):
                return ("RuntimeError: engine double: rank %d was started with %s=%r, rank 0 with %r: every host of "
                        "the replica must run the same configuration" % (rank, key, theirs.get(key), mine.get(key)))
        return None

    def _head(self, stop):
        conf = self.conf
        nnodes = conf["me"]["nnodes"]
        listener = socket.socket(socket.AF_INET6 if ":" in conf["host"] else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((conf["host"], conf["port"]))
        except OSError as exc:
            return ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                    "address. port: %d, useIpv6: 0, code: -98, name: EADDRINUSE, message: %s" % (conf["port"], exc.strerror))
        listener.listen(nnodes)
        listener.settimeout(0.2)
        self.listener = listener
        self.log("Rendezvous: rank 0 waiting for %d other rank(s) at %s:%d" % (nnodes - 1, conf["host"], conf["port"]))
        joined = {}
        deadline = time.time() + conf["timeout"]
        while len(joined) < nnodes - 1:
            if stop.is_set():
                return "stopped"
            if time.time() > deadline:
                return ("torch.distributed.DistStoreError: Timed out after %d seconds waiting for clients. %d/%d "
                        "clients joined." % (conf["timeout"], len(joined) + 1, nnodes))
            try:
                conn, _addr = listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(10)
            try:
                theirs = json.loads(conn.makefile("r").readline() or "{}")
            except (ValueError, OSError):
                conn.close()
                continue
            rank = int(theirs.get("rank", -1))
            problem = self._mismatch(theirs, rank) or (None if 0 < rank < nnodes and rank not in joined else
                                                       "RuntimeError: engine double: rank %d joined twice or is out of "
                                                       "range for nnodes=%d" % (rank, nnodes))
            conn.sendall((json.dumps({"ok": problem is None, "error": problem}) + "\n").encode())
            if problem:
                conn.close()
                return problem
            joined[rank] = conn
        self.log("Rendezvous: all %d ranks joined" % nnodes)
        for rank, conn in sorted(joined.items()):
            self._watch(conn, "rank %d" % rank)
        threading.Thread(target=self._serve_store, daemon=True).start()
        return None

    def _serve_store(self):
        """Like torch's TCPStore, the head keeps accepting clients for its whole life (a connection that sends no
        store request, e.g. a reachability probe, is simply closed), so the port stays reachable while it serves."""
        listener = self.listener
        while not self.lost.is_set():
            try:
                conn, _addr = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.close()

    def _member(self, stop):
        conf = self.conf
        deadline = time.time() + conf["timeout"]
        while True:
            if stop.is_set():
                return "stopped"
            try:
                conn = socket.create_connection((conf["host"], conf["port"]), timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    return ("torch.distributed.DistNetworkError: The client socket has timed out after %dms while "
                            "trying to connect to (%s, %d)." % (conf["timeout"] * 1000, conf["host"], conf["port"]))
                time.sleep(0.5)
        conn.settimeout(max(1.0, deadline - time.time()))
        conn.sendall((json.dumps(dict(conf["me"], rank=conf["rank"])) + "\n").encode())
        try:
            answer = json.loads(conn.makefile("r").readline() or "{}")
        except (ValueError, OSError):
            answer = {}
        if not answer.get("ok"):
            conn.close()
            return answer.get("error") or "RuntimeError: engine double: the head closed the rendezvous"
        self.log("Rendezvous: rank %d joined %s:%d" % (conf["rank"], conf["host"], conf["port"]))
        self._watch(conn, "rank 0 (the head)")
        return None

    def _watch(self, conn, who):
        conn.settimeout(None)
        self.sockets.append(conn)

        def watch():
            try:
                while True:
                    data = conn.recv(1024)
                    if not data:
                        break
                    if self.conf["rank"] == 0:  # the other rank acknowledged a step
                        with self.acks:
                            self.acked += data.count(b"a")
                            self.acks.notify_all()
                    elif data.count(b"s"):  # a step from the head: do it (acknowledge)
                        conn.sendall(b"a" * data.count(b"s"))
            except OSError:
                pass
            if not self.lost.is_set():
                self.lost_message = ("torch.distributed.DistBackendError: NCCL error: remote process exited or there was "
                                     "a network error (%s of the replica is gone) [engine double]" % who)
                self.lost.set()
        threading.Thread(target=watch, daemon=True).start()

    def close(self):
        self.lost.set()  # our own stop: not a lost member
        for conn in self.sockets:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # a FIN now, and the watcher's blocked recv returns
                conn.close()
            except OSError:
                pass
        if self.listener is not None:
            self.listener.close()
