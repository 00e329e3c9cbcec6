#!/usr/bin/python3
"""check_tokenizer.py -- does `cflow tokenize` reproduce bpe.py's ids?

Runs the C tokenizer once per sample (lines of the corpus files plus a few
whole multi-paragraph stories and samples holding "<|endoftext|>", given
with --parse-special) and compares with bpe.Tokenizer.encode.

Usage: check_tokenizer.py CFLOW_BINARY TOKDIR [N_LINES]
Exit status 0 when all agree.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import EOT, Tokenizer  # noqa: E402

SHARED = os.environ.get("CFLOW_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))


def samples(n):
    out = []
    per = n // 3
    for fn in ("tinystories-train-a.txt", "tinystories-train-b-lowercase.txt",
               "tinystories-valid-1000.txt"):
        with open(os.path.join(SHARED, "corpus", fn), encoding="utf-8") as f:
            text = f.read()
        lines = [ln for ln in text.split("\n") if ln.strip() and EOT not in ln]
        step = max(1, len(lines) // per)
        out += lines[::step][:per]
        # whole stories with their newlines, and pieces spanning a separator
        out += [p for p in text.split(EOT)[1:6]]
        out += [text[i:i + 700] for i in range(0, 200000, 40000)]
    out += ["  leading spaces", "trailing spaces   ", "tabs\tand\n\n\nnewlines \n",
            "digits 1234567 and 3.14", "émigré café naïve — “quotes” ’s",
            "I'm you'll they've she'd it's DON'T", "a<|endoftext|>b", "" + EOT]
    return out


def main():
    cflow, tokdir = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    tok = Tokenizer(tokdir)
    bad = 0
    ss = samples(n)
    for s in ss:
        want = tok.encode(s)
        cmd = [cflow, "tokenize", "-m", tokdir]
        if EOT in s:
            cmd.append("--parse-special")
        r = subprocess.run(cmd + ["--", s] if s.startswith("-") else cmd + [s],
                           capture_output=True, text=True)
        got = [int(x) for x in r.stdout.split()]
        if r.returncode != 0 or got != want:
            bad += 1
            if bad <= 10:
                print(f"MISMATCH {s[:80]!r}\n  py {want[:30]}\n  c  {got[:30]} rc={r.returncode} {r.stderr.strip()}")
    print(f"{len(ss) - bad}/{len(ss)} samples agree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
