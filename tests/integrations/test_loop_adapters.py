"""The loop adapters in one CPU process: their contract (`zeus_bso.testing.LoopAdapterContract`)
against a real server, and the learning rate without one. On two processes, with NVML's test
double, they run as the examples (``tests/integrations/test_examples.py``): ZeusBSOAccelerate in
examples/accelerate_loop.py under torchrun, ZeusBSOFabric in examples/fabric_loop.py started by
Fabric's own launcher."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="pip install torch")

from tests.helpers import ServerProcess, process_group_of_one, unique_id
from tests.ports import free_port
from zeus_bso import JobSpec
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter
from zeus_bso.errors import ConfigurationError
from zeus_bso.scaling.lr import stepped_rate
from zeus_bso.testing import LoopAdapterContract, MakeAdapter, loop_job
from zeus_bso.testing.adapters import Logged


def adapter_of(kind: str, logged: Logged | None = None) -> tuple[Any, Any]:
    """The adapter class and its framework object, in this one process on the CPU; with
    ``logged``, the framework logs into it (a tracker, a logger of its own kind)."""
    if kind == "accelerate":
        accelerate = pytest.importorskip("accelerate", reason="pip install 'zeus-bso[accelerate]'")
        from zeus_bso.integrations.accelerate import ZeusBSOAccelerate

        if logged is None:
            return ZeusBSOAccelerate, accelerate.Accelerator(cpu=True)
        accelerator = accelerate.Accelerator(cpu=True, log_with=[recording_tracker(logged)])
        accelerator.init_trackers("contract")
        return ZeusBSOAccelerate, accelerator
    fabric = pytest.importorskip("lightning.fabric", reason="pip install 'zeus-bso[lightning]'")
    from zeus_bso.integrations.fabric import ZeusBSOFabric

    loggers = [] if logged is None else [recording_logger(logged)]
    return ZeusBSOFabric, fabric.Fabric(accelerator="cpu", devices=1, loggers=loggers)


def recording_tracker(logged: Logged) -> Any:
    """An Accelerate tracker that records what it is given into ``logged``."""
    from accelerate.tracking import GeneralTracker

    class Recording(GeneralTracker):  # type: ignore[misc]
        name = "recording"
        requires_logging_directory = False

        @property
        def tracker(self) -> Logged:
            return logged

        def store_init_configuration(self, values: dict[str, Any]) -> None:
            pass

        def log(self, values: dict[str, float], step: int | None = None, **_: Any) -> None:
            logged.append((dict(values), step))

    return Recording()


def recording_logger(logged: Logged) -> Any:
    """A Lightning Fabric logger that records what it is given into ``logged``."""
    from lightning.fabric.loggers import Logger

    class Recording(Logger):  # type: ignore[misc]
        name = "recording"
        version = 0

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            logged.append((dict(metrics), step))

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

    return Recording()


def loop_spec(prefix: str) -> JobSpec:
    return JobSpec(
        job_id_prefix=prefix,
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.9,
        max_epochs=3,
        learning_curve_stop=False,
    )


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loops_learning_rate_follows_the_batch_size_without_the_server_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    adapter, framework = adapter_of(kind)
    spec = loop_spec(f"noserver{kind}")
    url = f"http://127.0.0.1:{free_port()}"
    options = {"lr_rule": "linear", "reference_batch_size": 16}
    with adapter(framework, url, spec, energy_meter=EstimateMeter(100), **options) as bso:
        assert (bso.batch_size, bso.trial_number) == (spec.default_batch_size, None)
        # The loop builds its optimizer at the rate tuned at 16; at 32 it trains at twice it.
        import torch

        assert bso.learning_rate(0.1) == 0.2
        optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        assert bso.scale(optimizer) == 2.0
        assert bso.scale(optimizer) == 2.0  # once: the second call changes nothing
        assert optimizer.param_groups[0]["lr"] == 0.1  # the schedule's; its steps take 0.2
        assert stepped_rate(optimizer) == 0.2
        bso.train_begin()
        assert not bso.report(0.5)
        assert bso.report(0.95)  # its target, judged here
    assert bso.outcome is not None
    assert (bso.outcome.converged, bso.outcome.offline) == (True, True)


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loop_with_an_lr_rule_that_scales_no_optimizer_is_refused_before_it_trains(
    server: ServerProcess, kind: str
) -> None:
    """``lr_rule="linear"`` given, but the loop never calls ``bso.scale(optimizer)`` nor builds
    its optimizer at ``bso.learning_rate(...)``: every size would train at the rate tuned at
    the reference while the job compares them as scaled. Refused at ``train_begin``, its trial
    released; a loop that asks for its rate trains."""
    adapter, framework = adapter_of(kind)
    spec = loop_spec(f"unscaled{kind}")
    options = {"lr_rule": "linear", "reference_batch_size": 16}
    refused = pytest.raises(ConfigurationError, match="lr_rule='linear', but no optimizer")
    meter = EstimateMeter(100)
    with refused, adapter(framework, server.url, spec, energy_meter=meter, **options) as bso:
        bso.train_begin()
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert trial.status == "released"
    with adapter(framework, server.url, spec, energy_meter=EstimateMeter(100), **options) as bso:
        assert bso.learning_rate(0.1) == 0.2  # its optimizer built at the rate for 32
        bso.train_begin()
        bso.report(0.95)
    assert bso.outcome is not None
    assert bso.outcome.converged


def refused_then_trained_anew(run: Any, model: Any, server: ServerProcess) -> None:
    """``run`` trains ``model``; run again, it is refused, its trial released; once the
    model's weights are set anew, it trains."""
    first = run()
    with pytest.raises(ConfigurationError, match="build the model again for each run"):
        run()
    model.reset_parameters()
    run()
    with ServerClient(server.url) as client:
        trials = client.trials(first.job_id)
    assert [t.status for t in trials] == ["reported", "released", "reported"]


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loops_reports_say_its_models_size_and_the_precision_its_framework_trains_in(
    server: ServerProcess, kind: str
) -> None:
    """The trial keeps what the run's reports said of its model: the parameters its optimizer
    stepped (two layers, 12 + 10), and the precision the accelerator or Fabric trains in
    (Fabric's made in bf16; an accelerator's ``mixed_precision="no"`` is 32-bit, and one
    process holds one Accelerate state, whose precision an earlier test may have set)."""
    import torch

    adapter, framework = adapter_of(kind)
    if kind == "fabric":
        from lightning.fabric import Fabric

        framework = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
        precision = "bf16-mixed"
    else:
        own = str(framework.mixed_precision)
        precision = "32" if own == "no" else own
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Linear(4, 2))
    spec = loop_spec(f"precision{kind}")
    with adapter(framework, server.url, spec, energy_meter=EstimateMeter(100)) as bso:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if kind == "accelerate":
            model, optimizer = framework.prepare(model, optimizer)
        else:
            model, optimizer = framework.setup(model, optimizer)
        bso.train_begin()
        framework.backward(model(torch.ones(4, 2)).float().sum())
        optimizer.step()
        bso.report(0.95)
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert (trial.model_parameters, trial.precision) == (22, precision)
    # The accelerator's prepared models say how they train; Fabric's are not known to it.
    assert trial.techniques == ([] if kind == "accelerate" else None)


def test_accelerate_refuses_a_model_an_earlier_run_of_the_job_trained(
    server: ServerProcess,
) -> None:
    """A notebook's Accelerate loop run again with the model the earlier run trained (the
    accelerator prepares it again): refused at ``train_begin``, before any step, its trial
    released; the model with its weights set anew trains."""
    import torch

    adapter, _ = adapter_of("accelerate")
    import accelerate

    spec = loop_spec("retrainedaccelerate")
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)

    def run() -> Any:
        accelerator = accelerate.Accelerator(cpu=True)
        prepared = accelerator.prepare(model)
        with adapter(accelerator, server.url, spec, energy_meter=EstimateMeter(100)) as bso:
            bso.train_begin()
            with torch.no_grad():
                prepared.weight.add_(1.0)  # what training does to it
            bso.report(0.95)
        return bso

    refused_then_trained_anew(run, model, server)


def test_fabric_refuses_a_model_an_earlier_run_of_the_job_trained(server: ServerProcess) -> None:
    """A notebook's Fabric training cell run again with the model the earlier run trained (a
    new optimizer of its parameters, set up again with it): refused at its first optimizer
    step, before the step changes a weight, its trial released; the model with its weights set
    anew trains."""
    import torch

    adapter, fabric = adapter_of("fabric")
    spec = loop_spec("retrainedfabric")
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)

    def run() -> Any:
        with adapter(fabric, server.url, spec, energy_meter=EstimateMeter(100)) as bso:
            wrapped, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
            bso.train_begin()
            fabric.backward(wrapped(torch.ones(4, 2)).sum())
            before = model.weight.detach().clone()
            try:
                optimizer.step()
            except ConfigurationError:
                assert torch.equal(model.weight, before)  # refused before the step
                raise
            bso.report(0.95)
        return bso

    refused_then_trained_anew(run, model, server)


