"""TrainState: a checkpoint dict holds everything the next step depends on, and puts it back."""

import io

import torch

from tasks.core.params import load_params
from tasks.training.data import FeatureStats
from tasks.training.loop import accumulate_gradients, make_loss, make_model, make_optimizer
from tasks.training.state import TrainState, rng_state, training_fingerprint

CPU = torch.device("cpu")


def new_state(p, stats):
    model = make_model(stats, p)
    return TrainState(model, make_optimizer(model, p), [32, 32], training_fingerprint("data-v1", p, None), 2, "ddp")


def step(state, x, y, loss_fn):
    state.optimizer.zero_grad(set_to_none=True)
    loss = accumulate_gradients(state.model, loss_fn, x, y, 1 / len(x))[0] / len(x)
    state.optimizer.step()
    state.finish_step(loss, len(x), steps_per_epoch=3)


def test_to_dict_then_load_dict_continues_bit_identical():
    p = load_params().train.replace(hidden=(8,))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 5, generator=g), (torch.rand(64, generator=g) < 0.3).float()
    stats = FeatureStats.of([(x, y)])
    a = new_state(p, stats)
    loss_fn = make_loss(a.model, stats)
    for _ in range(4):
        step(a, x, y, loss_fn)
    assert a.step == 4 and len(a.losses) == 1 and a.position(3) == (1, 1)
    a.splits = [40, 24]
    buf = io.BytesIO()
    torch.save(a.to_dict([rng_state(CPU), rng_state(CPU)]), buf)  # as a checkpoint file holds it
    blob = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)  # data only, as checkpoints load

    b = new_state(p.replace(seed=p.seed + 1), stats)  # other weights, fresh optimizer
    b.load_dict(blob, rank=1, device=CPU)
    assert (b.step, b.losses, b.epoch_loss, b.splits, b.fingerprint) == (
        a.step,
        a.losses,
        a.epoch_loss,
        a.splits,
        a.fingerprint,
    )
    for _ in range(2):
        step(a, x, y, loss_fn)
        step(b, x, y, loss_fn)
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k]), k
    assert a.losses == b.losses


def test_the_fingerprint_names_the_training_not_its_layout():
    p = load_params().train
    base = training_fingerprint("data-v1", p, None)
    assert base == training_fingerprint("data-v1", p, None)
    assert (
        len(
            {
                base,
                training_fingerprint("data-v2", p, None),
                training_fingerprint("data-v1", p.replace(lr=p.lr / 2), None),
                training_fingerprint("data-v1", p, "model-v1"),
                training_fingerprint(
                    "data-v1", p.replace(fsdp={**p.fsdp.model_dump(), "mixed_precision": "bf16"}), None
                ),
            }
        )
        == 5
    )
    # Another world size or strategy is the same training: a resumed job may resize (docs/training.md).
    fsdp = {**p.fsdp.model_dump(), "reshard_after_forward": False, "activation_checkpointing": True}
    for layout in (dict(nproc=1), dict(nproc=4), dict(strategy="fsdp2"), dict(strategy="fsdp2", fsdp=fsdp)):
        assert training_fingerprint("data-v1", p.replace(**layout), None) == base, layout


def test_a_resized_resume_derives_splits_and_rng_from_global_state():
    p = load_params().train.replace(hidden=(8,))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 5, generator=g), (torch.rand(64, generator=g) < 0.3).float()
    stats = FeatureStats.of([(x, y)])
    a = new_state(p, stats)
    step(a, x, y, make_loss(a.model, stats))
    a.splits = [40, 24]
    blob = a.to_dict([rng_state(CPU), rng_state(CPU)])
    one = new_state(p, stats)
    one.world = 1
    torch.manual_seed(123)
    assert one.load_dict(blob, rank=0, device=CPU) == {"step": 1, "world_size": 2, "strategy": "ddp"}
    assert one.splits == [64]  # equal splits of the same global batch
    drawn = torch.rand(3)
    three = new_state(p, stats)
    three.world = 3
    three.load_dict(blob, rank=0, device=CPU)
    assert three.splits == [22, 21, 21]
    assert torch.equal(torch.rand(3), drawn)  # seeded from (fingerprint, step, rank): the same for any world
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, three.model.state_dict()[k]), k
