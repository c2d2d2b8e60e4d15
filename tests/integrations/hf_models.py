"""An HF Trainer run of a paced model, apart from the test modules: a training process that a
test starts imports it with transformers alone (not Lightning, pytest or the server)."""

from __future__ import annotations

from typing import Any

import torch
import transformers

from tests.integrations.paced_jobs import PACED_BATCH, PACED_STEPS, paced_job, paced_step
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback


def paced_hf_run(url: str, job_id: str, eta: float, out: str, then: Any = None) -> Any:
    """An HF Trainer run of a paced model under ZeusBSOTrainerCallback(power_limit="optimize")."""

    class Model(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)
            self.steps = 0

        def forward(self, x: Any, labels: Any = None) -> Any:
            if self.training:
                paced_step()
                self.steps += 1
                if then is not None:
                    then(self.steps)
            logits = self.layer(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    class Data(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self, n: int) -> None:
            self.x = torch.randn(n, 4)

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": self.x[i], "labels": torch.tensor(0)}

    # The loss is at or above 0.0 at the first validation: one epoch a run (a loss counted
    # higher-is-better only where the job says so itself).
    spec = paced_job(job_id, eta, higher_is_better_metric=True)
    callback = ZeusBSOTrainerCallback(url, spec, metric="eval_loss", power_limit="optimize")
    args = transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=callback.start(), num_train_epochs=2,
        eval_strategy="epoch", logging_strategy="no", save_strategy="no", report_to=[],
        use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=Model(),
        args=args,
        train_dataset=Data(PACED_STEPS * PACED_BATCH),
        eval_dataset=Data(16),
        callbacks=[callback],
    )
    trainer.train()
    return callback
