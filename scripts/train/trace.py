#!/usr/bin/python3
"""trace.py -- reference traces of exported models for the C engine's tests.

For a fixed prompt (default "Once upon a time, there was a little girl"),
ids = [BOS] + encode(prompt), one causal forward pass over all of ids, and
for positions 0, 1, 2 and the last one (n-1) we record:

  layer_l2      per effective layer l = 0..L-1, the L2 norm of "the residual
                after layer l" (definition per combine_style in model.py:
                1 x_out[l]; 2 x after x+m+d, before outputs targeting l+1 are
                injected; 3 (a+f)/2 after the layer's merge step; 4 t[l];
                5 x after the application)
  final_in_l2   L2 norm of the input of N_out (after pending expert outputs
                are flushed, styles 1 and 2)
  final_norm_l2 L2 norm of N_out(x_L)
  top_ids, top_logits   the 32 largest logits, descending (ties: lower id)
  argmax        top_ids[0]
greedy_ids / greedy_text: 32 greedy (argmax, ties: lower id) continuation
tokens after the prompt (full recomputation each step, no sampling), and,
for style 3, attn_stream_l2 / ffn_stream_l2 (a and f after each layer's
merge step), for style 4, attn_reg_l2 (a[l]).

Each JSON also holds the model's config, the sha256 of its
model.safetensors (a trace only checks the weights it was made from) and the
prompt's token ids.  Values are f32 computations printed as floats.

Usage: trace.py [--prompt TEXT] --out tests/data/traces MODELDIR...
"""
import os
# OpenBLAS's own threads spin and fight torch's 2 OpenMP threads on 2
# cores: keep BLAS single-threaded inside each torch thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Idle OpenMP threads must sleep, not spin: on 2 shared cores a spinning
# thread starves its partner (4x slower under load).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import argparse
import hashlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import Tokenizer  # noqa: E402
from export import load  # noqa: E402

PROMPT = "Once upon a time, there was a little girl"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@torch.no_grad()
def trace(model, ids, k=32):
    logits, _, rec = model(torch.tensor([ids]), record=True)
    n = len(ids)
    positions = sorted(set(p for p in (0, 1, 2, n - 1) if 0 <= p < n))
    out = []
    for p in positions:
        lg = logits[0, p].double()
        # stable sort: equal logits keep ascending id order
        order = sorted(range(lg.shape[0]), key=lambda i: (-lg[i].item(), i))[:k]
        e = {
            "position": p,
            "token": ids[p],
            "layer_l2": [float(r[0, p].double().norm()) for r in rec["layers"]],
            "final_in_l2": float(rec["final_in"][0, p].double().norm()),
            "final_norm_l2": float(rec["final_norm"][0, p].double().norm()),
            "top_ids": order,
            "top_logits": [float(lg[i]) for i in order],
            "argmax": order[0],
        }
        for key in ("attn_stream", "ffn_stream", "attn_reg"):
            if key in rec:
                e[key + "_l2"] = [float(r[0, p].double().norm()) for r in rec[key]]
        out.append(e)
    return out


@torch.no_grad()
def greedy(model, ids, n=32):
    ids = list(ids)
    out = []
    for _ in range(n):
        if len(ids) >= model.c["max_position_embeddings"]:
            break
        lg = model(torch.tensor([ids]))[0][0, -1].double()
        nxt = int(torch.argmax(lg))   # first maximum = lower id on ties
        out.append(nxt)
        ids.append(nxt)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--out", required=True)
    ap.add_argument("--top", type=int, default=32)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    for d in args.models:
        model, tok = load(d), Tokenizer(d)
        ids = [tok.bos] + tok.encode(args.prompt)
        name = model.c["cflow_arch"]
        doc = {
            "model": name,
            "model_sha256": sha256(os.path.join(d, "model.safetensors")),
            "config": model.c,
            "prompt": args.prompt,
            "add_bos": True,
            "token_ids": ids,
            "effective_layers": model.L,
            "positions": trace(model, ids, args.top),
        }
        g = greedy(model, ids)
        doc["greedy_ids"] = g
        doc["greedy_text"] = tok.decode(g)
        path = os.path.join(args.out, f"{name}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        last = doc["positions"][-1]
        print(f"{name}: {len(ids)} ids, argmax at last {last['argmax']} "
              f"({tok.decode([last['argmax']])!r}), greedy {doc['greedy_text']!r} -> {path}")


if __name__ == "__main__":
    main()
