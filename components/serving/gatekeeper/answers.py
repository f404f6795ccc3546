"""Greedy chains of thought of a reasoning GPT on held-out problems, and their confidence: what the LM
cascade reads of each model (components/serving/gatekeeper/lm.py). Apart from the technique so that the
prepare step ``cascade_large_answers`` (the base model's answers, shared by every variant and seed) hashes
only this code and the model readers."""
from __future__ import annotations

import numpy as np
import torch

from components.core.errors import require
from components.data import reasoning as R


@torch.no_grad()
def greedy_answers(model, problems: list, chunk: int = 256) -> dict[str, np.ndarray]:
    """Batched greedy chains of thought (full recompute per token; prompts of one level share a
    length). Returns correctness, mean/min token max-prob, generated and prompt token counts."""
    ctxlen = model.cfg.context
    ok, cmean, cmin, ngen, nprompt = [], [], [], [], []
    for s in range(0, len(problems), chunk):
        part = problems[s:s + chunk]
        prompts = [R.encode(p.text) for p in part]
        require(len({len(q) for q in prompts}) == 1, "problems", "mixed prompt lengths", "problems of one level")
        ids = torch.tensor(prompts)
        B, T0 = ids.shape
        done = torch.zeros(B, dtype=torch.bool)
        maxp = torch.zeros(B, ctxlen)
        count = torch.zeros(B)
        while ids.shape[1] < ctxlen and not done.all():
            p = torch.softmax(model(ids)[:, -1].float(), -1)
            conf, nxt = p.max(-1)
            live = ~done
            maxp[live, count[live].long()] = conf[live]
            count += live.float()
            nxt = torch.where(done, torch.full_like(nxt, R.PAD_ID), nxt)
            ids = torch.cat([ids, nxt[:, None]], 1)
            done |= nxt == R.STOP_ID
        for i, prob in enumerate(part):
            n = int(count[i])
            text = R.decode(ids[i, T0:T0 + n].tolist())
            ok.append(R.final_answer(R.split_steps(text)) == prob.answer)
            cmean.append(float(maxp[i, :n].mean()) if n else 0.0)
            cmin.append(float(maxp[i, :n].min()) if n else 0.0)
            ngen.append(n)
            nprompt.append(T0)
    return {"ok": np.array(ok), "conf_mean": np.array(cmean), "conf_min": np.array(cmin),
            "n_gen": np.array(ngen), "n_prompt": np.array(nprompt)}
