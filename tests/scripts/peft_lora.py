"""A LoRA fine-tune written as PEFT's quickstart and Transformers' ``run_clm.py`` write it: a
causal language model wrapped by ``get_peft_model(model, LoraConfig(...))`` (its weights frozen,
low-rank adapters on its attention trained), texts tokenized with ``Dataset.map``, a
``DataCollatorForLanguageModeling(mlm=False)``, the HF ``Trainer`` with a warm-up and a linear
schedule, and token accuracy from the logits' argmax (``preprocess_logits_for_metrics``), the
batch size the arguments' own (the callback sets the server's as the Trainer is built). The
base model, tokenizer and texts are the corpus's own (`tests.scripts.words`: nothing is
downloaded).

    python peft_lora.py --job NAME --output-dir DIR [--target 0.5]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
import transformers
from peft import LoraConfig, TaskType, get_peft_model

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
        max_epochs=4,
    )
    words = tokenizer()

    def tokenized(n: int, seed: int) -> Any:
        return texts(n, seed).map(
            lambda batch: words(batch["text"], truncation=True, max_length=16),
            batched=True,
            remove_columns=["text"],
        )

    def one_run() -> RunOutcome | None:
        callback = ZeusBSOTrainerCallback(job=job, metric="eval_accuracy", lr_rule="linear")
        torch.manual_seed(0)
        model = get_peft_model(
            language_model(words),
            LoraConfig(
                task_type=TaskType.CAUSAL_LM,
                r=8,
                lora_alpha=16,
                lora_dropout=0.0,
                target_modules=["c_attn", "c_proj", "c_fc"],
                fan_in_fan_out=True,  # GPT-2's Conv1D
            ),
        )
        training = transformers.TrainingArguments(
            output_dir=args.output_dir,
            per_device_train_batch_size=16,  # the callback sets the server's as Trainer is built
            per_device_eval_batch_size=32,
            num_train_epochs=job.max_epochs,
            learning_rate=2.0,
            optim="sgd",
            lr_scheduler_type="linear",
            warmup_steps=2,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=ON_CPU,
            bf16=BF16,
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(
            model=model,
            args=training,
            train_dataset=tokenized(192, 0),
            eval_dataset=tokenized(64, 1),
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
