"""Fake Hugging Face Hub + CDN: a test double for kimi.deploy.

Standard library only (runs on python3 3.11+ in a bare Debian container).

Two HTTP/1.1 listeners share one in-process state:

* the *hub* (``HF_ENDPOINT``): ``/api/models/{repo}/revision/{rev}``, ``/api/models/{repo}/tree/{rev}[/{path}]``
  (cursor pagination with a ``Link: <...>; rel="next"`` header), ``/api/models/{repo}/paths-info/{rev}`` and
  ``HEAD|GET /{repo}/resolve/{rev}/{path}``. Regular (git) files are served directly with ``ETag: "<git blob
  sha1>"``; LFS files get a 302 to a signed URL on the CDN, which has another host *name* (not just another port).
* the *CDN*: ``GET|HEAD /repos/{repo}/{sha256}?expires=..&issued=..&sig=..`` with Range support (206/416).

Repos are generated deterministically from a :class:`RepoSpec`; shard bytes are computed on the fly from their
offset, so multi-GB repos cost no disk and little RAM. Hashes of the big files are cached in a JSON file under
``~/.cache/kimi-fake-hub/`` (or ``--cache-dir`` / ``$KIMI_FAKE_HUB_CACHE``).

Observability: every request is logged (``GET /_fake/requests``, ``POST /_fake/reset``); fault switches are set
in-process or with ``POST /_fake/faults``. See README.md next to this file.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlencode, urlsplit

GENERATOR_VERSION = 2  # 2: a working tokenizer (tiktoken.model merges, tokenization_kimi.py)
BLOCK = 1 << 20  # pseudo-random stream block size
LFS_THRESHOLD = 1 << 20  # files larger than this are LFS
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.model", "*.pt", "*.pth", "*.gguf", "*.h5", "*.msgpack", "*.onnx",
                "*.tiktoken", "*.zst", "*.tar", "*.gz")
DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "kimi-fake-hub")
_DEFAULT = object()  # sentinel: $KIMI_FAKE_HUB_CACHE or DEFAULT_CACHE_DIR
LAST_MODIFIED = "2026-04-20T12:00:00.000Z"
CREATED_AT = "2026-04-20T10:00:00.000Z"
REPO_KINDS = ("model", "eagle3", "dflash")
# model: the Kimi checkpoint; the others: speculative-decoding drafts. MODEL_TYPES: a model repo's architecture
# (RepoSpec.model_type).
MODEL_TYPES = ("kimi_k25", "kimi_k3")
DRAFT_HIDDEN_SIZE = 7168  # Kimi-K2.6's hidden size, which a draft must match
DRAFT_VOCAB_SIZE = 163840  # Kimi-K2.6's vocabulary size, idem

_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000 ** 2, "mb": 1000 ** 2,
               "mib": 1 << 20, "g": 1000 ** 3, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1000 ** 4, "tb": 1000 ** 4,
               "tib": 1 << 40}


def parse_size(value) -> int:
    """'8MiB' -> 8388608, '1.5GB' -> 1500000000, 4096 -> 4096."""
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"bad size: {value!r}")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


# --------------------------------------------------------------------------------------------------------------
# Repo specs and deterministic content
# --------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RepoSpec:
    """What a fake repo contains. Everything is derived from these fields (commit sha included)."""

    repo_id: str = "moonshotai/Kimi-K2.6"
    shards: int = 4
    shard_size: int = 8 << 20
    extra: int = 0  # number of extra small regular files under extra/ (to exercise pagination)
    private: bool = False
    seed: str = ""  # change to get different bytes / another commit for the same repo id
    quant: str = "auto"  # auto | int4 | nvfp4 | fp8 | bf16
    tiktoken_tokens: int = 4096
    kind: str = "model"  # model (the Kimi checkpoint) | eagle3 | dflash (speculative-decoding drafts)
    hidden_size: int = DRAFT_HIDDEN_SIZE  # drafts only: overrides config.json's value (for mismatch tests)
    vocab_size: int = DRAFT_VOCAB_SIZE  # drafts only: idem
    # The checkpoint's architecture, as its config.json model_type: kimi_k25 (Kimi-K2.6, Kimi-K2.7-Code) or kimi_k3
    # (Kimi-K3 and its successors: KimiK3ForConditionalGeneration over a kimi_linear text config). auto: kimi_k3 when
    # the repo id names Kimi-K3, else kimi_k25.
    model_type: str = "auto"

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", self.repo_id):
            raise ValueError(f"repo_id must be 'namespace/name': {self.repo_id!r}")
        kind = str(self.kind).strip().lower()
        if kind not in REPO_KINDS:
            raise ValueError(f"kind must be {'|'.join(REPO_KINDS)}: {self.kind!r}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "hidden_size", int(self.hidden_size))
        object.__setattr__(self, "vocab_size", int(self.vocab_size))
        if self.hidden_size < 1 or self.vocab_size < 1:
            raise ValueError("hidden_size and vocab_size must be >= 1")
        if kind == "model" and (self.hidden_size, self.vocab_size) != (DRAFT_HIDDEN_SIZE, DRAFT_VOCAB_SIZE):
            raise ValueError("hidden_size and vocab_size apply to draft kinds (eagle3, dflash) only")
        if kind != "model":
            # A draft is one model.safetensors in bf16 with no tokenizer: shards, quant and tiktoken_tokens are
            # ignored (normalized, so that they change neither the bytes nor the commit).
            object.__setattr__(self, "shards", 1)
            object.__setattr__(self, "quant", "bf16")
            object.__setattr__(self, "tiktoken_tokens", 4096)
        object.__setattr__(self, "shard_size", parse_size(self.shard_size))
        object.__setattr__(self, "shards", int(self.shards))
        object.__setattr__(self, "extra", int(self.extra))
        object.__setattr__(self, "tiktoken_tokens", max(256, min(int(self.tiktoken_tokens), 256 + 94 * 94)))
        object.__setattr__(self, "private", _bool(self.private))
        if self.shards < 1 or self.shards > 99999 or self.shard_size < 1:
            raise ValueError("shards must be 1..99999 and shard_size >= 1")
        model_type = str(self.model_type).strip().lower()
        if model_type == "auto":
            model_type = "kimi_k3" if kind == "model" and "kimi-k3" in self.repo_id.lower() else "kimi_k25"
        if model_type not in MODEL_TYPES or (kind != "model" and model_type != "kimi_k25"):
            raise ValueError(f"model_type must be auto|{'|'.join(MODEL_TYPES)} (a model kind only): "
                             f"{self.model_type!r}")
        object.__setattr__(self, "model_type", model_type)
        quant = self.quant.lower()
        if quant == "auto":  # K3's own checkpoint is MXFP4 (moonshotai/Kimi-K3), K2's INT4
            quant = "nvfp4" if "nvfp4" in self.repo_id.lower() else "w4a8" if "w4a8" in self.repo_id.lower() else \
                "mxfp4" if model_type == "kimi_k3" else "int4"
        if quant not in ("int4", "nvfp4", "w4a8", "fp8", "bf16", "mxfp4"):
            raise ValueError(f"quant must be auto|int4|nvfp4|w4a8|fp8|bf16|mxfp4: {self.quant!r}")
        object.__setattr__(self, "quant", quant)

    @classmethod
    def parse(cls, text: str) -> "RepoSpec":
        """'moonshotai/Kimi-K2.6:shards=4,shard_size=8MiB,extra=60,private=1,seed=x,quant=int4', or a draft:
        'lightseekorg/kimi-k2.6-eagle3:kind=eagle3,shard_size=1MiB' ('kind=dflash'; 'hidden_size=', 'vocab_size=')."""
        repo_id, _sep, rest = text.partition(":")
        kwargs = {}
        names = {f for f in cls.__dataclass_fields__ if f != "repo_id"}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or key not in names:
                raise ValueError(f"bad spec item {item!r}; known keys: {sorted(names)}")
            kwargs[key] = value.strip()
        return cls(repo_id=repo_id.strip(), **kwargs)

    def canonical(self) -> dict:
        out = {"v": GENERATOR_VERSION, "repo_id": self.repo_id, "shards": self.shards,
               "shard_size": self.shard_size, "extra": self.extra, "private": self.private, "seed": self.seed,
               "quant": self.quant, "tiktoken_tokens": self.tiktoken_tokens}
        # Fields added later appear only when they differ from their defaults, so that the specs that existed
        # before them keep their commits (and hash-cache keys).
        if self.kind != "model":
            out["kind"] = self.kind
        if self.hidden_size != DRAFT_HIDDEN_SIZE:
            out["hidden_size"] = self.hidden_size
        if self.vocab_size != DRAFT_VOCAB_SIZE:
            out["vocab_size"] = self.vocab_size
        if self.model_type != "kimi_k25":
            out["model_type"] = self.model_type
        return out

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.canonical(), sort_keys=True).encode()).hexdigest()

    @property
    def commit(self) -> str:
        return hashlib.sha1(b"kimi-fake-hub commit\0" + json.dumps(self.canonical(), sort_keys=True).encode()
                            ).hexdigest()


class PRStream:
    """Deterministic pseudo-random byte stream of a given length, addressable by offset.

    Block i (BLOCK bytes) = sha256(seed || i) followed by a rotation (by an offset derived from that hash) of a
    per-repo 1 MiB pool. Every block differs (its first 32 bytes), any range costs O(len) memory copies at most.
    """

    def __init__(self, seed: bytes, length: int, pool: memoryview):
        self.seed, self.length, self.pool = seed, length, pool

    def _block_pieces(self, i: int):
        h = hashlib.sha256(self.seed + i.to_bytes(8, "little")).digest()
        r = int.from_bytes(h[:4], "little") % BLOCK
        need = BLOCK - len(h)
        first = self.pool[r:r + need]
        pieces = [h, first]
        if len(first) < need:
            pieces.append(self.pool[:need - len(first)])
        return pieces

    def iter_range(self, start: int, end: int):
        """Yield buffers covering [start, end) of the stream."""
        pos = start
        while pos < end:
            bi, off = divmod(pos, BLOCK)
            take_end = min(BLOCK, off + (end - pos))
            cur = 0
            for piece in self._block_pieces(bi):
                lo, hi = max(off, cur), min(take_end, cur + len(piece))
                if lo < hi:
                    yield piece[lo - cur:hi - cur]
                cur += len(piece)
                if cur >= take_end:
                    break
            pos += take_end - off


class RepoFile:
    """One file of a fake repo: either in-memory bytes, or header bytes + a PRStream (shards)."""

    def __init__(self, path: str, data: bytes | None = None, header: bytes = b"", stream: PRStream | None = None):
        self.path = path
        self.data = data
        self.header = header
        self.stream = stream
        self.size = len(data) if data is not None else len(header) + stream.length
        base = path.rsplit("/", 1)[-1]
        self.lfs = self.size > LFS_THRESHOLD or any(fnmatch.fnmatchcase(base, p) for p in LFS_PATTERNS)
        self.sha256: str | None = None
        self.git_sha1: str | None = None  # git blob sha1 of the content (only computed for in-memory files)
        if data is not None:
            self.sha256 = hashlib.sha256(data).hexdigest()
            self.git_sha1 = git_blob_sha1(data)

    @property
    def streamed(self) -> bool:
        return self.data is None

    def compute_sha256(self) -> str:
        h = hashlib.sha256()
        for piece in self.iter_range(0, self.size):
            h.update(piece)
        return h.hexdigest()

    def finalize(self):
        if self.lfs:
            pointer = lfs_pointer(self.sha256, self.size)
            self.oid = git_blob_sha1(pointer)  # tree "oid" of an LFS file = blob sha1 of its pointer
            self.pointer_size = len(pointer)
        else:
            self.oid = self.git_sha1
            self.pointer_size = None

    @property
    def etag(self) -> str:
        """What the client must name the blob: sha256 for LFS, git blob sha1 otherwise."""
        return self.sha256 if self.lfs else self.git_sha1

    def iter_range(self, start: int, end: int):
        if self.data is not None:
            if start < end:
                yield memoryview(self.data)[start:end]
            return
        hl = len(self.header)
        if start < hl:
            yield memoryview(self.header)[start:min(end, hl)]
        if end > hl:
            yield from self.stream.iter_range(max(start, hl) - hl, end - hl)

    def read(self, start: int = 0, end: int | None = None) -> bytes:
        return b"".join(bytes(p) for p in self.iter_range(start, self.size if end is None else end))

    def tree_entry(self, expand: bool = False, commit: str = "") -> dict:
        entry = {"type": "file", "oid": self.oid, "size": self.size, "path": self.path}
        if self.lfs:
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        if expand:
            entry["lastCommit"] = {"id": commit, "title": "Upload folder using huggingface_hub",
                                   "date": LAST_MODIFIED}
            entry["securityFileStatus"] = {"status": "safe", "avScan": {"status": "safe"},
                                           "pickleImportScan": {"status": "unscanned"}}
        return entry

    def manifest(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "lfs": self.lfs, "oid": self.oid,
                "etag": self.etag, "git_sha1": self.git_sha1}


def _dumps(obj) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


def _quant_config(quant: str, model_type: str = "kimi_k25"):
    if quant == "mxfp4":  # Kimi-K3's config.json: MXFP4 routed experts (group 32) through compressed-tensors
        return {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
    if quant == "nvfp4" and model_type == "kimi_k3":  # RedHatAI/Kimi-K3-NVFP4: LLM Compressor, not ModelOpt
        return {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}
    if quant == "int4":
        return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                              "output_activations": None,
                                              "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                          "strategy": "group", "group_size": 32, "dynamic": False,
                                                          "actorder": None, "observer": "minmax"}}},
                "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                           "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:vision_tower.*", "re:mm_projector.*"],
                "kv_cache_scheme": None}
    if quant == "nvfp4":
        return {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                "exclude_modules": ["lm_head", "vision_tower*", "mm_projector*", "*self_attn*"]}
    if quant == "fp8":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [128, 128]}
    return None


_REMOTE_CODE = {
    "configuration_kimi_k25.py": '''\
# Fake remote code generated by kimi-fake-hub (test double). Not the real Kimi implementation.
from transformers.configuration_utils import PretrainedConfig


class KimiK25Config(PretrainedConfig):
    model_type = "kimi_k25"

    def __init__(self, text_config=None, vision_config=None, media_placeholder_token_id=163605, **kwargs):
        self.text_config = text_config or {}
        self.vision_config = vision_config or {}
        self.media_placeholder_token_id = media_placeholder_token_id
        super().__init__(**kwargs)
''',
    "modeling_kimi_k25.py": '''\
# Fake remote code generated by kimi-fake-hub (test double). Not the real Kimi implementation.
from .configuration_kimi_k25 import KimiK25Config


class KimiK25ForConditionalGeneration:
    config_class = KimiK25Config

    def __init__(self, config):
        self.config = config

    def forward(self, *args, **kwargs):
        raise NotImplementedError("fake model: weights are pseudo-random bytes")
''',
    "kimi_k25_vision_processing.py": '''\
# Fake remote code generated by kimi-fake-hub (test double).
# The relative import reproduces the transformers "blobs/media_utils.py" FileNotFoundError class of bugs.
from .media_utils import load_media


class KimiK25VisionProcessor:
    def __call__(self, media):
        return load_media(media)
''',
    "media_utils.py": '''\
# Fake remote code generated by kimi-fake-hub (test double).


def load_media(media):
    return media
''',
    "tokenization_kimi.py": r"""# Fake remote code generated by kimi-fake-hub (test double): a small but working copy of the shape of
