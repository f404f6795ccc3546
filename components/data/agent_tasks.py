"""An agent workload with checkable outcomes: questions over small financial tables, answered by
executing a plan of tool calls (Agentic Plan Caching's test bed, sheet plan_cache.md).

World: ``n_companies`` companies x 5 years x 12 line items of random integers (seeded). 20 task
intents, each with a keyword (its intent, 1-3 words), three descriptions and a slot pattern; a
question is one of three frames of its slot pattern around one description, with entities drawn
uniformly (so 9 phrasings per intent). Each intent has one canonical plan template in a tiny
word-level DSL, steps separated by ``;``, results named ``r1, r2, ...``::

    lookup <C> <Y1> current_assets ; lookup <C> <Y1> current_liabilities ; div r1 r2

Slots are named by order of first appearance *in the question* (``<C>``, ``<C2>``, ``<Y1>``,
``<Y2>``, ``<I>`` for a line item named in the question), which is also how
:func:`components.serving.plan_cache.cache.induce_template` abstracts a concrete plan. Tools
(``lookup add sub div growth argmax_year argmin_year``) are deterministic Python; executing the
canonical plan gives the ground-truth answer, so a wrong plan is a wrong answer.

The request stream draws intents Zipf(``zipf_a``) (rank order shuffled by the seed) and entities
uniformly: high plan reuse, little answer reuse. Everything is word-level; :data:`VOCAB` is the
closed vocabulary of every question, keyword, template and plan (ids via :func:`encode`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from components.core.errors import require
from components.core.registry import prepare_step

COMPANIES = ("acme globex initech umbrella hooli vandelay stark wayne wonka cyberdyne tyrell soylent "
             "oscorp gringotts monarch duff krusty sirius virtucon nakatomi aperture massive blackmesa "
             "contoso fabrikam northwind tailspin litware adatum proseware wingtip fourth lucerne "
             "margie alpine coho datum humongous southridge trey").split()
YEARS = ("2019", "2020", "2021", "2022", "2023")
#: line item token -> how a question names it
ITEMS = {"revenue": "revenue", "net_income": "net income", "operating_income": "operating income",
         "total_assets": "total assets", "total_liabilities": "total liabilities",
         "current_assets": "current assets", "current_liabilities": "current liabilities", "cash": "cash",
         "inventory": "inventory", "equity": "equity", "debt": "debt", "capex": "capital expenditure"}
ITEM_NAMES = tuple(ITEMS)

#: slot pattern -> three question frames ({d}: the intent's description)
FRAMES = {
    "cy": ("what is the {d} of {C} in {Y1} ?", "compute the {d} for {C} , fiscal {Y1}",
           "{C} {Y1} : report the {d}"),
    "cyy": ("what is the {d} of {C} from {Y1} to {Y2} ?", "compute the {d} for {C} between {Y1} and {Y2}",
            "{C} , {Y1} versus {Y2} : the {d}"),
    "c": ("in which year did {C} have the {d} ?", "find the year of the {d} for {C}",
          "{C} : which year shows the {d}"),
    "ccy": ("what is the {d} between {C} and {C2} in {Y1} ?", "compute the {d} of {C} against {C2} for {Y1}",
            "{C} versus {C2} , {Y1} : the {d}"),
    "cyi": ("what was the {d} {I} of {C} in {Y1} ?", "look up the {d} {I} for {C} , fiscal {Y1}",
            "{C} {Y1} : fetch the {d} {I}"),
}


@dataclass(frozen=True)
class Intent:
    keyword: str               # the intent's key (what the small LM extracts)
    pattern: str               # a key of FRAMES
    descs: tuple[str, str, str]
    template: str              # canonical plan template


def _L(c, y, item):
    return f"lookup {c} {y} {item}"


INTENTS = (
    Intent("current ratio", "cy", ("current ratio", "liquidity ratio", "short term solvency ratio"),
           f"{_L('<C>', '<Y1>', 'current_assets')} ; {_L('<C>', '<Y1>', 'current_liabilities')} ; div r1 r2"),
    Intent("leverage", "cy", ("gearing ratio", "leverage ratio", "gearing"),
           f"{_L('<C>', '<Y1>', 'debt')} ; {_L('<C>', '<Y1>', 'equity')} ; div r1 r2"),
    Intent("net margin", "cy", ("net margin", "net profit margin", "bottom line margin"),
           f"{_L('<C>', '<Y1>', 'net_income')} ; {_L('<C>', '<Y1>', 'revenue')} ; div r1 r2"),
    Intent("operating margin", "cy", ("operating margin", "operating profit margin", "ebit margin"),
           f"{_L('<C>', '<Y1>', 'operating_income')} ; {_L('<C>', '<Y1>', 'revenue')} ; div r1 r2"),
    Intent("revenue growth", "cyy", ("top line growth", "sales growth rate", "turnover growth"),
           f"{_L('<C>', '<Y1>', 'revenue')} ; {_L('<C>', '<Y2>', 'revenue')} ; growth r1 r2"),
    Intent("income growth", "cyy", ("profit growth rate", "earnings growth", "bottom line growth"),
           f"{_L('<C>', '<Y1>', 'net_income')} ; {_L('<C>', '<Y2>', 'net_income')} ; growth r1 r2"),
    Intent("cash change", "cyy", ("treasury change", "liquid funds movement", "treasury balance shift"),
           f"{_L('<C>', '<Y2>', 'cash')} ; {_L('<C>', '<Y1>', 'cash')} ; sub r1 r2"),
    Intent("working capital", "cy", ("working capital", "net working capital", "liquidity buffer"),
           f"{_L('<C>', '<Y1>', 'current_assets')} ; {_L('<C>', '<Y1>', 'current_liabilities')} ; sub r1 r2"),
    Intent("net debt", "cy", ("net borrowings", "borrowings net of liquid funds", "net leverage position"),
           f"{_L('<C>', '<Y1>', 'debt')} ; {_L('<C>', '<Y1>', 'cash')} ; sub r1 r2"),
    Intent("asset turnover", "cy", ("asset turnover", "asset efficiency ratio", "sales to assets ratio"),
           f"{_L('<C>', '<Y1>', 'revenue')} ; {_L('<C>', '<Y1>', 'total_assets')} ; div r1 r2"),
    Intent("return on equity", "cy", ("roe", "shareholder return ratio", "return to owners"),
           f"{_L('<C>', '<Y1>', 'net_income')} ; {_L('<C>', '<Y1>', 'equity')} ; div r1 r2"),
    Intent("return on assets", "cy", ("return on assets", "roa", "asset return ratio"),
           f"{_L('<C>', '<Y1>', 'net_income')} ; {_L('<C>', '<Y1>', 'total_assets')} ; div r1 r2"),
    Intent("best revenue year", "c", ("peak sales", "strongest top line", "best sales"),
           "argmax_year <C> revenue"),
    Intent("worst income year", "c", ("weakest profit", "worst earnings", "lowest profit"),
           "argmin_year <C> net_income"),
    Intent("revenue gap", "ccy", ("sales difference", "top line gap", "sales gap"),
           f"{_L('<C>', '<Y1>', 'revenue')} ; {_L('<C2>', '<Y1>', 'revenue')} ; sub r1 r2"),
    Intent("capex intensity", "cy", ("capex intensity", "investment intensity", "capex to sales ratio"),
           f"{_L('<C>', '<Y1>', 'capex')} ; {_L('<C>', '<Y1>', 'revenue')} ; div r1 r2"),
    Intent("inventory share", "cy", ("stock share of current holdings", "stock weight", "stockholding share"),
           f"{_L('<C>', '<Y1>', 'inventory')} ; {_L('<C>', '<Y1>', 'current_assets')} ; div r1 r2"),
    Intent("combined revenue", "cyy", ("combined sales", "total sales over both years", "two year sales sum"),
           f"{_L('<C>', '<Y1>', 'revenue')} ; {_L('<C>', '<Y2>', 'revenue')} ; add r1 r2"),
    Intent("margin change", "cyy", ("net margin change", "change in net margin", "margin shift"),
           f"{_L('<C>', '<Y1>', 'net_income')} ; {_L('<C>', '<Y1>', 'revenue')} ; div r1 r2 ; "
           f"{_L('<C>', '<Y2>', 'net_income')} ; {_L('<C>', '<Y2>', 'revenue')} ; div r4 r5 ; sub r6 r3"),
    Intent("item lookup", "cyi", ("reported", "recorded", "stated"), "lookup <C> <Y1> <I>"),
)
KEYWORDS = tuple(i.keyword for i in INTENTS)
SLOTS = ("<C>", "<C2>", "<Y1>", "<Y2>", "<I>")
OPS = ("lookup", "add", "sub", "div", "growth", "argmax_year", "argmin_year")
RESULTS = tuple(f"r{i}" for i in range(1, 9))
#: special tokens: pad, begin, the three task markers (keyword, template, plan), end
PAD, BOS, KW, TPL, PLAN, EOS = "<pad>", "<bos>", "<kw>", "<tpl>", "<plan>", "<eos>"


def _vocab() -> tuple[str, ...]:
    words: list[str] = [PAD, BOS, KW, TPL, PLAN, EOS, *SLOTS, *OPS, *RESULTS, ";", *COMPANIES, *YEARS, *ITEM_NAMES]
    texts = [f for fs in FRAMES.values() for f in fs] + list(ITEMS.values()) + list(KEYWORDS)
    texts += [d for i in INTENTS for d in i.descs]
    for t in texts:
        words += [w for w in t.split() if not w.startswith("{")]
    out, seen = [], set()
    for w in words:
        if w not in seen:
            seen.add(w)
            out.append(w)
    return tuple(out)


VOCAB = _vocab()
IDS = {w: i for i, w in enumerate(VOCAB)}
PAD_ID, EOS_ID = IDS[PAD], IDS[EOS]


def encode(text: str) -> list[int]:
    """Word ids of a whitespace-separated text (every word must be in :data:`VOCAB`)."""
    try:
        return [IDS[w] for w in text.split()]
    except KeyError as e:
        raise ValueError(f"word {e.args[0]!r} is not in the agent-task vocabulary") from None


def decode(ids) -> str:
    return " ".join(VOCAB[i] for i in ids if 0 <= i < len(VOCAB) and i not in (PAD_ID, EOS_ID))


def in_vocab(text: str) -> bool:
    return all(w in IDS for w in text.split())


# ------------------------------------------------------------------------------ tasks
@dataclass(frozen=True)
class Task:
    question: str
    intent: int
    slots: dict                # slot -> literal, e.g. {"<C>": "acme", "<Y1>": "2021"}

    @property
    def keyword(self) -> str:
        return INTENTS[self.intent].keyword

    @property
    def plan(self) -> str:
        """The canonical concrete plan (the ground truth's plan)."""
        return fill(INTENTS[self.intent].template, self.slots)


def fill(template: str, slots: dict) -> str:
    return " ".join(slots.get(w, w) for w in template.split())


def sample_task(rng: np.random.Generator, intent: int, n_companies: int = len(COMPANIES)) -> Task:
    """One question of ``intent``: a random frame and description, entities uniform."""
    it = INTENTS[intent]
    comps = rng.choice(n_companies, size=2, replace=False)
    ys = np.sort(rng.choice(len(YEARS), size=2, replace=False))
    values = {"C": COMPANIES[comps[0]], "C2": COMPANIES[comps[1]], "Y1": YEARS[ys[0]], "Y2": YEARS[ys[1]],
              "I": ITEMS[ITEM_NAMES[int(rng.integers(len(ITEM_NAMES)))]]}
    frame = FRAMES[it.pattern][int(rng.integers(3))]
    q = frame.format(d=it.descs[int(rng.integers(3))], **values)
    slots = {f"<{k}>": v for k, v in values.items() if "{" + k + "}" in frame}
    if "<I>" in slots:
        slots["<I>"] = next(k for k, v in ITEMS.items() if v == values["I"])
    return Task(q, intent, slots)


def make_tables(n_companies: int, seed: int) -> dict:
    """company -> year -> item -> integer value in [10, 999] (positive: every ratio is defined)."""
    rng = np.random.default_rng(seed)
    vals = rng.integers(10, 1000, size=(n_companies, len(YEARS), len(ITEM_NAMES)))
    return {c: {y: {it: int(vals[i, j, k]) for k, it in enumerate(ITEM_NAMES)} for j, y in enumerate(YEARS)}
            for i, c in enumerate(COMPANIES[:n_companies])}


# ------------------------------------------------------------------------------ tools
class PlanError(ValueError):
    """A plan that does not parse or whose tool call fails (a wrong answer, never a crash)."""


def execute(plan: str, tables: dict) -> float:
    """Run ``plan`` with the deterministic tools; the last step's result is the answer."""
    results: list[float] = []

    def ref(tok: str) -> float:
        if tok not in RESULTS or int(tok[1:]) > len(results):
            raise PlanError(f"bad reference {tok!r}")
        return results[int(tok[1:]) - 1]

    steps = [s.split() for s in plan.split(";")]
    if not steps or any(not s for s in steps):
        raise PlanError("empty step")
    for s in steps:
        op, args = s[0], s[1:]
        try:
            if op == "lookup" and len(args) == 3:
                v = float(tables[args[0]][args[1]][args[2]])
            elif op in ("argmax_year", "argmin_year") and len(args) == 2:
                row = {y: tables[args[0]][y][args[1]] for y in YEARS}
                v = float((max if op == "argmax_year" else min)(row, key=lambda y: (row[y], y)))
            elif op in ("add", "sub", "div", "growth") and len(args) == 2:
                a, b = ref(args[0]), ref(args[1])
                v = {"add": a + b, "sub": a - b, "div": a / b if b else math.nan,
                     "growth": (b - a) / a if a else math.nan}[op]
            else:
                raise PlanError(f"bad step {' '.join(s)!r}")
        except KeyError as e:
            raise PlanError(f"unknown entity {e.args[0]!r}") from None
        results.append(v)
    return results[-1]


def answer_of(plan: str, tables: dict) -> float | None:
    """The plan's answer, or None when it does not execute."""
    try:
        v = execute(plan, tables)
    except PlanError:
        return None
    return None if math.isnan(v) else v


def same_answer(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= 1e-9 * max(1.0, abs(b))


# ------------------------------------------------------------------------------ prepare step
@dataclass
class AgentTaskParams:
    n_requests: int = 2000
    n_companies: int = 40
    zipf_a: float = 1.0            # intent popularity: P(rank k) ~ k^-a (0: uniform)

    def check(self):
        require(1 <= self.n_requests <= 100_000, "n_requests", self.n_requests, "an integer in [1, 100000]")
        require(2 <= self.n_companies <= len(COMPANIES), "n_companies", self.n_companies,
                f"an integer in [2, {len(COMPANIES)}]")
        require(0 <= self.zipf_a <= 4, "zipf_a", self.zipf_a, "an exponent in [0, 4]")


def make_workload(p: AgentTaskParams, seed: int) -> dict:
    """Tables and a request stream (questions, intents, slots, canonical plans, true answers)."""
    p.check()
    rng = np.random.default_rng([seed, 1])
    tables = make_tables(p.n_companies, seed)
    order = rng.permutation(len(INTENTS))                 # which intent is the most popular
    w = 1.0 / np.arange(1, len(INTENTS) + 1) ** p.zipf_a
    intents = order[rng.choice(len(INTENTS), size=p.n_requests, p=w / w.sum())]
    tasks = [sample_task(rng, int(i), p.n_companies) for i in intents]
    return {"tables": tables, "questions": [t.question for t in tasks], "intents": [t.intent for t in tasks],
            "slots": [t.slots for t in tasks], "plans": [t.plan for t in tasks],
            "answers": [answer_of(t.plan, tables) for t in tasks], "seed": seed}


def tasks_of(workload: dict) -> list[Task]:
    return [Task(q, i, s) for q, i, s in zip(workload["questions"], workload["intents"], workload["slots"])]


@prepare_step("agent_tasks", params=AgentTaskParams, seeded=True,
              summary="Agent workload: tool plans over seeded financial tables, 20 intents (Zipf), "
                      "questions with canonical plans and true answers.")
def prepare_agent_tasks(p: AgentTaskParams, ctx) -> dict:
    return make_workload(p, ctx.seed)
