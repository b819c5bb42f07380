"""Sentences in, BERT WordPiece ids out: all-MiniLM-L6-v2's tokenizer (Hugging Face `tokenizers`'
BertNormalizer, BertPreTokenizer, WordPiece and [CLS]/[SEP] template) in pure Python, reading the
vocabulary and limits from tokenizer.json in the version directory (mounted read-only at /model).

TEXT holds one sentence per batch row (BYTES, UTF-8, [batch, 1]); each output is [batch, longest] INT64,
padded with 0 on the right, ready for `minilm`."""

import json
import unicodedata

import tessera as pb_utils

# CJK ideograph blocks, which BERT surrounds with spaces so each is a word of its own.
_CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]})
        for name in ("input_ids", "attention_mask", "token_type_ids"):
            config.add_output({"name": name, "data_type": "TYPE_INT64", "dims": [-1]})
        return config

    def initialize(self, args):
        with open("/model/tokenizer.json", encoding="utf-8") as f:
            spec = json.load(f)
        model = spec["model"]
        self.vocab = model["vocab"]
        self.unknown = self.vocab[model["unk_token"]]
        self.prefix = model["continuing_subword_prefix"]
        self.max_chars = model["max_input_chars_per_word"]
        self.max_length = (spec.get("truncation") or {}).get("max_length", 512)
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]

    def execute(self, requests):
        return [self.tokenize(request) for request in requests]

    def tokenize(self, request):
        texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_flat_list()
        rows = [self.encode(text.decode("utf-8", "replace")) for text in texts]
        width = max((len(row) for row in rows), default=0)
        shape = [len(rows), width]
        ids = [id_ for row in rows for id_ in row + [0] * (width - len(row))]
        mask = [bit for row in rows for bit in [1] * len(row) + [0] * (width - len(row))]
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("input_ids", ids, shape=shape),
            pb_utils.Tensor("attention_mask", mask, shape=shape),
            pb_utils.Tensor("token_type_ids", [0] * len(ids), shape=shape),
        ])

    def encode(self, text):
        pieces = [piece for word in split_words(normalize(text)) for piece in self.wordpiece(word)]
        return [self.cls] + pieces[: self.max_length - 2] + [self.sep]

    def wordpiece(self, word):
        """Greedy longest-match-first split of one word into vocabulary pieces."""
        if len(word) > self.max_chars:
            return [self.unknown]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    pieces.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.unknown]
            start = end
        return pieces


def normalize(text):
    """BertNormalizer: drop control characters, whitespace to spaces, CJK spaced, accents stripped, lower case."""
    out = []
    for ch in text:
        code = ord(ch)
        if code in (0, 0xFFFD) or (ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")):
            continue
        if ch in " \t\n\r" or unicodedata.category(ch) == "Zs":
            out.append(" ")
        elif any(low <= code <= high for low, high in _CJK):
            out.append(f" {ch} ")
        else:
            out.append(ch)
    text = unicodedata.normalize("NFD", "".join(out))
    return "".join(ch for ch in text if unicodedata.category(ch) != "Mn").lower()


def is_punctuation(ch):
    code = ord(ch)
    return 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126 or unicodedata.category(ch).startswith("P")


def split_words(text):
    """BertPreTokenizer: split on whitespace, each punctuation character a word of its own."""
    words = []
    for chunk in text.split():
        current = ""
        for ch in chunk:
            if is_punctuation(ch):
                if current:
                    words.append(current)
                    current = ""
                words.append(ch)
            else:
                current += ch
        if current:
            words.append(current)
    return words
