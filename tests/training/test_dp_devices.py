"""The data-parallel loop on ``ctx.device`` (issue "Run where researchers run: GPUs"), checked without a GPU:
the techniques declare cuda, batches drawn on cpu reach a model on another device, and the optimizer's
moments sit beside the parameters. torch's ``meta`` device stands in for cuda (its ops refuse a cpu
operand as cuda's do); benchmarks/gpu_check.py (``dp_in_process``) trains the ranks on a real GPU."""
from __future__ import annotations

import pytest
import torch

META = torch.device("meta")


@pytest.mark.parametrize("name", ["ddp_train", "duo"])
def test_data_parallel_techniques_declare_cuda(name):
    from components.core.registry import lookup

    # Prepare / Execute
    spec = lookup("technique", name)
    # Assert
    assert {"cpu", "cuda"} <= set(spec.devices)


def test_inputs_to_feeds_cpu_batches_to_a_model_elsewhere():
    from components.models.gpt import GPT, GPTConfig
    from components.training.on_device import InputsTo

    # Prepare: a model on the device, windows drawn on cpu (as evaluate_loss draws them)
    model = GPT(GPTConfig(vocab_size=50, n_layer=1, n_head=2, d_model=32, context=16)).to(META)
    x, y = torch.randint(0, 50, (2, 16)), torch.randint(0, 50, (2, 16))
    model.eval()
    # Execute
    view = InputsTo(model)
    view.train()
    logits, loss = view(x, y)
    # Assert: computed on the device; eval/train reach the model
    assert logits.device == META and loss.device == META
    assert model.training and not InputsTo(model.eval()).training


def test_adamw_moments_live_beside_the_parameters():
    from components.training.ddp.optim import AdamW

    # Prepare
    params = [torch.zeros(4, 3, device=META), torch.zeros(3, device=META)]
    # Execute
    opt = AdamW(params)
    # Assert
    assert opt.m_flat.device == META and opt.v_flat.device == META and opt.m[0].shape == (4, 3)
