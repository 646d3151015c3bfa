"""Speculative decoding in the engine double (kimi_engine_double/speculative.py): the flags in their valid forms, the
draft from the offline Hugging Face cache (made by the fake hub's write_repo), the refusals the real engines give, and
the acceptance metrics with the engines' names. No Docker needed."""
import io
import json
import os
import re
import sys
import threading

import pytest

from test_engine_double import SGLANG_LINE, VLLM_LINE, Running, chat

from kimi_engine_double import flags, speculative  # noqa: E402  (test_engine_double puts the double on sys.path)
from kimi_engine_double.main import serve  # noqa: E402
from kimi_engine_double.server import EngineDouble  # noqa: E402

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "doubles", "hub")))
import fake_hub  # noqa: E402

TARGET = "moonshotai/Kimi-K2.6:shards=1,shard_size=4096"
EAGLE3 = "lightseekorg/kimi-k2.6-eagle3"
DFLASH = "z-lab/Kimi-K2.6-DFlash"
NARROW = "acme/narrow-eagle3"  # hidden size 4096: trained for another target
SMALL_VOCAB = "acme/small-vocab-eagle3"  # vocab 32000: another tokenizer
MISSING = "acme/not-downloaded-eagle3"
SPECS = {EAGLE3: EAGLE3 + ":kind=eagle3,shard_size=4096", DFLASH: DFLASH + ":kind=dflash,shard_size=4096",
         NARROW: NARROW + ":kind=eagle3,hidden_size=4096,shard_size=4096",
         SMALL_VOCAB: SMALL_VOCAB + ":kind=eagle3,vocab_size=32000,shard_size=4096"}
SAMPLE = re.compile(r"^(\S+?)(\{[^}]*\})? (\S+)$")


def cache_repo(root, spec_text):
    """One repo of the fake hub in a Hugging Face cache layout (refs/main -> snapshots/<commit>/, plain files)."""
    spec = fake_hub.RepoSpec.parse(spec_text)
    repo_dir = os.path.join(root, "models--" + spec.repo_id.replace("/", "--"))
    fake_hub.write_repo(spec, os.path.join(repo_dir, "snapshots", spec.commit))
    os.makedirs(os.path.join(repo_dir, "refs"), exist_ok=True)
    with open(os.path.join(repo_dir, "refs", "main"), "w") as f:
        f.write(spec.commit)
    return spec.commit


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """The target (Kimi-K2.6's config: hidden 7168, vocab 163840) and the drafts; returns (env, {repo: commit})."""
    root = str(tmp_path_factory.mktemp("hf"))
    commits = {"target": cache_repo(root, TARGET)}
    commits.update({repo: cache_repo(root, text) for repo, text in SPECS.items()})
    return {"HF_HUB_CACHE": root, "HF_HUB_OFFLINE": "1"}, commits


@pytest.fixture
def start(hub_cache):
    started = []

    def _start(engine, extra=(), env=None):
        argv = list(SGLANG_LINE if engine == "sglang" else VLLM_LINE)
        argv[argv.index("--port") + 1] = "0"
        argv[argv.index("--host") + 1] = "127.0.0.1"
        r = Running(engine, argv + list(extra), dict(hub_cache[0], **(env or {})))
        started.append(r)
        return r
    yield _start
    for r in started:
        r.close()


def run_to_exit(engine, extra, env):
    """Start a double that must fail at start-up; returns (exit code, stdout, stderr)."""
    argv = list(SGLANG_LINE if engine == "sglang" else VLLM_LINE) + list(extra)
    out, err, stop = io.StringIO(), io.StringIO(), threading.Event()
    double = EngineDouble(engine, flags.parse(engine, argv), env=env, out=out, err=err)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", double.run(stop)), daemon=True)
    thread.start()
    for _attempt in range(200):  # until it exits, or gets ready (it must not: stop it, the code then is 0)
        thread.join(0.05)
        if not thread.is_alive() or double.ready.is_set():
            break
    stop.set()
    thread.join(10)
    return result.get("code"), out.getvalue(), err.getvalue()


