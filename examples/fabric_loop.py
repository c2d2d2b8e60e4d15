"""A Lightning Fabric training loop that lets zeus-bso choose its batch size, recurrence after
recurrence. CPU-only, on data it generates; one process, or several (Fabric starts them):

    zeus-bso-server serve                      # in another terminal: 'zeus-bso[server]'
    pip install torch 'zeus-bso[lightning]'    # where it trains (a CPU torch will do)
    python examples/fabric_loop.py --recurrences 5 [--devices 2]

The cost, energy and batch size of every report go to Fabric's loggers (here none is
configured; pass ``loggers=[...]`` to log them).
"""

from __future__ import annotations

import functools
import sys

import torch
from _common import arguments, data, loop_job, loss_of, no_model
from lightning.fabric import Fabric

from zeus_bso.integrations.fabric import ZeusBSOFabric
from zeus_bso.integrations.probe import steps_of


def main() -> None:
    args = arguments(__doc__, devices=True)
    fabric = Fabric(accelerator="cpu", devices=args.devices, strategy="ddp")
    fabric.launch()
    job = loop_job("example-fabric")
    train, val = data(2048, 0), data(512, 1)
    # The rate, 0.01, was tuned at 32 samples a step in all: 32 / processes per process. The
    # linear rule (SGD) scales it to the batch size the server gives.
    tuned_at = max(1, 32 // fabric.world_size)
    missed = 0
    for recurrence in range(1, args.recurrences + 1):
        with ZeusBSOFabric(
            fabric,
            args.server,
            job,
            token=args.token,
            lr_rule="linear",
            reference_batch_size=tuned_at,
        ) as bso:
            torch.manual_seed(0)
            model = torch.nn.Sequential(
                torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
            )
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            bso.scale(optimizer)
            model, optimizer = fabric.setup(model, optimizer)
            # A batch size new to these GPUs: a few steps of it first, undone after, each
            # process alone (the module unwrapped: no collective; at the run's precision:
            # fabric.autocast); where it runs out of memory, the server's next size is tried,
            # before the run trains.
            loss = functools.partial(loss_of, model.module)
            loader = torch.utils.data.DataLoader(train, batch_size=bso.batch_size, shuffle=True)
            tried = steps_of(model.module, optimizer, loader, loss, autocast=fabric.autocast)
            size = bso.fit_in_memory(tried)
            loader = fabric.setup_dataloaders(
                torch.utils.data.DataLoader(train, batch_size=size, shuffle=True)
            )
            bso.train_begin()
            for _epoch in range(job.max_epochs):
                model.train()
                for batch in loader:
                    optimizer.zero_grad()
                    fabric.backward(loss_of(model, batch))
                    optimizer.step()
                with bso.evaluating(), torch.no_grad():  # out of memory here: not the batch size's
                    predicted = model(val.tensors[0]).argmax(1)
                    accuracy = (predicted == val.tensors[1]).float().mean()
                if bso.report(float(accuracy)):  # every process: the answer is shared
                    break
        if not bso.converged:  # the same on every process: the server's answer is shared
            missed += 1
            fabric.print(no_model(recurrence, args.recurrences))
        fabric.barrier()
    sys.exit(1 if missed else 0)  # a recurrence without a model: a scheduler sees the job fail


if __name__ == "__main__":
    main()
