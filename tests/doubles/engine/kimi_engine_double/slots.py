"""A limited number of generation slots (KIMI_DOUBLE_SLOTS) and a time per generated token
(KIMI_DOUBLE_TOKEN_SECONDS): at most n requests generate at once, the others wait in arrival order (FIFO), as in an
engine whose running batch is full (SGLang --max-running-requests, vLLM --max-num-seqs, TensorRT-LLM max_batch_size);
each generated token takes s seconds, so a request holds its slot for its completion tokens x s."""
import collections
import threading
import time


def knobs(env):
    """(slots or None, token seconds) from the environment; raises ValueError with the message for a bad value.
    Unset or empty: no limit, no delay (the defaults)."""
    raw = (env.get("KIMI_DOUBLE_SLOTS") or "").strip()
    slots = None
    if raw:
        try:
            slots = int(raw)
        except ValueError:
            slots = 0
        if slots < 1:
            raise ValueError("engine double: bad KIMI_DOUBLE_SLOTS=%r (use a whole number >= 1)" % env.get(
                "KIMI_DOUBLE_SLOTS"))
    raw = (env.get("KIMI_DOUBLE_TOKEN_SECONDS") or "").strip()
    seconds = 0.0
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not 0.0 <= seconds < float("inf"):
            raise ValueError("engine double: bad KIMI_DOUBLE_TOKEN_SECONDS=%r (use a number of seconds >= 0)" % env.get(
                "KIMI_DOUBLE_TOKEN_SECONDS"))
    return slots, seconds


class Slots:
    """n slots handed out in arrival order: acquire() blocks while n requests hold one or an earlier request waits."""

    def __init__(self, n):
        self.n, self.busy = n, 0
        self.cond = threading.Condition()
        self.queue = collections.deque()

    def acquire(self):
        with self.cond:
            ticket = object()
            self.queue.append(ticket)
            while self.queue[0] is not ticket or self.busy >= self.n:
                self.cond.wait()
            self.queue.popleft()
            self.busy += 1
            self.cond.notify_all()  # the next in line may find a free slot too

    def release(self):
        with self.cond:
            self.busy -= 1
            self.cond.notify_all()

    def waiting(self):
        with self.cond:
            return len(self.queue)


def generate(seconds, tokens):
    """The time `tokens` generated tokens take."""
    if seconds > 0 and tokens > 0:
        time.sleep(seconds * tokens)


def chunk_tokens(item):
    """How many generated tokens a streamed chunk carries: a reasoning or content piece is one (one word = one token),
    a tool call 8 (as the usage counts it); the role, finish and usage chunks none."""
    tokens = 0
    for choice in item.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("reasoning_content") or delta.get("content"):
            tokens += 1
        tokens += 8 * len(delta.get("tool_calls") or [])
    return tokens
