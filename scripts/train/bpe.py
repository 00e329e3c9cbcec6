#!/usr/bin/python3
"""bpe.py -- train and apply a byte-level BPE tokenizer (GPT-2 style).

The tokenizer is the classic GPT-2 one, retrained on our TinyStories text:

* Pre-tokenizer: the GPT-2 regular expression (PRE_RE below, run with the
  `regex` module for \\p{L} / \\p{N}); BPE never merges across pre-tokens.
* Byte level: every UTF-8 byte of a pre-token is mapped to a printable
  unicode character by GPT-2's bytes_to_unicode() table, so vocab.json and
  merges.txt are plain text; ids 0..255 are the 256 single bytes in
  bytes_to_unicode() order.
* Merges: ids 256 .. V-2 are the merged tokens, in the order learned (the
  rank of merge i in merges.txt is i; lower rank merges first).
* The special token "<|endoftext|>" is the LAST id (V-1), as in GPT-2.  It is
  BOS, EOS and the document separator.  In text, the literal string
  "<|endoftext|>" is split out before pre-tokenisation and encoded as that id.

Training counts pre-tokens ("words") once, then merges pairs with
incremental pair-count updates (only the words containing the merged pair are
touched), so 2k merges over ~6 MB of text take well under a minute.

Usage:
  bpe.py train --vocab-size 2048 --out DIR FILE...   # writes vocab.json,
                                  # merges.txt, tokenizer_config.json
  bpe.py encode DIR TEXT          # prints ids (no BOS), like `cflow tokenize`
  bpe.py add-special DIR OUT TOKEN... [--chat-template FILE]
                                  # DIR's tokenizer plus special tokens
                                  # appended at ids V, V+1, ... (the chat
                                  # model's <|im_start|> <|im_end|>)

Special tokens beyond "<|endoftext|>" are listed in tokenizer_config.json's
added_tokens_decoder (special: true); encode() splits their literal strings
out of the text first, as the C tokenizer does with parse_special.
"""
import argparse
import collections
import json
import os
import sys

import regex

EOT = "<|endoftext|>"
PRE_RE = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character table."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def pretokenize(text):
    """Pre-tokens of a text holding no special token."""
    return PRE_RE.findall(text)


def word_symbols(word):
    return tuple(B2U[b] for b in word.encode("utf-8"))


def train(texts, vocab_size, verbose=True):
    """Returns (vocab dict token->id, merges list of (a, b))."""
    counts = collections.Counter()
    for t in texts:
        for part in t.split(EOT):
            counts.update(pretokenize(part))
    words = [list(word_symbols(w)) for w in counts]
    freqs = [counts[w] for w in counts]
    pair_count = collections.defaultdict(int)
    pair_where = collections.defaultdict(set)
    for i, (syms, f) in enumerate(zip(words, freqs)):
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] += f
            pair_where[(a, b)].add(i)
    base = [B2U[b] for b in range(256)]
    n_merges = vocab_size - 256 - 1
    merges = []
    for m in range(n_merges):
        if not pair_count:
            break
        # most frequent pair; ties broken by the pair itself (deterministic)
        best = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pair_count[best] <= 0:
            break
        a, b = best
        new = a + b
        merges.append(best)
        for i in list(pair_where[best]):
            syms, f = words[i], freqs[i]
            # remove old pairs of this word
            for p in zip(syms, syms[1:]):
                pair_count[p] -= f
                if pair_count[p] <= 0:
                    del pair_count[p]
                pair_where[p].discard(i)
            out = []
            j = 0
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += f
                pair_where[p].add(i)
        pair_where.pop(best, None)
        pair_count.pop(best, None)
        if verbose and (m + 1) % 250 == 0:
            print(f"merge {m + 1}/{n_merges}: {a!r}+{b!r}", file=sys.stderr)
    vocab = {}
    for s in base:
        vocab[s] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab[EOT] = len(vocab)
    return vocab, merges


def save(outdir, vocab, merges, model_max_length=512):
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(outdir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    cfg = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": EOT, "eos_token": EOT, "unk_token": EOT,
        "add_bos_token": True, "add_eos_token": False,
        "add_prefix_space": False,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(vocab[EOT]): {
            "content": EOT, "special": True, "lstrip": False, "rstrip": False,
            "normalized": False, "single_word": False}},
    }
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


