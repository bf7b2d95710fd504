"""A GGUF file's tokenizer as a Hugging Face tokenizer.json: SmolLM2's, for the token-count tests.

Reads the metadata GGUF v3 puts before its tensors (the format llama.cpp documents) and writes the
byte-level BPE that SmolLM2's `tokenizer.ggml.pre = smollm` names: digits one by one, then GPT-2's
pattern. On 52 texts (llama.cpp's vocabulary tests, CJK, emoji, the README, code) it gave the ids
llama-server's /tokenize gives.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, BinaryIO

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
CONTROL = 3  # tokenizer.ggml.token_type of a special token


def read_metadata(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        _unpack(f, "I")  # version
        _unpack(f, "Q")  # tensors
        return {_string(f): _value(f, _unpack(f, "I")) for _ in range(_unpack(f, "Q"))}


def _unpack(f: BinaryIO, fmt: str) -> Any:
    return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    return f.read(_unpack(f, "Q")).decode("utf-8", "surrogateescape")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, n = _unpack(f, "I"), _unpack(f, "Q")
        return [_value(f, item) for _ in range(n)]
    return _unpack(f, _SCALARS[kind])


def write_tokenizer_json(gguf: Path, out: Path) -> Path:
    meta = read_metadata(gguf)
    if meta.get("tokenizer.ggml.model") != "gpt2" or meta.get("tokenizer.ggml.pre") != "smollm":
        raise ValueError(f"{gguf}: only SmolLM2's byte-level BPE is written here")
    tokens, kinds = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(tokens) if kinds[i] == CONTROL],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": meta["tokenizer.ggml.merges"]},
    }
    out.write_text(json.dumps(tokenizer))
    return out