# Kimi's tokenizer - a transformers slow tokenizer over a tiktoken BPE read from tiktoken.model, with Kimi's
# pre-tokenizer pattern and Kimi's special tokens at Kimi's ids (163584 and up). The base vocabulary is small, so
# the ids between it and 163584 are unused. Needs tiktoken and transformers (4.5x or 5.x).
import os
from shutil import copyfile

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from transformers import PreTrainedTokenizer

VOCAB_FILES_NAMES = {"vocab_file": "tiktoken.model"}
SPECIAL_BASE = 163584  # the real base vocabulary's size: specials keep their real ids
NUM_RESERVED_SPECIAL_TOKENS = 256


def bytes_to_unicode():
    # GPT-2's reversible byte -> printable character map (the real file imports it from
    # transformers.models.gpt2.tokenization_gpt2, where transformers 5 no longer has it).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]
    pat_str = "|".join([
        r"[\p{Han}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ])

    def __init__(self, vocab_file, bos_token="[BOS]", eos_token="[EOS]", unk_token=None, pad_token=None,
                 additional_special_tokens=None, added_tokens_decoder=None, **kwargs):
        assert os.path.isfile(vocab_file), vocab_file
        names = {}
        for token_id, token in (added_tokens_decoder or {}).items():
            names[int(token_id)] = str(getattr(token, "content", token))
        self.vocab_file = vocab_file
        ranks = load_tiktoken_bpe(vocab_file)
        if max(ranks.values()) >= SPECIAL_BASE:
            raise ValueError("%s: ranks must stay below %d" % (vocab_file, SPECIAL_BASE))
        self.special_tokens = dict((names.get(i, "<|reserved_token_%d|>" % i), i)
                                   for i in range(SPECIAL_BASE, SPECIAL_BASE + NUM_RESERVED_SPECIAL_TOKENS))
        self.model = tiktoken.Encoding(name=os.path.basename(vocab_file), pat_str=self.pat_str,
                                       mergeable_ranks=ranks, special_tokens=self.special_tokens)
        self.n_words = self.model.n_vocab
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = dict((v, k) for k, v in self.byte_encoder.items())
        self.decoder = {}
        for token_id in sorted(ranks.values()) + sorted(self.special_tokens.values()):
            raw = self.model.decode_single_token_bytes(token_id)
            self.decoder[token_id] = "".join(self.byte_encoder[b] for b in raw)
        self.encoder = dict((v, k) for k, v in self.decoder.items())
        self.bos_id = self.special_tokens[str(bos_token)]
        self.eos_id = self.special_tokens[str(eos_token)]
        self.pad_id = self.special_tokens.get(str(pad_token), -1)
        self.unk_id = self.special_tokens.get(str(unk_token), -1)
        if additional_special_tokens is None:
            additional_special_tokens = ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                                         "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"]
        super().__init__(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, pad_token=pad_token,
                         additional_special_tokens=additional_special_tokens, **kwargs)

    @property
    def vocab_size(self):
        return self.n_words

    def get_vocab(self):
        return dict(self.encoder)

    def encode(self, text, allow_special_tokens=True, **kwargs):
        # Like the real one: without transformers keyword arguments, tiktoken encodes the whole text directly.
        if kwargs:
            return super().encode(text, **kwargs)
        if allow_special_tokens:
            return self.model.encode(text, allowed_special="all")
        return self.model.encode(text, disallowed_special=())

    def decode(self, token_ids, **kwargs):
        if kwargs:
            return super().decode(token_ids, **kwargs)
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self.model.decode(list(token_ids))

    def _tokenize(self, text, **kwargs):
        return [self.decoder[t] for t in self.model.encode(text, disallowed_special=())]

    def _convert_token_to_id(self, token):
        return self.encoder.get(token, self.unk_id)

    def _convert_id_to_token(self, index):
        return self.decoder.get(index)

    def convert_tokens_to_string(self, tokens):
        return bytearray(self.byte_decoder[c] for c in "".join(tokens)).decode("utf-8", "replace")

    def save_vocabulary(self, save_directory, filename_prefix=None):
        if not os.path.isdir(save_directory):
            raise ValueError("vocabulary path %s should be a directory" % save_directory)
        out = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "")
                           + VOCAB_FILES_NAMES["vocab_file"])
        if os.path.abspath(self.vocab_file) != os.path.abspath(out):
            copyfile(self.vocab_file, out)
        return (out,)