def samples(text):
    """{name: [(labels, value)]} of a Prometheus text."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and not line.startswith("#"):
            out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return out


def spec_config(**kw):
    return ["--speculative-config", json.dumps(kw)]


def sglang_eagle3(commit, steps="3", topk="1", draft_tokens="4", draft=EAGLE3):
    return ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
            "--speculative-draft-model-revision", commit, "--speculative-num-steps", steps,
            "--speculative-eagle-topk", topk, "--speculative-num-draft-tokens", draft_tokens]


# ---- parsing -----------------------------------------------------------------------------------------------
def test_vllm_dotted_speculative_config_merges_keys_and_keeps_underscores():
    args = flags.parse("vllm", ["m", "--speculative-config.method", "ngram",
                                "--speculative_config.num_speculative_tokens=4",
                                "--speculative-config.prompt_lookup_max", "5"])
    assert json.loads(args.get("speculative_config")) == {"method": "ngram", "num_speculative_tokens": 4,
                                                          "prompt_lookup_max": 5}


def test_vllm_speculative_config_not_json_is_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        serve("vllm", ["m", "--speculative-config", "{method: eagle3"])
    assert exc.value.code == 2
    assert "argument --speculative-config/-sc: Value {method: eagle3 cannot be converted" in capsys.readouterr().err


def test_sglang_speculative_ints_are_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        serve("sglang", ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "x"])
    assert exc.value.code == 2
    assert "argument --speculative-num-steps: invalid int value: 'x'" in capsys.readouterr().err


# ---- SGLang --------------------------------------------------------------------------------------------------
def test_sglang_eagle3_starts_with_its_draft_and_reports_acceptance(start, hub_cache):
    commit = hub_cache[1][EAGLE3]
    r = start("sglang", sglang_eagle3(commit))
    out = r.out.getvalue()
    assert "Speculative decoding: EAGLE3 with draft %s@%s (num_steps=3, eagle_topk=1, num_draft_tokens=4)" % (
        EAGLE3, commit[:12]) in out
    assert "(draft)" in out and "snapshots/" + commit in out  # the draft's bytes were read from its snapshot
    assert SGLANG_TOPK1_WARNING_TEXT not in out
    status, before = r.get("/metrics")
    assert status == 200 and "sglang:spec_accept_length" not in before  # no decode interval yet
    assert r.post(chat("Tell me a long story about speculative decoding"))[0] == 200
    text = r.get("/metrics")[1]
    assert ("# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding (accepted drafts + "
            "bonus token per forward).") in text
    assert "# TYPE sglang:spec_accept_rate gauge" in text
    got = samples(text)
    labels = '{engine_type="unified",model_name="kimi-k2.6",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
    [(lab_len, length)] = got["sglang:spec_accept_length"]
    [(lab_rate, rate)] = got["sglang:spec_accept_rate"]
    assert lab_len == lab_rate == labels
    assert 1 < length <= 4 and 0 < rate <= 1
    assert re.search(r"Decode batch, .*accept len: %.2f, accept rate: %.2f" % (length, rate), r.out.getvalue())


SGLANG_TOPK1_WARNING_TEXT = ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                             "speculative_eagle_topk == 1")


def test_sglang_topk1_overrides_draft_tokens_with_a_warning(start, hub_cache):
    r = start("sglang", sglang_eagle3(hub_cache[1][EAGLE3], steps="3", topk="1", draft_tokens="8"))
    out = r.out.getvalue()
    assert SGLANG_TOPK1_WARNING_TEXT in out
    assert "num_steps=3, eagle_topk=1, num_draft_tokens=4)" in out


def test_sglang_dflash_uses_the_drafts_block(start, hub_cache):
    r = start("sglang", ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DFLASH])
    assert "Speculative decoding: DFLASH with draft %s@%s (num_steps=1, eagle_topk=1, num_draft_tokens=16 (the " \
           "draft's block_size))" % (DFLASH, hub_cache[1][DFLASH][:12]) in r.out.getvalue()


def test_sglang_ngram_loads_no_draft(start):
    r = start("sglang", ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "12"])
    assert "Speculative decoding: NGRAM (no draft model) (num_draft_tokens=12)" in r.out.getvalue()
    assert r.post(chat())[0] == 200
    assert "sglang:spec_accept_rate{" in r.get("/metrics")[1]


def test_sglang_without_speculation_has_no_spec_gauges(start):
    r = start("sglang")
    assert r.post(chat())[0] == 200
    assert "spec_accept" not in r.get("/metrics")[1] and "Speculative decoding" not in r.out.getvalue()


# ---- vLLM ----------------------------------------------------------------------------------------------------
def vllm_counters(text):
    got = samples(text)
    labels = '{model_name="kimi-k2.6",engine="0"}'
    out = {}
    for name in ("drafts", "draft_tokens", "accepted_tokens"):
        [(lab, value)] = got["vllm:spec_decode_num_%s_total" % name]
        assert lab == labels
        out[name] = value
    out["per_pos"] = {re.search(r'position="(\d+)"', lab).group(1): value
                      for lab, value in got["vllm:spec_decode_num_accepted_tokens_per_pos_total"]}
    return out


def test_vllm_eagle3_starts_with_its_draft_and_counts(start, hub_cache):
    commit = hub_cache[1][EAGLE3]
    r = start("vllm", spec_config(method="eagle3", model=EAGLE3, num_speculative_tokens=3, revision=commit))
    out = r.out.getvalue()
    assert "Loading drafter model..." in out and "snapshots/" + commit in out
    assert "Speculative decoding: eagle3 with draft %s@%s (num_speculative_tokens=3)" % (EAGLE3, commit[:12]) in out
    text = r.get("/metrics")[1]
    for name, doc in (("drafts", "Number of spec decoding drafts."), ("draft_tokens", "Number of draft tokens."),
                      ("accepted_tokens", "Number of accepted tokens.")):
        assert "# HELP vllm:spec_decode_num_%s_total %s" % (name, doc) in text
        assert "# TYPE vllm:spec_decode_num_%s_total counter" % name in text
        assert 'vllm:spec_decode_num_%s_created{model_name="kimi-k2.6",engine="0"}' % name in text
    assert "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position." in text
    start_counts = vllm_counters(text)  # the children exist from the start, at 0
    assert start_counts == {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0,
                            "per_pos": {"0": 0, "1": 0, "2": 0}}
    status, body = r.post(chat("Tell me a long story about speculative decoding"))
    assert status == 200
    generated = body["usage"]["completion_tokens"]
    c = vllm_counters(r.get("/metrics")[1])
    drafts = max(1, generated // 4)
    assert c["drafts"] == drafts and c["draft_tokens"] == 3 * drafts
    assert c["accepted_tokens"] == round(speculative.ACCEPT_RATE * 3 * drafts)
    assert sum(c["per_pos"].values()) == c["accepted_tokens"]
    assert c["per_pos"]["0"] >= c["per_pos"]["1"] >= c["per_pos"]["2"]
    line = re.search(r"SpecDecoding metrics: Mean acceptance length: ([\d.]+), Accepted throughput: [\d.]+ "
                     r"tokens/s, Drafted throughput: [\d.]+ tokens/s, Accepted: (\d+) tokens, Drafted: (\d+) tokens, "
                     r"Per-position acceptance rate: [\d., ]+, Avg Draft acceptance rate: [\d.]+%", r.out.getvalue())
    assert line and int(line.group(2)) == c["accepted_tokens"] and int(line.group(3)) == c["draft_tokens"]
    assert float(line.group(1)) == pytest.approx(1 + c["accepted_tokens"] / c["drafts"], abs=0.01)


def test_vllm_ngram_in_dotted_form(start):
    r = start("vllm", ["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "4",
                       "--speculative-config.prompt_lookup_max", "4", "--speculative-config.prompt_lookup_min", "2"])
    out = r.out.getvalue()
    assert "Speculative decoding: ngram (no draft model) (num_speculative_tokens=4, prompt_lookup_min=2, " \
           "prompt_lookup_max=4)" in out and "Loading drafter model" not in out
    assert r.post(chat())[0] == 200
    c = vllm_counters(r.get("/metrics")[1])
    assert c["drafts"] >= 1 and c["draft_tokens"] == 4 * c["drafts"] and sorted(c["per_pos"]) == ["0", "1", "2", "3"]


def test_vllm_without_speculation_has_no_spec_counters(start):
    r = start("vllm")
    assert r.post(chat())[0] == 200
    assert "spec_decode" not in r.get("/metrics")[1]


@pytest.mark.parametrize("version", ["0.20.2", "0.33.0"])
def test_vllm_methods_come_from_the_versions_flag_list(monkeypatch, hub_cache, version):
    monkeypatch.setenv(flags.VERSION_ENV, version)
    table = flags.load_flags("vllm")
    assert "eagle3" in speculative.vllm_methods(table) and "None" not in speculative.vllm_methods(table)
    args = flags.parse("vllm", ["m"] + spec_config(method="eagle3", model=EAGLE3, num_speculative_tokens=3))
    assert flags.startup_problems(args) == []  # 0.20.2's valid_values are methods, not whole values
    spec, _notes = speculative.configure("vllm", args, "m", table=table)
    assert spec.method == "eagle3" and spec.draft == EAGLE3
    bad = flags.parse("vllm", ["m"] + spec_config(method="eagle4", model=EAGLE3, num_speculative_tokens=3))
    with pytest.raises(speculative.Problem, match=r"(?s)method\n  Input should be .*'eagle3'.*literal_error"):
        speculative.configure("vllm", bad, "m", table=table)


# ---- refusals ------------------------------------------------------------------------------------------------
EAGLE3_OK = dict(method="eagle3", model=EAGLE3, num_speculative_tokens=3)
REFUSALS = [
    ("vllm", spec_config(method="eagle4", model=EAGLE3, num_speculative_tokens=3),
     ["1 validation error for SpeculativeConfig", "method\n  Input should be ", "'eagle3'", "type=literal_error"]),
    ("vllm", spec_config(foo=1, **EAGLE3_OK),
     ["foo\n  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=1, input_type=int]"]),
    ("vllm", spec_config(method="eagle3", model=EAGLE3),
     ["Value error, num_speculative_tokens must be provided with speculative model"]),
    ("vllm", spec_config(method="eagle3", num_speculative_tokens=3),
     ["Value error, num_speculative_tokens was provided but without speculative model."]),
    ("vllm", spec_config(method="dflash", num_speculative_tokens=15),
     ["num_speculative_tokens was provided but without speculative model."]),
    ("vllm", spec_config(method="eagle3", model=EAGLE3, num_speculative_tokens=0),
     ["num_speculative_tokens\n  Input should be greater than 0 [type=greater_than"]),
    ("vllm", spec_config(method="eagle3", model=EAGLE3, num_speculative_tokens="x"),
     ["num_speculative_tokens\n  Input should be a valid integer, unable to parse string as an integer"]),
    ("vllm", spec_config(method="ngram", num_speculative_tokens=3, prompt_lookup_min=6, prompt_lookup_max=5),
     ["prompt_lookup_min=6 must be <= prompt_lookup_max=5"]),
    ("vllm", spec_config(draft_tensor_parallel_size=4, **EAGLE3_OK),
     ["speculative_draft_tensor_parallel_size=4 cannot be other value than 1 or target model tensor_parallel_size"]),
    ("vllm", spec_config(tensor_parallel_size=1, **EAGLE3_OK), ["Please pass 'draft_tensor_parallel_size' instead."]),
    ("vllm", spec_config(**EAGLE3_OK) + ["--pipeline-parallel-size", "2"],
     ["ValueError: EAGLE3 with pipeline parallel is not supported."]),
    ("vllm", spec_config(method="eagle3", model=NARROW, num_speculative_tokens=3),
     ["RuntimeError: Error(s) in loading state_dict", "size mismatch for fc.weight", "torch.Size([4096, 12288])",
      "torch.Size([4096, 21504])", "hidden size 4096", "has 7168"]),
    ("vllm", spec_config(method="eagle3", model=SMALL_VOCAB, num_speculative_tokens=3),
     ["size mismatch for embed_tokens.weight", "vocab_size 32000", "has 163840"]),
    ("vllm", spec_config(method="eagle3", model=MISSING, num_speculative_tokens=3),
     ["huggingface_hub.errors.LocalEntryNotFoundError", "models--acme--not-downloaded-eagle3"]),
    ("vllm", spec_config(method="eagle3", model=DFLASH, num_speculative_tokens=3),
     ["is not an EAGLE3 draft", "DFlashDraftModel"]),
    ("sglang", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", EAGLE3, "--pp-size", "2"],
     ["AssertionError: Pipeline parallelism is not compatible with overlap schedule, speculative decoding"]),
    ("sglang", ["--speculative-algorithm", "DFLASH"], ["ValueError: DFLASH requires --speculative-draft-model-path."]),
    ("sglang", ["--speculative-algorithm", "EAGLE4"], ["invalid value 'EAGLE4' for --speculative-algorithm"]),
    ("sglang", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", NARROW],
     ["size mismatch for fc.weight", "hidden size 4096", "has 7168"]),
    ("sglang", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", MISSING],
     ["LocalEntryNotFoundError", "Cannot find the requested files in the local cache", "it is the speculative draft"]),
    ("sglang", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", EAGLE3,
                "--speculative-draft-model-revision", "f" * 40], ["LocalEntryNotFoundError", "no snapshot"]),
    ("sglang", ["--speculative-algorithm", "EAGLE3"],
     ["is not an EAGLE3 draft", "KimiK25ForConditionalGeneration", "--speculative-draft-model-path is unset"]),
]


@pytest.mark.parametrize("engine,extra,messages", REFUSALS, ids=[
    "vllm-bad-method", "vllm-unknown-key", "vllm-no-tokens", "vllm-tokens-without-model", "vllm-dflash-no-model",
    "vllm-zero-tokens", "vllm-tokens-not-int", "vllm-ngram-min-over-max", "vllm-draft-tp", "vllm-tp-key",
    "vllm-pp-eagle3", "vllm-narrow-draft", "vllm-vocab-draft", "vllm-missing-draft", "vllm-wrong-kind",
    "sglang-pp", "sglang-dflash-no-draft", "sglang-bad-algorithm", "sglang-narrow-draft", "sglang-missing-draft",
    "sglang-missing-revision", "sglang-eagle3-no-draft"])
def test_refusals_exit_1(hub_cache, engine, extra, messages):
    code, out, err = run_to_exit(engine, extra, hub_cache[0])
    assert code == 1, (out, err)
    for message in messages:
        assert message in err, (message, err)
    assert "ready to roll" not in out and "Application startup complete" not in out


def test_sglang_eagle3_without_draft_warns_before_failing(hub_cache):
    _code, out, _err = run_to_exit("sglang", ["--speculative-algorithm", "EAGLE3"], hub_cache[0])
    assert "speculative_draft_model_path is not set: EAGLE3 uses the target's model path moonshotai/Kimi-K2.6" in out


# ---- what the collection reads -----------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_collection_reads_the_doubles_acceptance(start, hub_cache, engine):
    """kimi.deploy's serve_verify reads the engine's own series (its engine data's speculative.metrics) with
    _speculative.acceptance(): the double's names and values must give what the engine would."""
    try:
        from ansible_collections.kimi.deploy.plugins.module_utils._engines import sglang as _engine_sglang
        from ansible_collections.kimi.deploy.plugins.module_utils._engines import vllm as _engine_vllm
        from ansible_collections.kimi.deploy.plugins.module_utils._model.speculative import acceptance
    except ImportError as e:  # pragma: no cover - the collection's layout is tests/conftest.py's business
        pytest.skip("kimi.deploy module_utils not importable: %s" % e)
    extra = sglang_eagle3(hub_cache[1][EAGLE3]) if engine == "sglang" else spec_config(**EAGLE3_OK)
    r = start(engine, extra)
    names = (_engine_sglang if engine == "sglang" else _engine_vllm).SPECULATIVE["metrics"]
    assert acceptance(r.get("/metrics")[1], names) is None  # nothing drafted yet
    assert r.post(chat("Tell me a long story about speculative decoding"))[0] == 200
    got = acceptance(r.get("/metrics")[1], names)
    assert got and 0 < got["accept_rate"] <= 1 and got["mean_accepted_length"] > 1
