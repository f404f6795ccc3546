"""Multi-turn, multi-session chat workload with shared knowledge and checkable answers (SmartCache).

- A knowledge base of ``n_entities`` made-up entities (capitalised single words) x ``n_attrs``
  attributes, each value drawn from the attribute's small value set (``kb_seed``).
- Questions: explicit-entity ("what is the colour of Zorvan ?", several paraphrases per
  attribute) and pronoun follow-ups ("and its size ?"), which only the conversation context
  resolves. Two phrasings (``KBParams.phrasing``): ``templated`` (5 explicit and 4 follow-up forms,
  each attribute named by two words, one of them a made-up synonym such as "bigness") and
  ``natural`` (5 + 5 forms that vary the function words the way people reword a question, the
  attribute by its ordinary noun), fixed before their similarity was measured. The answer of a turn is the attribute's value for the entity in focus, so a cached
  answer can be checked: a false hit is a wrong answer.
- A session opens with an explicit question; each later turn is a follow-up on the entity in focus,
  or (``p_shift``) a topic shift: an explicit question about a new entity. Entities and attributes
  follow Zipf(``zipf``) popularity, so sessions repeat each other semantically while paraphrases
  make identical token prefixes rare.
- Sessions are interleaved (``concurrency`` open at a time, turns drawn from open sessions at
  random), as a server sees them.

Token format seen by the LM: ``<bos> Q w1 .. wn ? A value . Q ...`` (word-level vocabulary).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.core.errors import require

ATTRS = {  # attribute -> (words naming it in paraphrases, value set)
    "colour": (["colour", "color"], ["red", "blue", "green", "black", "white", "amber", "violet", "grey"]),
    "size": (["size", "bigness"], ["tiny", "small", "medium", "large", "huge", "vast", "minor", "giant"]),
    "home": (["home", "hometown"], ["paris", "rome", "oslo", "lima", "cairo", "tokyo", "quito", "delhi"]),
    "food": (["food", "meal"], ["rice", "bread", "fish", "beans", "figs", "corn", "soup", "nuts"]),
    "sport": (["sport", "game"], ["chess", "golf", "polo", "judo", "tennis", "rugby", "darts", "squash"]),
    "job": (["job", "work"], ["baker", "pilot", "nurse", "judge", "miner", "tailor", "poet", "smith"]),
}
EXPLICIT = ["what is the {a} of {e} ?", "tell me the {a} of {e} ?", "which {a} does {e} have ?",
            "do you know the {a} of {e} ?", "{e} has what {a} ?"]
FOLLOWUP = ["and its {a} ?", "what about its {a} ?", "what is its {a} ?", "its {a} ?"]


@dataclass(frozen=True)
class Phrasing:
    """How users word a question: explicit and follow-up templates, and how many of an attribute's
    words (``ATTRS[a][0]``, the ordinary noun first) they use."""
    explicit: tuple
    followup: tuple
    n_words: int

    def words(self, attr: str) -> list[str]:
        return ATTRS[attr][0][:self.n_words]


PHRASINGS = {
    "templated": Phrasing(tuple(EXPLICIT), tuple(FOLLOWUP), 2),
    "natural": Phrasing(("what is the {a} of {e} ?", "what is {e} 's {a} ?", "can you tell me the {a} of {e} ?",
                         "do you know the {a} of {e} ?", "what {a} does {e} have ?"),
                        ("what is its {a} ?", "and what is its {a} ?", "what about its {a} ?", "and its {a} ?",
                         "what {a} does it have ?"), 1),
}
SYLL = ["zor", "van", "mek", "la", "tir", "bo", "qua", "sel", "drin", "ko", "pax", "ul", "fen", "ri", "gol",
        "tha", "mu", "xen", "or", "vi", "lum", "ba", "kir", "es"]
SPECIAL = ["<pad>", "<bos>", "Q", "A", "?", "."]


@dataclass(frozen=True)
class KBParams:
    n_entities: int = 40
    n_attrs: int = 4
    kb_seed: int = 0
    phrasing: str = "templated"        # a PHRASINGS key: how the workload's users word their questions

    def check(self):
        require(2 <= self.n_entities <= 200, "n_entities", self.n_entities, "an integer in [2, 200]")
        require(1 <= self.n_attrs <= len(ATTRS), "n_attrs", self.n_attrs, f"an integer in [1, {len(ATTRS)}]")
        require(self.phrasing in PHRASINGS, "phrasing", self.phrasing, f"one of {sorted(PHRASINGS)}")


@dataclass
class KB:
    entities: list[str]
    attrs: list[str]
    values: dict          # (entity, attr) -> value word
    phrasing: Phrasing = PHRASINGS["templated"]

    @property
    def vocab(self) -> list[str]:
        words = set()
        for t in self.phrasing.explicit + self.phrasing.followup:
            words.update(w for w in t.split() if "{" not in w)
        for a in self.attrs:
            words.update(self.phrasing.words(a))
            words.update(ATTRS[a][1])
        return SPECIAL + sorted(words - set(SPECIAL)) + self.entities


def make_kb(p: KBParams) -> KB:
    """Entities with unique made-up names and their attribute values (deterministic in ``kb_seed``)."""
    rng = np.random.default_rng(p.kb_seed)
    names: list[str] = []
    while len(names) < p.n_entities:
        n = "".join(SYLL[i] for i in rng.integers(0, len(SYLL), 2)).capitalize()
        if n not in names:
            names.append(n)
    attrs = list(ATTRS)[:p.n_attrs]
    values = {(e, a): ATTRS[a][1][int(rng.integers(0, len(ATTRS[a][1])))] for e in names for a in attrs}
    return KB(names, attrs, values, PHRASINGS[p.phrasing])


def explicit_q(kb: KB, e: str, a: str, t: int, w: int) -> str:
    return kb.phrasing.explicit[t].format(a=kb.phrasing.words(a)[w], e=e)


def followup_q(kb: KB, a: str, t: int, w: int) -> str:
    return kb.phrasing.followup[t].format(a=kb.phrasing.words(a)[w])


def query_meanings(kb: KB) -> dict[str, tuple]:
    """Every query text the generator can produce -> what it asks: ``(entity, attr)`` for an explicit
    question, ``(None, attr)`` for a follow-up (its entity is the conversation's)."""
    out = {}
    for a in kb.attrs:
        for w in range(len(kb.phrasing.words(a))):
            out.update({followup_q(kb, a, t, w): (None, a) for t in range(len(kb.phrasing.followup))})
            out.update({explicit_q(kb, e, a, t, w): (e, a) for e in kb.entities for t in range(len(kb.phrasing.explicit))})
    return out


def all_queries(kb: KB) -> list[str]:
    """Every query text the generator can produce (embedded once, in prepare)."""
    return sorted(query_meanings(kb))


@dataclass(frozen=True)
class Turn:
    session: int
    index: int            # turn number in its session
    query: str
    entity: str           # entity in focus (ground truth)
    attr: str
    answer: str
    shift: bool           # explicit question about a new entity after turn 0 (a topic shift)


@dataclass(frozen=True)
class WorkloadParams:
    n_sessions: int = 600
    min_turns: int = 4
    max_turns: int = 8
    p_shift: float = 0.12
    zipf: float = 1.1
    concurrency: int = 16

    def check(self):
        require(1 <= self.n_sessions <= 100_000, "n_sessions", self.n_sessions, "an integer in [1, 100000]")
        require(1 <= self.min_turns <= self.max_turns <= 16, "max_turns", self.max_turns,
                f"an integer in [min_turns={self.min_turns}, 16]")
        require(0 <= self.p_shift <= 1, "p_shift", self.p_shift, "a probability in [0, 1]")
        require(self.zipf >= 0, "zipf", self.zipf, "a non-negative Zipf exponent")
        require(1 <= self.concurrency <= 1024, "concurrency", self.concurrency, "an integer in [1, 1024]")


def _zipf(n: int, s: float, rng) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return rng.permutation(w / w.sum())


def session_turns(kb: KB, sid: int, n: int, p: WorkloadParams, pe, pa, rng) -> list[Turn]:
    """One conversation of ``n`` turns (see the module docstring)."""
    out, ent, asked = [], None, set()
    for i in range(n):
        shift = i > 0 and rng.random() < p.p_shift
        if ent is None or shift:
            ent = kb.entities[int(rng.choice(len(kb.entities), p=pe))]
            asked = set()
        free = [j for j, a in enumerate(kb.attrs) if a not in asked] or list(range(len(kb.attrs)))
        pf = pa[free] / pa[free].sum()
        a = kb.attrs[free[int(rng.choice(len(free), p=pf))]]
        asked.add(a)
        w = int(rng.integers(0, len(kb.phrasing.words(a))))
        if i == 0 or shift:
            q = explicit_q(kb, ent, a, int(rng.integers(0, len(kb.phrasing.explicit))), w)
        else:
            q = followup_q(kb, a, int(rng.integers(0, len(kb.phrasing.followup))), w)
        out.append(Turn(sid, i, q, ent, a, kb.values[(ent, a)], shift))
    return out


def make_workload(kb: KB, p: WorkloadParams, seed: int) -> list[Turn]:
    """Sessions interleaved as a server sees them: ``concurrency`` open, a random open one speaks next."""
    rng = np.random.default_rng(seed)
    pe, pa = _zipf(len(kb.entities), p.zipf, rng), _zipf(len(kb.attrs), p.zipf, rng)
    pending = [session_turns(kb, s, int(rng.integers(p.min_turns, p.max_turns + 1)), p, pe, pa, rng)
               for s in range(p.n_sessions)]
    open_: list[list[Turn]] = []
    out: list[Turn] = []
    nxt = 0
    while nxt < len(pending) or open_:
        while len(open_) < p.concurrency and nxt < len(pending):
            open_.append(list(pending[nxt]))
            nxt += 1
        j = int(rng.integers(0, len(open_)))
        out.append(open_[j].pop(0))
        if not open_[j]:
            open_.pop(j)
    return out


class Tokenizer:
    """Word-level ids over the KB's vocabulary; unknown words are a ValueError naming them."""

    def __init__(self, vocab: list[str]):
        self.vocab = list(vocab)
        self.ids = {w: i for i, w in enumerate(self.vocab)}
        self.bos, self.q, self.a, self.dot = (self.ids[w] for w in ("<bos>", "Q", "A", "."))

    def encode(self, text: str) -> list[int]:
        bad = [w for w in text.split() if w not in self.ids]
        if bad:
            raise ValueError(f"query: words {bad[:5]} are not in the model's vocabulary")
        return [self.ids[w] for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)

    def query_tokens(self, query: str) -> list[int]:
        return [self.q] + self.encode(query) + [self.a]

    def turn_tokens(self, query: str, answer: str) -> list[int]:
        return self.query_tokens(query) + self.encode(answer) + [self.dot]


def training_dialogues(kb: KB, n: int, max_turns: int, p_shift: float, seed: int) -> list[list[Turn]]:
    """Conversations for training the LM (uniform popularity: every fact is seen)."""
    rng = np.random.default_rng(seed + 10_000)
    p = WorkloadParams(n_sessions=n, min_turns=1, max_turns=max_turns, p_shift=p_shift)
    pe, pa = np.full(len(kb.entities), 1 / len(kb.entities)), np.full(len(kb.attrs), 1 / len(kb.attrs))
    return [session_turns(kb, s, int(rng.integers(1, max_turns + 1)), p, pe, pa, rng) for s in range(n)]
