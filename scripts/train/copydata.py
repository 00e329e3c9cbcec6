#!/usr/bin/python3
"""copydata.py -- chat data that rewards copying any name and thing (issue 46).

The chat model of chatdata.py copied the names its stories introduce, but
asked for a child with a name no story holds it wrote a name it knew ("a
little girl named Ella"), and it dropped everyday things TinyStories seldom
mentions.  Copying a name it has never seen is an induction behaviour: the
model must attend from the answer to the request and write the request's
tokens again.  It learns that only when copying is the only way to be
right, so here the requested name and thing are drawn from lists far
broader than the stories and the story is rewritten to use them:

* Names (lists/names-train.txt): the first names of Faker's 49 locales
  (Debian python3-fake-factory; ASCII, 3-10 letters) and names composed
  from syllables (compose_names), split by the vocabulary into pieces the
  model has never seen together.  A story's main character (chatdata.py's
  main_character) is renamed, every whole-word occurrence, with
  probability --p-name.
* Things (lists/things-train.txt, "word category plural"): single-word
  nouns of WordNet (Debian wordnet-base) whose commonest sense is an
  animal, an artifact or a food, in the wamerican word list, at most
  MAX_THING_TOKENS (7) tokens of the vocabulary (the held-out everyday
  things run to 8).  The requested thing of the story's first
  sentences (chatdata.py's things()) is replaced, singular and plural, any
  case, by a listed thing of its kind (an animal by an animal, a thing by
  an artifact or a food) with probability --p-thing, "a"/"an" fixed.
* A fixed place for the thing (--cue P, cue_convo): a name has one
  ("a girl named X"), a thing had none, and the first fine-tunes copied
  names but never things.  With probability P the story's first sentence
  names the character (an intro "Once upon a time, there was a girl named
  X." is put in front where it does not) and the thing's first mention
  comes right after it, after "a"/"her"/... (a cue sentence of CUES, "X
  had a THING.", "She found a THING.", "One day, she met a THING.", is
  put in as the second sentence where the story does not already do so).
  train.py --copy-spans weighs exactly those first mentions.
* Requests: chatdata.py's 15 phrasings plus TRAIN_PHRASINGS below; a
  quarter with a system line; a few plain stories (--p-plain) keep the
  model writing stories after EOT.

Held out, for the evaluation (`lists` writes them, `requests` uses them):
names-{valid,test}.txt are Faker first names and things-{valid,test}.txt
listed things (with regular plurals, so the scorer's "s"/"es" finds them)
that occur in NO training file -- not in the training lists, and not as a
word in tinystories-train-a.txt or tinystories-train-b-lowercase.txt
(case-insensitive, the plural too), so in no conversation built from
them.  `requests` checks that again against the training lists and every
file given with --check (the conversations trained on).  The make-check
request's "Zephyrine" and "trumpet" (tests/e2e/test_default_model) are
RESERVED: in no list.  VALID_PHRASINGS and TEST_PHRASINGS are request
wordings no training conversation uses (checked at import).  The
validation set chooses checkpoints; the test set is scored once.

Usage:
  copydata.py lists [--seed 46] LISTDIR TRAIN.txt...     # writes the lists
  copydata.py build [--seed N] [--per-story K] [--p-name P] [--p-thing P]
                    [--p-plain P] [--nouns-only] [--cue P] [--more-phrasings]
                    [--thing-phrasings] [--lists DIR]
                    OUT.txt STORIES.txt...
  copydata.py requests --set valid|test [--seed N] [--n N] [--lists DIR]
                    [--check FILE...] OUT.jsonl
"""
import argparse
import collections
import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chatdata  # noqa: E402
from chatdata import EOT, PHRASINGS, SYSTEMS, read_stories, render  # noqa: E402

LISTS = os.path.join(HERE, "lists")
RESERVED_NAMES = {"Zephyrine"}     # tests/e2e/test_default_model's request
RESERVED_THINGS = {"trumpet"}
WORDNET = "/usr/share/wordnet"
# a training thing is at most this many tokens after a space (the held-out
# everyday things run to 8: " ac" "c" "or" "d" "ion" is 5)
MAX_THING_TOKENS = 7
DICT = "/usr/share/dict/american-english"
# WordNet lexicographer files: the categories a story's thing may become
LEXFILES = {5: "animal", 6: "artifact", 13: "food"}
# not for children's stories: every noun below these WordNet synsets (the
# lemma's first sense), and these words
BANNED_ROOTS = ["weapon", "ammunition", "explosive", "alcohol", "drug", "tobacco",
                "contraceptive", "drug_of_abuse", "instrument_of_execution"]
BANNED_WORDS = set("""brothel whorehouse bordello bawdyhouse cathouse casino prison jail
coffin casket gallows condom bra brassiere lingerie corset syringe toilet urinal bong
beer wine whisky whiskey vodka gin rum liquor cocktail weenie bazooka artillery""".split())
# everyday things for the held-out sets: those of these that no training
# file holds (make_lists); the things a reader asks for
EVERYDAY = """aardvark accordion almond alpaca anklet anteater antelope apricot
armadillo artichoke asparagus badger bagel banjo barometer bassoon beret bison
bonfire bonnet boomerang brooch buffalo bugle bulldozer burrito cabbage
calculator camel canary candlestick caravan cardigan carousel cashew catfish
cello centipede chameleon chestnut chisel clarinet cockatoo cockroach colander
cougar coyote cradle cranberry croissant custard cymbal domino donut doorknob
dumpling earthworm eel eggplant elk emu falcon ferret ferry flamingo gazelle
gecko gerbil glider goblet goldfish grapefruit grasshopper gumdrop hairbrush
hammock harmonica hawk hazelnut heron highchair highlighter hourglass
hummingbird hyena iguana jackal jaguar kaleidoscope kazoo kettle keyboard
kimono kiwi koala ladle lantern laptop lemur limousine llama lobster locket
lynx magnifier manatee maraca marionette metronome monocle moose moth mussel
narwhal newt noodle notepad oboe omelet orca palette panther papaya paperclip
parakeet parasol pelican pendant pinata pineapple pinecone pinwheel pistachio
platter platypus plum poncho postcard pretzel projector protractor puffin
puppet radiator salamander sardine saucepan saucer scallop scorpion sharpener
skateboard sketchbook skillet sled slipper sloth snowboard sombrero spatula
spool squid stapler stencil stingray stopwatch stork stroller submarine sundial
taco tadpole tambourine tangerine teacup thermos thumbtack tiara toothbrush
tortoise toucan tram tricycle trombone trout trowel tuba tugboat tumbler tuxedo
typewriter ukulele unicycle visor vulture waistcoat wallaby walnut walrus wasp
watermelon weasel wheelbarrow wok wombat wrench wristwatch xylophone yak yoyo
zucchini""".split()

# More training wordings ({who}: girl/boy/kid/child, from the story's
# pronouns).  chatdata.py's PHRASINGS are used too.
TRAIN_PHRASINGS = [
    ("", "Tell me a story about a {who} named {name} and {athing}."),
    ("", "Write a story about a {who} called {name} who has {athing}."),
    ("", "Can you tell me a story about {name}? There should be {athing}."),
    ("", "I want a story with {name} and {athing} in it."),
    ("", "A story about {name} and {athing}, please."),
    ("", "Please write a story. It is about {name} and {athing}."),
    ("", "Tell a story about {athing} and a {who} named {name}."),
    ("", "Write a story where {name} sees {athing}."),
    ("", "Make a story about {name} and {athing}."),
    ("", "Tell me about {name} and {athing} in a story."),
    # more wordings for --cue data (the held-out ones stay unused)
    ("", "Write a story about {name}. Put {athing} in it."),
    ("", "{name} and {athing}: tell me a story."),
    ("", "Can I have a story about a {who} named {name} with {athing}?"),
    ("", "Please tell me a story where {name} has {athing}."),
    ("", "I want to hear a story about {name} and {athing}."),
    ("", "Tell me a funny story about {name} and {athing}."),
    ("", "Write a happy story. The main character is {name}. Include {athing}."),
    ("", "Do you know a story about {name} and {athing}?"),
    ("", "Tell me a story with a {who} called {name}. Add {athing}."),
    ("", "A story, please: {name} meets {athing}."),
    ("", "Write about {name} and {athing}."),
    ("", "Tell a short story about {name}, who has {athing}."),
]
# With build --more-phrasings (issue 46's grow3): wordings in which the
# requested name is followed by a verb or another word, not only by "and",
# "." or "," -- the copy of an unseen name ran on past its end where a
# request went on with a verb ("named Karis plays with" -> "Karisss").
# A separate list, so the draws of the seeds above are unchanged.
MORE_PHRASINGS = [
    "Write a story where a {who} named {name} likes {athing}.",
    "Tell me a story in which {name} wants {athing}.",
    "Tell me a story where a {who} named {name} draws {athing}.",
    "Can you write a story where {name} keeps {athing}?",
    "Tell me a story where a {who} called {name} helps {athing}.",
    "Please tell a story where {name} takes care of {athing}.",
    "Write a story in which a {who} named {name} shares {athing}.",
    "I want a story where {name} hides {athing}.",
    "Tell me a story where {name} makes {athing}.",
    "Can you tell a story in which a {who} named {name} wishes for {athing}?",
    "Write a story where {name} looks for {athing}.",
    "Write a story: {name} is a {who} with {athing}.",
    "Tell me a story where {name} goes out with {athing}.",
    "Make up a story where a {who} named {name} runs into {athing}.",
    "Write a story in which {name} brings home {athing}.",
    "Tell me a story where a {who} named {name} wins {athing}.",
]
# With build --thing-phrasings (issue 46's grow4): wordings that vary the
# requested thing as MORE_PHRASINGS vary the name -- the thing followed by
# other words, the thing before the name, "the"/"a big"/"her" before it.
# The copy that fails now is mostly the thing's ("brocan" for toucan,
# "lanternn"), and every earlier training wording but one ended the
# request with it.  ({poss}: her/his/the, from the story's pronouns.)
# train.py reads the name and thing back through these (request_words;
# its _check_request_words, at import, fills every wording and reads it
# back, so no earlier wording takes one of these with the slots swapped).
THING_PHRASINGS = [
    "Tell me a story about {athing} that belongs to a {who} named {name}.",
    "Write a story where {athing} makes {name} happy.",
    "Can you tell me a story where {name} puts {athing} in a box?",
    "Tell me a story where {name} gives {athing} to a friend.",
    "Write a story in which {name} sees {athing} at the park.",
    "Please write a story where {name} takes {athing} to school.",
    "Tell me a story where {name} and {athing} go on a trip.",
    "Write a story about {athing} and a {who} called {name}.",
    "Tell me a story about {athing}. It belongs to {name}.",
    "Write a story where {athing} meets a {who} named {name}.",
    "Tell me a story about {name} and the {thing}.",
    "Write a story where a {who} named {name} has a big {thing}.",
    "Can you write a story about {name} and a little {thing}?",
    "Tell me a story about {name} and {poss} {thing}.",
    "Write a story where {name} loses {poss} {thing}.",
    "Tell me a story about a {who} named {name}. The story has {athing} in it, too.",
]
# Held-out wordings: validation requests (checkpoint choice) and the final
# test set use their own, and no training conversation uses either.
VALID_PHRASINGS = [
    "Could you write me a story where a {who} named {name} plays with {athing}?",
    "I'd like a short story. It's about {name}, who gets {athing}.",
    "Please make up a story about {name} and {athing} for my class.",
    "Story time! The hero is {name}, and the story has {athing}.",
]
TEST_PHRASINGS = [
    "My kid wants a bedtime story about {name} and {athing}. Can you help?",
    "Write me a little tale in which {name} finds {athing}.",
    "Could you make up a story for a {who} called {name} who loves {athing}?",
    "Give me a short story featuring {name} and {athing}.",
    "Once upon a time story please, with {name} and {athing}!",
    "I need a story for tonight: a {who} named {name} and {athing}.",
]
WHO = {"she": "girl", "he": "boy", None: "kid"}


def _check_phrasings():
    train = {t for _, t in PHRASINGS} | {t for _, t in TRAIN_PHRASINGS} | set(chatdata.FOLLOWUPS) \
        | set(MORE_PHRASINGS) | set(THING_PHRASINGS)
    held = set(VALID_PHRASINGS) | set(TEST_PHRASINGS)
    assert not train & held and not set(VALID_PHRASINGS) & set(TEST_PHRASINGS)


_check_phrasings()


def plural(w, exc=None):
    if exc and w in exc:
        return exc[w]
    if re.search(r"(s|x|z|ch|sh)$", w):
        return w + "es"
    if re.search(r"[^aeiou]y$", w):
        return w[:-1] + "ies"
    return w + "s"


# ---- the lists ---------------------------------------------------------------

def faker_names():
    """ASCII first names (3-10 letters) of every locale of Faker."""
    import importlib
    import pkgutil
    import faker.providers.person as P
    out = set()
    for m in pkgutil.iter_modules(P.__path__):
        try:
            prov = importlib.import_module("faker.providers.person." + m.name).Provider
        except Exception:  # a locale module that does not import
            continue
        for attr in ("first_names", "first_names_male", "first_names_female"):
            for n in getattr(prov, attr, None) or ():
                if re.fullmatch(r"[A-Z][a-z]{2,9}", n):
                    out.add(n)
    return out


ONSETS = "b br c ch d dr f fl g gr h j k kl l m n p pr qu r s sh st t th tr v w y z zh".split()
VOWELS = "a e i o u ai ea ee ia io oa ou y".split()
CODAS = [""] * 6 + "l m n r s th x nd rk ll ss".split()


def compose_names(rng, n):
    """n distinct names of 2-3 syllables (onset vowel coda), e.g. Brelinx."""
    out = set()
    while len(out) < n:
        k = rng.choice((2, 2, 3))
        s = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + (rng.choice(CODAS) if i == k - 1 else "")
                    for i in range(k))
        if 4 <= len(s) <= 10:
            out.add(s.capitalize())
    return out


def _wn_index(pos):
    """{lemma: (tagged sense count, [synset offsets, commonest first])}"""
    out = {}
    with open(os.path.join(WORDNET, "index." + pos), encoding="latin-1") as f:
        for line in f:
            if not line.startswith(" "):
                p = line.split()
                n = int(p[2])
                out[p[0]] = (int(p[-n - 1]), p[-n:])
    return out


def wordnet_things(tok):
    """{word: category} of single-word WordNet nouns whose first (commonest)
    sense is an animal, artifact or food and not below a BANNED_ROOTS
    synset (weapons, drink, drugs), in the wamerican list, not an adjective
    or adverb nor a verb more often than a noun in WordNet's tagged text, at
    most MAX_THING_TOKENS tokens after a space; and WordNet's irregular plurals."""
    lexfile, hyper = {}, {}
    with open(os.path.join(WORDNET, "data.noun"), encoding="latin-1") as f:
        for line in f:
            if line.startswith(" "):
                continue
            p = line.split(" | ")[0].split()
            lexfile[p[0]] = int(p[1])
            k = 4 + 2 * int(p[3], 16)
            hyper[p[0]] = [p[k + 2 + 4 * i] for i in range(int(p[k]))
                           if p[k + 1 + 4 * i] in ("@", "@i")]
    exc = {}
    with open(os.path.join(WORDNET, "noun.exc"), encoding="latin-1") as f:
        for line in f:
            p, s = line.split()[:2]
            exc.setdefault(s, p)
    with open(DICT, encoding="utf-8") as f:
        dictwords = {w.strip() for w in f}
    nouns, verbs = _wn_index("noun"), _wn_index("verb")
    other = set(_wn_index("adj")) | set(_wn_index("adv"))
    banned = {nouns[w][1][0] for w in BANNED_ROOTS}

    def below_banned(off, depth=0):
        return off in banned or (depth < 20 and any(below_banned(h, depth + 1)
                                                    for h in hyper.get(off, ())))
    out = {}
    for w, (tagged, offs) in nouns.items():
        if (not re.fullmatch(r"[a-z]{3,10}", w) or w not in dictwords or w in other
                or w in BANNED_WORDS or verbs.get(w, (0,))[0] > tagged):
            continue
        cat = LEXFILES.get(lexfile.get(offs[0]))
        if cat and not below_banned(offs[0]) and len(tok.encode(" " + w)) <= MAX_THING_TOKENS:
            out[w] = cat
    return out, exc


