#!/usr/bin/python3
"""eval.py -- held-out perplexity and bits per byte of exported models.

The definition (`cflow ppl` mirrors it exactly):

1. Stories.  The file is split on the literal string "<|endoftext|>"; each
   piece is stripped of leading and trailing ASCII whitespace
   (" \\t\\n\\r\\v\\f"); empty pieces are dropped.  Every other piece is a story
   (the first piece of tinystories-valid-1000.txt, a story tail, counts).
2. Tokens.  seq = [BOS] + encode(story) + [EOS], BOS = EOS = the
   "<|endoftext|>" id; encode() is the plain BPE of the story text (it holds
   no special token).
3. Scoring.  Every token of seq after BOS is predicted exactly once, from the
   tokens before it, in windows of at most n_ctx = max_position_embeddings
   tokens: window w covers seq[w*(n_ctx-1) : w*(n_ctx-1) + n_ctx], starts from
   an empty context at position 0, and predicts all of its tokens except its
   first.  (Stories of at most n_ctx tokens -- nearly all -- are one window.)
4. nats = sum over predicted tokens of -ln softmax(logits)[token];
   tokens = sum over stories of (len(seq) - 1) (so the final EOS counts);
   bytes = sum over stories of the UTF-8 byte length of the stripped story
   (BOS/EOS add no bytes).
   ppl = exp(nats / tokens);  bits per byte = nats / ln 2 / bytes.

Usage:
  OPENBLAS_NUM_THREADS=2 nice -n 19 /usr/bin/python3 eval.py \\
      [--text ../shared/corpus/tinystories-valid-1000.txt] MODELDIR...
prints one JSON line per model and writes MODELDIR/eval.json.
"""
import os
# OpenBLAS's own threads spin and fight torch's 2 OpenMP threads on 2
# cores: keep BLAS single-threaded inside each torch thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Idle OpenMP threads must sleep, not spin: on 2 shared cores a spinning
# thread starves its partner (4x slower under load).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import EOT, Tokenizer  # noqa: E402
from export import load  # noqa: E402

SHARED = os.environ.get("CFLOW_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))


def stories_of(text):
    out = []
    for p in text.split(EOT):
        p = p.strip(" \t\n\r\v\f")
        if p:
            out.append(p)
    return out


def windows(seq, n_ctx):
    """The windows of rule 3: lists of ids; predicted = all but the first."""
    out, start = [], 0
    while start < len(seq) - 1:
        out.append(seq[start:start + n_ctx])
        start += n_ctx - 1
    return out


@torch.no_grad()
def evaluate(model, tok, stories, batch=16, max_stories=None):
    n_ctx = model.c["max_position_embeddings"]
    if max_stories:
        stories = stories[:max_stories]
    wins, nbytes, ntok = [], 0, 0
    for s in stories:
        seq = [tok.bos] + tok.encode(s) + [tok.eot]
        ntok += len(seq) - 1
        nbytes += len(s.encode("utf-8"))
        wins.extend(windows(seq, n_ctx))
    wins.sort(key=len)
    nats = 0.0
    for i in range(0, len(wins), batch):
        grp = wins[i:i + batch]
        T = max(len(w) for w in grp)
        ids = torch.full((len(grp), T), tok.eot, dtype=torch.long)
        tgt = torch.full((len(grp), T - 1), -100, dtype=torch.long)
        for j, w in enumerate(grp):
            ids[j, :len(w)] = torch.tensor(w)
            tgt[j, :len(w) - 1] = torch.tensor(w[1:])
        logits, _, _ = model(ids)
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).double(),
                              tgt.reshape(-1), ignore_index=-100, reduction="sum")
        nats += nll.item()
    return {"stories": len(stories), "tokens": ntok, "bytes": nbytes,
            "nats": nats, "ppl": math.exp(nats / ntok),
            "bits_per_byte": nats / math.log(2) / nbytes,
            "nats_per_token": nats / ntok}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default=os.path.join(SHARED, "corpus", "tinystories-valid-1000.txt"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-stories", type=int, default=0)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(args.text, encoding="utf-8") as f:
        stories = stories_of(f.read())
    for d in args.models:
        t0 = time.time()
        model, tok = load(d), Tokenizer(d)
        r = evaluate(model, tok, stories, max_stories=args.max_stories or None)
        r["model"] = os.path.basename(os.path.normpath(d))
        r["text"] = os.path.basename(args.text)
        r["seconds"] = round(time.time() - t0, 1)
        print(json.dumps(r), flush=True)
        if not args.max_stories:
            with open(os.path.join(d, "eval.json"), "w") as f:
                json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
