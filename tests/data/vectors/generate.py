#!/usr/bin/env python3
"""Writes the conformance vectors (tests/data/vectors/*.json) from first principles.

This script is the independent computation of the expected values: it implements the
documented semantics (README.md in this directory, and the pipeline table in the crate
docs) directly, in Python, and never runs or imports the crate. Run it from anywhere:

    python3 tests/data/vectors/generate.py

Arithmetic follows the documented precision so that another implementation can agree to
within 1e-9: the logits and every adjustment (bias, penalties) are IEEE-754 binary32
values, each operation rounded to binary32; temperature, softmax, the cuts and the draw
work in binary64. The worked examples from the documentation are asserted here, so a
change of semantics that breaks them fails loudly instead of rewriting the files.
"""

import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NEG_INF = float("-inf")


def f32(x):
    """Rounds a Python float (binary64) to the nearest binary32 value."""
    if math.isinf(x) or math.isnan(x):
        return x
    return struct.unpack("<f", struct.pack("<f", x))[0]


def decimal(x):
    """The shortest decimal that rounds to the binary32 value `x`, as a binary64: the value
    a probability threshold is compared at (0.8 means 0.8, not 0.800000011920929)."""
    if x == 0.0 or math.isinf(x) or math.isnan(x):
        return x
    for digits in range(1, 18):
        d = float("%.*e" % (digits - 1, x))
        if f32(d) == x:
            return d
    return x


# ---------------------------------------------------------------------------------------
# The semantics, stage by stage.


def adjust(logits, vocab, params, prompt, generated):
    """Stage 1: bias, then penalties, then (no mask in these vectors)."""
    l = [f32(x) for x in logits[:vocab]]
    for tid, b in params.get("logit_bias", []):
        l[tid] = f32(l[tid] + f32(b))
    r = f32(params.get("repetition_penalty", 1.0))
    fp = f32(params.get("frequency_penalty", 0.0))
    pp = f32(params.get("presence_penalty", 0.0))
    if r != 1.0 or fp != 0.0 or pp != 0.0:
        base = prompt + generated if params.get("penalize_prompt", True) else list(generated)
        window = params.get("penalty_window")
        if window is not None:
            base = base[len(base) - window:] if window < len(base) else base
            if window == 0:
                base = []
        counts = {}
        for t in base:
            counts[t] = counts.get(t, 0) + 1
        for t, c in counts.items():
            x = l[t]
            if r != 1.0:
                x = f32(x / r) if x > 0 else f32(x * r)
            x = f32(x - f32(f32(c * fp) + pp))
            l[t] = x
    return l


def survivors(l, params):
    """Stages 2-4: temperature, softmax, top-k, top-p, min-p. Returns [(id, weight)] in
    draw order: probability descending, ties to the lower id."""
    finite = [(i, x) for i, x in enumerate(l) if x != NEG_INF]
    if not finite:
        return None
    t = f32(params.get("temperature", 1.0))
    m = max(x for _, x in finite)
    if t == 0.0:
        best = min(i for i, x in finite if x == m)
        return [(best, 1.0)]
    cands = sorted(finite, key=lambda p: (-p[1], p[0]))
    cands = [(i, math.exp((x - m) / t)) for i, x in cands]
    keep = params.get("min_tokens_to_keep", 1)

    def at_least(n):
        return cands[: min(max(n, keep), len(cands))]

    k = params.get("top_k")
    if k is not None:
        cands = at_least(k)
    p = decimal(f32(params.get("top_p", 1.0)))
    if p < 1.0:
        total = sum(w for _, w in cands)
        cum, n = 0.0, len(cands)
        for j, (_, w) in enumerate(cands):
            before = cum
            cum += w
            if cum >= p * total:
                n = j + 1
                # No vector may depend on rounding: the crossing is exact or clear.
                assert cum == p * total or cum - p * total > 1e-9 * total, (cum, p)
                assert p * total - before > 1e-9 * total, (before, p)
                break
        cands = at_least(n)
    mp = decimal(f32(params.get("min_p", 0.0)))
    if mp > 0.0:
        # p_i >= min_p * p_max, equality kept.
        top = cands[0][1]
        n = sum(1 for _, w in cands if w >= mp * top)
        for _, w in cands:
            assert w == mp * top or abs(w - mp * top) > 1e-9 * top, (w, mp)
        cands = at_least(n)
    return cands


