"""Prepare step ``smartcache_lm``: the tiny word-level GPT trained on generated dialogues over the
knowledge base (loss on answer tokens), so it answers explicit questions from memory and pronoun
follow-ups by attending to the history. Kept apart from the technique so edits there keep the cache."""
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.registry import prepare_step
from components.data.conversations import PHRASINGS, KBParams, Phrasing, Tokenizer, make_kb, training_dialogues
from components.models.gpt import GPT, GPTConfig


@dataclass
class LMParams:
    kb: dict = field(default_factory=dict)            # KBParams keys
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    context: int = 96
    steps: int = 1500
    batch: int = 64
    lr: float = 3e-3
    max_turns: int = 8
    p_shift: float = 0.25          # more shifts than the workload: the model must learn to find the latest entity
    n_eval: int = 300
    seed: int = 0

    def check(self):
        KBParams(**self.kb).check()
        require(self.steps >= 1, "steps", self.steps, "a positive integer")
        require(self.batch >= 1, "batch", self.batch, "a positive integer")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")
        require(1 <= self.max_turns <= 16, "max_turns", self.max_turns, "an integer in [1, 16]")
        per_turn = turn_tokens_max(PHRASINGS[KBParams(**self.kb).phrasing])
        require(self.context >= per_turn * self.max_turns + 2, "context", self.context,
                f"at least {per_turn} * max_turns + 2 = {per_turn * self.max_turns + 2} tokens "
                f"(the longest turn of its phrasing is {per_turn} tokens)")


def turn_tokens_max(phrasing: Phrasing) -> int:
    """The longest turn's tokens: ``Q``, the longest question, ``A``, the value and ``.``."""
    return max(len(t.split()) for t in phrasing.explicit + phrasing.followup) + 4


def dialogue_tokens(tok: Tokenizer, turns) -> tuple[list[int], list[int]]:
    """Ids of ``<bos>`` + every turn, and a 0/1 mask of the answer tokens (value and '.')."""
    ids, mask = [tok.bos], [0]
    for t in turns:
        q = tok.query_tokens(t.query)
        a = tok.encode(t.answer) + [tok.dot]
        ids += q + a
        mask += [0] * len(q) + [1] * len(a)
    return ids, mask


def _batch(seqs, rng, batch: int, context: int):
    pick = rng.integers(0, len(seqs), batch)
    context = min(context, max(len(seqs[i][0]) - 1 for i in pick))     # pad to the batch's longest
    x = np.zeros((batch, context), np.int64)
    y = np.zeros((batch, context), np.int64)
    m = np.zeros((batch, context), np.float32)
    for r, i in enumerate(pick):
        ids, mask = seqs[i]
        n = min(len(ids) - 1, context)
        x[r, :n] = ids[:n]
        y[r, :n] = ids[1:n + 1]
        m[r, :n] = mask[1:n + 1]
    return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(m)


@torch.no_grad()
def answer_accuracy(model: GPT, tok: Tokenizer, dialogues) -> float:
    """Greedy answers of every turn given the dialogue's true history: exact-match rate."""
    model.eval()
    ok = n = 0
    for turns in dialogues:
        hist = [tok.bos]
        for t in turns:
            prompt = hist + tok.query_tokens(t.query)
            out = model.generate(prompt, 2, stop={tok.dot})
            ok += tok.decode([o for o in out if o != tok.dot]) == t.answer
            n += 1
            hist = prompt + tok.encode(t.answer) + [tok.dot]
    return ok / max(n, 1)


@prepare_step("smartcache_lm", params=LMParams, seeded=False,
              summary="Tiny word-level GPT trained on generated multi-turn dialogues over the SmartCache knowledge "
                      "base (answers explicit and pronoun follow-up questions); held-out exact match recorded.")
def prepare_lm(p: LMParams, ctx) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(p.seed)
    kb = make_kb(KBParams(**p.kb))
    tok = Tokenizer(kb.vocab)
    cfg = GPTConfig(vocab_size=len(tok.vocab), n_layer=p.n_layer, n_head=p.n_head, d_model=p.d_model,
                    context=p.context)
    model = GPT(cfg)
    seqs = [dialogue_tokens(tok, d) for d in training_dialogues(kb, 20_000, p.max_turns, p.p_shift, p.seed)]
    rng = np.random.default_rng(p.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=p.lr, total_steps=p.steps, pct_start=0.1)
    losses = []
    model.train()
    for step in range(p.steps):
        x, y, m = _batch(seqs, rng, p.batch, p.context)
        _, loss = model(x, y, loss_mask=m)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0:
            ctx.progress(step + 1, p.steps, loss=losses[-1])
    held = training_dialogues(kb, p.n_eval, p.max_turns, 0.12, p.seed + 1)
    acc = answer_accuracy(model, tok, held)
    acc_first = answer_accuracy(model, tok, [d[:1] for d in held])
    model.eval()
    return {"state": {k: v.clone() for k, v in model.state_dict().items()}, "config": cfg.to_dict(),
            "kb": asdict(KBParams(**p.kb)), "heldout_accuracy": acc, "heldout_first_turn_accuracy": acc_first, "final_loss": float(np.mean(losses[-50:])),
            "n_params": model.num_params(non_embedding=False)}


def load_lm(prep: dict) -> GPT:
    model = GPT(GPTConfig(**prep["config"]))
    model.load_state_dict(prep["state"])
    return model.eval()
