"""A sequence-to-sequence fine-tune with the HF ``Seq2SeqTrainer``, written as Transformers'
``run_translation.py`` and ``run_summarization.py`` write it: source and target texts
tokenized with ``text_target=``, ``DataCollatorForSeq2Seq`` padding the labels with -100,
``Seq2SeqTrainingArguments`` with ``predict_with_generate=True`` (the evaluation generates, and
``compute_metrics`` decodes the generated ids against the labels), a warm-up then a linear decay,
the batch size the arguments' own (the callback sets the server's as the Trainer is built). The
task is the corpus's own (`tests.scripts.words`: nothing is downloaded): the next three words of
a text that counts up, by a two-layer T5; the job is judged by the share of the generated words
that are right.

    python hf_seq2seq.py --job NAME --output-dir DIR [--target 0.5]
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

import numpy as np
import transformers
from datasets import Dataset

from tests.scripts.hardware import BF16, ON_CPU
from tests.scripts.words import VOCABULARY, WORDS, tokenizer
from zeus_bso import JobSpec, RunOutcome
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback

ANSWER = 3
"""The words a model answers: the next three of its source."""


def pairs(n: int, seed: int) -> Dataset:
    """Sources of six words counting up from a random one, and their next three words."""
    rng = random.Random(seed)
    rows: dict[str, list[str]] = {"source": [], "target": []}
    for _ in range(n):
        first = rng.randrange(WORDS)
        words = [f"w{(first + i) % WORDS}" for i in range(6 + ANSWER)]
        rows["source"].append(" ".join(words[:6]))
        rows["target"].append(" ".join(words[6:]))
    return Dataset.from_dict(rows)


def model_for(words: Any) -> Any:
    """A two-layer T5 over ``words``'s vocabulary, freshly initialised."""
    return transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=VOCABULARY,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_heads=2,
            pad_token_id=words.pad_token_id,
            eos_token_id=words.eos_token_id,
            decoder_start_token_id=words.pad_token_id,
        )
    )


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
    words = tokenizer()

    def preprocess(batch: dict[str, list[str]]) -> Any:
        inputs = words(batch["source"], truncation=True, max_length=8)
        labels = words(text_target=batch["target"], truncation=True, max_length=ANSWER + 1)
        inputs["labels"] = labels["input_ids"]
        return inputs

    def compute_metrics(prediction: Any) -> dict[str, float]:
        generated, labels = prediction.predictions, prediction.label_ids
        labels = np.where(labels != -100, labels, words.pad_token_id)
        said = words.batch_decode(generated, skip_special_tokens=True)
        meant = words.batch_decode(labels, skip_special_tokens=True)
        right = [
            a == b
            for one, other in zip(said, meant, strict=True)
            for a, b in zip(one.split() + [""] * ANSWER, other.split(), strict=False)
        ]
        return {"word_accuracy": float(np.mean(right))}

    callback = ZeusBSOTrainerCallback(job=job, metric="eval_word_accuracy", lr_rule="linear")
    training_args = transformers.Seq2SeqTrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=16,  # the callback sets the server's as Trainer is built
        per_device_eval_batch_size=32,
        num_train_epochs=job.max_epochs,
        learning_rate=1.0,
        optim="sgd",
        lr_scheduler_type="linear",
        warmup_steps=2,
        predict_with_generate=True,
        generation_max_length=ANSWER + 1,
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=ON_CPU,
        bf16=BF16,
        disable_tqdm=True,
    )
    columns = ["source", "target"]
    train = pairs(512, 0).map(preprocess, batched=True, remove_columns=columns)
    evaluation = pairs(64, 1).map(preprocess, batched=True, remove_columns=columns)
    model = model_for(words)
    trainer = transformers.Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=transformers.DataCollatorForSeq2Seq(words, model=model),
        processing_class=words,
        compute_metrics=compute_metrics,
        callbacks=[callback],
    )
    trainer.train()
    outcome: RunOutcome | None = callback.outcome
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
