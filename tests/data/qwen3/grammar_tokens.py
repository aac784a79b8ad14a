#!/usr/bin/env python3
"""Regenerates grammar_samples.json: the canonical Qwen3 tokenization of the valid sample
outputs the grammar conformance tests walk (tests/grammar_conformance.rs).

The library has no BPE tokenizer, so the ids are computed once here with the Hugging Face
`tokenizers` package (pip install tokenizers) from the committed tokenizer.json.gz, and
committed. Run from the repository root:

    python3 tests/data/qwen3/grammar_tokens.py
"""
import gzip
import json
import pathlib

from tokenizers import Tokenizer

HERE = pathlib.Path(__file__).resolve().parent
SAMPLES = {
    "regex": "555-1234",
    "json": '{"name": "Ada Lovelace, who wrote the first published algorithm for a machine",'
    ' "age": 36, "color": "green", "scores": [9.5, 7, -3.25]}',
    "lark": "(12+3)*4-56/7+(8*(9-1))",
    "json_maxlen": '{"title": "Grammar masks over the Qwen3 vocabulary", "tags": ["rust", "llm"],'
    ' "ok": true}',
    "json_think": '{"name": "<think> is text here", "age": 7, "color": "red", "scores": []}',
}

tok = Tokenizer.from_str(gzip.decompress((HERE / "tokenizer.json.gz").read_bytes()).decode())
out = {}
for name, text in SAMPLES.items():
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids) == text, name
    out[name] = {"text": text, "ids": ids}
(HERE / "grammar_samples.json").write_text(json.dumps(out, indent=1) + "\n")
print("wrote", HERE / "grammar_samples.json")
