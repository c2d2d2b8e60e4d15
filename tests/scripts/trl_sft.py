"""A supervised fine-tune with TRL's ``SFTTrainer``, written as TRL's quickstart writes it: a
``datasets.Dataset`` of texts, an ``SFTConfig`` (TrainingArguments with the SFT settings), a
causal language model and its tokenizer, a warm-up and a cosine schedule; the batch size on the
config is the callback's. The model is a two-layer GPT-2 of the script's own, on a word-level
tokenizer of 50 words and texts that count up through them (now and then a word out of turn),
so that nothing is downloaded; the job is judged by SFT's token accuracy.

    python trl_sft.py --job NAME --output-dir DIR [--target 0.5]
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

import transformers
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from trl import SFTConfig, SFTTrainer

from tests.scripts.hardware import BF16, ON_CPU
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback

WORDS = 50
VOCABULARY = WORDS + 3
"""The tokenizer's words, and its unknown, padding and end-of-text tokens: the model's
embedding has as many rows (what `tests.scripts.probe` counts a batch's texts by)."""


def tokenizer() -> Any:
    vocabulary = {f"w{i}": i for i in range(WORDS)} | {"[UNK]": 50, "[PAD]": 51, "[EOS]": 52}
    words = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )


def texts(n: int, seed: int) -> Dataset:
    """Texts of 12 words counting up from a random one; each word after the first is out of
    turn with probability 0.1."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        word = rng.randrange(WORDS)
        sentence = []
        for _ in range(12):
            sentence.append(f"w{word}")
            word = rng.randrange(WORDS) if rng.random() < 0.1 else (word + 1) % WORDS
        rows.append(" ".join(sentence))
    return Dataset.from_dict({"text": rows})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--target", type=float, default=0.5)
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )

    def one_run() -> RunOutcome | None:
        callback = ZeusBSOTrainerCallback(
            job=job, metric="eval_mean_token_accuracy", lr_rule="linear"
        )
        config = SFTConfig(
            output_dir=args.output_dir,
            per_device_train_batch_size=callback.start(),
            num_train_epochs=job.max_epochs,
            learning_rate=0.5,
            optim="sgd",
            lr_scheduler_type="cosine",
            warmup_steps=2,
            max_length=16,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=ON_CPU,
            bf16=BF16,
            disable_tqdm=True,
        )
        words = tokenizer()
        model = transformers.GPT2LMHeadModel(
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
        trainer = SFTTrainer(
            model=model,
            args=config,
            train_dataset=texts(192, 0),
            eval_dataset=texts(64, 1),
            processing_class=words,
            callbacks=[callback],
        )
        trainer.train()
        return callback.outcome

    outcome = until_converged(one_run, attempts=1)
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
