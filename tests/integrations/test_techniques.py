"""The ways of training a run's reports say beside its model and precision
(`zeus_bso.training.techniques`): activation checkpointing and a compiled model, read off the
modules as torch, Lightning and Hugging Face set them (CPU, no compile run)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="reads torch modules")

from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (  # noqa: E402
    checkpoint_wrapper,
)

from zeus_bso.spec import Technique  # noqa: E402
from zeus_bso.training.techniques import techniques_of  # noqa: E402

CHECKPOINTING, COMPILED = Technique.ACTIVATION_CHECKPOINTING, Technique.COMPILED


def model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_a_plain_model_and_what_is_not_a_model_say_none() -> None:
    assert techniques_of(model()) == []
    assert techniques_of(None, object(), "model") == []
    assert techniques_of() == []


def test_activation_checkpointing_is_read_off_the_modules() -> None:
    flagged = model()
    flagged[2].gradient_checkpointing = True  # what Hugging Face sets on its layers
    assert techniques_of(flagged) == [CHECKPOINTING]
    timm = model()  # timm's (and OpenCLIP's) set_grad_checkpointing(): the model or its stages
    timm.grad_checkpointing = True
    assert techniques_of(timm) == [CHECKPOINTING]
    timm.grad_checkpointing = False  # set_grad_checkpointing(False), and timm's default
    assert techniques_of(timm) == []
    function = model()
    function[2].gradient_checkpointing = lambda: True  # a method of that name is not the flag
    assert techniques_of(function) == []
    wrapped = torch.nn.Sequential(checkpoint_wrapper(torch.nn.Linear(2, 2)))
    assert techniques_of(wrapped) == [CHECKPOINTING]


def test_a_compiled_model_is_read_however_it_was_compiled() -> None:
    assert techniques_of(torch.compile(model())) == [COMPILED]  # wrapped: nothing compiles yet
    in_place = model()
    in_place.compile()
    assert techniques_of(in_place) == [COMPILED]
    inner = model()
    inner[0].compile()
    assert techniques_of(inner) == [COMPILED]
    assert techniques_of(model(), compiled=True) == [COMPILED]  # the HF Trainer's torch_compile
    both = torch.compile(torch.nn.Sequential(checkpoint_wrapper(torch.nn.Linear(2, 2))))
    assert techniques_of(both) == [CHECKPOINTING, COMPILED]
