# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Prometheus text exposition read into samples with their labels, and what is computed from them: sums of counters
by label, and quantiles of histograms (as histogram_quantile does: linear within the bucket). Stdlib only; private
to kimi.deploy."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """[(name, {label: value}, value)] of every sample line; comments and malformed lines are skipped."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = SAMPLE_RE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict((k, v.replace('\\"', '"').replace("\\\\", "\\")) for k, v in LABEL_RE.findall(match.group(2) or ""))
        out.append((match.group(1), labels, value))
    return out


def total(samples, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`."""
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == want for k, want in labels.items()))


def buckets(samples, name):
    """A histogram's cumulative buckets [(upper bound, count)] summed over its label sets, +Inf last."""
    out = {}
    for n, labels, value in samples:
        if n == name + "_bucket" and "le" in labels:
            bound = float("inf") if labels["le"] in ("+Inf", "Inf") else float(labels["le"])
            out[bound] = out.get(bound, 0.0) + value
    return sorted(out.items())


def delta(after, before):
    """Bucket counts of `after` less `before` (the requests between two reads)."""
    earlier = dict(before)
    return [(bound, count - earlier.get(bound, 0.0)) for bound, count in after]


def quantile(q, cumulative):
    """The q-quantile of cumulative buckets, linear within the bucket it falls in (PromQL's histogram_quantile); None
    without observations; the last finite bound when it falls in +Inf."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in cumulative:
        if count >= rank:
            if bound == float("inf"):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower
