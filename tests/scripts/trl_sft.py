"""A supervised fine-tune with TRL's ``SFTTrainer``, written as TRL's quickstart writes it: a
``datasets.Dataset`` of texts, an ``SFTConfig`` (TrainingArguments with the SFT settings), a
causal language model and its tokenizer, a warm-up and a cosine schedule, the batch size the
config's own (the callback sets the server's as the Trainer is built). The model, tokenizer and
texts are the corpus's own
(`tests.scripts.words`: nothing is downloaded); the job is judged by SFT's token accuracy.
``--longer K`` makes K of its texts longer than the others, and ``--oom-above-tokens N`` has
the model run out of memory in training at a batch of more than N tokens, padding included
(texts of many lengths: the longest batch, which may come late in an epoch, needs the most).

    python trl_sft.py --job NAME --output-dir DIR [--target 0.5] [--longer K]
        [--oom-above-tokens N] [--attempts A]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
from trl import SFTConfig, SFTTrainer

from tests.scripts.hardware import BF16, ON_CPU
from tests.scripts.words import language_model, texts, tokenizer
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--longer", type=int, default=0)
    parser.add_argument("--oom-above-tokens", type=int, default=0)
    parser.add_argument("--attempts", type=int, default=1)
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
            per_device_train_batch_size=16,  # the callback sets the server's as Trainer is built
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
        model = language_model(words)
        if args.oom_above_tokens:
            model.register_forward_pre_hook(
                out_of_memory_above(args.oom_above_tokens), with_kwargs=True
            )
        trainer = SFTTrainer(
            model=model,
            args=config,
            train_dataset=texts(192, 0, longer=args.longer),
            eval_dataset=texts(64, 1),
            processing_class=words,
            callbacks=[callback],
        )
        trainer.train()
        return callback.outcome

    outcome = until_converged(one_run, attempts=args.attempts)
    return 0 if outcome is not None and outcome.converged else 1


def out_of_memory_above(tokens: int) -> Any:
    """A forward pre-hook that raises CUDA's out-of-memory error at a training batch of more
    than ``tokens`` token ids (its texts times their padded length)."""

    def hook(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if model.training and ids is not None and ids.numel() > tokens:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {ids.numel()} MiB"
            )

    return hook


if __name__ == "__main__":
    sys.exit(main())