def test_a_plain_loop_refuses_a_model_an_earlier_run_of_the_job_trained(
    server: ServerProcess,
) -> None:
    """A plain loop (`BatchSizeOptimizer`) gives the session no model: the one its optimizer
    steps is checked before its first step. Run again in a notebook with the model the
    earlier run trained, it is refused; a run of another job may train it."""
    import torch

    from zeus_bso import BatchSizeOptimizer

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)

    def run(spec: JobSpec) -> Any:
        with BatchSizeOptimizer(server.url, spec, energy_meter=EstimateMeter(100)) as bso:
            bso.get_batch_size()
            optimizer = torch.optim.Adam(model.parameters(), lr=bso.learning_rate(0.01))
            bso.on_train_begin()
            model(torch.ones(4, 2)).sum().backward()
            optimizer.step()
            bso.on_evaluate(0.95)
        return bso

    first = run(loop_spec("retrainedplain"))
    with pytest.raises(ConfigurationError, match="build the model again for each run"):
        run(loop_spec("retrainedplain"))
    run(loop_spec("retrainedplainphase2"))  # a second phase: a job of its own
    with ServerClient(server.url) as client:
        trials = client.trials(first.job_id)
    assert [t.status for t in trials] == ["reported", "released"]


def steps_of(loader: Any, every: int) -> None:
    """Train a small model over ``loader``, stepping its optimizer every ``every`` batches."""
    import torch

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for index, (x, y) in enumerate(loader):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if (index + 1) % every == 0:
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loop_that_steps_at_every_micro_batch_of_an_accumulating_run_is_refused(
    server: ServerProcess, kind: str
) -> None:
    """32 as four micro-batches of 8 (``max_micro_batch_size=8``), but the loop steps its
    optimizer at each micro-batch: every step trained 8 while the server charges 32. Refused
    at the run's first report, its trial released; a loop that steps every
    ``bso.accumulation_steps`` micro-batches reports."""
    import torch

    adapter, framework = adapter_of(kind)
    spec = loop_spec(f"unaccumulated{kind}")
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    options = {"max_micro_batch_size": 8, "energy_meter": EstimateMeter(100)}
    refused = pytest.raises(ConfigurationError, match="each step took one micro-batch")
    with refused, adapter(framework, server.url, spec, **options) as bso:
        assert (bso.batch_size, bso.micro_batch_size, bso.accumulation_steps) == (32, 8, 4)
        loader = torch.utils.data.DataLoader(data, batch_size=bso.micro_batch_size)
        bso.train_begin(len(loader))
        steps_of(loader, every=1)
        bso.report(0.5)
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert (trial.batch_size, trial.status) == (32, "released")
    with adapter(framework, server.url, spec, **options) as bso:
        loader = torch.utils.data.DataLoader(data, batch_size=bso.micro_batch_size)
        bso.train_begin(len(loader))
        steps_of(loader, every=bso.accumulation_steps)
        bso.report(0.95)
    assert bso.outcome is not None
    assert bso.outcome.converged


