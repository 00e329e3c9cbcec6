#!/usr/bin/python3
"""train.py -- train the six variants with one budget and seed, export each.

Data: ../shared/corpus/tinystories-train-a.txt only (cased; the held-out
tinystories-valid-1000.txt is never read here).  Stories are split on
"<|endoftext|>" and stripped of surrounding newlines.  train-a separates
paragraphs with a single "\\n" whereas TinyStories proper (and the held-out
file) uses a blank line, so each single "\\n" inside a story becomes "\\n\\n".
(tinystories-train-b-lowercase.txt is used for the tokenizer only: it is
lower-cased, which would teach the model the wrong casing.)

Token stream: EOT story0 EOT story1 EOT ... (EOT = "<|endoftext|>" is BOS and
EOS).  A training row is seq_len+1 consecutive stream tokens starting at a
random story's BOS, so every row starts at position 0 with BOS, as evaluation
does; rows run on into the following stories.

Optimiser: AdamW (betas 0.9/0.95, weight decay 0.1 on matrices, none on
norms), linear warm-up then cosine decay to 10 % of the peak, gradient
clipping at 1.0, plus 0.01 x the Switch load-balancing loss of every MoE.
Same seed (data order and init) for every variant.

Usage (see README.md):
  OPENBLAS_NUM_THREADS=2 nice -n 19 /usr/bin/python3 train.py \\
      --tok /work/models-out/tokenizer --out /work/models-out [--variants ...]
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
import re
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import EOT, Tokenizer  # noqa: E402
from chatdata import FOLLOWUPS, IM_END, IM_START, PHRASINGS, PLAIN_REQUESTS  # noqa: E402
from copydata import MORE_PHRASINGS, THING_PHRASINGS, TRAIN_PHRASINGS  # noqa: E402

# the requests' own wording (chatdata.py's and, since issue 46,
# copydata.py's phrasings): not weighted by --copy-weight
REQUEST_TEXTS = [t for _, t in PHRASINGS + TRAIN_PHRASINGS] + FOLLOWUPS + PLAIN_REQUESTS \
    + MORE_PHRASINGS + THING_PHRASINGS
from export import export, load  # noqa: E402
from model import VARIANTS, CflowModel, make_config  # noqa: E402

SHARED = os.environ.get("CFLOW_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))


def train_stories(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = []
    for s in text.split(EOT):
        s = s.strip("\n")
        if not s:
            continue
        out.append("\n\n".join(p for p in s.split("\n") if p))
    return out


def chat_docs(path):
    """Conversations of chatdata.py build, verbatim (their newlines are
    ChatML's): documents separated by "<|endoftext|>" + newline."""
    with open(path, encoding="utf-8") as f:
        return [d.lstrip("\n") for d in f.read().split(EOT) if d.strip("\n")]


def grow_vocab(m, sd, V):
    """Load state dict sd (vocabulary v < V) into m (vocabulary V): the new
    rows of the tied embedding/classifier are the mean of the old rows, the
    last new row (<|im_end|>, an end-of-text like "<|endoftext|>") the old
    "<|endoftext|>" row (id v-1), each plus noise of 1/10 of the rows' spread."""
    e = sd["embed_tokens.weight"]
    v = e.shape[0]
    g = torch.Generator().manual_seed(0)
    new = e.mean(0, keepdim=True).repeat(V - v, 1)
    new[-1] = e[v - 1]
    new += 0.1 * e.std(0, keepdim=True) * torch.randn(new.shape, generator=g)
    sd = dict(sd)
    sd["embed_tokens.weight"] = torch.cat([e, new])
    m.load_state_dict(sd)
    print(f"vocabulary grown from {v} to {V}", flush=True)


def chat_ids(tok, doc, copy_weight, common, copy_end=False, mask_request=False,
             copy_spans=False, copy_later=1.0, copy_first=1.0):
    """ids and loss weights of one conversation: the first time the answer
    writes a token of the request it answers (the requested name and thing,
    not the request's own wording, common) weighs copy_weight, every
    other token 1.  Those first mentions are what the story cannot predict
    from itself: later mentions repeat the story's own words.  With
    copy_end the token that ends such a run of copied tokens (the "." or
    " was" after "Zephyrine") weighs copy_weight too: a name the model has
    never seen must also be stopped where the request stops it, or the
    copy runs on ("Ajijiondiond...").  With mask_request the system and
    user turns weigh 0: a request's name is drawn at random from thousands,
    and learning to predict it is noise that teaches the model to write
    rare pieces (the answer's copies of it are what counts).  With
    copy_spans the weighted tokens are those of the first mention of the
    requested name and thing themselves (request_words, span_weights), not
    of any token the request holds, copy_later weighs their later
    mentions and copy_first their first piece more (span_weights)."""
    ids, w, req = [], [], set()
    for k, seg in enumerate(doc.split(IM_START)):
        if k:
            ids.append(tok.special[IM_START])
            w.append(1.0)
        seg_ids = tok.encode(seg)
        if seg.startswith("user\n"):
            req = set(tok.encode(seg[5:].split(IM_END)[0])) - common
            req_words = request_words(seg[5:].split(IM_END)[0])
            w += [0.0 if mask_request else 1.0] * len(seg_ids)
        elif seg.startswith("assistant\n") and copy_spans:
            w += span_weights(tok, seg, seg_ids, req_words, copy_weight, copy_end,
                              copy_later, copy_first)
        elif seg.startswith("assistant\n"):
            # run: inside a copy that began at a first mention (with
            # copy_end its later tokens of the request weigh too, so a name
            # that repeats a piece, "Quasimodo", is one run)
            run, full = False, set(req)
            for t in seg_ids:
                if t in req or (copy_end and run and t in full):
                    w.append(copy_weight)
                    run = True
                else:
                    w.append(copy_weight if copy_end and run else 1.0)
                    run = False
                req.discard(t)
        else:
            w += [0.0 if mask_request and seg.startswith("system\n") else 1.0] * len(seg_ids)
        ids += seg_ids
    return ids, w


def _slot_re(text):
    """A regex matching a request written from the phrasing text, its
    {name} {athing} {thing} {kind} {who} as named groups."""
    out, pos, seen = "", 0, set()
    for m in re.finditer(r"\{(\w+)\}", text):
        out += re.escape(text[pos:m.start()])
        g = m.group(1)
        # a name, a kind, a who are one word: "a {kind} named {name}."
        # must not take "a girl named X and a Y." ("X and a Y" the name)
        pat = r"\S+?" if g in ("name", "kind", "who") else ".+?"
        out += f"(?P={g})" if g in seen else f"(?P<{g}>{pat})"
        seen.add(g)
        pos = m.end()
    return re.compile(out + re.escape(text[pos:]) + "$")


SLOT_RES = [_slot_re(t) for t in REQUEST_TEXTS if "{" in t]


def request_words(req):
    """The words a request asks for, [name, thing], read back through the
    phrasing it was written from (SLOT_RES): {name}; the last word of
    {athing} ("a red ball" -> ball) or {thing}; {kind} where there is no
    thing ("a dog named Max").  [] for a request of no known phrasing."""
    for r in SLOT_RES:
        m = r.match(req)
        if m:
            g = m.groupdict()
            out = [g["name"]] if g.get("name") else []
            th = g.get("athing") or g.get("thing") or g.get("kind")
            if th:
                out.append(th.split()[-1])
            return out
    return []


def _check_request_words():
    """Every wording with a {name} reads back as [name, thing]: the first
    matching wording wins, so a later one ("... about {athing} and a
    {who} called {name}") must not be taken by an earlier one with its
    slots swapped."""
    for t in REQUEST_TEXTS:
        if "{name}" not in t:
            continue
        req = t.format(name="Qzname", athing="a qzthing", thing="qzthing", kind="qzthing",
                       who="kid", poss="her")
        assert request_words(req) == ["Qzname", "qzthing"], (t, request_words(req))


_check_request_words()


def token_bytes(tok, ids):
    """Byte length of each id's text (the special tokens' literal text)."""
    return [len(tok.inv[i].encode()) if (i == tok.eot or tok.inv[i] in tok.special)
            else len(tok.inv[i]) for i in ids]


def span_weights(tok, seg, seg_ids, words, copy_weight, copy_end, copy_later=1.0,
                 copy_first=1.0):
    """Weights of an assistant segment's tokens: those covering the first
    whole-word mention of each of words (the thing also in its plural, any
    case) weigh copy_weight, with copy_end the token after it too; the
    later mentions copy_later (their tokens only: the copy inside a long
    name fails on a later mention too, "Zepruine" on Zephyrine's fifth);
    with copy_first the first token of each first mention weighs
    copy_weight x copy_first (the copy of a thing fails most at its first
    piece, which the model writes from its own prior: " her" of " her"
    "on", heron, comes out "apon"); the rest 1.  The mention is found in the text, so a name's first piece
    counts whatever else uses it (" A" of " Aukusti", the bare " " of
    " Zephyrine"), and a piece of the name inside another word does not."""
    w = [1.0] * len(seg_ids)
    ends, n = [], 0
    for b in token_bytes(tok, seg_ids):
        n += b
        ends.append(n)
    for k, word in enumerate(words):
        pat = r"\b%s\b" % re.escape(word) if k == 0 else r"\b%s(?:s|es)?\b" % re.escape(word)
        for j, m in enumerate(re.finditer(pat, seg, 0 if k == 0 else re.I)):
            if j and copy_later == 1.0:
                break
            a, b = len(seg[:m.start()].encode()), len(seg[:m.end()].encode())
            first = next(i for i, e in enumerate(ends) if e > a)
            last = next(i for i, e in enumerate(ends) if e >= b)
            stop = last + 1 + (1 if copy_end and not j else 0)
            for i in range(first, min(len(w), stop)):
                w[i] = max(w[i], copy_later) if j else copy_weight
            if not j:
                w[first] = copy_weight * copy_first
    return w


def token_stream(tok, stories, cache, copy_weight=1.0, copy_end=False, mask_request=False,
                 copy_spans=False, copy_later=1.0, copy_first=1.0):
    """stream [N] ids, starts [docs] (each document's BOS), weights [N] f32:
    the loss weight of predicting stream[i] (chat_ids; 1 for stories)."""
    if cache and os.path.exists(cache):
        d = np.load(cache)
        return d["stream"], d["starts"], d["weights"]
    parts, wparts, starts, n = [], [], [], 0
    # the requests' own wording ("Tell me a story about ..."), not what
    # they ask for: the tokens of chatdata.py's phrasings without the
    # {placeholders}
    common = set()
    for text in REQUEST_TEXTS:
        common.update(tok.encode(re.sub(r"\{\w+\}", "", text)))
    for s in stories:
        if s.startswith(IM_START):
            ids, w = chat_ids(tok, s, copy_weight, common, copy_end, mask_request,
                                    copy_spans, copy_later, copy_first)
        else:
            ids = tok.encode(s)
            w = [1.0] * len(ids)
        ids, w = [tok.bos] + ids, [1.0] + w
        starts.append(n)
        parts.append(np.array(ids, dtype=np.int64))
        wparts.append(np.array(w, dtype=np.float32))
        n += len(ids)
    parts.append(np.array([tok.eot], dtype=np.int64))
    wparts.append(np.ones(1, dtype=np.float32))
    stream, weights = np.concatenate(parts), np.concatenate(wparts)
    starts = np.array(starts, dtype=np.int64)
    if cache:
        np.savez(cache, stream=stream, starts=starts, weights=weights)
    return stream, starts, weights


def batches(stream, starts, weights, batch, seq, steps, seed):
    rng = np.random.default_rng(seed)
    ok = starts[starts + seq + 1 <= len(stream)]
    for _ in range(steps):
        s = rng.choice(ok, size=batch)
        rows = np.stack([stream[i:i + seq + 1] for i in s])
        w = np.stack([weights[i + 1:i + seq + 1] for i in s])
        yield torch.from_numpy(rows), torch.from_numpy(w)


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def train_one(arch, args, stream, starts, weights, tok):
    out = os.path.join(args.out, arch + args.suffix)
    torch.manual_seed(args.seed)
    c = make_config(arch, len(tok.vocab), d=args.d, eff_layers=args.layers,
                    n_heads=args.heads, n_kv=args.kv_heads, ffn=args.ffn,
                    n_experts=args.experts, topk=args.topk, moe_ffn=args.moe_ffn,
                    max_pos=args.max_pos)
    c["bos_token_id"] = c["eos_token_id"] = tok.eot
    m = CflowModel(c)
    if args.init:
        # continue training an exported model (the shipped model's longer run)
        sd = load(args.init).state_dict()
        if sd["embed_tokens.weight"].shape[0] < c["vocab_size"]:
            grow_vocab(m, sd, c["vocab_size"])
        else:
            m.load_state_dict(sd)
    nparams = sum(p.numel() for p in m.parameters())
    if args.freeze_below:
        # train only the layers from --freeze-below on (grow.py's new ones)
        # and the final norm: the rest, the embedding included, stays as it
        # is, and the backward pass stops at the first trained layer
        for n, p in m.named_parameters():
            p.requires_grad = n.startswith("layers.") and \
                int(n.split(".")[1]) >= args.freeze_below or n == "norm.weight"
    trained = [(n, p) for n, p in m.named_parameters() if p.requires_grad]
    decay = [p for n, p in trained if p.dim() >= 2]
    nodecay = [p for n, p in trained if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    print(f"[{arch}] params {nparams} config {json.dumps(c)}", flush=True)
    t0 = time.time()
    ema = None
    V = c["vocab_size"]
    for step, (rows, wts) in enumerate(batches(stream, starts, weights, args.batch,
                                               args.seq, args.steps, args.seed)):
        if step < args.start_step:
            continue    # the batches --init's run already took
        for g in opt.param_groups:
            # a resumed run's AdamW starts with no moments: warm up again
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup) * (
                min(1.0, (step - args.start_step + 1) / args.warmup) if args.start_step else 1.0)
        logits, aux, _ = m(rows[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, V), rows[:, 1:].reshape(-1),
                             reduction="none")
        ce = (ce * wts.reshape(-1)).sum() / wts.sum()
        loss = ce + args.aux * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in trained], 1.0)
        opt.step()
        ema = ce.item() if ema is None else 0.95 * ema + 0.05 * ce.item()
        if step % 20 == 0 or step == args.steps - 1:
            el = time.time() - t0
            print(f"[{arch}] step {step}/{args.steps} ce {ce.item():.3f} ema {ema:.3f} "
                  f"lr {opt.param_groups[0]['lr']:.2e} {el:.0f}s", flush=True)
        if args.save_every and step and step % args.save_every == 0:
            # a fallback copy for long runs; the final export replaces it
            m.eval()
            export(m, args.tok, out + f"-step{step}")
            m.train()
    el = time.time() - t0
    info = {"train_seconds": round(el, 1), "train_steps": args.steps,
            "train_tokens": args.steps * args.batch * args.seq,
            "final_train_ce_ema": round(ema, 4), "params": nparams,
            "seed": args.seed, "init": args.init, "start_step": args.start_step, "copy_weight": args.copy_weight, "copy_end": args.copy_end, "mask_request": args.mask_request, "copy_spans": args.copy_spans, "copy_later": args.copy_later, "copy_first": args.copy_first, "freeze_below": args.freeze_below, "lr": args.lr, "batch": args.batch, "seq": args.seq,
            "data": [os.path.basename(p) for p in [args.train] + args.extra + args.chat]}
    m.eval()
    export(m, args.tok, out)
    with open(os.path.join(out, "train_info.json"), "w") as f:
        json.dump(info, f, indent=2)
    print(f"[{arch}] done {info} -> {out}", flush=True)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", required=True, help="tokenizer dir (bpe.py train --out)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", nargs="+", default=VARIANTS)
    ap.add_argument("--train", default=os.path.join(SHARED, "corpus", "tinystories-train-a.txt"))
    ap.add_argument("--extra", nargs="*", default=[],
                    help="more training text in train-a's format (truecase.py output)")
    ap.add_argument("--chat", nargs="*", default=[],
                    help="conversations of chatdata.py build, mixed with the stories")
    ap.add_argument("--copy-weight", type=float, default=1.0,
                    help="loss weight of an answer's first mentions of the request's tokens (chat_ids)")
    ap.add_argument("--copy-end", action="store_true",
                    help="the token ending a copied run weighs --copy-weight too (chat_ids)")
    ap.add_argument("--mask-request", action="store_true",
                    help="the conversations' system and user turns weigh 0 (chat_ids)")
    ap.add_argument("--copy-spans", action="store_true",
                    help="weigh the first mention of the requested name and thing "
                         "(span_weights), not every token of the request")
    ap.add_argument("--copy-first", type=float, default=1.0,
                    help="with --copy-spans the first token of each first mention weighs "
                         "--copy-weight times this (span_weights)")
    ap.add_argument("--copy-later", type=float, default=1.0,
                    help="with --copy-spans: loss weight of the later mentions of the "
                         "requested name and thing (span_weights)")
    ap.add_argument("--suffix", default="", help="output dir = OUT/<variant><suffix>")
    ap.add_argument("--save-every", type=int, default=0)
    ap.add_argument("--init", default=None,
                    help="start from this exported model instead of a random init")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--start-step", type=int, default=0,
                    help="resume a run: --init is its checkpoint of this step; the same "
                         "options go on with its batches and lr schedule from here")
    ap.add_argument("--freeze-below", type=int, default=0,
                    help="train only the layers from this one on and the final norm "
                         "(after grow.py: the new layers)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6, help="effective layers")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--moe-ffn", type=int, default=128)
    ap.add_argument("--max-pos", type=int, default=512)
    args = ap.parse_args()
    for p in [args.train] + args.extra + args.chat:
        if "valid" in os.path.basename(p):
            sys.exit("train.py: refusing to train on the held-out file")
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(args.threads)
    tok = Tokenizer(args.tok)
    stories = train_stories(args.train)
    cache = "train-a-tokens.npz"
    for p in args.extra:
        stories += train_stories(p)
        cache = cache[:-4] + "+" + os.path.splitext(os.path.basename(p))[0] + ".npz"
    for p in args.chat:
        stories += chat_docs(p)
        cache = cache[:-4] + "+" + os.path.splitext(os.path.basename(p))[0] + ".npz"
    if args.chat:
        # interleave conversations and plain stories (rows run on into the
        # following documents, so each row sees both kinds)
        random_order = np.random.default_rng(args.seed).permutation(len(stories))
        stories = [stories[i] for i in random_order]
    if args.copy_weight != 1.0:
        cache = cache[:-4] + f"+w{args.copy_weight:g}" + ("e" if args.copy_end else "") + ".npz"
    if args.mask_request:
        cache = cache[:-4] + "+m.npz"
    if args.copy_spans:
        cache = cache[:-4] + "+s.npz"
    if args.copy_later != 1.0:
        cache = cache[:-4] + f"+l{args.copy_later:g}.npz"
    if args.copy_first != 1.0:
        cache = cache[:-4] + f"+f{args.copy_first:g}.npz"
    stream, starts, weights = token_stream(tok, stories, os.path.join(args.out, cache),
                                           args.copy_weight, args.copy_end, args.mask_request,
                                           args.copy_spans, args.copy_later, args.copy_first)
    print(f"train: {len(stories)} stories, {len(stream)} tokens", flush=True)
    for arch in args.variants:
        train_one(arch, args, stream, starts, weights, tok)


if __name__ == "__main__":
    main()