""",
    "tool_declaration_ts.py": '''\
# Fake remote code generated by kimi-fake-hub (test double).


def encode_tools_to_typescript_style(tools):
    lines = []
    for tool in tools or []:
        fn = tool.get("function", tool)
        lines.append("// " + fn.get("description", ""))
        lines.append("type " + fn["name"] + " = (_: object) => any;")
    return "\\n".join(lines)
''',
}


# Kimi's special tokens at their real ids (tokenizer_config.json added_tokens_decoder of the Kimi-K2 family; the
# media ids agree with transformers' kimi_k25 config: vision start 163602, end 163604, image 163605). The other ids
# of 163584..163839 are "<|reserved_token_N|>".
KIMI_SPECIAL_TOKENS = {
    163584: "[BOS]", 163585: "[EOS]", 163586: "<|im_end|>", 163587: "<|im_user|>", 163588: "<|im_assistant|>",
    163590: "<|start_header_id|>", 163591: "<|end_header_id|>", 163593: "[EOT]", 163594: "<|im_system|>",
    163595: "<|tool_calls_section_begin|>", 163596: "<|tool_calls_section_end|>", 163597: "<|tool_call_begin|>",
    163598: "<|tool_call_argument_begin|>", 163599: "<|tool_call_end|>", 163601: "<|im_middle|>",
    163602: "<|media_begin|>", 163603: "<|media_content|>", 163604: "<|media_end|>", 163605: "<|media_pad|>",
    163606: "<think>", 163607: "</think>", 163838: "[UNK]", 163839: "[PAD]",
}
# Words whose prefixes become merges, so that English text (aiperf's corpus is Shakespeare) compresses like BPE.
_BPE_WORDS = (
    "the and to of a in that is it you for with as was his he be not by but have this are her my me all so at "
    "on we what they him will no do your thou thy thee shall from or if an one our there their which would "
    "when more then them love lord good king now come here man let say such like than well know make upon "
    "yet must these how did had may should were out been who can see sir hath doth art time day night heart "
    "eyes death life world sweet fair true great give take speak tell think hear own most much some very "
    "hand still where why nor too before never ever every other into again about after being nothing "
    "something ing ed er est ly tion ness ment ous able ful less"
).split()


def tiktoken_model(lines_wanted: int) -> bytes:
    """A small byte-level BPE in tiktoken's file format (base64 token, space, rank), like Kimi's tiktoken.model:
    the 256 single bytes, then every prefix of the words above (with and without a leading space, shortest
    first), then pairs of printable ASCII characters, cut at `lines_wanted` lines. Every token is reachable by
    merging two shorter ones, so tiktoken round-trips any text."""
    tokens, seen = [bytes([i]) for i in range(256)], set()
    chained = []
    for word in _BPE_WORDS:
        for form in (" " + word, word, " " + word.capitalize()):
            raw = form.encode()
            chained.extend(raw[:n] for n in range(2, len(raw) + 1))
    multi = []
    for tok in sorted(dict.fromkeys(chained), key=len):
        if tok not in seen:
            seen.add(tok)
            multi.append(tok)
    for a in range(33, 127):
        for b in range(33, 127):
            if bytes([a, b]) not in seen:
                multi.append(bytes([a, b]))
    tokens.extend(multi[:max(0, lines_wanted - 256)])
    return b"".join(b"%s %d\n" % (base64.b64encode(tok), rank) for rank, tok in enumerate(tokens))


def _safetensors_header(tensor: str, size: int) -> tuple[bytes, int]:
    """(header, body length) of a `size`-byte safetensors file holding one U8 tensor named `tensor`: 8-byte
    little-endian header length, then the JSON header padded with spaces to a multiple of 8. Below 512 bytes
    there is no header (raw bytes)."""
    if size < 512:
        return b"", size
    hlen = 0
    for _attempt in range(3):  # header length depends on the digits of the body length
        body = size - 8 - hlen
        js = json.dumps({"__metadata__": {"format": "pt"},
                         tensor: {"dtype": "U8", "shape": [body], "data_offsets": [0, body]}},
                        separators=(",", ":")).encode()
        hlen = (len(js) + 7) // 8 * 8
    js = js.ljust(hlen, b" ")
    header = len(js).to_bytes(8, "little") + js
    return header, size - len(header)


# kind -> (config.json without the fake_hub marker, the one tensor of model.safetensors, hub metadata)
_DRAFTS = {
    # EAGLE-3 (lightseekorg/kimi-k2.6-eagle3, AQ-MedAI/Kimi-K26-eagle3): one Llama-style decoder layer fed with
    # the target's auxiliary hidden states of three layers; the target's tokenizer.
    "eagle3": ({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": DRAFT_HIDDEN_SIZE,
        "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 18432, "vocab_size": DRAFT_VOCAB_SIZE, "draft_vocab_size": 32000,
        "max_position_embeddings": 262144, "rms_norm_eps": 1e-05, "rope_theta": 50000.0, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
    }, "midlayer.self_attn.q_proj.weight", "EAGLE-3"),
    # DFlash (z-lab/Kimi-K2.6-DFlash): a block-diffusion draft of 5 layers conditioned on 5 target layers,
    # drafting `block_size` tokens at once from mask tokens.
    "dflash": ({
        "architectures": ["DFlashDraftModel"], "model_type": "dflash", "hidden_size": DRAFT_HIDDEN_SIZE,
        "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": DRAFT_VOCAB_SIZE, "block_size": 16, "mask_token_id": 163838,
        "target_layer_ids": [1, 15, 29, 43, 57], "torch_dtype": "bfloat16",
    }, "layers.0.self_attn.q_proj.weight", "DFlash"),
}


def _draft_config(spec: RepoSpec) -> dict:
    config = dict(_DRAFTS[spec.kind][0], hidden_size=spec.hidden_size, vocab_size=spec.vocab_size)
    config["fake_hub"] = {"generator_version": GENERATOR_VERSION, "spec": spec.canonical()}
    return config


def _with_common_files(spec: RepoSpec, files: dict) -> list[RepoFile]:
    """Every repo's .gitattributes (the LFS patterns) and its `extra` small files, then all files in path order."""
    files[".gitattributes"] = RepoFile(".gitattributes", "".join(
        f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS).encode())
    for i in range(spec.extra):
        name = f"extra/extra_{i:04d}.txt"
        files[name] = RepoFile(name, f"extra file {i} of {spec.repo_id} {spec.seed}\n".encode())
    return [files[k] for k in sorted(files)]