def test_accelerate_says_where_no_prepared_dataloader_takes_the_batch_size(
    sqlite_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A loop that keeps its own DataLoader size (the one line a user adopting zeus-bso must
    change) trained it while the server charged its own, without a word, unless the loop
    called ``step_begin(batch)``. Said at ``train_begin`` now; a loop whose training
    DataLoader takes ``bso.micro_batch_size`` is told nothing."""
    import torch

    said = "no DataLoader the accelerator prepared takes this run's batch size"
    data = torch.utils.data.TensorDataset(torch.zeros(64, 2))
    for own_size in (True, False):
        adapter, accelerator = adapter_of("accelerate")
        caplog.clear()
        spec = loop_spec("fixedloader")
        with adapter(accelerator, sqlite_server.url, spec, energy_meter=EstimateMeter(100)) as bso:
            size = 8 if own_size else bso.micro_batch_size
            loaders = [torch.utils.data.DataLoader(data, batch_size=n) for n in (size, 64)]
            accelerator.prepare(*loaders)
            bso.train_begin()
            bso.report(0.95)
        assert caplog.text.count(said) == int(own_size)
        if own_size:
            assert f"batch size, {bso.batch_size} (theirs: 8, 64)" in caplog.text
        accelerator.free_memory()


def test_accelerate_says_where_reports_come_every_few_steps(
    sqlite_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Each report counts as an epoch of the job's: a loop that validated every few steps had
    its max_epochs count those reports (a job of 3 epochs stopped 6 steps into its first), of
    another number of samples at each batch size, without a word. Said at the run's first
    report, against the optimizer steps of an epoch of the DataLoader the accelerator prepared;
    a loop that reports after each epoch is told nothing."""
    import torch

    said = "the run's first report came after 2 optimizer steps of an epoch's 8"
    for every in (2, None):
        adapter, accelerator = adapter_of("accelerate")
        caplog.clear()
        with adapter(
            accelerator, sqlite_server.url, loop_spec("everyfew"), energy_meter=EstimateMeter(100)
        ) as bso:
            data = torch.utils.data.TensorDataset(torch.zeros(8 * bso.micro_batch_size, 2))
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(data, batch_size=bso.micro_batch_size)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            bso.train_begin()
            for step, (x,) in enumerate(loader, start=1):
                optimizer.zero_grad()
                accelerator.backward(model(x).sum())
                optimizer.step()
                if (step % every == 0 if every else step == len(loader)) and bso.report(0.5):
                    break
        assert caplog.text.count("optimizer steps of an epoch's") == int(every is not None)
        if every is not None:
            assert said in caplog.text
        accelerator.free_memory()


def test_accelerate_takes_only_a_loop_prepared_again_smaller_for_a_run_gone_on(
    sqlite_server: ServerProcess,
) -> None:
    """A loop under ``find_executable_batch_size`` prepares its DataLoaders again at a smaller
    size and calls ``train_begin`` again: the run goes on outside the optimizer (the corpus's
    ``accelerate_find_batch_size.py``). A loop that prepares a smaller evaluation DataLoader
    at each validation, and begins once, is reported as it trains: its trial is its own."""
    import torch

    data = torch.utils.data.TensorDataset(torch.zeros(64, 2))
    for again in (False, True):
        adapter, accelerator = adapter_of("accelerate")
        spec = loop_spec("preparedagain")
        with adapter(accelerator, sqlite_server.url, spec, energy_meter=EstimateMeter(100)) as bso:
            size = bso.micro_batch_size
            accelerator.prepare(torch.utils.data.DataLoader(data, batch_size=size))
            bso.train_begin()
            smaller = torch.utils.data.DataLoader(data, batch_size=size // 2)
            accelerator.prepare(smaller)  # an evaluation's; or the loop's, prepared again
            if again:
                bso.train_begin()
            answer = bso.report(0.95)  # the target: the run ends
        assert answer.reported
        assert bso.outcome is not None
        assert bso.outcome.went_on == again
        with ServerClient(sqlite_server.url) as client:
            trials = client.job_state(bso.job_id)["trials"]
        (trial,) = [t for t in trials if t["trial_number"] == bso.outcome.trial_number]
        assert trial["status"] == ("infeasible" if again else "reported")
        accelerator.free_memory()


def test_a_fabric_loops_memory_check_takes_steps_at_the_precision_it_trains_at(
    sqlite_server: ServerProcess,
) -> None:
    """Fabric in bf16-mixed: its wrapper runs the forward under autocast, and the module the
    check is given (``model.module``, each process alone) does not. With
    ``autocast=fabric.autocast`` the steps tried compute in bf16, as the run's do; without it in
    float32, with activations twice the size (on a GPU, a size that fits would run out)."""
    import torch

    fabric_module = pytest.importorskip(
        "lightning.fabric", reason="pip install 'zeus-bso[lightning]'"
    )
    from zeus_bso.integrations.fabric import ZeusBSOFabric
    from zeus_bso.integrations.probe import steps_of

    fabric = fabric_module.Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    data = torch.utils.data.TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
    computed: list[torch.dtype] = []
    spec = loop_spec(unique_id("precision"))
    with ZeusBSOFabric(fabric, sqlite_server.url, spec, energy_meter=EstimateMeter(100)) as bso:
        layer = torch.nn.Linear(2, 1)
        layer.register_forward_hook(lambda _m, _i, out: computed.append(out.dtype))
        model, optimizer = fabric.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
        model(data.tensors[0][:2])  # the run's forward
        trains_at = computed.pop()
        assert trains_at == torch.bfloat16

        def loss(batch: Any) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(model.module(x).float(), y)

        loader = torch.utils.data.DataLoader(data, batch_size=bso.batch_size)
        steps_of(model.module, optimizer, loader, loss, steps=1)(8)
        assert computed == [torch.float32]  # the module alone
        computed.clear()
        tried = steps_of(model.module, optimizer, loader, loss, steps=1, autocast=fabric.autocast)
        assert bso.fit_in_memory(tried) == bso.batch_size
        assert computed == [trains_at]
        bso.train_begin()
        bso.report(0.95)


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_prepared_dataloader_given_to_steps_of_is_refused_with_what_to_give(kind: str) -> None:
    """A DataLoader the framework prepared for its processes (Accelerate's ``DataLoaderShard``,
    Fabric's wrapper) was refused as one that cannot be built at another size, with "write
    try_steps by hand": the loop has the DataLoader it built, which is what to give."""
    import torch

    from zeus_bso.integrations.probe import steps_of

    _, framework = adapter_of(kind)
    built = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(8, 2)))
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if kind == "accelerate":
        prepared, what = framework.prepare(built), "accelerator.prepare()"
    else:
        prepared, what = framework.setup_dataloaders(built), "fabric.setup_dataloaders()"
    with pytest.raises(ConfigurationError, match=r"give it the DataLoader as built") as refused:
        steps_of(model, optimizer, prepared, lambda batch: model(batch[0]).sum())
    assert what in str(refused.value)
    assert callable(steps_of(model, optimizer, built, lambda batch: model(batch[0]).sum()))
    if kind == "accelerate":
        framework.free_memory()


