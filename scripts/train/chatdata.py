#!/usr/bin/python3
"""chatdata.py -- request -> story pairs from TinyStories, rendered in ChatML.

The shipped model chats (data/README.md): it was fine-tuned on conversations
whose user turn asks for a story and whose assistant turn is a TinyStories
story.  The requests are written from each story's own content, so the
story really is an answer to its request:

* Main character: the name after "named" ("a dog named Max" -> Max, with
  its kind "dog"), else the most frequent capitalised word that is not a
  sentence start or a common word (Mom, The, ...) and occurs twice or more.
* Things: words of the story's first EARLY (3) sentences (--early; 0:
  the whole story) from three lists below -- ANIMALS, THINGS and PLACES -- with the colour/size adjective in front of them when the story
  has one ("a red ball").  The main character's own kind is not a thing.
* One request names the character and one animal, thing or place of the
  story, in one of the phrasings of PHRASINGS (some say "finds" only when
  the story has the character find that thing, "a dog named Max" only when
  Max is a dog).  A quarter of the conversations start with a system line
  from SYSTEMS; a few ask for "a story" with nothing else.  One in eight is
  two turns: a second request ("Now tell me one about ...") answered by a
  second, short story, so the model sees follow-up turns.
* --swap-names P: with probability P a story's main character is renamed
  (every whole-word occurrence) to a name drawn evenly from the names the
  stories introduce with "named", one the story does not already use --
  the rare names are requested as often as the common ones.

Each conversation is rendered exactly as src/engine/eng_chat.c renders
ChatML after the tokenizer's BOS:
    <|im_start|>system\\n{system}<|im_end|>\\n            (optional)
    <|im_start|>user\\n{request}<|im_end|>\\n
    <|im_start|>assistant\\n{story}<|im_end|>\\n
Stories have their paragraphs separated by a blank line, like the held-out
file (train.py's convention).  "<|im_start|>" and "<|im_end|>" are special
tokens of the tokenizer (bpe.py add-special).

Output (`build`): one conversation per document, documents separated by a
line "<|endoftext|>"; train.py --chat reads them verbatim.  `requests`
writes one JSON object per line -- {"system", "request", "name", "thing"}
-- for chateval.py.  The held-out file is refused for `build`; `requests`
takes it (that is what the evaluation is for).

Usage:
  chatdata.py build [--seed N] [--per-story K] [--swap-names P] OUT.txt STORIES.txt...
  chatdata.py requests [--seed N] [--n N] [--skip N] OUT.jsonl STORIES.txt
"""
import argparse
import collections
import json
import os
import random
import re
import sys

EOT = "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

ANIMALS = """dog cat bird fish bunny rabbit bear lion tiger elephant monkey frog
duck horse cow pig sheep mouse owl fox puppy kitten turtle snake bee butterfly
squirrel deer giraffe zebra chicken hen ant spider dragon dinosaur whale shark
dolphin bug ladybug goat wolf penguin kitty bat crab worm snail""".split()
THINGS = """ball toy doll car truck kite balloon box book hat cake cookie apple
flower tree boat train bike robot crayon blanket cup shoe sock shell rock stick
key ring necklace drum bell star moon picture ribbon bag basket bowl chair
table bed door window lamp clock phone map coin jar pot spoon sandwich pie
candy banana carrot leaf stone button dress shirt coat scarf umbrella wagon
plane rocket sword crown puzzle block blocks slide swing sandcastle treasure
gift present card letter pencil paint brush paper bottle bucket cloud""".split()
PLACES = """park forest garden beach school house farm pond lake river sea hill
mountain zoo store shop castle cave playground kitchen jungle yard street
library town city village field meadow woods""".split()
ADJS = """red blue green yellow pink purple orange white black brown gold golden
silver big little small tiny shiny soft old new pretty fluffy happy sad""".split()
COMMON = set("""The A An One Once Then But And So When She He They It Her His
They We I You Mom Dad Mommy Daddy Mum Grandma Grandpa Mr Mrs Miss Yes No Oh
This That There What Why How Where Who Let Can Do Don Did Look Thank Thanks
Please Sorry Hello Hi Wow After Every Today Tomorrow Sometimes Suddenly Finally
Later At In On Up Out If As Now Not Be Go Come See Okay OK Hey Good Bad Here
Soon From With All Some Each Our My Your Their Its Is Are Was Were Will
Would Could Should Just Even Also Maybe Together First Next Bye""".split())
KINDS = set(ANIMALS) | set("""girl boy kid child man woman lady baby king queen
princess prince friend car truck train robot toy doll bear""".split())

SYSTEMS = [
    "You are a storyteller. You write short, simple stories for young children.",
    "You are a helpful assistant.",
    "You tell kind bedtime stories.",
    "Write happy stories for little kids.",
    "You are a friendly assistant who writes stories.",
    "Keep your stories short and easy to read.",
]

