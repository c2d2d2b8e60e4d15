"""What the Hugging Face callback checks of real ``TrainingArguments`` before a run trains
(`zeus_bso.integrations.hf_arguments`): each way a run would train another batch than the
server dispatched, or never evaluate, is refused in words that say what to change."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="pip install 'zeus-bso[hf]'")

from tests.helpers import kept_environment  # noqa: E402
from zeus_bso.integrations import hf_arguments  # noqa: E402


def arguments(tmp_path: Path, **options: Any) -> Any:
    settings = {
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 32,
        "num_train_epochs": 6,
        "eval_strategy": "epoch",
        "use_cpu": True,
        "report_to": [],
    }
    return transformers.TrainingArguments(**(settings | options))


def refusal(
    args: Any, accumulation_steps: int = 1, micro: int = 32, metric: str = "eval_accuracy"
) -> str | None:
    return hf_arguments.refusal(
        args,
        micro_batch_size=micro,
        batch_size=micro * accumulation_steps,
        accumulation_steps=accumulation_steps,
        accumulates=accumulation_steps > 1,
        metric=metric,
    )


def test_arguments_that_train_the_dispatched_batch_and_evaluate_pass(tmp_path: Path) -> None:
    assert refusal(arguments(tmp_path)) is None
    accumulating = arguments(
        tmp_path, per_device_train_batch_size=16, gradient_accumulation_steps=4
    )
    assert refusal(accumulating, accumulation_steps=4, micro=16) is None
    # The loss alone, and runs judged by it.
    assert refusal(arguments(tmp_path, prediction_loss_only=True), metric="eval_loss") is None
    assert hf_arguments.warnings(arguments(tmp_path), max_epochs=6) == []


@pytest.mark.parametrize(
    ("options", "steps", "said"),
    [
        ({"per_device_train_batch_size": 64}, 1, "per_device_train_batch_size=callback.start()"),
        ({"per_device_train_batch_size": 64}, 1, "training_args.per_device_train_batch_size = "),
        ({"gradient_accumulation_steps": 2}, 1, "pass ZeusBSOTrainerCallback(max_micro_batch"),
        ({"gradient_accumulation_steps": 2}, 4, "trains as 4 micro-batches of 32"),
        ({"eval_strategy": "no"}, 1, "eval_strategy='no': this run never evaluates"),
        ({"prediction_loss_only": True}, 1, "prediction_loss_only=True) evaluates the loss alone"),
        (
            {"auto_find_batch_size": True, "gradient_accumulation_steps": 4},
            4,
            "auto_find_batch_size=True) shrinks the batch size at an out-of-memory error",
        ),
    ],
)
def test_a_run_the_server_could_not_judge_is_refused_saying_what_to_change(
    tmp_path: Path, options: dict[str, Any], steps: int, said: str
) -> None:
    refused = refusal(arguments(tmp_path, **options), accumulation_steps=steps)
    assert refused is not None
    assert said in refused


def test_epochs_below_the_jobs_are_said_where_the_jobs_epochs_are_epochs(tmp_path: Path) -> None:
    """``num_train_epochs`` below the job's max_epochs ends a run before the server's stop
    where the job's epochs are the Trainer's; by steps they are evaluations, which the run
    counts when it starts (`zeus_bso.integrations.hf_cadence.evaluations_below`)."""
    (fewer,) = hf_arguments.warnings(arguments(tmp_path, num_train_epochs=3), max_epochs=6)
    assert "num_train_epochs=3) is below the job's max_epochs (6)" in fewer
    by_steps = {"eval_strategy": "steps", "eval_steps": 50}
    assert hf_arguments.warnings(arguments(tmp_path, num_train_epochs=3, **by_steps), 6) == []
    # max_steps bounds the run instead of num_train_epochs: whatever the batch size, and
    # released where the target is not reached by then (nothing learned).
    (steps,) = hf_arguments.warnings(arguments(tmp_path, max_steps=100, num_train_epochs=1), 6)
    assert steps.startswith("TrainingArguments(max_steps=100) ends the run after 100 optimizer")
    assert "(num_train_epochs=6, max_steps=-1: the server stops the run)" in steps
    # Where the run's steps an epoch are known: said only where max_steps ends it first.
    bounded = arguments(tmp_path, max_steps=100, num_train_epochs=1)
    assert hf_arguments.warnings(bounded, 6, per_epoch=16) == []  # 6.25 epochs
    (short,) = hf_arguments.warnings(bounded, 6, per_epoch=20)
    assert "ends the run after 5 epochs" in short
    # The script's max_steps, of the reference size's steps as its eval_steps are, is said.
    by_steps = {"eval_strategy": "steps", "eval_steps": 50, "num_train_epochs": 1}
    (run,) = hf_arguments.warnings(arguments(tmp_path, max_steps=100, **by_steps), 6, max_steps=200)
    assert run.startswith("TrainingArguments(max_steps=200) ends the run before the job's")
    assert "set max_steps to at least 300" in run


def test_max_steps_and_a_fixed_warm_up_keep_their_samples_at_every_batch_size(
    tmp_path: Path,
) -> None:
    """``max_steps`` and a fixed ``warmup_steps`` are taken as tuned at the reference batch
    size, as ``eval_steps`` is: a run at another size trains the same samples (its length
    rounded up) and warms up over the same samples (under an lr rule; with ``lr_rule='none'``
    the warm-up is the script's), set once on the arguments even where a Trainer is built with
    them again; a ratio, no ``max_steps``, or the reference's size keeps the arguments' own."""
    from zeus_bso.integrations.hf_cadence import ReferenceSteps
    from zeus_bso.scaling.lr import warmup_steps

    def session(batch_size: int, rule: str = "linear") -> Any:
        def warmup(steps: int) -> int:
            return steps if rule == "none" else warmup_steps(steps, batch_size, 16)

        def steps_for(steps: int) -> int:  # as TrialSession.steps_for: the samples, down
            return max(1, steps * 16 // batch_size)

        return SimpleNamespace(
            lr=SimpleNamespace(reference=16),
            batch_size=batch_size,
            warmup_steps=warmup,
            steps_for=steps_for,
        )

    args, kept = arguments(tmp_path, max_steps=24, warmup_steps=8), ReferenceSteps()
    length, warm = kept.keep(args, session(32))
    assert (args.max_steps, args.warmup_steps, kept.given) == (12, 4, 24)
    assert "at batch size 32 the run trains at most 12 steps" in length
    assert "at batch size 32 the warm-up takes 4 steps" in warm
    assert kept.keep(args, session(32)) == []  # built again with the same arguments
    assert (args.max_steps, args.warmup_steps) == (12, 4)
    args = arguments(tmp_path, max_steps=25, warmup_steps=8)
    ReferenceSteps().keep(args, session(24, rule="none"))
    assert (args.max_steps, args.warmup_steps) == (17, 8)  # 400 samples: 16.7 steps of 24, up
    by_steps = {"eval_strategy": "steps", "eval_steps": 4}  # a delay of steps, down
    for strategy, delay in ((by_steps, 2), ({}, 5)):  # by epochs: epochs
        args = arguments(tmp_path, eval_delay=5, **strategy)
        ReferenceSteps().keep(args, session(32))
        assert args.eval_delay == delay
    # A ratio of the run's steps: warmup_ratio, or from transformers 5 on a warmup_steps below 1.
    ratio = "warmup_ratio" if hasattr(transformers.TrainingArguments, "warmup_ratio") else ""
    for options, size in (
        ({"max_steps": 24, "warmup_steps": 8}, 16),
        ({ratio or "warmup_steps": 0.1}, 32),
        ({}, 32),
    ):
        args = arguments(tmp_path, **options)
        assert ReferenceSteps().keep(args, session(size)) == []
        assert args.max_steps == options.get("max_steps", -1)
        assert args.warmup_steps == options.get("warmup_steps", 0)


def test_max_steps_with_evaluations_by_steps_is_said_only_where_it_ends_the_run_first(
    tmp_path: Path,
) -> None:
    """With evaluations every N steps (a streaming dataset, which has no epochs, needs them and
    ``max_steps``), each evaluation is an epoch of the job's: ``max_steps`` ends the run first
    only below the job's max_epochs evaluations, and it is said only then, with the steps to
    set: of the run's own steps between evaluations where they are not the arguments'."""
    by_steps = {"eval_strategy": "steps", "eval_steps": 50, "num_train_epochs": 1}
    enough = arguments(tmp_path, max_steps=300, **by_steps)
    assert hf_arguments.warnings(enough, max_epochs=6) == []  # 6 evaluations of 50 steps
    short = arguments(tmp_path, max_steps=200, **by_steps)
    (ends,) = hf_arguments.warnings(short, max_epochs=6)
    assert ends.startswith("TrainingArguments(max_steps=200) ends the run before the job's")
    assert "evaluations of every 50 steps" in ends
    assert "set max_steps to at least 300" in ends
    ratio = arguments(tmp_path, max_steps=1000, **(by_steps | {"eval_steps": 0.1}))
    assert hf_arguments.warnings(ratio, max_epochs=6) == []  # every 100 steps: 10 of them
    assert "at least 1200" in hf_arguments.warnings(ratio, max_epochs=12)[0]


def test_an_evaluation_of_the_loss_alone_says_to_give_the_trainer_compute_metrics() -> None:
    timings = {"eval_runtime": 0.1, "eval_samples_per_second": 9.0, "eval_steps_per_second": 1.0}
    alone = {"eval_loss": 0.5, **timings, "epoch": 1.0}
    said = hf_arguments.loss_alone(alone, "eval_accuracy")
    assert "compute_metrics=... returning 'accuracy'" in said
    assert hf_arguments.loss_alone({**alone, "eval_f1": 0.7}, "eval_accuracy") == ""


def test_an_evaluation_of_no_samples_says_the_eval_dataset_is_empty() -> None:
    """It said to give the Trainer compute_metrics, which it had: an empty eval_dataset gives
    no loss and no metric, and 0 samples a second (what the Trainer evaluated of its own)."""
    nothing = {"eval_runtime": 0.0003, "eval_samples_per_second": 0.0, "epoch": 1.0}
    said = hf_arguments.loss_alone({**nothing, "eval_steps_per_second": 0.0}, "eval_accuracy")
    assert "the evaluation saw no samples" in said
    assert "eval_dataset is empty" in said
    assert "compute_metrics" not in said


def test_the_precision_a_run_reports_is_the_arguments(tmp_path: Path) -> None:
    """What the callback's reports say of the Trainer's precision (a run in another precision
    than the job's earlier runs is told so): real ``TrainingArguments``' own, and the fields
    it reads of them. Arguments in bf16 or fp16 are not built here: in some versions they set
    the process's one Accelerate state to that precision, which later tests' accelerators
    would then train in."""
    assert hf_arguments.precision(arguments(tmp_path)) == "32"
    assert hf_arguments.precision(SimpleNamespace(bf16=True, fp16=False)) == "bf16"
    assert hf_arguments.precision(SimpleNamespace(bf16=False, fp16=True)) == "fp16"


def test_the_callback_sets_the_size_where_nothing_read_it_as_the_arguments_were_built(
    tmp_path: Path,
) -> None:
    """A Trainer's arguments (plain, or TRL's SFT ones) take the run's size as the Trainer is
    built; DeepSpeed's configuration (filled from the arguments as they are built) and TRL's
    GRPO (its generation batch sized from the batch size) keep the size they were built with:
    those scripts call ``start()`` first, and are told why."""
    trainer = SimpleNamespace(is_deepspeed_enabled=False)
    assert hf_arguments.set_by_hand(arguments(tmp_path), trainer) is None
    # DeepSpeed's configuration given in the arguments, or by `accelerate launch`: the Trainer's.
    in_arguments = SimpleNamespace(deepspeed={"train_micro_batch_size_per_gpu": "auto"})
    launched = SimpleNamespace(is_deepspeed_enabled=True)
    for args, built in ((in_arguments, trainer), (arguments(tmp_path), launched)):
        assert "DeepSpeed's configuration" in (hf_arguments.set_by_hand(args, built) or "")
    trl = pytest.importorskip("trl", reason="pip install trl")
    common = {"output_dir": str(tmp_path), "use_cpu": True, "report_to": []}
    assert hf_arguments.set_by_hand(trl.SFTConfig(**common), trainer) is None
    grpo = trl.GRPOConfig(**common, per_device_train_batch_size=8, num_generations=4)
    said = hf_arguments.set_by_hand(grpo, trainer)
    assert said == "GRPOConfig sized its generation batch from the batch size as it was built"


@pytest.mark.parametrize(
    ("accumulation", "said"),
    [
        (None, "per_device_train_batch_size=8 (TrainingArguments said 32)"),
        (2, "per_device_train_batch_size=8, gradient_accumulation_steps=2 (TrainingArguments "
         "said 32 and 1)"),
    ],
)  # fmt: skip
def test_taking_the_batch_size_sets_it_on_the_arguments_and_the_trainer(
    tmp_path: Path, accumulation: int | None, said: str
) -> None:
    """The run's size on the arguments and on the Trainer, which took its own from them as it
    was built; where the run accumulates, its micro-batches an optimizer step too."""
    args = arguments(tmp_path)
    trainer = SimpleNamespace(_train_batch_size=args.train_batch_size)
    changed = hf_arguments.take_batch_size(args, trainer, 8, accumulation)
    assert changed == f"the Trainer trains at the server's batch size: {said}"
    assert (args.per_device_train_batch_size, trainer._train_batch_size) == (8, 8)
    assert args.gradient_accumulation_steps == (accumulation or 1)
    assert hf_arguments.take_batch_size(args, trainer, 8, accumulation) is None  # said so now


def test_a_trainer_that_evaluates_its_own_way_is_not_refused_for_evaluating_the_loss_alone(
    tmp_path: Path,
) -> None:
    """Sentence Transformers' trainer adds its evaluator's metrics to its evaluations while its
    arguments evaluate the loss alone (``prediction_loss_only=True``, their default): the job's
    metric is looked for at the first evaluation, not refused before the run trains. The HF
    Trainer's own evaluation computes only the loss there: refused, also in Transformers' own
    subclass, which passes generation settings on to it (``Seq2SeqTrainer``)."""
    seq2seq = transformers.Seq2SeqTrainer
    assert not hf_arguments.evaluates_itself(seq2seq.__new__(seq2seq))
    with kept_environment():  # scikit-learn's KMP_* settings, as it is imported
        sentence_transformers = pytest.importorskip(
            "sentence_transformers", reason="pip install sentence-transformers"
        )
    args = arguments(tmp_path, prediction_loss_only=True)
    assert not hf_arguments.evaluates_itself(SimpleNamespace())  # no Trainer
    assert not hf_arguments.evaluates_itself(None)
    assert "evaluates the loss alone" in (refusal(args) or "")
    own = sentence_transformers.SentenceTransformerTrainer.__new__(
        sentence_transformers.SentenceTransformerTrainer
    )
    assert not hf_arguments.evaluates_itself(transformers.Trainer.__new__(transformers.Trainer))
    assert hf_arguments.evaluates_itself(own)
    assert (
        hf_arguments.refusal(
            args,
            micro_batch_size=32,
            batch_size=32,
            accumulation_steps=1,
            accumulates=False,
            metric="eval_sts_spearman_cosine",
            evaluates_itself=True,
        )
        is None
    )
