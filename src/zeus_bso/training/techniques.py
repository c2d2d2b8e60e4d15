"""The ways of training a run uses beside its model and precision, which its reports say
(`zeus_bso.spec.Technique`): activation checkpointing and a compiled model each change what a
batch size costs and what fits in memory, so a job whose runs switched one on or off under
unchanged settings mixes models (the server's notice, `zeus_bso_server.mixed_models`).

Read off the modules the framework trains: activation checkpointing where a module says it
checkpoints (the Hugging Face and diffusers models' ``gradient_checkpointing`` flag, which
``activation_checkpointing_enable`` and ``TrainingArguments(gradient_checkpointing=True)``
set; timm's and OpenCLIP's ``grad_checkpointing``, which ``set_grad_checkpointing()`` sets on
the model or its stages) or is wrapped by torch's ``checkpoint_wrapper``; a compiled model
where ``torch.compile`` wrapped it (its ``_orig_mod``), compiled it in place
(``module.compile()``), or Lightning unwrapped a compiled module it was given (its
``_compiler_ctx``). Activations a ``forward`` checkpoints by calling ``torch.utils.checkpoint``
itself, where no flag says so, are not seen."""

from __future__ import annotations

from typing import Any

from zeus_bso.spec import Technique


def _compiled(module: Any) -> bool:
    return (
        hasattr(module, "_orig_mod")
        or getattr(module, "_compiled_call_impl", None) is not None
        or getattr(module, "_compiler_ctx", None) is not None
    )


CHECKPOINTING_FLAGS = ("gradient_checkpointing", "grad_checkpointing")
"""The attributes a module sets to ``True`` where it checkpoints its activations: Hugging Face's
(and diffusers'), and timm's and OpenCLIP's."""


def _checkpointed(module: Any) -> bool:
    return (
        any(getattr(module, flag, False) is True for flag in CHECKPOINTING_FLAGS)
        or type(module).__name__ == "CheckpointWrapper"
    )


def techniques_of(*models: Any, compiled: bool = False) -> list[Technique]:
    """The ways of training ``models`` (torch modules; None and other objects are passed
    over) use, sorted; ``compiled``: the framework compiles them (the HF Trainer's
    ``torch_compile``) whatever they say yet."""
    found = {Technique.COMPILED} if compiled else set()
    for model in models:
        modules = getattr(model, "modules", None)
        for module in modules() if callable(modules) else ():
            if _compiled(module):
                found.add(Technique.COMPILED)
            if _checkpointed(module):
                found.add(Technique.ACTIVATION_CHECKPOINTING)
        if _compiled(model):
            found.add(Technique.COMPILED)
    return sorted(found)
