"""A causal-LM training on a streamed dataset, as the Transformers docs write one for data too
large to hold: ``datasets``' ``to_iterable_dataset()`` (``load_dataset(..., streaming=True)``
gives the same kind), tokenized with ``map``, which has no length and so no epochs: the run is
bounded by ``max_steps`` and evaluated every ``eval_steps`` steps, each evaluation one of the
job's epochs. The model, tokenizer and texts are the corpus's own (`tests.scripts.words`).

    python hf_streaming.py --job NAME --output-dir DIR [--target 0.5]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import transformers

from tests.scripts.hardware import BF16, ON_CPU
from tests.scripts.words import language_model, next_words, texts, token_accuracy, tokenizer
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


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
        max_epochs=4,  # evaluations
    )
    words = tokenizer()

    def tokenize(batch: dict[str, Any]) -> Any:
        return words(batch["text"], truncation=True, max_length=16)

    def one_run() -> RunOutcome | None:
        callback = ZeusBSOTrainerCallback(job=job, metric="eval_accuracy", lr_rule="linear")
        stream = texts(1024, 0).to_iterable_dataset().map(tokenize, batched=True)
        training = transformers.TrainingArguments(
            output_dir=args.output_dir,
            per_device_train_batch_size=callback.start(),
            per_device_eval_batch_size=32,
            max_steps=32,  # 4 evaluations of 8 steps of 16 samples: as many at every size
            eval_strategy="steps",
            eval_steps=8,  # steps of 16 samples, the job's default
            learning_rate=0.5,
            optim="sgd",
            lr_scheduler_type="constant",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=ON_CPU,
            bf16=BF16,
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(
            model=language_model(words),
            args=training,
            train_dataset=stream.remove_columns(["text"]),
            eval_dataset=texts(64, 1).map(tokenize, batched=True, remove_columns=["text"]),
            data_collator=transformers.DataCollatorForLanguageModeling(words, mlm=False),
            compute_metrics=token_accuracy,
            preprocess_logits_for_metrics=next_words,
            callbacks=[callback],
        )
        trainer.train()
        return callback.outcome

    outcome = until_converged(one_run, attempts=1)
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
