"""A plain PyTorch training loop that lets zeus-bso choose its batch size, recurrence after
recurrence. CPU-only, on data it generates.

    zeus-bso-server serve                      # in another terminal: 'zeus-bso[server]'
    pip install torch zeus-bso                 # where it trains (a CPU torch will do)
    python examples/plain_pytorch.py --recurrences 5
"""

from __future__ import annotations

import functools
import sys

import torch
from _common import arguments, data, loop_job, loss_of, recurrences

from zeus_bso import BatchSizeOptimizer, RunOutcome
from zeus_bso.energy import auto_meter
from zeus_bso.integrations.probe import steps_of


def main() -> None:
    args = arguments(__doc__)
    job = loop_job("example-plain")
    train, val = data(2048, 0), data(512, 1)

    def one_run() -> RunOutcome | None:
        with BatchSizeOptimizer(
            args.server, job, energy_meter=auto_meter(), token=args.token, lr_rule="linear"
        ) as bso:
            batch_size = bso.get_batch_size()
            model = torch.nn.Sequential(
                torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
            )
            # 0.01 was tuned at the default batch size (32); the linear rule (SGD) scales it to
            # the batch size trained (the server's next one, should this one not fit).
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            bso.scale(optimizer)
            loss = functools.partial(loss_of, model)
            # A batch size new to this GPU: a few steps of it first, undone after; where it
            # runs out of memory, the server's next size is tried, before the run trains.
            loader = torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True)
            batch_size = bso.fit_in_memory(steps_of(model, optimizer, loader, loss))
            loader = torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True)
            bso.on_train_begin()
            for _epoch in range(job.max_epochs):
                for batch in loader:
                    optimizer.zero_grad()
                    loss(batch).backward()
                    optimizer.step()
                with bso.evaluating(), torch.no_grad():  # out of memory here: not the batch size's
                    accuracy = (model(val.tensors[0]).argmax(1) == val.tensors[1]).float().mean()
                if bso.on_evaluate(float(accuracy)).stop_train:
                    break
        return bso.outcome  # its line is on stderr already

    # A recurrence delivers a model: a run that stops short is followed by another, at the next
    # batch size the server gives, up to three runs; the script exits 1 if one delivered none.
    sys.exit(recurrences(one_run, args.recurrences))


if __name__ == "__main__":
    main()