def test_a_loops_memory_check_does_not_try_a_model_sharded_across_processes(
    sqlite_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """``steps_of`` of a model that FSDP shards (``fully_shard``, in a process group of one
    here) tries no step, as the callbacks' checks do not: a step by hand would find only this
    process's shard, or gather the rest in collectives one process cannot take alone. The size
    is taken, and the run says why it was not tried."""
    import torch
    from torch.distributed.fsdp import fully_shard

    from zeus_bso.integrations.probe import steps_of

    adapter, framework = adapter_of("fabric")
    spec = loop_spec(unique_id("stepsofsharded"))
    data = torch.utils.data.TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
    tried: list[int] = []

    def loss(batch: Any) -> Any:
        tried.append(len(batch[0]))
        return torch.nn.functional.mse_loss(model(batch[0]), batch[1])

    meter = EstimateMeter(100)
    with (
        process_group_of_one(),
        caplog.at_level(logging.INFO),
        adapter(framework, sqlite_server.url, spec, energy_meter=meter) as bso,
    ):
        model = torch.nn.Sequential(torch.nn.Linear(2, 1))
        fully_shard(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(data, batch_size=bso.batch_size)
        assert bso.fit_in_memory(steps_of(model, optimizer, loader, loss)) == bso.batch_size
        bso.train_begin()
        bso.report(0.95)
    assert tried == []
    assert f"batch size {bso.batch_size} is new to these GPUs, but its steps are not tried" in (
        caplog.text
    )
    assert "FSDP shards the model" in caplog.text


@pytest.mark.parametrize("kind", ["accelerate", "fabric"])
def test_a_loops_memory_check_takes_steps_of_its_model_and_undoes_them(
    kind: str, sqlite_server: ServerProcess
) -> None:
    """``steps_of`` makes a loop's ``try_steps``: steps of its own model, optimizer and data at
    each size tried, undone. 64 runs out of memory (a loss of more than 32 samples raises it),
    the smallest size, 16, is tried and fits, and 32 does: the run trains at 32, and the model,
    the optimizer's state and the DataLoader's shuffling are as they were."""
    import torch

    from zeus_bso.integrations.probe import steps_of

    adapter, framework = adapter_of(kind)
    spec = loop_spec(unique_id("stepsof")).model_copy(update={"default_batch_size": 64})
    data = torch.utils.data.TensorDataset(torch.randn(256, 2), torch.randn(256, 1))
    draws = torch.Generator().manual_seed(5)
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=draws)
    tried: list[int] = []

    def loss(batch: Any) -> Any:
        x, y = batch
        tried.append(len(x))
        if len(x) > 32:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {len(x)}")
        return torch.nn.functional.mse_loss(model(x), y)

    with adapter(framework, sqlite_server.url, spec, energy_meter=EstimateMeter(100)) as bso:
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        if kind == "accelerate":
            model, optimizer = framework.prepare(model, optimizer)
        else:
            model, optimizer = framework.setup(model, optimizer)
        weights = [p.detach().clone() for p in model.parameters()]
        order = [int(i) for i in torch.randperm(256, generator=draws.clone_state())]
        assert bso.fit_in_memory(steps_of(model, optimizer, loader, loss)) == 32
        assert tried == [64, 16, 16, 16, 32, 32, 32]  # 3 steps a size; 64 ran out at its first
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights, strict=True))
        assert not optimizer.state_dict()["state"]  # no momentum left
        assert [int(i) for i in torch.randperm(256, generator=draws)] == order
        bso.train_begin()
        bso.report(0.95)
    with ServerClient(sqlite_server.url) as client:
        trials = client.job_state(bso.job_id)["trials"]
    assert sorted((t["batch_size"], t["status"]) for t in trials) == [
        (32, "reported"),
        (64, "infeasible"),
    ]
    if kind == "accelerate":
        framework.free_memory()


