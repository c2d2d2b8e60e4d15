"""Preference tuning with TRL's ``DPOTrainer``, written as TRL's quickstart writes it: a
``datasets.Dataset`` of prompts with a chosen and a rejected answer each, a ``DPOConfig``
(TrainingArguments with the DPO settings), the policy model, its frozen reference and the
tokenizer; the batch size on the config is the callback's. The model, tokenizer and words are
the corpus's own (`tests.scripts.words`: nothing is downloaded); the job is judged by how often
the policy prefers the chosen answer (``eval_rewards/accuracies``). Each step trains the chosen
and the rejected answer of every pair: twice the batch size's texts.

    python trl_dpo.py --job NAME --output-dir DIR [--target 0.75]
"""

from __future__ import annotations

import argparse
import copy
import random
import sys

from datasets import Dataset
from trl import DPOConfig, DPOTrainer

from tests.scripts.hardware import BF16, ON_CPU
from tests.scripts.words import WORDS, language_model, tokenizer
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


def preferences(n: int, seed: int) -> Dataset:
    """Prompts of 2 to 7 words counting up from a random one; the chosen answer counts on for
    three words, the rejected one is three random words."""
    rng = random.Random(seed)
    rows: dict[str, list[str]] = {"prompt": [], "chosen": [], "rejected": []}
    for _ in range(n):
        word, length = rng.randrange(WORDS), rng.randrange(2, 8)
        rows["prompt"].append(" ".join(f"w{(word + i) % WORDS}" for i in range(length)))
        chosen = (f"w{(word + length + i) % WORDS}" for i in range(3))
        rows["chosen"].append(" " + " ".join(chosen))
        rows["rejected"].append(" " + " ".join(f"w{rng.randrange(WORDS)}" for _ in range(3)))
    return Dataset.from_dict(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--target", type=float, default=0.75)
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
            job=job, metric="eval_rewards/accuracies", lr_rule="linear"
        )
        config = DPOConfig(
            output_dir=args.output_dir,
            per_device_train_batch_size=callback.start(),
            num_train_epochs=job.max_epochs,
            learning_rate=0.05,
            optim="sgd",
            lr_scheduler_type="cosine",
            warmup_steps=2,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=ON_CPU,
            bf16=BF16,
            disable_tqdm=True,
        )
        words = tokenizer()
        model = language_model(words)
        trainer = DPOTrainer(
            model=model,
            ref_model=copy.deepcopy(model),  # the policy's start, frozen
            args=config,
            train_dataset=preferences(128, 0),
            eval_dataset=preferences(32, 1),
            processing_class=words,
            callbacks=[callback],
        )
        trainer.train()
        return callback.outcome

    outcome = until_converged(one_run, attempts=1)
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