def distribution(cands):
    total = sum(w for _, w in cands)
    return [(i, w / total) for i, w in cands]


def draw(dist, u):
    """Inverse CDF: the first survivor whose cumulative probability exceeds u."""
    cum = 0.0
    for i, p in dist:
        cum += p
        if cum > u:
            return i
    return dist[-1][0]


def uniforms_for(dist):
    """0, the midpoint of every survivor's interval (those wider than 1e-6), and
    0.999999."""
    us, lo = [0.0], 0.0
    for _, p in dist:
        if p > 1e-6:
            us.append(round(lo + p / 2, 9))
        lo += p
    us.append(0.999999)
    return sorted(set(us))


# ---------------------------------------------------------------------------------------
# The vectors.


def enc(x):
    if isinstance(x, float) and math.isinf(x):
        return "-inf" if x < 0 else "inf"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return x


def vector(name, description, logits, params=None, prompt=(), generated=(), vocab=None,
           extra_uniforms=(), check=None):
    params = dict(params or {})
    vocab = len(logits) if vocab is None else vocab
    l = adjust(logits, vocab, params, list(prompt), list(generated))
    cands = survivors(l, params)
    v = {
        "name": name,
        "description": description,
        "logits": [enc(x) for x in logits],
    }
    if vocab != len(logits):
        v["vocab_size"] = vocab
    v["params"] = {k: ([[i, enc(b)] for i, b in val] if k == "logit_bias" else val)
                   for k, val in params.items()}
    if prompt or generated:
        v["history"] = {"prompt": list(prompt), "generated": list(generated)}
    if cands is None:
        v["expected"] = {"error": "no_candidates"}
        return v
    dist = distribution(cands)
    if check:
        check(dict(dist))
    us = sorted(set(uniforms_for(dist)) | set(extra_uniforms))
    v["expected"] = {
        "survivors": [[i, p] for i, p in dist],
        "draws": [[u, draw(dist, u)] for u in us],
    }
    return v


def close(a, b, tol=1e-3):
    assert abs(a - b) <= tol, (a, b)


def kept_exactly(ids):
    def check(d):
        assert set(d) == ids, (sorted(d), sorted(ids))
    return check


FRUIT = [22.38, 20.88, 20.62, 19.88, 19.50]  # Apple, M, apple, App, P


def fruit_ratio(expected):
    def check(d):
        # p(Apple) / p(M) = e^(1.5 / T), up to the binary32 rounding of the logits.
        assert abs(d[0] / d[1] / expected - 1) < 1e-5, (d[0] / d[1], expected)
    return check


# The top-p 0.8 worked example: 0.574, 0.128, 0.100, 0.047, 0.032, 0.029, and the
# remaining 0.09 of the mass over ten further tokens of 0.009 each.
WORKED = [0.574, 0.128, 0.100, 0.047, 0.032, 0.029] + [0.009] * 10
WORKED_LOGITS = [math.log(p) for p in WORKED]


def worked_three(d):
    assert sorted(d) == [0, 1, 2], d
    close(d[0], 0.716)
    close(d[1], 0.160)
    close(d[2], 0.125)


