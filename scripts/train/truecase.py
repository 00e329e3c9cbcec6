#!/usr/bin/python3
"""truecase.py -- restore the casing of tinystories-train-b-lowercase.txt.

Used only for the longer-trained shipped model (data/README.md), never for
the equal-budget six-way comparison.

File b is lower-cased TinyStories: paragraphs separated by a blank line,
stories by a single newline, no "<|endoftext|>".  About 2050 of its 5511
stories are lower-cased copies of tinystories-train-a.txt; the rest are new
text (none is in tinystories-valid-1000.txt: no held-out story shares even
its first 200 characters with a story of b -- checked by `--check-heldout`).

Casing model, learnt from train-a (the only cased training text):
1. Word casing.  For every word seen in train-a *not* at a sentence start,
   its most frequent cased form ("lily" -> "Lily", "i" -> "I", "tv" -> "TV");
   ties and unseen words stay lower case.  A word right after "named" that
   train-a never saw is capitalised (TinyStories names: "a fish named fin").
2. Sentence starts.  The first letter of a story, of a paragraph, after
   ". ", "! ", "? " (also when a closing quote follows the mark) and right
   after an opening quote is upper-cased.

Measured on train-a itself (lower-case it, truecase it, compare word by word
with the original): printed by `--selftest`.

Output: the new stories of b (those not in train-a), cased, separated by
"<|endoftext|>" lines in train-a's format (one "\\n" between paragraphs), so
train.py reads it like train-a.

Usage: truecase.py [--selftest] [--check-heldout] OUT
"""
import argparse
import collections
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("CFLOW_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))
EOT = "<|endoftext|>"
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


def a_stories(text):
    return [s.strip("\n") for s in text.split(EOT) if s.strip()]


def b_stories(text):
    """Stories of file b: split on a newline that is not part of a blank line."""
    return [s.strip("\n") for s in re.split(r"(?<!\n)\n(?!\n)", text) if s.strip()]


def sentence_start_positions(s):
    """Character offsets where a sentence starts (first letter expected)."""
    starts = set()
    expect = True
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch.isalpha():
            if expect:
                starts.add(i)
                expect = False
            # skip the rest of the word
            while i < n and (s[i].isalpha() or s[i] == "'"):
                i += 1
            continue
        if ch in ".!?" or ch == "\n":
            expect = True
        elif ch == '"':
            # opening quote: preceded by start, space or newline
            if i == 0 or s[i - 1] in " \n":
                expect = True
        elif ch in " \t,;:-'()":
            pass
        else:
            pass
        i += 1
    return starts


def learn(stories):
    counts = collections.defaultdict(collections.Counter)
    for s in stories:
        starts = sentence_start_positions(s)
        for m in WORD.finditer(s):
            if m.start() in starts:
                continue
            w = m.group(0)
            counts[w.lower()][w] += 1
    table = {}
    for low, c in counts.items():
        (best, nb), = c.most_common(1)
        if best != low and nb > c.get(low, 0):
            table[low] = best
    return table


def truecase(s, table):
    starts = sentence_start_positions(s)
    out = []
    last = 0
    prev = ""
    for m in WORD.finditer(s):
        w = m.group(0)
        cw = table.get(w, w)
        if cw == w and prev == "named":
            cw = w[0].upper() + w[1:]
        if m.start() in starts:
            cw = cw[0].upper() + cw[1:]
        out.append(s[last:m.start()])
        out.append(cw)
        last = m.end()
        prev = w
    out.append(s[last:])
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--check-heldout", action="store_true")
    ap.add_argument("out")
    args = ap.parse_args()
    corpus = os.path.join(SHARED, "corpus")
    with open(os.path.join(corpus, "tinystories-train-a.txt"), encoding="utf-8") as f:
        sa = a_stories(f.read())
    with open(os.path.join(corpus, "tinystories-train-b-lowercase.txt"), encoding="utf-8") as f:
        sb = b_stories(f.read())
    table = learn(sa)
    if args.selftest:
        half = len(sa) // 2
        t2 = learn(sa[:half])
        ok = tot = 0
        for s in sa[half:]:
            got = WORD.findall(truecase(s.lower(), t2))
            want = WORD.findall(s)
            tot += len(want)
            ok += sum(g == w for g, w in zip(got, want))
        print(f"truecase self-test (learn on first half of train-a, test on second): "
              f"{ok}/{tot} words = {100.0 * ok / tot:.2f}% cased right", file=sys.stderr)
    # b's paragraphs are separated by a blank line, train-a's by one newline
    a_keys = set("\n".join(p for p in s.lower().split("\n") if p) for s in sa)
    new = []
    for s in sb:
        key = "\n".join(p for p in s.split("\n") if p)
        if key in a_keys:
            continue
        new.append(truecase(key, table))
    if args.check_heldout:
        with open(os.path.join(corpus, "tinystories-valid-1000.txt"), encoding="utf-8") as f:
            sv = [s.strip() for s in f.read().split(EOT) if s.strip()]
        pre = set(s.lower()[:200] for s in new)
        hit = sum(s.lower()[:200] in pre for s in sv)
        print(f"held-out stories whose first 200 characters occur in the output: {hit}",
              file=sys.stderr)
        if hit:
            sys.exit("truecase.py: held-out text in the output")
    with open(args.out, "w", encoding="utf-8") as f:
        for s in new:
            f.write(s + "\n" + EOT + "\n")
    print(f"{len(sb)} stories in b, {len(sb) - len(new)} already in train-a, "
          f"{len(new)} written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
