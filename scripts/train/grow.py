#!/usr/bin/python3
"""grow.py -- add layers to a trained DelayedSum model without changing
what it computes (issue 46: more layers to copy an unseen name with).

  grow.py SRC DST --layers L [--seed S]

SRC is an exported model directory (export.py) of n layers, DST gets the
same model with L > n layers: layers 0..n-1 are SRC's, the new layers
n..L-1 are appended after them with their output projections zero --
attention o_proj, the dense FFN's down_proj and every expert's down_proj
[E][d][F] -- so each new layer adds exactly 0 to the residual [T][d];
their other matrices are drawn as model.py's reset_parameters draws them
(normal, std 0.02; seed S) and their norms are 1, so the fine-tune that
follows has something to grow from (a zero o_proj still receives a
gradient, and once it moves, so do q/k/v).

Why the function is unchanged for DelayedSum (ARCHITECTURES.md, style 1,
the only style this accepts): an expert output routed at layer l is
injected at l + delta_e, or, past the last layer, flushed before N_out.
With n layers the outputs of layers n-2, n-1 are flushed; with L they
are injected at layers n, n+1 instead, still before N_out and in the
same order, and the new layers add their zero attention, zero dense FFN
and zero experts.  So the logits are those of SRC (bit for bit in f32,
and at Q8_0, where a zero row quantises to a zero scale); check with
`cflow ppl` on both.  The parameter count grows by (L-n) layers' worth.
"""
import argparse
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import hf_name, load, write_safetensors  # noqa: E402
from model import CflowModel  # noqa: E402

ZERO = ("self_attn.o_proj.weight", "mlp.down_proj.weight", "moe.experts.down_proj")


def grow(src, layers, seed):
    """The grown model (CflowModel) of the model in directory src."""
    old = load(src)
    c = dict(old.c)
    n = c["num_hidden_layers"]
    if c["combine_style"] != 1 or c.get("iterations", 1) != 1:
        sys.exit(f"grow.py: {src}: combine_style {c['combine_style']}: only DelayedSum (1) "
                 "keeps its function when layers are appended")
    if layers <= n:
        sys.exit(f"grow.py: --layers {layers}: {src} already has {n} layers")
    c["num_hidden_layers"] = layers
    torch.manual_seed(seed)
    m = CflowModel(c)
    sd = m.state_dict()
    for name, p in old.state_dict().items():
        sd[name] = p.clone()
    for name in sd:
        if name.startswith("layers.") and int(name.split(".")[1]) >= n \
                and name.split(".", 2)[2] in ZERO:
            sd[name] = torch.zeros_like(sd[name])
    m.load_state_dict(sd)
    m.eval()
    return m, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    m, n = grow(a.src, a.layers, a.seed)
    os.makedirs(a.dst, exist_ok=True)
    with open(os.path.join(a.dst, "config.json"), "w") as f:
        json.dump(m.c, f, indent=2)
    write_safetensors(os.path.join(a.dst, "model.safetensors"),
                      [(hf_name(k), v.numpy()) for k, v in m.state_dict().items()])
    for fn in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.src, fn), os.path.join(a.dst, fn))
    # the same logits as src: checked here on one row of ids
    old = load(a.src)
    ids = torch.randint(0, m.c["vocab_size"], (1, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        d = (m(ids)[0] - old(ids)[0]).abs().max().item()
    nparams = sum(p.numel() for p in m.parameters())
    print(f"{a.dst}: {n} -> {a.layers} layers, {nparams} parameters, "
          f"max |logit difference| {d:g}")
    if d != 0.0:
        sys.exit("grow.py: the grown model's logits differ")


if __name__ == "__main__":
    main()