def corpus_words(paths):
    words = set()
    for p in paths:
        with open(p, encoding="utf-8") as f:
            words |= {w.lower() for w in re.findall(r"[A-Za-z]+", f.read())}
    return words


def make_lists(args):
    from bpe import Tokenizer
    rng = random.Random(args.seed)
    tok = Tokenizer(os.path.join(HERE, "..", "..", "tests", "data", "models", "arch2_4_combined"))
    seen = corpus_words(args.train)
    with open(DICT, encoding="utf-8") as f:
        lower_dict = {w.strip() for w in f if w[:1].islower()}
    common = chatdata.COMMON | {n.capitalize() for n in chatdata.KINDS}
    real = sorted(n for n in faker_names() if n.lower() not in lower_dict and n not in common)
    composed = sorted(n for n in compose_names(rng, 4000) if n not in real
                      and n.lower() not in lower_dict and n not in common)
    # held out: real names no training file holds
    unseen = [n for n in real if n.lower() not in seen and n not in RESERVED_NAMES]
    rng.shuffle(unseen)
    held = {"valid": sorted(unseen[:300]), "test": sorted(unseen[300:700])}
    taken = set(held["valid"]) | set(held["test"]) | RESERVED_NAMES
    names_train = sorted((set(real) | set(composed)) - taken)

    things, exc = wordnet_things(tok)
    everyday = [w for w in EVERYDAY if w not in seen and plural(w) not in seen
                and w not in RESERVED_THINGS and plural(w) == plural(w, exc)]
    for w in everyday:
        things.setdefault(w, "artifact")  # a word WordNet files elsewhere
    rng.shuffle(everyday)
    held_t = {"valid": sorted(everyday[:80]), "test": sorted(everyday[80:])}
    taken_t = set(held_t["valid"]) | set(held_t["test"]) | RESERVED_THINGS
    taken_t |= {plural(w, exc) for w in taken_t}
    # "dumplings" is a WordNet lemma of its own: no training thing is a
    # held-out word in either number, nor has one as its plural
    things_train = sorted(w for w in things if w not in taken_t and plural(w, exc) not in taken_t
                          and re.sub(r"e?s$", "", w) not in taken_t)

    os.makedirs(args.listdir, exist_ok=True)

    def write(fn, lines):
        with open(os.path.join(args.listdir, fn), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    write("names-train.txt", names_train)
    write("things-train.txt", [f"{w} {things[w]} {plural(w, exc)}" for w in things_train])
    for s in ("valid", "test"):
        write(f"names-{s}.txt", held[s])
        write(f"things-{s}.txt", [f"{w} {things[w]} {plural(w, exc)}" for w in held_t[s]])
    print(f"names: {len(names_train)} for training ({len(real)} Faker first names, "
          f"{len(composed)} composed), held out {len(held['valid'])} valid + "
          f"{len(held['test'])} test of {len(unseen)} unseen; things: {len(things_train)} "
          f"for training, held out {len(held_t['valid'])} + {len(held_t['test'])} of "
          f"{len(everyday)} everyday unseen", file=sys.stderr)


def read_names(listdir, which):
    with open(os.path.join(listdir, f"names-{which}.txt"), encoding="utf-8") as f:
        return [w.strip() for w in f if w.strip()]


def read_things(listdir, which):
    """[(word, category, plural)]"""
    with open(os.path.join(listdir, f"things-{which}.txt"), encoding="utf-8") as f:
        return [tuple(line.split()) for line in f if line.strip()]


# ---- the conversations -------------------------------------------------------

def article(np_):
    return ("an " if np_[0] in "aeiou" else "a ") + np_


def swap_thing(story, old, new, new_pl):
    """story with every whole-word old / old's plural (any case) replaced by
    new / new_pl, capitalised where old was, "a"/"an" before it fixed."""
    def sub(m):
        w = m.group(0)
        rep = new_pl if w.lower() != old else new
        return rep.capitalize() if w[0].isupper() else rep
    pat = r"\b(?:%s|%s)\b" % (re.escape(old), re.escape(plural(old)))
    story = re.sub(pat, sub, story, flags=re.I)
    # "a" / "an" directly before the new word (or before an adjective of it)
    vowel = new[0] in "aeiou"
    art = r"\b([Aa])(n?) (?=%s\b)" % re.escape(new)
    return re.sub(art, lambda m: m.group(1) + ("n " if vowel else " "), story)


DETS = set("""a an the his her my your their our its this that some one two three
another every each no""".split())


def noun_uses(story, word):
    """True when every occurrence of word (or its plural) follows a
    determiner or an adjective of chatdata.ADJS ("a red paint", not "to
    paint"): a thing swapped in for it then stays a noun."""
    for m in re.finditer(r"\b(\w+)\s+(?:%s|%s)\b" % (re.escape(word), re.escape(plural(word))),
                         story, re.I):
        if m.group(1).lower() not in DETS and m.group(1).lower() not in chatdata.ADJS:
            return False
    return True


def who(story):
    m = re.search(r"\b(she|he)\b", story, re.I)
    return WHO[m.group(1).lower() if m else None]


def rename(story, rng, names, p_name):
    """(story, name, kind) with the story's main character (chatdata.py's
    main_character) renamed, every whole-word occurrence, to a name of
    names the story does not hold, with probability p_name; None for a
    story without one."""
    mc = chatdata.main_character(story)
    if not mc:
        return None
    name, kind = mc
    if rng.random() < p_name:
        for _ in range(8):
            new = rng.choice(names)
            if not re.search(r"\b%s\b" % re.escape(new), story):
                story = re.sub(r"\b%s\b" % re.escape(name), new, story)
                name = new
                break
    return story, name, kind


def convo(story, rng, names, things_by_cat, p_name, p_thing, nouns_only=False):
    """(request, story, name, thing) for one story, or None."""
    mc = rename(story, rng, names, p_name)
    if not mc:
        return None
    story, name, kind = mc
    ex = {kind} if kind else set()
    ths = [t for t in chatdata.things(chatdata.opening(story, chatdata.EARLY), ex) if t[2] != "place"]
    ths = ths or [t for t in chatdata.things(story, ex) if t[2] != "place"]
    if not ths:
        return None
    w, art, cat = rng.choice(ths)
    if rng.random() < p_thing and (not nouns_only or noun_uses(story, w)):
        pool = things_by_cat["animal"] if cat == "animal" else things_by_cat["thing"]
        new, _, new_pl = rng.choice(pool)
        if not re.search(r"\b%s\b" % re.escape(new), story, re.I):
            story = swap_thing(story, w, new, new_pl)
            art = art.rsplit(" ", 1)[0] + " " + new
            art = article(art.split(" ", 1)[1]) if art.split(" ")[0] in ("a", "an") else art
            w = new
    choices = [("", t) for _, t in TRAIN_PHRASINGS] + [
        (n, t) for n, t in PHRASINGS if n in ("", "kind") and (n != "kind" or kind)]
    needs, text = rng.choice(choices)
    req = text.format(name=name, kind=kind, athing=art, who=who(story))
    return req, story, name, w


# --cue: the requested thing's first mention gets a fixed place, as "named
# X" gives the name one.  {Ref}: the name or the pronoun; {poss}: her/his.
CUES = {
    "thing": ["{Ref} had {athing}.", "{Ref} loved {poss} {thing}.", "{Ref} found {athing}.",
              "{Ref} had a big {thing}.", "{Ref} had a little {thing}.", "{Ref} saw {athing}.",
              "One day, {ref} found {athing}."],
    "animal": ["{Ref} had a pet {thing}.", "{Ref} saw {athing}.", "{Ref} had a friend, {athing}.",
               "{Ref} loved {poss} {thing}.", "One day, {ref} met {athing}."],
}
INTROS = ["Once upon a time, there was a {who} named {name}.",
          "Once upon a time, there was a little {who} named {name}."]
PRON = {"girl": ("She", "her"), "boy": ("He", "his")}


def sentence_ends(text):
    """Offsets just past each sentence end (".", "!", "?", a closing quote)."""
    return [m.end() for m in re.finditer(r'[.!?]"?(?=\s)', text)] + [len(text)]


def cue_convo(story, rng, names, things_by_cat, p_name, p_thing, more=False, more_things=False):
    """(request, story, name, thing) with the name in the story's first
    sentence (an intro "Once upon a time, there was a girl named X." put in
    front where it is not) and the thing's first mention in the first or
    second sentence after "a"/"her"/... (a cue sentence of CUES put in
    after the first sentence where it is not), or None."""
    mc = rename(story, rng, names, p_name)
    if not mc:
        return None
    story, name, kind = mc
    wh = who(story)
    # not the character's own kind ("a little car named X"), and only a
    # thing the story uses as a noun (noun_uses: not "went to bed")
    ex = {m.group(1).lower() for m in re.finditer(r"(\w+)\s+named\s+%s\b" % re.escape(name), story)}
    ths = [t for t in chatdata.things(chatdata.opening(story, chatdata.EARLY), ex)
           if t[2] != "place" and noun_uses(story, t[0])]
    ths = ths or [t for t in chatdata.things(story, ex) if t[2] != "place" and noun_uses(story, t[0])]
    w, cat = (rng.choice(ths)[0::2] if ths else (None, rng.choice(("thing", "animal"))))
    if w is None or rng.random() < p_thing:
        pool = things_by_cat["animal"] if cat == "animal" else things_by_cat["thing"]
        for _ in range(8):
            new, _, new_pl = rng.choice(pool)
            if not re.search(r"\b%s\b" % re.escape(new), story, re.I):
                break
        else:
            return None
        if w:
            story = swap_thing(story, w, new, new_pl)
        w = new
    if not re.search(r"\b%s\b" % re.escape(name), story[:sentence_ends(story)[0]]):
        if story.startswith("Once upon a time"):
            return None
        intro = rng.choice(INTROS).format(who=kind or wh, name=name)
        story = intro + " " + story
    ends = sentence_ends(story)
    pat = r"\b(?:%s|%s)\b" % (re.escape(w), re.escape(plural(w)))
    m = re.search(pat, story, re.I)
    cued = m and m.start() < ends[min(1, len(ends) - 1)] and re.search(
        r"\b(?:a|an|the|her|his|their|its|my)\s+(?:(?:%s),?\s+){0,2}$" % "|".join(chatdata.ADJS),
        story[:m.start()])
    if not cued:
        pron, poss = PRON.get(wh, (name, "the"))
        ref = name if rng.random() < 0.5 else pron
        rest = story[ends[0]:].lstrip()
        cues = [c for c in CUES[cat] if not (c.startswith("One day") and rest.startswith("One day"))]
        cue = rng.choice(cues).format(Ref=ref, ref=ref if ref == name else ref.lower(),
                                      poss=poss, thing=w, athing=article(w))
        story = story[:ends[0]] + " " + cue + (" " + rest if rest else "")
    choices = [t for _, t in TRAIN_PHRASINGS] + [t for n, t in PHRASINGS if n == ""] \
        + (MORE_PHRASINGS if more else []) + (THING_PHRASINGS if more_things else [])
    req = rng.choice(choices).format(name=name, athing=article(w), who=kind or wh, thing=w,
                                     poss=PRON.get(wh, (None, "the"))[1])
    return req, story, name, w


def build(stories, rng, args, names, things_by_cat):
    docs = []
    for story0 in stories:
        for _ in range(args.per_story):
            if rng.random() < args.p_plain:
                docs.append(story0)
                continue
            if args.cue and rng.random() < args.cue:
                c = cue_convo(story0, rng, names, things_by_cat, args.p_name, args.p_thing,
                              args.more_phrasings, args.thing_phrasings)
            else:
                c = convo(story0, rng, names, things_by_cat, args.p_name, args.p_thing,
                          args.nouns_only)
            if not c:
                continue
            system = rng.choice(SYSTEMS) if rng.random() < 0.25 else None
            docs.append(render([(c[0], c[1])], system))
    rng.shuffle(docs)
    return docs


# ---- the held-out requests ---------------------------------------------------

def requests(args):
    rng = random.Random(args.seed)
    names = read_names(args.lists, args.set)
    things = read_things(args.lists, args.set)
    phr = VALID_PHRASINGS if args.set == "valid" else TEST_PHRASINGS
    # the check: no held-out name or thing is a training list's, or a word
    # of any training file (the conversations and stories trained on)
    train_names = set(read_names(args.lists, "train"))
    train_things = {t[0] for t in read_things(args.lists, "train")}
    bad = [n for n in names if n in train_names] + [t[0] for t in things if t[0] in train_things]
    seen = corpus_words(args.check)
    bad += [n for n in names if n.lower() in seen]
    bad += [t[0] for t in things if t[0] in seen or t[2] in seen]
    if bad:
        sys.exit(f"copydata.py: held-out words found in training: {' '.join(sorted(set(bad)))}")
    rng.shuffle(names)
    out = []
    for i in range(args.n):
        name = names[i % len(names)]
        w, _, _ = things[rng.randrange(len(things))]
        text = rng.choice(phr)
        req = text.format(name=name, athing=article(w), who=rng.choice(("girl", "boy", "kid")))
        system = rng.choice(SYSTEMS) if rng.random() < 0.25 else None
        out.append({"system": system, "request": req, "name": name, "thing": w})
    with open(args.out, "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o) + "\n")
    print(f"{len(out)} requests ({len(set(o['name'] for o in out))} names, "
          f"{len(set(o['thing'] for o in out))} things, checked against "
          f"{len(args.check)} training files) -> {args.out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    li = sub.add_parser("lists")
    li.add_argument("--seed", type=int, default=46)
    li.add_argument("listdir")
    li.add_argument("train", nargs="+", help="every story file the model was trained on")
    b = sub.add_parser("build")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--per-story", type=int, default=2)
    b.add_argument("--p-name", type=float, default=0.85)
    b.add_argument("--p-thing", type=float, default=0.7)
    b.add_argument("--p-plain", type=float, default=0.1)
    b.add_argument("--nouns-only", action="store_true",
                   help="swap a thing only where the story uses it as a noun (noun_uses)")
    b.add_argument("--cue", type=float, default=0.0, metavar="P",
                   help="with probability P the thing's first mention is put in a cue "
                        "sentence early in the story (cue_convo)")
    b.add_argument("--more-phrasings", action="store_true",
                   help="--cue requests also use MORE_PHRASINGS (the name followed by a verb)")
    b.add_argument("--thing-phrasings", action="store_true",
                   help="--cue requests also use THING_PHRASINGS (the thing's wording varied)")
    b.add_argument("--lists", default=LISTS)
    b.add_argument("out")
    b.add_argument("stories", nargs="+")
    r = sub.add_parser("requests")
    r.add_argument("--set", choices=("valid", "test"), required=True)
    r.add_argument("--seed", type=int, default=4600)
    r.add_argument("--n", type=int, default=320)
    r.add_argument("--lists", default=LISTS)
    r.add_argument("--check", nargs="*", default=[], help="training files")
    r.add_argument("out")
    args = ap.parse_args()
    if args.cmd == "lists":
        make_lists(args)
    elif args.cmd == "requests":
        requests(args)
    else:
        stories = []
        for p in args.stories:
            if "valid" in os.path.basename(p):
                sys.exit(f"copydata.py: refusing to build training data from {p}")
            # train-b's mis-decoded quotes ("\u00e2\u20ac\u0153") are left out
            stories += [s for s in read_stories(p) if "\u00e2\u20ac" not in s]
        names = read_names(args.lists, "train")
        by_cat = collections.defaultdict(list)
        for t in read_things(args.lists, "train"):
            by_cat["animal" if t[1] == "animal" else "thing"].append(t)
        docs = build(stories, random.Random(args.seed), args, names, by_cat)
        with open(args.out, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(d + EOT + "\n")
        print(f"{len(docs)} documents from {len(stories)} stories -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
