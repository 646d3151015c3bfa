"""The engine double is not taught the shipped probes' answers (issue 51): it works each one out from the request.

Every shipped case graded on its answer has a perturbation here: the numbers, words, list, JSON, tool result or
needle of its prompt are changed at random, and the expectation is recomputed by this file's own small functions
(never the double's). The double, asked the perturbed cases over HTTP with its one fact (FACTS, kept for serve_verify)
taken away and the offered tools in reverse order, still passes every one; given a wrong expectation instead, every
case fails and the gate's figures say so - the score can fail. A new shipped answer case without a perturbation fails
here. No Docker."""
import copy
import datetime
import math
import os
import random
import re
import string
import sys

import pytest
import yaml

from ansible_collections.kimi.deploy.plugins.module_utils import _accuracy as acc

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROBES = os.path.join(ROOT, "roles", "kimi_probes", "files", "kimi-k26-probes.yml")
DOUBLE = os.path.join(ROOT, "tests", "doubles", "engine", "kimi_engine_double")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(DOUBLE))
import test_engine_double  # noqa: E402
from kimi_engine_double import answers  # noqa: E402

cache, start = test_engine_double.cache, test_engine_double.start  # its fixtures
THRESHOLDS = {"min_schema_accuracy": 98, "min_choice_accuracy": 95, "max_reasoning_leaks": 0,
              "max_answer_failures": 0}


def shipped():
    with open(PROBES) as handle:
        return yaml.safe_load(handle)


# ---- the expectations, recomputed here ----------------------------------------------------------------------------
def number(value):
    return r"(?<![0-9.])%s(?![0-9])" % re.escape(str(value))


def exact(text, flags=""):
    return r"%s^\W*%s\W*$" % (flags, re.escape(text))


def listed(items):
    return r"^\W*%s\W*$" % r",\s*".join(re.escape(str(i)) for i in items)


def is_prime(n):
    return n > 1 and all(n % d for d in range(2, n))


def token(rng, size=8):
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _i in range(size))


WORDS = ["plum", "fig", "cherry", "date", "grape", "lime", "lemon", "melon", "peach", "quince", "apricot", "olive"]
COLOURS = ["red", "green", "blue", "cyan", "magenta", "yellow", "black", "white", "orange", "purple", "brown"]
SPELLED = ["mississippi", "parallel", "committee", "bookkeeper", "engineering", "assessment", "referee"]
SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400, "weeks": 604800}


def perturb_multiply(rng):
    a, b = rng.randint(11, 99), rng.randint(11, 99)
    return [("17 multiplied by 23", "%d multiplied by %d" % (a, b))], number(a * b), number(a * b + 1)


def perturb_add(rng):
    a, b = rng.randint(1000, 9999), rng.randint(1000, 9999)
    return [("1234 plus 5678", "%d plus %d" % (a, b))], number(a + b), number(a + b - 10)


def perturb_expression(rng):
    a, b, c, d = (rng.randint(2, 40) for _i in range(4))
    right = (a + b) * c - d
    return [("(12 + 30) * 4 - 7", "(%d + %d) * %d - %d" % (a, b, c, d))], number(right), number(a + b * c - d)


