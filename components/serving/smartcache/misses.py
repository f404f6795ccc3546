"""Where a semantic forest's misses come from, and whether the embedding recognises the workload's
repeats at the forest's threshold (issue 32 item 7: the premise behind SmartCache's hit rate).

- :func:`paraphrase_recall`: over pairs of distinct query texts that ask the same thing
  (:func:`~components.data.conversations.query_meanings`), the share whose cosine reaches ``tau``,
  for explicit questions and pronoun follow-ups apart; and the highest cosine between texts that ask
  different things but which the entity guard cannot tell apart (the same capitalised words), overall
  and per kind. A semantic cache presumes the first near 1 and the second below ``tau``; the paper's
  data (CoQA, SQuAD: natural text) is where it was shown. Whether any one threshold can do both for a
  kind reads off two of these figures: ``paraphrase_sim_p10_{kind}`` (the threshold at which 90% of its
  same-meaning pairs match) above ``cross_meaning_max_{kind}`` (where a different-meaning pair starts
  to match); ``paraphrase_recall_separable_{kind}`` is the recall at the lowest threshold that still
  keeps every different-meaning pair of the kind apart.
- :class:`MissLedger`: each turn of a forest cache, by the conversation path it asks (the
  ``(entity, attribute)`` pairs since its session's last topic start, ground truth):
  ``cold``: no earlier turn asked this path, so no cache could hit; ``paraphrase``: an entry for the
  path sat in the scope the lookup searched, and the query scored below ``tau`` (or the guard refused
  it); ``detect``: the shift detector chose the wrong scope; ``branch``: the path was asked before but
  lives elsewhere, split off by an earlier paraphrase miss upstream (or evicted).
  ``hit_ceiling`` = 1 - cold: what a cache that matches meanings exactly would hit (unbounded, with
  perfect detection).
"""
from __future__ import annotations

import numpy as np

from components.data.conversations import KB, Turn, query_meanings
from components.serving.smartcache.forest import Forest, entities


def paraphrase_recall(kb: KB, emb: dict, tau: float) -> dict:
    """``paraphrase_recall_explicit`` / ``_followup``: same-meaning pairs at cosine >= tau;
    ``paraphrase_sim_p10_*``: their 10th-percentile cosine; ``cross_meaning_max``: the highest cosine
    of a different-meaning pair with the same entities (what only the threshold can separate), and
    ``cross_meaning_max_*`` per kind; ``paraphrase_recall_separable_*``: same-meaning pairs scoring
    above the kind's ``cross_meaning_max_*`` (the best recall of a threshold with no cross-meaning match)."""
    meanings = query_meanings(kb)
    groups: dict[frozenset, list[str]] = {}
    for text in meanings:
        groups.setdefault(entities(text), []).append(text)
    same = {"explicit": [], "followup": []}
    cross = {"explicit": -1.0, "followup": -1.0}
    for texts in groups.values():
        e = np.stack([emb[t] for t in texts])
        sim = e @ e.T
        m = [meanings[t] for t in texts]
        iu = np.triu_indices(len(texts), 1)
        alike = np.array([m[i] == m[j] for i, j in zip(*iu)], bool)
        s = sim[iu]
        kind = "followup" if m[0][0] is None else "explicit"
        same[kind] += s[alike].tolist()
        if (~alike).any():
            cross[kind] = max(cross[kind], float(s[~alike].max()))
    out = {"cross_meaning_max": max(cross.values())}
    for kind, s in same.items():
        if s:
            a = np.asarray(s)
            out[f"paraphrase_recall_{kind}"] = float((a >= tau).mean())
            out[f"paraphrase_sim_p10_{kind}"] = float(np.quantile(a, 0.1))
            out[f"cross_meaning_max_{kind}"] = cross[kind]
            out[f"paraphrase_recall_separable_{kind}"] = float((a > cross[kind]).mean())
    return out


class MissLedger:
    """Classifies a forest cache's turns (see the module docstring); feed it every turn in order."""

    KINDS = ("cold", "paraphrase", "detect", "branch")

    def __init__(self, forest: Forest):
        self.forest = forest
        self.path: dict[int, tuple] = {}            # session -> path asked so far
        self.seen: set[tuple] = set()
        self.nodes_of: dict[tuple, list[int]] = {}  # path -> keys of the nodes created for it
        self.counts = dict.fromkeys(("hit",) + self.KINDS, 0)
        self.sims: list[float] = []                 # paraphrase misses: best cosine to a same-path entry

    def record(self, t: Turn, out, e: np.ndarray) -> None:
        start = t.index == 0 or t.shift
        p = (() if start else self.path.get(t.session, ())) + ((t.entity, t.attr),)
        self.path[t.session] = p
        if out.hit:
            self.counts["hit"] += 1
        elif p not in self.seen:
            self.counts["cold"] += 1
        elif out.shift_pred is not None and out.shift_pred != t.shift:
            self.counts["detect"] += 1
        else:
            here = [self.forest.nodes[k] for k in self.nodes_of.get(p, ()) if k in self.forest.nodes]
            here = [n for n in here if (n.parent.key if n.parent is not None else -1) == out.scope]
            if here:
                self.counts["paraphrase"] += 1
                self.sims.append(max(float(n.emb @ e) for n in here))
            else:
                self.counts["branch"] += 1
        if not out.hit and out.node >= 0:
            self.nodes_of.setdefault(p, []).append(out.node)
        self.seen.add(p)

    def metrics(self) -> dict:
        n = max(sum(self.counts.values()), 1)
        out = {f"miss_{k}": self.counts[k] / n for k in self.KINDS}
        out["hit_ceiling"] = 1 - self.counts["cold"] / n
        out["paraphrase_miss_sim"] = float(np.mean(self.sims)) if self.sims else float("nan")
        return out
