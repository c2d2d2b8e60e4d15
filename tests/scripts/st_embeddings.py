"""An embedding model fine-tuned with Sentence Transformers, written as its training docs write
it: a ``SentenceTransformer`` of a transformer and a pooling module, a ``datasets.Dataset`` of
sentence pairs and their similarity, ``CosineSimilarityLoss``, an
``EmbeddingSimilarityEvaluator`` on held-out pairs, and the ``SentenceTransformerTrainer`` with
``SentenceTransformerTrainingArguments`` at a batch size of their own (the callback sets the
server's as the Trainer is built). The job is judged by the evaluator's Spearman correlation,
which the trainer adds to its evaluation's metrics itself (its arguments evaluate the loss
alone: ``prediction_loss_only=True``, their default). The transformer is a one-layer BERT of
the corpus's own over its words (`tests.scripts.words`: nothing is downloaded).

    python st_embeddings.py --job NAME --output-dir DIR [--target 0.9]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import transformers
from datasets import Dataset
from sentence_transformers import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
    losses,
    models,
)
from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

from tests.scripts.hardware import BF16, ON_CPU
from tests.scripts.words import VOCABULARY, WORDS, tokenizer
from zeus_bso import JobSpec, RunOutcome, until_converged
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


def pairs(n: int, seed: int) -> Dataset:
    """Pairs of five counting words: the same run of words (similarity 1) or two runs from
    different words (0), half each."""
    rng = random.Random(seed)
    first, second, scores = [], [], []
    for _ in range(n):
        start = rng.randrange(WORDS)
        other = start if rng.random() < 0.5 else rng.randrange(WORDS)
        first.append(" ".join(f"w{(start + i) % WORDS}" for i in range(5)))
        second.append(" ".join(f"w{(other + i) % WORDS}" for i in range(5)))
        scores.append(1.0 if other == start else 0.0)
    return Dataset.from_dict({"sentence1": first, "sentence2": second, "score": scores})


def embedding_model(folder: Path) -> SentenceTransformer:
    """A one-layer BERT over the corpus's words, saved to ``folder`` and loaded from it as a
    Sentence Transformers module, with mean pooling."""
    words = tokenizer()
    config = transformers.BertConfig(
        vocab_size=VOCABULARY,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        pad_token_id=words.pad_token_id,
    )
    transformers.BertModel(config).save_pretrained(folder)
    words.save_pretrained(folder)
    transformer = models.Transformer(str(folder))
    pooling = models.Pooling(transformer.get_word_embedding_dimension())
    return SentenceTransformer(modules=[transformer, pooling], device="cpu" if ON_CPU else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )
    held_out = pairs(64, 1)
    evaluator = EmbeddingSimilarityEvaluator(
        held_out["sentence1"], held_out["sentence2"], held_out["score"], name="sts"
    )

    def one_run() -> RunOutcome | None:
        callback = ZeusBSOTrainerCallback(
            job=job, metric="eval_sts_spearman_cosine", lr_rule="linear"
        )
        model = embedding_model(Path(args.output_dir) / "base")
        training = SentenceTransformerTrainingArguments(
            output_dir=args.output_dir,
            per_device_train_batch_size=16,  # the server's replaces it as the Trainer is built
            num_train_epochs=job.max_epochs,
            learning_rate=0.5,
            optim="sgd",
            warmup_steps=2,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=ON_CPU,
            bf16=BF16,
            disable_tqdm=True,
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=training,
            train_dataset=pairs(192, 0),
            eval_dataset=held_out,
            loss=losses.CosineSimilarityLoss(model),
            evaluator=evaluator,
            callbacks=[callback],
        )
        trainer.train()
        return callback.outcome

    outcome = until_converged(one_run, attempts=1)
    return 0 if outcome is not None and outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
