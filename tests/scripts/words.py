"""The corpus's language-model task, shared by its LLM scripts (``trl_sft.py``, ``trl_dpo.py``,
``peft_lora.py``, ``hf_streaming.py``): a word-level tokenizer of 50 words, texts that count up
through them (now and then a word out of turn), a two-layer GPT-2 of the corpus's own, so that
nothing is downloaded, and its token accuracy."""

from __future__ import annotations

import random
from typing import Any

import torch
import transformers
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers

WORDS = 50
VOCABULARY = WORDS + 3
"""The tokenizer's words, and its unknown, padding and end-of-text tokens: the model's
embedding has as many rows (what `tests.scripts.probe` counts a batch's texts by)."""


def tokenizer() -> Any:
    vocabulary = {f"w{i}": i for i in range(WORDS)} | {"[UNK]": 50, "[PAD]": 51, "[EOS]": 52}
    words = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=words,
        unk_token="[UNK]",
        pad_token="[PAD]",
        eos_token="[EOS]",
        model_input_names=["input_ids", "attention_mask"],  # as GPT-2's own tokenizer
    )


def texts(n: int, seed: int, longer: int = 0) -> Dataset:
    """Texts of 12 words counting up from a random one (the last ``longer`` of them: 15 words);
    each word after the first is out of turn with probability 0.1."""
    rng = random.Random(seed)
    rows = []
    for number in range(n):
        word = rng.randrange(WORDS)
        sentence = []
        for _ in range(15 if number >= n - longer else 12):
            sentence.append(f"w{word}")
            word = rng.randrange(WORDS) if rng.random() < 0.1 else (word + 1) % WORDS
        rows.append(" ".join(sentence))
    return Dataset.from_dict({"text": rows})


def language_model(words: Any) -> Any:
    """A two-layer GPT-2 over ``words``'s vocabulary, freshly initialised."""
    return transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=VOCABULARY,
            n_positions=32,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=words.eos_token_id,
            eos_token_id=words.eos_token_id,
            pad_token_id=words.pad_token_id,
        )
    )


def next_words(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The words the model predicts (the Trainer's ``preprocess_logits_for_metrics``: the
    argmax, not the logits, are gathered)."""
    return logits.argmax(dim=-1)


def token_accuracy(prediction: Any) -> dict[str, float]:
    """The share of next words predicted right (``run_clm.py``'s, shifted by one)."""
    predicted, labels = prediction.predictions[:, :-1], prediction.label_ids[:, 1:]
    counted = labels != -100
    return {"accuracy": float((predicted[counted] == labels[counted]).mean())}