# (needs, text).  needs: "kind" = the character is a kind of ANIMALS
# ("a dog named Max"), "find" = the story has the character find the thing,
# "place" = the thing is a place, "" = any thing.  {name} {thing} {athing}
# ("a red ball" / "the park") {kind}.
PHRASINGS = [
    ("kind", "Tell me a story about a {kind} named {name}."),
    ("kind", "Can you write a story about a {kind} called {name}?"),
    ("kind", "Write a story about {name} the {kind}."),
    ("kind", "I want a story about a little {kind} named {name}."),
    ("", "Tell me a story about {name} and {athing}."),
    ("", "Can you write a story about {name} and {athing}?"),
    ("", "Write a short story about {name}. It should have {athing} in it."),
    ("", "Please tell me a story with {name} and {athing}."),
    ("", "I would like a story about {name} and {athing}."),
    ("", "Tell me a story. The main character is {name}, and there is {athing}."),
    ("", "Story about {name} and {athing}, please."),
    ("find", "Can you write a story where {name} finds {athing}?"),
    ("find", "Tell me a story where {name} finds {athing}."),
    ("place", "Tell me a story about {name} at {athing}."),
    ("place", "Write a story about {name} going to {athing}."),
]
FOLLOWUPS = [
    "Now tell me one about {name} and {athing}.",
    "Another one, please, about {name} and {athing}.",
    "Can you tell me another story? This time about {name} and {athing}.",
    "Thank you! Now a story about {name} and {athing}.",
]
PLAIN_REQUESTS = ["Tell me a story.", "Can you tell me a story?",
                  "Write a short story for me.", "Please tell me a story."]

WORD = re.compile(r"[A-Za-z]+")
# requests name a thing of the story's first EARLY sentences (make_request)
EARLY = 3


def read_stories(path):
    """Stories of a train-a style file (EOT lines, one \\n between
    paragraphs) or of the held-out file (blank lines between paragraphs),
    paragraphs rejoined with a blank line as train.py does."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = []
    for s in text.split(EOT):
        s = s.strip("\n")
        if s:
            out.append("\n\n".join(p for p in s.split("\n") if p.strip()))
    return out


def main_character(story):
    """(name, kind or None) or None."""
    m = re.search(r"\b(?:a|an|the)\s+(?:\w+\s+){0,2}?(\w+)\s+named\s+([A-Z][a-z]+)", story)
    if m:
        kind = m.group(1).lower()
        return m.group(2), (kind if kind in ANIMALS else None)
    m = re.search(r"\bnamed\s+([A-Z][a-z]+)", story)
    if m:
        return m.group(1), None
    counts = collections.Counter()
    for sm in re.finditer(r"(?<![.!?\"]\s)(?<!^)\b([A-Z][a-z]+)\b", story, re.M):
        w = sm.group(1)
        if w not in COMMON and w.lower() not in KINDS:
            counts[w] += 1
    if counts:
        w, c = counts.most_common(1)[0]
        if c >= 2:
            return w, None
    return None


def things(story, exclude):
    """[(word, with_article, category)] of ANIMALS / THINGS / PLACES in the
    story; with_article is "a red ball", "an apple" or "the park"."""
    words = WORD.findall(story)
    lower = [w.lower() for w in words]
    present = collections.Counter(lower)
    out = []
    for cat, lst in (("animal", ANIMALS), ("thing", THINGS), ("place", PLACES)):
        for w in lst:
            if present[w] == 0 or w in exclude:
                continue
            adj = None
            for i, lw in enumerate(lower):
                if lw == w and i and lower[i - 1] in ADJS:
                    adj = lower[i - 1]
                    break
            if cat == "place":
                art = "the " + w
            else:
                np_ = (adj + " " + w) if adj else w
                art = ("an " if np_[0] in "aeiou" else "a ") + np_
            out.append((w, art, cat))
    return out


def finds(story, name, word):
    return re.search(r"\b%s\b[^.!?]{0,40}\bf(?:ou|i)nds?\b[^.!?]{0,25}\b%s\b"
                     % (re.escape(name), re.escape(word)), story) is not None


def opening(story, early):
    """The story's first `early` sentences (all of it when early is 0)."""
    if not early:
        return story
    return " ".join(re.split(r"(?<=[.!?])\s+", story)[:early])


