#!/usr/bin/python3
"""chateval.py -- does the chat model answer the request it was given?

For every request of a `chatdata.py requests` file (built from the held-out
stories, which the model never saw) run

    cflow run [-m MODEL] --chat -p REQUEST [--system SYSTEM] --temp 0 -n N --no-log

and score the reply (data/README.md, issue 22's targets):

* on topic: the reply names the requested character (the exact word, with
  its capital: "Max") AND the requested animal or thing (the word, any
  case, singular or with a plural "s"/"es": "dog", "dogs");
* the on-topic share again without the requests for the commonest name of
  the set (Lily, 45 of the 120 held-out requests): a model that ignores
  the request and writes its favourite name still gets those;
* dictionary words: of all the reply's words (lower-cased runs of letters,
  optionally "'" and more letters, as tests/e2e/test_default_model splits
  them), the share found in the word list of tinystories-train-a.txt;
  and again with the request's own words added to the list (a reply that
  copies an unseen name or thing, as asked, is not writing non-words:
  copydata.py's held-out names and things are in no training file).

Prints a JSON summary (and with --out, every request with its reply).

Usage:
  chateval.py --cflow build/cflow [--model M] [--n 400] [--threads T] REQUESTS.jsonl
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("CFLOW_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")


def words(text):
    return [w.lower() for w in WORD.findall(text)]


def on_topic(reply, name, thing):
    has_name = re.search(r"\b%s\b" % re.escape(name), reply) is not None
    has_thing = re.search(r"\b%s(?:s|es)?\b" % re.escape(thing), reply, re.I) is not None
    return has_name, has_thing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cflow", required=True, help="the cflow binary")
    ap.add_argument("--model", help="model file (default: cflow's shipped model)")
    ap.add_argument("--n", type=int, default=400, help="most tokens per reply")
    ap.add_argument("--threads", type=int, help="cflow run -t (default: cflow's)")
    ap.add_argument("--lexicon", default=os.path.join(SHARED, "corpus", "tinystories-train-a.txt"))
    ap.add_argument("--out", help="write requests and replies (JSON lines) here")
    ap.add_argument("requests")
    args = ap.parse_args()
    with open(args.lexicon, encoding="utf-8") as f:
        lex = set(words(f.read()))
    reqs = [json.loads(line) for line in open(args.requests, encoding="utf-8")]
    n_ok = n_name = n_thing = n_words = n_known = n_replies90 = n_known_req = 0
    rows = []
    for r in reqs:
        cmd = [args.cflow, "run"] + (["-m", args.model] if args.model else []) + [
            "--chat", "-p", r["request"], "--temp", "0", "-n", str(args.n), "--no-log"] + (
            ["-t", str(args.threads)] if args.threads else [])
        if r.get("system"):
            cmd += ["--system", r["system"]]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"chateval.py: {' '.join(cmd)} failed: {p.stderr.strip()}")
        reply = p.stdout
        hn, ht = on_topic(reply, r["name"], r["thing"])
        w = words(reply)
        k = sum(x in lex for x in w)
        req = set(words(r["request"]))
        n_known_req += sum(x in lex or x in req or x.rstrip("s") in req or
                           x.split("'")[0] in req for x in w)
        n_name += hn
        n_thing += ht
        n_ok += hn and ht
        n_words += len(w)
        n_known += k
        n_replies90 += bool(w) and k >= 0.9 * len(w)
        rows.append(dict(r, reply=reply, name_ok=hn, thing_ok=ht,
                         words=len(w), known=k))
    n = len(reqs)
    top = collections.Counter(r["name"] for r in reqs).most_common(1)[0][0]
    others = [row for row in rows if row["name"] != top]
    n_other_ok = sum(row["name_ok"] and row["thing_ok"] for row in others)
    summary = {
        "requests": n,
        "names_character_and_thing": n_ok, "on_topic_share": round(n_ok / n, 4),
        "names_character": n_name, "names_thing": n_thing,
        "commonest_name": top, "other_requests": len(others),
        "other_names_character_and_thing": n_other_ok,
        "on_topic_share_other_names": round(n_other_ok / max(1, len(others)), 4),
        "words": n_words, "dictionary_words": n_known,
        "dictionary_share": round(n_known / max(1, n_words), 4),
        "dictionary_or_request_words": n_known_req,
        "dictionary_or_request_share": round(n_known_req / max(1, n_words), 4),
        "replies_with_90pct_dictionary_words": n_replies90,
    }
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