def _build_draft_files(spec: RepoSpec, pool: memoryview, seed_for) -> list[RepoFile]:
    """A speculative-decoding draft repo: config.json, one streamed model.safetensors of spec.shard_size bytes,
    README.md, .gitattributes (and spec.extra files). No tokenizer: drafts use the target's."""
    _config, tensor, label = _DRAFTS[spec.kind]
    files: dict[str, RepoFile] = {}
    header, body = _safetensors_header(tensor, spec.shard_size)
    files["model.safetensors"] = RepoFile("model.safetensors", header=header,
                                          stream=PRStream(seed_for("model.safetensors"), body, pool))
    files["config.json"] = RepoFile("config.json", _dumps(_draft_config(spec)))
    files["README.md"] = RepoFile("README.md", (
        f"---\nlicense: other\nlibrary_name: transformers\npipeline_tag: text-generation\n"
        f"base_model: moonshotai/Kimi-K2.6\ntags:\n- speculative-decoding\n- {spec.kind}\n---\n"
        f"# {spec.repo_id} (FAKE {label} draft for Kimi-K2.6)\n\nGenerated by kimi-fake-hub for tests. Spec: "
        f"`{json.dumps(spec.canonical(), sort_keys=True)}`\n").encode())
    return _with_common_files(spec, files)


def _k3_config() -> dict:
    """Kimi-K3's config.json (without quantization_config): KimiK3ForConditionalGeneration over a kimi_linear text
    config, 93 layers of which 24 gated MLA (every fourth and the last two; 1-based ids) and 69 Kimi Delta Attention,
    896 experts, 16 per token. Values of the published config (HF revision f831ab66), confirmed by vLLM 0.33.0's
    models/kimi_k3 and transformers_utils/configs/kimi_linear.py (tests/unit/doubles/test_fake_hub_models.py checks
    them against the model data's geometry)."""
    layers = 93
    full = list(range(4, layers, 4)) + [layers]
    text_config = {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": 7168,
        "num_hidden_layers": layers, "first_k_dense_replace": 1, "moe_layer_freq": 1, "vocab_size": 163840,
        "num_attention_heads": 96, "num_key_value_heads": 96, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": True,
        "mla_use_output_gate": True,
        "linear_attn_config": {"full_attn_layers": full,
                               "kda_layers": [i for i in range(1, layers + 1) if i not in full],
                               "num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4,
                               "use_full_rank_gate": True, "gate_lower_bound": -5.0},
        "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2, "moe_intermediate_size": 3072,
        "routed_expert_hidden_size": 3584, "intermediate_size": 33792, "routed_scaling_factor": 1.0,
        "moe_router_activation_func": "sigmoid", "topk_method": "noaux_tc", "attn_res_block_size": 12,
        "hidden_act": "situ", "rms_norm_eps": 1e-5, "max_position_embeddings": 1048576,
        "num_nextn_predict_layers": 0, "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839,
        "torch_dtype": "bfloat16",
    }
    return {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text_config,
            "vision_config": {"model_type": "kimi_k3_vision", "patch_size": 14, "vt_hidden_size": 1024,
                              "vt_num_hidden_layers": 27, "vt_num_attention_heads": 12},
            "media_placeholder_token_id": 163605, "max_position_embeddings": 1048576, "torch_dtype": "bfloat16",
            "transformers_version": "4.57.1"}


def build_files(spec: RepoSpec, pool: memoryview) -> list[RepoFile]:
    """All files of the repo, in path order. Shards are streamed; everything else is in memory."""
    files: dict[str, RepoFile] = {}

    def seed_for(path: str) -> bytes:
        return hashlib.sha256(f"{GENERATOR_VERSION}|{spec.repo_id}|{spec.seed}|{path}".encode()).digest()

    if spec.kind != "model":
        return _build_draft_files(spec, pool, seed_for)

    n = spec.shards
    width = max(5, len(str(n)))
    shard_names = [f"model-{i:0{width}d}-of-{n:0{width}d}.safetensors" for i in range(1, n + 1)]
    weight_map, total_body = {}, 0
    for i, name in enumerate(shard_names):
        tensor = f"language_model.model.layers.{i}.mlp.experts.weight_packed"
        header, body = _safetensors_header(tensor, spec.shard_size)
        weight_map[tensor] = name
        total_body += body
        files[name] = RepoFile(name, header=header, stream=PRStream(seed_for(name), body, pool))

    quant = _quant_config(spec.quant, spec.model_type)
    text_config = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 64, "num_key_value_heads": 64, "n_routed_experts": 384, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 163840,
        "max_position_embeddings": 262144, "rope_theta": 50000.0,
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "bos_token_id": 163584, "eos_token_id": 163585, "torch_dtype": "bfloat16",
    }
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                     "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
        "model_type": "kimi_k25",
        "text_config": text_config,
        "vision_config": {"model_type": "moonvit", "hidden_size": 1152, "num_hidden_layers": 27,
                          "patch_size": 14},
        "media_placeholder_token_id": 163605,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "fake_hub": {"generator_version": GENERATOR_VERSION, "spec": spec.canonical()},
    }
    if spec.model_type == "kimi_k3":
        config = dict(_k3_config(), fake_hub=config["fake_hub"])
    context = config.get("max_position_embeddings") or text_config["max_position_embeddings"]
    if quant is not None:
        config["quantization_config"] = quant
    files["config.json"] = RepoFile("config.json", _dumps(config))
    if spec.quant == "w4a8":
        # msModelSlim's per-weight description, which vLLM-Ascend (--quantization ascend) and SGLang (modelslim) read
        # instead of a quantization_config (the shape of msModelSlim's output; the real one lists every weight).
        files["quant_model_description.json"] = RepoFile("quant_model_description.json", _dumps({
            "model_quant_type": "W4A8_DYNAMIC", "version": "1.0.0",
            "model.layers.1.mlp.experts.0.gate_proj.weight": "W4A8_DYNAMIC",
            "model.layers.1.self_attn.q_a_proj.weight": "W8A8_DYNAMIC",
            "lm_head.weight": "FLOAT"}))
    if spec.quant == "nvfp4" and quant["quant_method"] == "modelopt":
        files["hf_quant_config.json"] = RepoFile("hf_quant_config.json", _dumps({
            "producer": {"name": "modelopt", "version": "0.37.0"},
            "quantization": {k: v for k, v in quant.items() if k != "quant_method"}}))
    files["generation_config.json"] = RepoFile("generation_config.json", _dumps(
        {"bos_token_id": 163584, "eos_token_id": 163586, "max_length": context, "temperature": 1.0, "top_p": 0.95,
         "transformers_version": "4.57.1"}))
    files["tokenizer_config.json"] = RepoFile("tokenizer_config.json", _dumps(
        {"added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                           "single_word": False, "special": t not in ("<think>", "</think>")}
                                  for i, t in sorted(KIMI_SPECIAL_TOKENS.items())},
         "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                                       "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"],
         "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
         "tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]",
         "pad_token": "[PAD]", "unk_token": "[UNK]", "clean_up_tokenization_spaces": False,
         "model_max_length": context, "chat_template": None}))
    k3 = spec.model_type == "kimi_k3"
    files["preprocessor_config.json"] = RepoFile("preprocessor_config.json", _dumps(
        {"processor_class": "KimiK3Processor", "patch_size": 14} if k3 else
        {"auto_map": {"AutoProcessor": "kimi_k25_vision_processing.KimiK25VisionProcessor"},
         "processor_class": "KimiK25VisionProcessor", "patch_size": 14}))
    if not k3:  # K3 ships no Jinja template: vLLM's and SGLang's K3 renderers encode its XTML themselves
        files["chat_template.jinja"] = RepoFile("chat_template.jinja", (
            "{%- for message in messages -%}<|im_{{ message['role'] }}|>{{ message['content'] }}<|im_end|>"
            "{%- endfor -%}{%- if add_generation_prompt -%}<|im_assistant|>{%- endif -%}\n").encode())
    for name, code in _REMOTE_CODE.items():
        if not (k3 and "k25" in name):  # K3's config, model and processor classes are the engines' own
            files[name] = RepoFile(name, code.encode())
    files["tiktoken.model"] = RepoFile("tiktoken.model", tiktoken_model(spec.tiktoken_tokens))
    files["model.safetensors.index.json"] = RepoFile("model.safetensors.index.json", _dumps(
        {"metadata": {"total_size": total_body}, "weight_map": weight_map}))
    files["README.md"] = RepoFile("README.md", (
        f"---\nlicense: other\nlibrary_name: transformers\npipeline_tag: image-text-to-text\n---\n"
        f"# {spec.repo_id} (FAKE)\n\nGenerated by kimi-fake-hub for tests. Spec: "
        f"`{json.dumps(spec.canonical(), sort_keys=True)}`\n").encode())
    files["docs/deploy_guidance.md"] = RepoFile("docs/deploy_guidance.md",
                                                b"# Deploy guidance (fake)\n\nUse vLLM or SGLang.\n")
    return _with_common_files(spec, files)