class TestAccelerate(LoopAdapterContract):
    """`ZeusBSOAccelerate` on one CPU process passes the loop adapters' contract; Accelerate's
    own accumulation steps follow the session's."""

    @pytest.fixture
    def logged(self) -> Logged:
        return []

    @pytest.fixture
    def adapter(self, logged: Logged) -> MakeAdapter:
        adapter, accelerator = adapter_of("accelerate", logged)
        return lambda url, job, **options: adapter(accelerator, url, job, **options)

    @pytest.fixture
    def server_url(self, sqlite_server: ServerProcess) -> str:
        return sqlite_server.url

    def test_the_accelerator_accumulates_as_the_session_says(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        job = loop_job("accsteps")
        options = {"energy_meter": EstimateMeter(100), "max_micro_batch_size": 16}
        with adapter(server_url, job, **options) as bso:
            assert bso.accelerator.gradient_accumulation_steps == bso.accumulation_steps == 2
            bso.release("not trained in this test")
        # Given back at the end: a later run with this accelerator and without accumulation
        # was refused, the accelerator accumulating "of its own".
        assert bso.accelerator.gradient_accumulation_steps == 1
        adapter(server_url, job, energy_meter=EstimateMeter(100)).release("not trained")
        assert bso.outcome is not None
        assert bso.outcome.accumulation_steps == 2  # the run's line says how it trained
        assert f"batch size {bso.batch_size} (2 accumulated micro-batches of 16)" in (
            bso.outcome.summary()
        )

    def test_an_accelerator_that_accumulates_of_its_own_is_refused_before_the_server_is_asked(
        self, server_url: str
    ) -> None:
        """``Accelerator(gradient_accumulation_steps=2)`` took each optimizer step over two
        batches of the size the server charged; accumulation is the adapter's
        (``max_micro_batch_size``), as the Lightning and HF callbacks have it."""
        adapter, _ = adapter_of("accelerate")
        accelerate = pytest.importorskip("accelerate")
        accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
        job = loop_job("accown")
        words = r"gradient_accumulation_steps=2\): .* pass max_micro_batch_size"
        with pytest.raises(ConfigurationError, match=words):
            adapter(accelerator, server_url, job, energy_meter=EstimateMeter(100))
        with ServerClient(server_url) as client:
            assert not client.list_jobs(prefix=job.job_id_prefix or "")

    def test_an_accelerator_that_splits_batches_across_processes_is_refused(
        self, server_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``split_batches=True`` on two processes: each trains half the DataLoader's batch,
        while the server charges each the whole (the first-batch check refused it with words
        saying the script built its DataLoader at a size of its own, which it had not). Refused
        before the server is asked. (One CPU process here, told it is one of two.)"""
        adapter, _ = adapter_of("accelerate")
        accelerate = pytest.importorskip("accelerate")
        from accelerate.utils import DataLoaderConfiguration

        config = DataLoaderConfiguration(split_batches=True)
        accelerator = accelerate.Accelerator(cpu=True, dataloader_config=config)
        assert adapter(accelerator, server_url, loop_job("accsplit1")).release("one") is None
        monkeypatch.setattr(type(accelerator), "num_processes", property(lambda self: 2))
        job = loop_job("accsplit")
        with pytest.raises(ConfigurationError, match=r"split_batches=True\) splits each batch"):
            adapter(accelerator, server_url, job, energy_meter=EstimateMeter(100))
        with ServerClient(server_url) as client:
            assert not client.list_jobs(prefix=job.job_id_prefix or "")


class TestFabric(LoopAdapterContract):
    """`ZeusBSOFabric` on one CPU process passes the loop adapters' contract."""

    @pytest.fixture
    def logged(self) -> Logged:
        return []

    @pytest.fixture
    def adapter(self, logged: Logged) -> MakeAdapter:
        adapter, fabric = adapter_of("fabric", logged)
        return lambda url, job, **options: adapter(fabric, url, job, **options)

    @pytest.fixture
    def server_url(self, sqlite_server: ServerProcess) -> str:
        return sqlite_server.url

    def test_a_fabric_of_several_processes_not_launched_yet_is_refused(
        self, server_url: str
    ) -> None:
        """``ZeusBSOFabric`` before ``fabric.launch()`` of two processes: the first asked the
        server for a trial, and the second, started by the launch and running the script from
        its start, waited for a broadcast without a process group and crashed (AttributeError).
        Refused before the server is asked."""
        fabric = pytest.importorskip("lightning.fabric")
        from zeus_bso.integrations.fabric import ZeusBSOFabric

        two = fabric.Fabric(accelerator="cpu", devices=2, strategy="ddp")
        job = loop_job("fabnolaunch")
        with pytest.raises(ConfigurationError, match=r"call fabric.launch\(\) before ZeusBSO"):
            ZeusBSOFabric(two, server_url, job, energy_meter=EstimateMeter(100))
        with ServerClient(server_url) as client:
            assert not client.list_jobs(prefix=job.job_id_prefix or "")