def groups():
    g = {}
    g["worked_examples"] = [
        vector("fruit_t1", "The fruit table (Apple, M, apple, App, P) at T = 1: "
               "p(Apple)/p(M) = e^1.5.", FRUIT, {"temperature": 1.0},
               check=fruit_ratio(math.exp(1.5))),
        vector("fruit_t0.5", "The fruit table at T = 0.5: the gap doubles, "
               "p(Apple)/p(M) = e^3.", FRUIT, {"temperature": 0.5},
               check=fruit_ratio(math.exp(3.0))),
        vector("fruit_t1.5", "The fruit table at T = 1.5: p(Apple)/p(M) = e^1.", FRUIT,
               {"temperature": 1.5}, check=fruit_ratio(math.exp(1.0))),
        vector("fruit_qwen3_defaults", "The fruit table with Qwen3's defaults: T = 0.6, "
               "top-k 20, top-p 0.95.", FRUIT,
               {"temperature": 0.6, "top_k": 20, "top_p": 0.95}),
        vector("top_p_0.8_worked", "Top-p 0.8 on 0.574, 0.128, 0.100, 0.047, 0.032, "
               "0.029 (+ 0.09 over ten more tokens): the cumulative mass reaches 0.802 at "
               "the third token, which crosses 0.8 and is kept; renormalised to 0.716, "
               "0.160, 0.125.", WORKED_LOGITS, {"top_p": 0.8}, check=worked_three),
        vector("min_p_0.1_worked", "Min-p 0.1 on the same row: the threshold is "
               "0.0574; 0.100 stays, 0.047 goes: the same three tokens.", WORKED_LOGITS,
               {"min_p": 0.1}, check=worked_three),
    ]
    g["temperature"] = [
        vector("greedy", "T = 0 is greedy: the argmax alone, probability 1, whatever u.",
               FRUIT, {"temperature": 0.0}),
        vector("greedy_ties_lowest_id", "T = 0 with a tie at the maximum: the lowest id.",
               [1.0, 4.0, 2.0, 4.0, 4.0], {"temperature": 0.0}),
        vector("greedy_ignores_cuts", "T = 0 with top-k, top-p and min-p set: still the "
               "argmax.", [0.5, 3.0, 2.9, -1.0],
               {"temperature": 0.0, "top_k": 2, "top_p": 0.5, "min_p": 0.5}),
        vector("greedy_after_ban", "T = 0 when the argmax is banned by a -inf bias: the "
               "next largest.", [5.0, 1.0, 3.0], {"temperature": 0.0,
                                                  "logit_bias": [[0, NEG_INF]]}),
        vector("hot", "T = 2 flattens: the gap between two logits is halved.",
               [2.0, 0.0, -2.0, -4.0], {"temperature": 2.0}),
        vector("cold", "T = 0.25 sharpens: the gap between two logits is multiplied by 4.",
               [2.0, 1.5, 1.0, -4.0], {"temperature": 0.25}),
    ]
    g["logit_bias"] = [
        vector("bias_added", "Bias is added to the logit before temperature.",
               [1.0, 2.0, 3.0, 0.0], {"logit_bias": [[0, 2.5], [2, -1.0]]}),
        vector("bias_ban", "A -inf bias bans a token: it never survives, even with no "
               "cut.", [3.0, 2.0, 1.0], {"logit_bias": [[0, NEG_INF]]}),
        vector("bias_then_temperature", "Bias applies before temperature: "
               "(l + b) / T.", [1.0, 2.0, 0.0], {"temperature": 0.5,
                                                 "logit_bias": [[2, 1.5]]}),
        vector("bias_reorders_top_k", "Top-k cuts on the biased logits.",
               [4.0, 3.0, 2.0, 1.0], {"top_k": 2, "logit_bias": [[3, 5.0]]}),
        vector("all_banned", "Every token banned: an error, never a token.", [1.0, 2.0],
               {"logit_bias": [[0, NEG_INF], [1, NEG_INF]]}),
    ]
    g["penalties"] = [
        vector("repetition_positive_and_negative", "Repetition penalty 2: a seen "
               "positive logit is divided by 2, a seen negative one multiplied by 2; "
               "unseen tokens are unchanged; counts do not matter.",
               [2.0, -1.0, 1.0, 0.5], {"repetition_penalty": 2.0},
               prompt=[0, 1], generated=[0]),
        vector("repetition_below_one", "Repetition penalty 0.5 favours seen tokens.",
               [1.0, 1.0, -1.0], {"repetition_penalty": 0.5}, prompt=[0, 2]),
        vector("frequency_counts", "Frequency penalty 0.5 subtracts 0.5 per occurrence: "
               "token 0 seen three times loses 1.5.", [2.0, 2.0, 1.0],
               {"frequency_penalty": 0.5}, prompt=[0, 0], generated=[0, 1]),
        vector("presence_once", "Presence penalty 1 subtracts 1 once, however often the "
               "token was seen.", [2.0, 2.0, 1.0], {"presence_penalty": 1.0},
               prompt=[0, 0, 0], generated=[1]),
        vector("all_three", "Repetition, then frequency and presence: "
               "l' = (l > 0 ? l / r : l * r) - (c * f + p).", [3.0, -2.0, 1.0, 0.0],
               {"repetition_penalty": 1.5, "frequency_penalty": 0.25,
                "presence_penalty": 0.5}, prompt=[0, 1], generated=[1, 1]),
        vector("window", "A window of 2 counts only the last two history tokens.",
               [2.0, 2.0, 2.0], {"presence_penalty": 3.0, "penalty_window": 2},
               prompt=[0, 1], generated=[2, 1]),
        vector("prompt_not_penalized", "penalize_prompt = false: prompt tokens do not "
               "count.", [2.0, 2.0, 2.0], {"frequency_penalty": 1.0,
                                           "penalize_prompt": False},
               prompt=[0, 0], generated=[1]),
        vector("negative_frequency", "A negative frequency penalty encourages repeats.",
               [1.0, 1.0], {"frequency_penalty": -0.75}, generated=[1, 1]),
    ]
    g["top_k"] = [
        vector("top_k_2", "Top-k 2 keeps the two largest, renormalised.",
               [1.0, 3.0, 2.0, 0.0, -1.0], {"top_k": 2}),
        vector("top_k_ties", "Ties at the k-th value go to the lower id: exactly k tokens.",
               [1.0, 3.0, 3.0, 3.0, 0.0], {"top_k": 2}),
        vector("top_k_larger_than_vocab", "k larger than the number of finite tokens "
               "keeps them all.", [1.0, NEG_INF, 0.5], {"top_k": 10}),
        vector("top_k_1", "Top-k 1 is greedy in effect: probability 1.",
               [0.0, 0.1, 0.2], {"top_k": 1}),
    ]
    g["top_p"] = [
        vector("top_p_crossing_kept", "The token whose cumulative mass crosses p is "
               "kept: 0.5 + 0.3 < 0.85 <= 0.5 + 0.3 + 0.15.",
               [math.log(x) for x in (0.5, 0.3, 0.15, 0.05)], {"top_p": 0.85}),
        vector("top_p_reaching_exactly", "Four equal weights, p = 0.5: two tokens reach "
               "exactly 0.5 and the prefix stops there (reaching p is enough).",
               [1.0, 1.0, 1.0, 1.0], {"top_p": 0.5}),
        vector("top_p_ties_lower_id", "Three equal top weights, p = 0.5: the cut falls "
               "inside the tie; the lower ids survive.", [0.0, 2.0, 2.0, 2.0],
               {"top_p": 0.5}),
        vector("top_p_small", "A tiny p keeps the top token alone.",
               [2.0, 1.9, 1.8, 1.0], {"top_p": 0.01}),
        vector("top_p_one", "p = 1 keeps every finite token.",
               [2.0, NEG_INF, 1.8, -30.0], {"top_p": 1.0}),
        vector("top_p_after_temperature", "Top-p works on the tempered distribution: at "
               "T = 0.5 the top token alone reaches 0.9.", [2.0, 0.0, -0.5, -1.0],
               {"temperature": 0.5, "top_p": 0.9}),
        vector("top_p_after_top_k", "Top-p measures mass within top-k's survivors.",
               [3.0, 2.5, 2.0, 1.0, 0.0], {"top_k": 3, "top_p": 0.7}),
        vector("top_p_decimal_tie", "p = 0.8 means 0.8, not the f32 0.800000011920929: "
               "0.5 + 0.3 (0.8000000042 from these f32 logits) reaches it, and no 0.1 is "
               "added.", [math.log(x) for x in (0.3, 0.1, 0.1, 0.5)], {"top_p": 0.8},
               check=kept_exactly({3, 0})),
    ]
    g["min_p"] = [
        vector("min_p_cut", "Min-p 0.2: the threshold is 0.2 * 0.5 = 0.1: 0.11 stays, 0.09 goes.",
               [math.log(x) for x in (0.5, 0.2, 0.11, 0.09, 0.08, 0.02)], {"min_p": 0.2}),
        vector("min_p_equality_kept", "Min-p 1: only the maximum survives, and every "
               "token equal to it (p_i = min_p * p_max is kept).", [1.0, 3.0, 0.0, 3.0],
               {"min_p": 1.0}),
        vector("min_p_after_temperature", "Min-p is relative to the tempered "
               "distribution: at T = 2 the ratio e^-2 becomes e^-1 > 0.3.",
               [2.0, 0.0, -3.0], {"temperature": 2.0, "min_p": 0.3}),
        vector("min_p_after_top_p", "Min-p applies to top-p's survivors.",
               [3.0, 2.0, 1.5, 1.0, 0.0], {"top_p": 0.9, "min_p": 0.3}),
    ]
    g["min_tokens_to_keep"] = [
        vector("keep_top_k", "top-k 1 with min_tokens_to_keep 3 keeps 3.",
               [3.0, 2.0, 1.0, 0.0], {"top_k": 1, "min_tokens_to_keep": 3}),
        vector("keep_top_p", "A tiny top-p with min_tokens_to_keep 2 keeps 2.",
               [5.0, 1.0, 0.9, 0.0], {"top_p": 0.05, "min_tokens_to_keep": 2}),
        vector("keep_min_p", "Min-p 0.9 would keep one token; min_tokens_to_keep 3 keeps 3.",
               [5.0, 1.0, 0.9, 0.0], {"min_p": 0.9, "min_tokens_to_keep": 3}),
        vector("keep_more_than_vocab", "min_tokens_to_keep larger than the finite tokens "
               "keeps them all.", [5.0, NEG_INF, 0.0], {"top_k": 1,
                                                          "min_tokens_to_keep": 8}),
    ]
    g["ties_and_edges"] = [
        vector("draw_boundary_goes_up", "Two equal weights: u = 0.5 is the boundary and "
               "draws the second token (the first whose cumulative mass exceeds u).",
               [1.0, 1.0], {}, extra_uniforms=(0.5,)),
        vector("neg_inf_never_drawn", "-inf logits are banned and never survive.",
               [NEG_INF, 0.0, NEG_INF, 1.0], {}),
        vector("padding_not_read", "vocab_size 3 of a 5-entry row: the padding entries "
               "(even NaN) are never read or returned.", [1.0, 2.0, 3.0, 100.0,
                                                           float("nan")],
               {"top_p": 0.95}, vocab=3),
        vector("ties_order", "Equal logits keep id order in the draw.",
               [0.0, 1.0, 0.0, 1.0, 0.0], {}),
        vector("signed_zeros_tie", "-0.0 and 0.0 are the same logit: a tie, lower id "
               "first.", [-0.0, 0.0, -1.0], {}),
        vector("signed_zeros_greedy", "Greedy on -0.0 and 0.0: the lower id.",
               [-0.0, 0.0, -1.0], {"temperature": 0.0}),
        vector("wide_range", "Logits 60 apart: the small token's weight is e^-60, kept "
               "with p = 1 but never drawn for these uniforms.", [30.0, -30.0, 29.0], {}),
    ]
    g["combined"] = [
        vector("everything", "Bias, penalties, temperature, top-k, top-p and min-p "
               "together, in the documented order.",
               [4.0, 3.5, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, NEG_INF],
               {"logit_bias": [[5, 2.0], [0, -0.5]], "repetition_penalty": 1.3,
                "frequency_penalty": 0.2, "presence_penalty": 0.1, "temperature": 0.8,
                "top_k": 8, "top_p": 0.9, "min_p": 0.05},
               prompt=[1, 2, 2], generated=[1, 3]),
        vector("qwen3_thinking", "Qwen3 thinking-mode defaults (T 0.6, top-k 20, top-p "
               "0.95) on 20 tokens.", [10.0 - 0.7 * i for i in range(20)],
               {"temperature": 0.6, "top_k": 20, "top_p": 0.95}),
    ]
    # Rows of a few thousand tokens, where a fast path's bucketing and partial sorts
    # have room to go wrong. Deterministic, irregular logits.
    big = [round(3.0 * math.sin(i * 0.37) + ((i * 7919) % 101) / 50.0, 4)
           for i in range(3000)]
    g["scale"] = [
        vector("scale_top_p", "3000 tokens, T = 0.7, top-p 0.5.", big,
               {"temperature": 0.7, "top_p": 0.5}),
        vector("scale_min_p", "3000 tokens, min-p 0.5.", big, {"min_p": 0.5}),
        vector("scale_top_k_top_p", "3000 tokens, Qwen3 defaults: T 0.6, top-k 20, "
               "top-p 0.95.", big, {"temperature": 0.6, "top_k": 20, "top_p": 0.95}),
        vector("scale_greedy", "3000 tokens, greedy.", big, {"temperature": 0.0}),
    ]
    return g


def main():
    # `generate.py [DIR]` writes into DIR instead (the crate's tests use this to check
    # that the committed files are what this script produces).
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    for name, vectors in groups().items():
        doc = {"format": "logits-conformance/1", "vectors": vectors}
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