class Repo:
    def __init__(self, spec: RepoSpec, cache_dir: str | None = None):
        self.spec = spec
        self.repo_id = spec.repo_id
        self.commit = spec.commit
        self.private = spec.private
        pool_seed = hashlib.sha256(f"{GENERATOR_VERSION}|pool|{spec.repo_id}|{spec.seed}".encode()).digest()
        self.pool = memoryview(hashlib.shake_256(pool_seed).digest(BLOCK))
        self.files = build_files(spec, self.pool)
        self.by_path = {f.path: f for f in self.files}
        self._hash_streamed(cache_dir)
        for f in self.files:
            f.finalize()
        self.by_sha256 = {f.sha256: f for f in self.files if f.lfs}
        dirs = sorted({p.rsplit("/", 1)[0] for p in self.by_path if "/" in p} |
                      {"/".join(p.split("/")[:i]) for p in self.by_path for i in range(1, p.count("/"))})
        self.dirs = {d: hashlib.sha1(f"tree|{self.commit}|{d}".encode()).hexdigest() for d in dirs}
        self.total_size = sum(f.size for f in self.files)

    def _hash_streamed(self, cache_dir):
        streamed = [f for f in self.files if f.streamed]
        cache_file = None
        if cache_dir is not None:
            cache_file = os.path.join(cache_dir, f"{self.spec.key}.json")
            try:
                with open(cache_file) as fh:
                    cached = json.load(fh)
                if cached.get("spec") == self.spec.canonical():
                    table = cached["sha256"]
                    if all(f.path in table for f in streamed):
                        for f in streamed:
                            f.sha256 = table[f.path]
                        return
            except (OSError, ValueError, KeyError, TypeError):
                pass
        for f in streamed:
            f.sha256 = f.compute_sha256()
        if cache_file is not None:
            try:
                os.makedirs(cache_dir, exist_ok=True)
                tmp = f"{cache_file}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w") as fh:
                    json.dump({"spec": self.spec.canonical(), "sha256": {f.path: f.sha256 for f in streamed}},
                              fh, indent=1, sort_keys=True)
                os.replace(tmp, cache_file)
            except OSError:
                pass

    def resolve_rev(self, rev: str) -> str | None:
        return self.commit if rev in ("main", self.commit) else None

    def tree(self, path: str, recursive: bool, expand: bool) -> list[dict] | None:
        """Entries under `path` ('' = root), or None if `path` is not a directory."""
        if path and path not in self.dirs:
            return None
        prefix = path + "/" if path else ""
        entries = []
        for d, oid in self.dirs.items():
            if d.startswith(prefix) and (recursive or "/" not in d[len(prefix):]):
                entries.append({"type": "directory", "oid": oid, "size": 0, "path": d})
        for f in self.files:
            if f.path.startswith(prefix) and (recursive or "/" not in f.path[len(prefix):]):
                entries.append(f.tree_entry(expand, self.commit))
        entries.sort(key=lambda e: e["path"])
        return entries

    def info(self, blobs: bool = False) -> dict:
        siblings = []
        for f in self.files:
            s = {"rfilename": f.path}
            if blobs:
                s.update(size=f.size, blobId=f.oid)
                if f.lfs:
                    s["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
            siblings.append(s)
        if self.spec.kind == "model":
            arch = "KimiK3ForConditionalGeneration" if self.spec.model_type == "kimi_k3" else \
                "KimiK25ForConditionalGeneration"
            pipeline_tag, tags = "image-text-to-text", ["transformers", "safetensors", self.spec.model_type, "fake"]
            config = {"architectures": [arch], "model_type": self.spec.model_type}
        else:
            draft = _DRAFTS[self.spec.kind][0]
            pipeline_tag = "text-generation"
            tags = ["transformers", "safetensors", draft["model_type"], "speculative-decoding", self.spec.kind,
                    "base_model:moonshotai/Kimi-K2.6", "fake"]
            config = {"architectures": draft["architectures"], "model_type": draft["model_type"]}
        return {"_id": self.commit[:24], "id": self.repo_id, "modelId": self.repo_id,
                "author": self.repo_id.split("/")[0], "sha": self.commit, "lastModified": LAST_MODIFIED,
                "createdAt": CREATED_AT, "private": self.private, "gated": False, "disabled": False,
                "downloads": 0, "likes": 0, "library_name": "transformers", "pipeline_tag": pipeline_tag,
                "tags": tags, "config": config, "siblings": siblings, "usedStorage": self.total_size}

    def manifest(self) -> dict:
        return {"repo_id": self.repo_id, "commit": self.commit, "private": self.private,
                "spec": self.spec.canonical(), "total_size": self.total_size,
                "files": [f.manifest() for f in self.files]}


# --------------------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------------------

# type -> (phase, {param: default}). Phases: "pre" (answer instead of the real response), "url" (CDN URL
# validation), "body" (applied while a body is written).
FAULT_TYPES = {
    "status_5xx": ("pre", {"status": 503}),
    "rate_429": ("pre", {"retry_after": 1, "ratelimit_header": False}),
    "expire_urls": ("url", {"after": 0.0}),
    "drop_after_bytes": ("body", {"bytes": 0}),
    "corrupt_byte": ("body", {"offset": 0, "xor": 0xFF}),
    "rate_limit_bps": ("body", {"bps": 50_000_000}),
    # One cap for all connections at once (a hub's or CDN's total egress to this client): bytes are paced in turn.
    "rate_limit_total_bps": ("body", {"bps": 200_000_000}),
}
_TOTAL_PACE_LOCK = threading.Lock()
_FAULT_COMMON = {"id", "type", "match", "file", "repo", "role", "method", "count", "fired"}


class FaultRegistry:
    """Thread-safe list of active faults.

    Common selectors: match (regex searched in the request path), file (glob on the repo file path), repo
    (repo id), role ("hub"|"cdn"), method ("GET"|"HEAD"|...), count (fire at most N times; null = forever).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[dict] = []
        self._ids = itertools.count(1)

    def add(self, fault: dict | None = None, **kw) -> int:
        f = dict(fault or {}, **kw)
        ftype = f.get("type")
        if ftype not in FAULT_TYPES:
            raise ValueError(f"unknown fault type {ftype!r}; known: {sorted(FAULT_TYPES)}")
        defaults = FAULT_TYPES[ftype][1]
        unknown = set(f) - _FAULT_COMMON - set(defaults)
        if unknown:
            raise ValueError(f"unknown fields for {ftype}: {sorted(unknown)}")
        for k, v in defaults.items():
            f.setdefault(k, v)
            if isinstance(v, bool):
                f[k] = _bool(f[k])
            elif isinstance(v, (int, float)):
                f[k] = type(v)(f[k])
        if f.get("match") is not None:
            re.compile(f["match"])
        if f.get("role") not in (None, "hub", "cdn"):
            raise ValueError("role must be hub, cdn or null")
        if f.get("count") is not None:
            f["count"] = int(f["count"])
        f["fired"] = 0
        with self._lock:
            f["id"] = next(self._ids)
            self._faults.append(f)
        return f["id"]

    def remove(self, fault_id: int | None = None):
        with self._lock:
            self._faults = [f for f in self._faults if fault_id is not None and f["id"] != fault_id]

    def list(self) -> list[dict]:
        with self._lock:
            return [dict(f) for f in self._faults]

    @staticmethod
    def _matches(f, ctx) -> bool:
        if f.get("role") and f["role"] != ctx["role"]:
            return False
        if f.get("method") and f["method"].upper() != ctx["method"]:
            return False
        if f.get("match") and not re.search(f["match"], ctx["path"]):
            return False
        if f.get("repo") and f["repo"] != ctx.get("repo"):
            return False
        if f.get("file") and (ctx.get("file") is None or not fnmatch.fnmatchcase(ctx["file"], f["file"])):
            return False
        return True

    def candidates(self, phase: str, ctx: dict) -> list[dict]:
        with self._lock:
            return [f for f in self._faults if FAULT_TYPES[f["type"]][0] == phase and self._matches(f, ctx)
                    and (f.get("count") is None or f["fired"] < f["count"])]

    def fire(self, f: dict) -> bool:
        """Consume one use of `f`; False if it was used up meanwhile."""
        with self._lock:
            if f.get("count") is not None and f["fired"] >= f["count"]:
                return False
            f["fired"] += 1
            if f.get("count") is not None and f["fired"] >= f["count"]:
                self._faults = [x for x in self._faults if x is not f]
            return True


# --------------------------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------------------------

class _DropConnection(Exception):
    pass


def parse_range(header: str | None, size: int):
    """None (serve 200), (start, end_exclusive) for 206, or 'unsatisfiable' for 416."""
    if not header:
        return None
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None  # unknown unit, multiple ranges or junk: ignore the header (RFC 9110 allows it)
    if m.group(1) == "":
        n = int(m.group(2))
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), size
    start = int(m.group(1))
    end = int(m.group(2)) + 1 if m.group(2) else size
    if m.group(2) and end <= start:
        return None  # invalid range spec: ignore
    if start >= size:
        return "unsatisfiable"
    return start, min(end, size)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kimi-fake-hub/1"
    timeout = 120  # idle keep-alive connections are closed after this

    # ---- plumbing ---------------------------------------------------------------------------------------
    def setup(self):
        super().setup()
        self.hub: FakeHub = self.server.hub
        self.role: str = self.server.role
        self.conn_id = self.hub._register_conn(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            self.hub._unregister_conn(self.connection)

    def log_message(self, fmt, *args):
        if self.hub.verbose:
            sys.stderr.write(f"[fake-hub {self.role}] {self.address_string()} {fmt % args}\n")

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def _dispatch(self):
        t0 = time.monotonic()
        url = urlsplit(self.path)
        self.req_path = url.path
        self.query = parse_qs(url.query, keep_blank_values=True)
        self.raw_query = url.query
        length = int(self.headers.get("Content-Length") or 0)
        self.body_in = self.rfile.read(length) if length > 0 else b""
        self.rec = {"role": self.role, "method": self.command, "host": self.headers.get("Host"),
                    "path": url.path, "query": url.query, "range": self.headers.get("Range"),
                    "auth": self.headers.get("Authorization") is not None, "status": None, "length": None,
                    "bytes": 0, "faults": [], "conn": self.conn_id, "repo": None, "file": None,
                    "aborted": False}
        self.ctx = {"role": self.role, "method": self.command, "path": url.path, "repo": None, "file": None}
        internal = url.path.startswith("/_fake/")
        if not internal:
            self.hub._log_start(self.rec)
        try:
            if internal:
                self._internal()
            elif self.role == "hub":
                self._hub()
            else:
                self._cdn()
        except _DropConnection:
            self.close_connection = True
            self.rec["aborted"] = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True
            self.rec["aborted"] = True
        finally:
            if not internal:
                self.rec["duration_s"] = round(time.monotonic() - t0, 6)
                self.hub._log_end(self.rec)

    def _start(self, status: int, headers: dict, length: int):
        self.send_response(status)
        for k, v in headers.items():
            if v is not None:
                self.send_header(k, str(v))
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.rec["status"] = status
        self.rec["length"] = length

    def _send(self, status: int, headers: dict | None = None, body: bytes = b""):
        headers = dict(headers or {})
        self._start(status, headers, len(body))
        if self.command != "HEAD" and body:
            self._write_body(iter([memoryview(body)]), 0, len(body))

    def _json(self, status: int, obj, headers: dict | None = None):
        h = {"Content-Type": "application/json; charset=utf-8"}
        h.update(headers or {})
        self._send(status, h, json.dumps(obj).encode())

    def _error(self, status: int, code: str | None, message: str, headers: dict | None = None):
        h = {"X-Error-Code": code, "X-Error-Message": message}
        h.update(headers or {})
        self._json(status, {"error": message}, h)

    def _write_body(self, pieces, file_offset: int, length: int):
        """Write `length` body bytes from `pieces`, applying body faults. `file_offset`: file offset of byte 0."""
        faults = []
        ok = 200 <= (self.rec["status"] or 0) < 300  # body faults only touch successful responses
        for f in self.hub.faults.candidates("body", self.ctx) if ok else ():
            if f["type"] == "corrupt_byte":
                faults.append(f)  # fired only if the byte is actually served
            elif f["type"] == "drop_after_bytes" and f["bytes"] >= length:
                continue  # the whole body fits before the cut: nothing to drop
            elif self.hub.faults.fire(f):
                faults.append(f)
                self.rec["faults"].append(f["type"])
        drop = min((f["bytes"] for f in faults if f["type"] == "drop_after_bytes"), default=None)
        bps = min((f["bps"] for f in faults if f["type"] == "rate_limit_bps"), default=None)
        total = next((f for f in faults if f["type"] == "rate_limit_total_bps"), None)
        if total is not None:
            bps = min(bps or total["bps"], total["bps"])  # small chunks, so that connections take turns
        corrupt = [f for f in faults if f["type"] == "corrupt_byte"]
        chunk_max = 1 << 20 if not bps else max(4096, min(1 << 20, int(bps) // 20))
        sent, t0, pos = 0, time.monotonic(), file_offset
        for piece in pieces:
            for i in range(0, len(piece), chunk_max):
                chunk = piece[i:i + chunk_max]
                n = len(chunk)
                for f in corrupt:
                    off = f["offset"]
                    if pos <= off < pos + n and self.hub.faults.fire(f):
                        chunk = bytearray(chunk)
                        chunk[off - pos] ^= f["xor"] & 0xFF
                        self.rec["faults"].append("corrupt_byte")
                if drop is not None and sent + n > drop:
                    part = chunk[:drop - sent]
                    if len(part):
                        self.wfile.write(part)
                        sent += len(part)
                    self.rec["bytes"] = sent
                    raise _DropConnection()
                if total is not None:
                    with _TOTAL_PACE_LOCK:
                        slot = max(time.monotonic(), total.get("_next", 0.0))
                        total["_next"] = slot + n / total["bps"]
                    if slot > time.monotonic():
                        time.sleep(slot - time.monotonic())
                self.wfile.write(chunk)
                sent += n
                pos += n
                self.rec["bytes"] = sent
                if bps:
                    ahead = sent / bps - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)

    def _pre_faults(self) -> bool:
        """Apply status faults; True if a fault answered the request."""
        for f in self.hub.faults.candidates("pre", self.ctx):
            if not self.hub.faults.fire(f):
                continue
            self.rec["faults"].append(f["type"])
            if f["type"] == "status_5xx":
                self._error(int(f["status"]), None, f"Injected fault: HTTP {f['status']}")
            else:
                h = {"Retry-After": int(f["retry_after"])}
                if f["ratelimit_header"]:
                    h["RateLimit"] = f'"api";r=0;t={int(f["retry_after"])}'
                    h["RateLimit-Policy"] = '"fixed window";"api";q=500;w=300'
                self._error(429, None, "Injected fault: rate limited", h)
            return True
        return False

    def _serve_file(self, f: RepoFile, headers: dict):
        rng = parse_range(self.headers.get("Range"), f.size)
        headers = dict(headers)
        headers.setdefault("Content-Type", "application/octet-stream")
        headers["Accept-Ranges"] = "bytes"
        if rng == "unsatisfiable":
            headers["Content-Range"] = f"bytes */{f.size}"
            self._start(416, headers, 0)
            return
        if rng is None:
            start, end, status = 0, f.size, 200
        else:
            (start, end), status = rng, 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        self._start(status, headers, end - start)
        if self.command != "HEAD":
            self._write_body(f.iter_range(start, end), start, end - start)

    # ---- auth ---------------------------------------------------------------------------------------------
    def _auth_failed(self, repo: Repo) -> bool:
        """Send 401 and return True when the request must be refused."""
        auth = self.headers.get("Authorization")
        token = None
        if auth:
            scheme, _sep, token = auth.partition(" ")
            if scheme.lower() != "bearer":
                token = None
        if auth is not None and self.hub.tokens and token not in self.hub.tokens:
            self._error(401, None, "Invalid credentials in Authorization header")
            return True
        if repo.private and (token is None or token not in self.hub.tokens):
            self._error(401, "RepoNotFound", "Invalid username or password.")
            return True
        return False

    # ---- hub ----------------------------------------------------------------------------------------------
    def _hub(self):
        parts = [unquote(p) for p in self.req_path.split("/")[1:]]
        repo, rev, rest, kind = None, None, [], None
        if self.req_path == "/api/agent-harnesses" and self.command == "GET":
            # huggingface_hub >= 2.x fetches this telemetry registry once a day (utils/_detect_agent.py)
            return self._json(200, {"standardEnvVars": [], "harnesses": {}})
        if len(parts) >= 3 and parts[0] == "api" and parts[1] in ("models", "datasets", "spaces"):
            repo_id = "/".join(parts[2:4])
            tail = parts[4:]
            kind = "api-info" if not tail else tail[0]
            rev = tail[1] if len(tail) > 1 else ("main" if not tail else None)
            rest = tail[2:]
            if parts[1] != "models":
                repo_id = None
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo_id, kind, rev, rest = "/".join(parts[:2]), "resolve", parts[3], parts[4:]
        else:
            self._error(404, None, "Not Found")
            return
        repo = self.hub.repos.get(repo_id) if repo_id else None
        self.ctx["repo"] = self.rec["repo"] = repo_id
        if kind == "resolve" and rest:
            self.ctx["file"] = self.rec["file"] = "/".join(rest)
        if self._pre_faults():
            return
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return
        if self._auth_failed(repo):
            return
        if kind not in ("api-info", "revision", "tree", "paths-info", "resolve") or rev is None:
            self._error(404, None, "Not Found")
            return
        commit = repo.resolve_rev(rev)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        if kind in ("api-info", "revision"):
            if self.command not in ("GET", "HEAD"):
                return self._error(405, None, "Method not allowed")
            blobs = _bool(self.query.get("blobs", ["false"])[0])
            return self._json(200, repo.info(blobs=blobs))
        if kind == "tree":
            return self._tree(repo, "/".join(rest), commit)
        if kind == "paths-info":
            return self._paths_info(repo, commit)
        return self._resolve(repo, "/".join(rest), commit)

    def _tree(self, repo: Repo, path: str, commit: str):
        recursive = _bool(self.query.get("recursive", ["false"])[0])
        expand = _bool(self.query.get("expand", ["false"])[0])
        entries = repo.tree(path.strip("/"), recursive, expand)
        if entries is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on \"{commit}\"",
                               {"X-Repo-Commit": commit})
        page_size = self.hub.page_size
        if self.query.get("limit"):
            try:
                page_size = max(1, min(int(self.query["limit"][0]), self.hub.page_size))
            except ValueError:
                return self._error(400, None, "Invalid limit")
        offset = 0
        if self.query.get("cursor"):
            try:
                raw = base64.urlsafe_b64decode(self.query["cursor"][0] + "==").decode()
                if not raw.startswith("o="):
                    raise ValueError(raw)
                offset = int(raw[2:])
            except (ValueError, UnicodeDecodeError):
                return self._error(400, None, "Invalid cursor")
        page = entries[offset:offset + page_size]
        headers = {"X-Repo-Commit": commit}
        if offset + page_size < len(entries):
            cursor = base64.urlsafe_b64encode(f"o={offset + page_size}".encode()).decode().rstrip("=")
            params = [(k, v) for k, v in parse_qsl(self.raw_query, keep_blank_values=True) if k != "cursor"]
            params.append(("cursor", cursor))
            host = self.headers.get("Host") or urlsplit(self.hub.url).netloc
            headers["Link"] = f'<http://{host}{self.req_path}?{urlencode(params)}>; rel="next"'
        self._json(200, page, headers)

    def _paths_info(self, repo: Repo, commit: str):
        if self.command != "POST":
            return self._error(405, None, "Method not allowed")
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            form = json.loads(self.body_in or b"{}")
            paths = form.get("paths", [])
            expand = _bool(form.get("expand", False))
        else:
            form = parse_qs(self.body_in.decode(), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = _bool(form.get("expand", ["false"])[0])
        out = []
        for p in paths:
            p = p.strip("/")
            if p in repo.by_path:
                out.append(repo.by_path[p].tree_entry(expand, commit))
            elif p in repo.dirs:
                out.append({"type": "directory", "oid": repo.dirs[p], "size": 0, "path": p})
        self._json(200, out, {"X-Repo-Commit": commit})

    def _resolve(self, repo: Repo, path: str, commit: str):
        if self.command not in ("GET", "HEAD"):
            return self._error(405, None, "Method not allowed")
        f = repo.by_path.get(path)
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit})
        if not f.lfs:
            return self._serve_file(f, {"ETag": f'"{f.git_sha1}"', "X-Repo-Commit": commit,
                                        "Content-Type": "text/plain; charset=utf-8",
                                        "Content-Disposition": f'inline; filename="{f.path.rsplit("/", 1)[-1]}";'})
        location = self.hub.sign_cdn_url(repo, f)
        self._send(302, {"Location": location, "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": f.size,
                         "X-Repo-Commit": commit, "ETag": f'"{f.oid}"', "Content-Type": "text/plain; charset=utf-8",
                         "Vary": "Origin, Accept"})

    # ---- CDN ----------------------------------------------------------------------------------------------
    def _cdn(self):
        parts = [unquote(p) for p in self.req_path.split("/")[1:]]
        if self.command not in ("GET", "HEAD"):
            return self._cdn_error(405, "MethodNotAllowed")
        if len(parts) != 4 or parts[0] != "repos":
            return self._cdn_error(404, "NoSuchKey")
        repo = self.hub.repos.get(f"{parts[1]}/{parts[2]}")
        f = repo.by_sha256.get(parts[3]) if repo else None
        self.ctx["repo"] = self.rec["repo"] = repo.repo_id if repo else None
        self.ctx["file"] = self.rec["file"] = f.path if f else None
        if self._pre_faults():
            return
        reason = self.hub.check_cdn_signature(self.req_path, self.query)
        if reason is None:
            for fault in self.hub.faults.candidates("url", self.ctx):
                age = time.time() - int(self.query["issued"][0]) / 1000.0
                if age > fault["after"] and self.hub.faults.fire(fault):
                    self.rec["faults"].append("expire_urls")
                    reason = "Request has expired"
                    break
        if reason is not None:
            return self._cdn_error(403, "AccessDenied", reason)
        if f is None:
            return self._cdn_error(404, "NoSuchKey")
        disposition = self.query.get("response-content-disposition", [None])[0]
        self._serve_file(f, {"ETag": f'"{f.sha256}"', "Content-Disposition": disposition,
                             "Last-Modified": "Mon, 20 Apr 2026 12:00:00 GMT", "X-Cache": "Hit from cloudfront"})

    def _cdn_error(self, status: int, code: str, message: str = ""):
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>{message or code}</Message></Error>\n").encode()
        self._send(status, {"Content-Type": "application/xml"}, body)

    # ---- introspection ------------------------------------------------------------------------------------
    def _internal(self):
        p, m = self.req_path.rstrip("/"), self.command
        try:
            if p == "/_fake/requests" and m == "GET":
                since = int(self.query.get("since", ["0"])[0])
                role = self.query.get("role", [None])[0]
                wait = float(self.query.get("wait", ["2"])[0])
                return self._json(200, self.hub.requests(since=since, role=role, wait=wait))
            if p == "/_fake/reset" and m == "POST":
                opts = json.loads(self.body_in) if self.body_in.strip() else {}
                self.hub.reset(requests=opts.get("requests", True), faults=opts.get("faults", True))
                return self._json(200, {"ok": True})
            if p == "/_fake/faults" and m == "GET":
                return self._json(200, self.hub.faults.list())
            if p == "/_fake/faults" and m == "POST":
                obj = json.loads(self.body_in or b"null")
                items = obj if isinstance(obj, list) else [obj]
                ids = [self.hub.faults.add(it) for it in items]
                return self._json(200, {"ids": ids})
            if p == "/_fake/faults" and m == "DELETE":
                self.hub.faults.remove(None)
                return self._json(200, {"ok": True})
            if p.startswith("/_fake/faults/") and m == "DELETE":
                self.hub.faults.remove(int(p.rsplit("/", 1)[1]))
                return self._json(200, {"ok": True})
            if p == "/_fake/info" and m == "GET":
                return self._json(200, self.hub.info(manifest=True))
            if p == "/_fake/healthz":
                return self._send(200, {"Content-Type": "text/plain"}, b"ok\n")
        except (ValueError, TypeError, AttributeError) as e:
            return self._json(400, {"error": str(e)})
        self._json(404, {"error": "unknown introspection endpoint"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, hub: "FakeHub", role: str):
        self.hub, self.role = hub, role
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, Handler)


class FakeHub:
    """In-process fake hub. Use :func:`start_fake_hub` or ``FakeHub(...).start()``; ``.stop()`` to end."""

    def __init__(self, specs, host: str = "127.0.0.1", port: int = 0, public_host: str | None = None,
                 cdn_host: str | None = None, cdn_bind: str | None = None, cdn_port: int = 0,
                 tokens=(), page_size: int = 50, url_ttl: float = 3600, cache_dir=_DEFAULT,
                 secret: bytes | None = None, verbose: bool = False):
        specs = [RepoSpec.parse(s) if isinstance(s, str) else s for s in specs]
        if cache_dir is _DEFAULT:
            cache_dir = os.environ.get("KIMI_FAKE_HUB_CACHE") or DEFAULT_CACHE_DIR
        self.repos: dict[str, Repo] = {}
        for spec in specs:
            if spec.repo_id in self.repos:
                raise ValueError(f"duplicate repo {spec.repo_id}")
            self.repos[spec.repo_id] = Repo(spec, cache_dir)
        self.commits = {r: repo.commit for r, repo in self.repos.items()}
        self.tokens = {t for t in tokens if t}
        self.page_size = int(page_size)
        self.url_ttl = float(url_ttl)
        self.secret = secret or secrets.token_bytes(32)
        self.verbose = verbose
        self.faults = FaultRegistry()
        self._log_lock = threading.Condition()
        self._log_entries: list[dict] = []
        self._req_ids = itertools.count(1)
        self._conn_ids = itertools.count(1)
        self._conns: dict[int, socket.socket] = {}
        self._conns_lock = threading.Lock()
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        bind = host
        self.hub_server = _Server((bind, port), self, "hub")
        self.cdn_server = _Server((cdn_bind or bind, cdn_port), self, "cdn")
        self._servers = [self.hub_server, self.cdn_server]
        wildcard = bind in ("", "0.0.0.0", "::")
        self.public_host = public_host or ("127.0.0.1" if wildcard else bind)
        if cdn_host is None:
            cdn_host = "127.0.0.1" if self.public_host == "localhost" else "localhost"
        if cdn_host == self.public_host:
            raise ValueError("the CDN must have another host name than the hub (huggingface_hub 1.x compares "
                             "host names only)")
        self.cdn_host = cdn_host
        self.url = f"http://{_host_port(self.public_host, self.hub_server.server_address[1])}"
        self.cdn_url = f"http://{_host_port(self.cdn_host, self.cdn_server.server_address[1])}"

    # lifecycle
    def start(self) -> "FakeHub":
        for srv in self._servers:
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2},
                                 name=f"fake-hub-{srv.role}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self):
        for srv in self._servers:
            srv.shutdown()
            srv.server_close()
        with self._conns_lock:
            conns = list(self._conns.values())
        for c in conns:  # end keep-alive connections so that no stale handler keeps serving
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # connection tracking
    def _register_conn(self, conn) -> int:
        cid = next(self._conn_ids)
        with self._conns_lock:
            self._conns[cid] = conn
        return cid

    def _unregister_conn(self, conn):
        with self._conns_lock:
            for k, v in list(self._conns.items()):
                if v is conn:
                    del self._conns[k]

    # log
    def _log_start(self, rec: dict):
        # Entries are added when a request starts (so a reset() after a client saw its response removes it)
        # and completed when it ends; requests() waits a little for in-flight entries.
        with self._log_lock:
            rec["id"] = next(self._req_ids)
            rec["t"] = time.time()
            rec["done"] = False
            self._log_entries.append(rec)

    def _log_end(self, rec: dict):
        with self._log_lock:
            rec["done"] = True
            self._log_lock.notify_all()

    def requests(self, since: int = 0, role: str | None = None, wait: float = 2.0) -> list[dict]:
        """Logged requests with id > since (optionally only role 'hub' or 'cdn'), in start order.

        Waits up to `wait` seconds for requests still in flight (their entries have done=False after that).
        """
        with self._log_lock:
            self._log_lock.wait_for(lambda: all(r["done"] for r in self._log_entries), timeout=wait)
            return [dict(r, faults=list(r["faults"])) for r in self._log_entries
                    if r["id"] > since and (role is None or r["role"] == role)]

    def reset(self, requests: bool = True, faults: bool = True):
        if requests:
            with self._log_lock:
                self._log_entries = []
        if faults:
            self.faults.remove(None)

    def add_fault(self, fault: dict | None = None, **kw) -> int:
        return self.faults.add(fault, **kw)

    # CDN signing
    def _sig(self, path: str, issued_ms: int, expires: int) -> str:
        return hmac.new(self.secret, f"{path}|{issued_ms}|{expires}".encode(), hashlib.sha256).hexdigest()

    def sign_cdn_url(self, repo: Repo, f: RepoFile, now: float | None = None) -> str:
        now = time.time() if now is None else now
        issued_ms = int(now * 1000)
        expires = int(now + self.url_ttl)
        path = f"/repos/{repo.repo_id}/{f.sha256}"
        name = f.path.rsplit("/", 1)[-1]
        query = urlencode([("response-content-disposition", f'inline; filename*=UTF-8\'\'{quote(name)}; '
                                                            f'filename="{name}";'),
                           ("issued", issued_ms), ("expires", expires),
                           ("sig", self._sig(path, issued_ms, expires))])
        return f"{self.cdn_url}{path}?{query}"

    def check_cdn_signature(self, path: str, query: dict) -> str | None:
        """None if valid, else the reason for a 403."""
        try:
            issued_ms = int(query["issued"][0])
            expires = int(query["expires"][0])
            sig = query["sig"][0]
        except (KeyError, ValueError, IndexError):
            return "Missing or malformed signature"
        if not hmac.compare_digest(sig, self._sig(path, issued_ms, expires)):
            return "Invalid signature"
        if time.time() > expires:
            return "Request has expired"
        return None

    # info
    def info(self, manifest: bool = False) -> dict:
        out = {"hub_url": self.url, "cdn_url": self.cdn_url, "commits": dict(self.commits),
               "page_size": self.page_size, "pid": os.getpid(),
               "repos": {r: {"commit": repo.commit, "private": repo.private, "files": len(repo.files),
                             "total_size": repo.total_size, "kind": repo.spec.kind}
                         for r, repo in self.repos.items()}}
        if manifest:
            out["manifests"] = {r: repo.manifest() for r, repo in self.repos.items()}
        return out


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def write_repo(spec, directory: str, cache_dir=None) -> str:
    """Write every file of a repo (a RepoSpec or a spec string) under `directory`, as a plain model directory
    (what a snapshot holds, without the hub): e.g. the tokenizer for a client, or a model for the engine double.
    Keep the shards small in the spec. Returns `directory`."""
    repo = Repo(spec if isinstance(spec, RepoSpec) else RepoSpec.parse(spec), cache_dir)
    for f in repo.files:
        path = os.path.join(directory, *f.path.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            for piece in f.iter_range(0, f.size):
                out.write(piece)
    return directory


def start_fake_hub(specs, **kwargs) -> FakeHub:
    """Start a fake hub in background threads. `specs`: RepoSpec objects or spec strings.

    Returns the handle: .url, .cdn_url, .commits, .repos, .requests(), .reset(), .add_fault(), .stop().
    """
    return FakeHub(specs, **kwargs).start()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Fake Hugging Face Hub + CDN (test double)")
    ap.add_argument("--host", default="127.0.0.1", help="bind address of both listeners")
    ap.add_argument("--port", type=int, default=0, help="hub port (0 = any free port)")
    ap.add_argument("--public-host", default=None, help="host name put in hub URLs (default: bind address)")
    ap.add_argument("--cdn-host", default=None, help="host name put in CDN URLs (must differ from the hub's; "
                                                     "default localhost, or 127.0.0.1 if the hub is localhost)")
    ap.add_argument("--cdn-bind", default=None, help="bind address of the CDN (default: --host)")
    ap.add_argument("--cdn-port", type=int, default=0)
    ap.add_argument("--repo", action="append", default=[], help="repo spec, e.g. "
                    "moonshotai/Kimi-K2.6:shards=4,shard_size=8MiB (repeatable)")
    ap.add_argument("--token-file", action="append", default=[], help="file with accepted tokens, one a line")
    ap.add_argument("--token", action="append", default=[], help="accepted token (repeatable)")
    ap.add_argument("--page-size", type=int, default=50)
    ap.add_argument("--url-ttl", type=float, default=3600, help="lifetime of signed CDN URLs (s)")
    ap.add_argument("--cache-dir", default=None, help="hash cache dir (default $KIMI_FAKE_HUB_CACHE or "
                                                      "~/.cache/kimi-fake-hub; 'none' disables)")
    ap.add_argument("--fault", action="append", default=[], help="fault JSON object to set at start-up")
    ap.add_argument("--info-file", default=None, help="also write the start-up JSON line to this file")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    tokens = list(args.token)
    for tf in args.token_file:
        with open(tf) as fh:
            tokens += [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    cache_dir = _DEFAULT if args.cache_dir is None else (
        None if args.cache_dir.lower() == "none" else args.cache_dir)
    hub = FakeHub(args.repo or ["moonshotai/Kimi-K2.6"], host=args.host, port=args.port,
                  public_host=args.public_host, cdn_host=args.cdn_host, cdn_bind=args.cdn_bind,
                  cdn_port=args.cdn_port, tokens=tokens, page_size=args.page_size, url_ttl=args.url_ttl,
                  cache_dir=cache_dir, verbose=args.verbose)
    for fj in args.fault:
        hub.add_fault(json.loads(fj))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    hub.start()
    line = json.dumps(hub.info())
    if args.info_file:
        tmp = args.info_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(line + "\n")
        os.replace(tmp, args.info_file)
    print(line, flush=True)
    while not stop.wait(1.0):
        pass
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