class Tokenizer:
    """Encoder/decoder reading vocab.json + merges.txt."""

    def __init__(self, d):
        with open(os.path.join(d, "vocab.json"), encoding="utf-8") as f:
            self.vocab = json.load(f)
        self.inv = {i: s for s, i in self.vocab.items()}
        self.ranks = {}
        with open(os.path.join(d, "merges.txt"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("#version"):
                    continue
                line = line.rstrip("\n")
                if not line:
                    continue
                a, b = line.split(" ")
                self.ranks[(a, b)] = len(self.ranks)
        self.eot = self.vocab[EOT]
        self.bos = self.eot
        self.cache = {}
        self.special = {EOT: self.eot}
        cfgp = os.path.join(d, "tokenizer_config.json")
        if os.path.exists(cfgp):
            with open(cfgp, encoding="utf-8") as f:
                dec = json.load(f).get("added_tokens_decoder", {})
            for i, t in dec.items():
                if t.get("special"):
                    self.special[t["content"]] = int(i)
        self.special_re = regex.compile(
            "(" + "|".join(regex.escape(t) for t in
                           sorted(self.special, key=len, reverse=True)) + ")")

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        syms = list(word_symbols(word))
        while len(syms) > 1:
            best, bi = None, -1
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = syms[bi], syms[bi + 1]
            out, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            syms = out
        ids = [self.vocab[s] for s in syms]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        """ids of text (no BOS added); literal special tokens
        ("<|endoftext|>", "<|im_start|>", ...) -> their ids."""
        ids = []
        for k, part in enumerate(self.special_re.split(text)):
            if k % 2:
                ids.append(self.special[part])
                continue
            for w in pretokenize(part):
                ids.extend(self._bpe(w))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            if i == self.eot or self.inv[i] in self.special:
                out += self.inv[i].encode()
            else:
                out += bytes(U2B[c] for c in self.inv[i])
        return out.decode("utf-8", errors="replace")


def add_special(tokdir, outdir, tokens, chat_template=None):
    """Copy tokdir to outdir with tokens appended as special ids V, V+1..."""
    with open(os.path.join(tokdir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(tokdir, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    for t in tokens:
        if t in vocab:
            sys.exit(f"bpe.py: {t} is already token {vocab[t]}")
        vocab[t] = len(vocab)
        cfg["added_tokens_decoder"][str(vocab[t])] = {
            "content": t, "special": True, "lstrip": False, "rstrip": False,
            "normalized": False, "single_word": False}
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(tokdir, "merges.txt"), encoding="utf-8") as f:
        merges = f.read()
    with open(os.path.join(outdir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(merges)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--vocab-size", type=int, default=2048)
    t.add_argument("--out", required=True)
    t.add_argument("files", nargs="+")
    e = sub.add_parser("encode")
    e.add_argument("dir")
    e.add_argument("text")
    a = sub.add_parser("add-special")
    a.add_argument("dir")
    a.add_argument("out")
    a.add_argument("tokens", nargs="+")
    a.add_argument("--chat-template", help="file whose text becomes chat_template")
    args = ap.parse_args()
    if args.cmd == "add-special":
        tmpl = None
        if args.chat_template:
            with open(args.chat_template, encoding="utf-8") as f:
                tmpl = f.read()
        add_special(args.dir, args.out, args.tokens, tmpl)
    elif args.cmd == "train":
        texts = []
        for fn in args.files:
            if "valid" in os.path.basename(fn):
                sys.exit(f"bpe.py: refusing held-out file {fn}")
            with open(fn, encoding="utf-8") as f:
                texts.append(f.read())
        vocab, merges = train(texts, args.vocab_size)
        save(args.out, vocab, merges)
        print(f"vocab {len(vocab)} ({len(merges)} merges) -> {args.out}",
              file=sys.stderr)
    else:
        print(" ".join(map(str, Tokenizer(args.dir).encode(args.text))))


if __name__ == "__main__":
    main()
