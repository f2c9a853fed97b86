"""Step records for tests that call steps directly: the train step's record with test defaults."""

from tasks.core.records import TrainRecord


def train_record(**changes) -> TrainRecord:
    """A TrainRecord of a one-step CPU run; `changes` set what the test cares about."""
    fields = dict(
        data_version="data-v3",
        rows=60,
        partitions=1,
        epochs=1,
        world_size=1,
        device="cpu",
        final_loss=0.1,
        seconds=1.0,
        resumed_from_step=None,
        steps=1,
        n_parameters=1,
        warm_start=None,
        metrics={},
        model="m.pt",
        outputs="out",
    )
    return TrainRecord(**{**fields, **changes})