def make_request(story, rng, early=EARLY):
    """(request, name, thing) or None when the story gives no character.
    The thing is one the story's first `early` sentences mention: the
    story's own prominent things, and an answer that writes its request's
    thing near its start, where a first mention teaches the copy."""
    mc = main_character(story)
    if not mc:
        return None
    name, kind = mc
    ths = things(opening(story, early), {kind} if kind else set())
    choices = []
    for needs, text in PHRASINGS:
        if needs == "kind":
            if kind:
                choices.append((text, kind, kind))
            continue
        for w, art, cat in ths:
            if needs == "place" and cat != "place":
                continue
            if needs == "find" and not finds(story, name, w):
                continue
            if needs == "" and cat == "place":
                continue
            choices.append((text, w, art))
    if not choices:
        return None
    text, w, art = rng.choice(choices)
    return text.format(name=name, kind=kind, athing=art), name, w


def render(turns, system=None):
    """ChatML text of [(user, assistant)], as eng_chat.c renders it."""
    s = ""
    if system:
        s += f"{IM_START}system\n{system}{IM_END}\n"
    for u, a in turns:
        s += f"{IM_START}user\n{u}{IM_END}\n{IM_START}assistant\n{a}{IM_END}\n"
    return s


def followup(story, rng):
    r = make_request(story, rng)
    if not r:
        return None
    _, name, w = r
    ths = {t[0]: t[1] for t in things(story, set())}
    return rng.choice(FOLLOWUPS).format(name=name, athing=ths.get(w, "a " + w))


def name_pool(stories):
    """Sorted distinct names the stories introduce with "named X" (the
    capitalised-word fallback of main_character also finds "Papa", "It",
    "Sunday"), for --swap-names."""
    return sorted({m.group(1) for s in stories
                   for m in re.finditer(r"\bnamed\s+([A-Z][a-z]+)", s)} - COMMON)


def swap_name(story, pool, rng):
    """The story with its main character renamed to a name of the pool that
    the story does not already use, or the story unchanged.  Every
    distinct name is equally likely, so a name the corpus uses once is
    requested as often as Lily: the copy of a name the model has seldom
    seen (one the vocabulary cuts into rare pieces) is what fails most."""
    mc = main_character(story)
    if not mc or len(pool) < 2:
        return story
    for _ in range(8):
        new = rng.choice(pool)
        if not re.search(r"\b%s\b" % re.escape(new), story):
            return re.sub(r"\b%s\b" % re.escape(mc[0]), new, story)
    return story


def build(stories, rng, per_story, early=EARLY, swap=0.0):
    docs = []
    short = [s for s in stories if len(s) < 700]
    pool = name_pool(stories) if swap else []
    for story0 in stories:
        for _ in range(per_story):
            story = swap_name(story0, pool, rng) if swap and rng.random() < swap else story0
            system = rng.choice(SYSTEMS) if rng.random() < 0.25 else None
            if rng.random() < 0.04:
                docs.append(render([(rng.choice(PLAIN_REQUESTS), story)], system))
                continue
            r = make_request(story, rng, early)
            if not r:
                continue
            turns = [(r[0], story)]
            if len(story) < 700 and rng.random() < 0.125:
                s2 = rng.choice(short)
                f = followup(s2, rng)
                if f:
                    turns.append((f, s2))
            docs.append(render(turns, system))
    rng.shuffle(docs)
    return docs


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--per-story", type=int, default=2)
    b.add_argument("--early", type=int, default=EARLY,
                   help="the thing from the story's first N sentences (0: anywhere)")
    b.add_argument("--swap-names", type=float, default=0.0, metavar="P",
                   help="rename a story's main character with probability P to a "
                        "name drawn evenly from the stories' main characters")
    b.add_argument("out")
    b.add_argument("stories", nargs="+")
    r = sub.add_parser("requests")
    r.add_argument("--seed", type=int, default=7)
    r.add_argument("--n", type=int, default=120)
    r.add_argument("--early", type=int, default=EARLY,
                   help="the thing from the story's first N sentences (0: anywhere)")
    r.add_argument("--skip", type=int, default=0,
                   help="start at the file's story N (0-based): a set of other stories")
    r.add_argument("out")
    r.add_argument("stories")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    if args.cmd == "build":
        stories = []
        for p in args.stories:
            if "valid" in os.path.basename(p):
                sys.exit(f"chatdata.py: refusing to build training data from {p}")
            stories += read_stories(p)
        docs = build(stories, rng, args.per_story, args.early, args.swap_names)
        with open(args.out, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(d + EOT + "\n")
        print(f"{len(docs)} conversations from {len(stories)} stories -> {args.out}",
              file=sys.stderr)
        return
    out = []
    for story in read_stories(args.stories)[args.skip:]:
        if len(out) >= args.n:
            break
        req = make_request(story, rng, args.early)
        if not req:
            continue
        system = rng.choice(SYSTEMS) if rng.random() < 0.25 else None
        out.append({"system": system, "request": req[0], "name": req[1], "thing": req[2]})
    with open(args.out, "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o) + "\n")
    print(f"{len(out)} requests -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