def perturb_percent(rng):
    share, whole = 5 * rng.randint(1, 19), 20 * rng.randint(1, 50)
    return [("15% of 240", "%d%% of %d" % (share, whole))], number(share * whole // 100), number(share * whole)


def perturb_sum_list(rng):
    values = [rng.randint(1, 99) for _i in range(rng.randint(3, 7))]
    return [("12, 45, 7, 30, 6", ", ".join(map(str, values)))], number(sum(values)), number(sum(values) + 1)


def perturb_echo(old):
    def perturb(rng):
        new = "echo-%s" % token(rng)
        return [(old, new)], exact(new), exact(old)
    return perturb


def perturb_sort_numbers(rng):
    values = rng.sample(range(-50, 500), 6)
    return ([("42, 7, 19, 3, 88", ", ".join(map(str, values)))], listed(sorted(values)),
            listed(sorted(values, reverse=True)))


def perturb_sort_words(rng):
    words = rng.sample(WORDS, 5)
    return ([("pear, apple, mango, kiwi, banana", ", ".join(words))], listed(sorted(words)),
            listed(sorted(words, reverse=True)))


def perturb_reverse(rng):
    text = "%s-%s" % (token(rng, 4), token(rng, 3))
    return [("abc-123", text)], exact(text[::-1]), exact(text)


def perturb_count_letter(rng):
    word = rng.choice(SPELLED)
    letter = rng.choice(sorted(set(word)))
    count = sum(1 for c in word if c == letter)
    return [("letter a ", "letter %s " % letter), ("word banana", "word %s" % word)], number(count), number(count + 1)


def perturb_count_items(rng):
    items = rng.sample(COLOURS, rng.randint(3, 9))
    return ([("red, green, blue, cyan, magenta, yellow", ", ".join(items))], number(len(items)),
            number(len(items) + 1))


def perturb_upper(rng):
    text = " ".join(rng.sample(WORDS, 3))
    return [("kimi deploy gate", text)], exact(text.upper()), exact(text)


def perturb_time_units(rng):
    small, large = sorted(rng.sample(sorted(SECONDS, key=SECONDS.get), 2), key=SECONDS.get)
    amount = rng.randint(2, 30)
    right = amount * SECONDS[large] // SECONDS[small]
    return [("seconds are in 3 hours", "%s are in %d %s" % (small, amount, large))], number(right), number(amount)


def perturb_celsius(rng):
    celsius = 5 * rng.randint(-20, 60)
    fahrenheit = celsius * 9 // 5 + 32
    return [("100 degrees Celsius", "%d degrees Celsius" % celsius)], number(fahrenheit), number(fahrenheit + 1)


def perturb_date(rng):
    day = datetime.date(2026, 1, 1) + datetime.timedelta(days=rng.randint(0, 364))
    days = rng.randint(1, 400)
    right, wrong = day + datetime.timedelta(days=days), day + datetime.timedelta(days=days + 1)
    return ([("10 days after 2026-02-25", "%d days after %s" % (days, day.isoformat()))], number(right.isoformat()),
            number(wrong.isoformat()))


def perturb_json(rng):
    count, replicas = rng.randint(1, 64), [rng.randint(100, 999) for _i in range(3)]
    document = '{"gpu": {"count": %d, "model": "H200"}, "replicas": [%s]}' % (count, ", ".join(map(str, replicas)))
    index = rng.randint(0, 2)
    path, value = rng.choice([("gpu.count", count), ("replicas[%d]" % index, replicas[index])])
    return ([('{"gpu": {"count": 8, "model": "H200"}, "replicas": [2, 4]}', document), ("gpu.count", path)],
            exact(str(value)), exact(str(value + 1)))


def perturb_divide(rng):
    divisor, quotient = rng.randint(2, 30), rng.randint(2, 30)
    return ([("48 divided by 6", "%d divided by %d" % (divisor * quotient, divisor))], number(quotient),
            number(quotient + 1))


def perturb_prime(rng):
    n = rng.randint(50, 400)
    yes, no = r"(?i)^\W*yes\b", r"(?i)^\W*no\b"
    return [("Is 97 a prime", "Is %d a prime" % n)], yes if is_prime(n) else no, no if is_prime(n) else yes


def perturb_gcd(rng):
    g, x, y = rng.randint(2, 40), rng.randint(2, 30), rng.randint(2, 30)
    right = math.gcd(g * x, g * y)
    return [("84 and 126", "%d and %d" % (g * x, g * y))], number(right), number(right * 2 + 1)


def perturb_tool_number(old, template):
    def perturb(rng):
        value = rng.randint(100, 9999)
        return [(template % old, template % value)], number(value), number(value + 1)
    return perturb


def perturb_status(rng):
    status = rng.choice(["delayed", "delivered", "returned", "held at customs", "lost"])
    return [('"shipped"', '"%s"' % status)], "(?i)%s" % re.escape(status), "(?i)shipped"


def perturb_currency_result(rng):
    value = "%d.%02d" % (rng.randint(1, 9999), rng.randint(0, 99))
    return [("231.19", value)], re.escape(value), re.escape("231.19")


def perturb_search_result(rng):
    title = " ".join(rng.sample(WORDS, 3)).capitalize()
    return [("Expert parallelism across nodes", title)], "(?i)%s" % re.escape(title), "(?i)expert parallelism"


def perturb_parallel_results(rng):
    temperature, converted = rng.randint(-30, 45), rng.randint(1000, 99999)
    return ([('"temperature_c": 22', '"temperature_c": %d' % temperature), ("81250", str(converted))],
            r"(?s)^(?=.*%s).*%s" % (number(temperature), number(converted)), r"(?s)%s" % number(converted + 1))


PERTURB = {
    "deterministic-multiply": perturb_multiply, "deterministic-add": perturb_add,
    "deterministic-expression": perturb_expression, "deterministic-percent": perturb_percent,
    "deterministic-sum-list": perturb_sum_list, "deterministic-echo": perturb_echo("kimi-probe-7f3a9c"),
    "deterministic-sort-numbers": perturb_sort_numbers, "deterministic-sort-words": perturb_sort_words,
    "deterministic-reverse": perturb_reverse, "deterministic-count-letter": perturb_count_letter,
    "deterministic-count-items": perturb_count_items, "deterministic-upper-case": perturb_upper,
    "deterministic-hours-to-seconds": perturb_time_units, "deterministic-celsius-to-fahrenheit": perturb_celsius,
    "deterministic-date": perturb_date, "deterministic-json": perturb_json,
    "no-tool-divide": perturb_divide, "no-tool-prime": perturb_prime, "no-tool-echo": perturb_echo("tools-not-needed-42"),
    "no-tool-gcd": perturb_gcd,
    "follow-up-weather": perturb_tool_number(17, '"temperature_c": %s'), "follow-up-order": perturb_status,
    "follow-up-currency": perturb_currency_result, "follow-up-search": perturb_search_result,
    "follow-up-parallel": perturb_parallel_results,
}


def perturb_needle(case, rng):
    old = case["needle"]["code"]
    case["needle"] = {"code": "K26-%04d-%s" % (rng.randint(0, 9999), token(rng, 5).upper()),
                      "depth": round(rng.uniform(0.05, 0.95), 2)}
    return re.escape(case["needle"]["code"]), re.escape(old)


def replace_once(case, old, new):
    """`old` replaced by `new` in the prompt or the messages' contents, where it must be exactly once."""
    texts = [case] if case.get("prompt") else case["messages"]
    key = "prompt" if case.get("prompt") else "content"
    assert sum(str(t.get(key) or "").count(old) for t in texts) == 1, (case["id"], old)
    for holder in texts:
        if old in str(holder.get(key) or ""):
            holder[key] = holder[key].replace(old, new)


def perturbed(seed):
    """(the perturbed probe file, the same file with every expectation wrong)."""
    rng, doc = random.Random(seed), shipped()
    doc["variants"] = [{"thinking": True, "stream": False}]
    right, wrong = [], []
    for case in doc["cases"]:
        case.pop("variants", None)
        if case["category"] == "needle":
            good, bad = perturb_needle(case, rng)
        elif case["id"] in PERTURB:
            replacements, good, bad = PERTURB[case["id"]](rng)
            for old, new in replacements:
                replace_once(case, old, new)
        elif len(case.get("tools") or []) > 1 and case["expect"]["tools"]:  # a choice: the tools in another order
            case["tools"] = list(reversed(case["tools"]))
            other = [t for t in case["tools"] if t not in case["expect"]["tools"]]
            right.append(case)
            wrong.append(dict(copy.deepcopy(case), expect=dict(case["expect"], tools=other[:1])))
            continue
        else:
            continue
        right.append(dict(case, expect=dict(case["expect"], answer_regex=good)))
        wrong.append(dict(copy.deepcopy(case), expect=dict(case["expect"], answer_regex=bad)))
    return dict(doc, cases=right), dict(doc, cases=wrong)


# ---- the tests ----------------------------------------------------------------------------------------------------
def test_every_shipped_answer_case_has_a_perturbation_here():
    graded = set(c["id"] for c in shipped()["cases"] if "answer_regex" in c.get("expect", {}))
    needles = set(c["id"] for c in shipped()["cases"] if c["category"] == "needle")
    assert graded - needles == set(PERTURB), "a shipped case graded on its answer needs a perturbation in this file"


def test_the_double_works_out_every_shipped_answer_itself_not_from_a_table(monkeypatch):
    """Each answer is one of the stand-in's skills' (not its canned greeting, nor its one fact), and nothing the
    probes name - a case id, an answer of four characters or more - is written in the double's source."""
    monkeypatch.setattr(answers, "FACTS", {})
    source = ""
    for name in ("answers.py", "server.py"):
        with open(os.path.join(DOUBLE, name)) as handle:
            source += handle.read()
    for case in acc.load(shipped()):
        assert case["case"] not in source, case["case"]
        if case["messages"] or not case["expect"].get("answer_regex"):
            continue  # a follow-up reports its tool's result; a greeting is graded on its tool choice only
        body = acc.request_body(case, "kimi-k2.6", context_length=4096)
        text = body["messages"][-1]["content"]
        answer = answers.direct_answer(text, text)
        assert answer is not None and re.search(case["expect"]["answer_regex"], answer), (case["id"], answer)
        assert len(answer) < 4 or answer.lower().startswith(("yes", "no")) or answer not in source, (case["id"], answer)


@pytest.mark.parametrize("seed", [51, 2026])
def test_perturbed_probes_pass_and_a_wrong_expectation_fails_the_score(start, monkeypatch, seed):
    monkeypatch.setattr(answers, "FACTS", {})
    right, wrong = perturbed(seed)
    assert len(right["cases"]) >= 35
    url = "http://127.0.0.1:%d" % start("sglang").double.port
    outcomes, _seconds = acc.run(acc.load(right), url, "kimi-k2.6", context_length=4096)
    assert [o["id"] for o in outcomes if not o["ok"]] == [], [o["problems"] for o in outcomes if not o["ok"]]
    figures = acc.figures(outcomes)
    assert acc.judge(figures, THRESHOLDS) == [] and figures["answer_failures"] == 0
    outcomes, _seconds = acc.run(acc.load(wrong), url, "kimi-k2.6", context_length=4096)
    assert [o["id"] for o in outcomes if o["ok"]] == []  # every wrong expectation is caught
    figures = acc.figures(outcomes)
    answered = sum(1 for c in wrong["cases"] if "answer_regex" in c["expect"])
    assert figures["answer_failures"] == answered and figures["choice_accuracy"] < 95
    reasons = acc.judge(figures, THRESHOLDS)
    assert any(r.startswith("choice accuracy") for r in reasons)
    assert "%d answer failures, at most 0 allowed" % answered in reasons
