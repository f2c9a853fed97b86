"""How the demo feed orders the nightly replay: by the time column, in source order, or shuffled with the
demo seed when the dataset plug-in asks (`replay_order = "shuffle"`), so a class-sorted source does not
become single-class batches. tests/datasets/class_sorted.py is such a source."""

from __future__ import annotations

import types

import pytest

from tasks.core.params import load_params
from tasks.datasets import DatasetError
from tasks.datasets.demo_feed import DemoFeed, split_demo
from tests.datasets import class_sorted

PARAMS = load_params(overrides={"demo": {"batch_size": 100}}).demo


def _variant(**attrs) -> types.ModuleType:
    """class_sorted with some attributes changed (None: removed)."""
    mod = types.ModuleType("class_sorted_variant")
    mod.__dict__.update({k: v for k, v in vars(class_sorted).items() if not k.startswith("__")})
    for k, v in attrs.items():
        if v is None:
            mod.__dict__.pop(k, None)
        else:
            setattr(mod, k, v)
    return mod


def _classes(batches, source):
    gold = dict(zip(source[class_sorted.ID_COLUMN], source[class_sorted.GOLD_COLUMN]))
    return [set(b[class_sorted.ID_COLUMN].map(gold)) for b in batches]


def test_a_class_sorted_source_in_source_order_makes_single_class_batches():
    source = class_sorted.load_source()
    _, _, batches = split_demo(source, PARAMS, _variant(replay_order=None))  # no time column: source order
    classes = _classes(batches, source)
    assert sum(len(c) == 1 for c in classes) >= len(classes) - 1  # what the shuffle is for


def test_the_plugin_asks_for_a_seeded_shuffle_and_every_batch_holds_both_classes():
    source = class_sorted.load_source()
    dev, test, batches = split_demo(source, PARAMS, class_sorted)
    assert len(batches) >= 10 and all(c == {0, 1} for c in _classes(batches, source))
    ids = [i for b in batches for i in b[class_sorted.ID_COLUMN]]
    assert len(ids) == len(set(ids)) == len(source) - len(dev) - len(test)  # each row once, no gold row
    assert not set(ids) & (set(dev[class_sorted.ID_COLUMN]) | set(test[class_sorted.ID_COLUMN]))
    again = split_demo(source, PARAMS, class_sorted)[2]
    assert all(a.equals(b) for a, b in zip(batches, again))  # the same seed, the same batches
    other = split_demo(source, load_params(overrides={"demo": {"batch_size": 100, "seed": 8}}).demo, class_sorted)
    assert not other[2][0].equals(batches[0])


def test_time_order_stays_the_default_when_there_is_a_time_column():
    from tests.toy import dataset as toy

    _, _, batches = split_demo(toy.load_source(), PARAMS, toy)
    times = [t for b in batches for t in b[toy.TIME_COLUMN]]
    assert times == sorted(times)


def test_an_unknown_replay_order_is_refused_naming_the_choices():
    with pytest.raises(DatasetError, match=r"replay_order 'random' .*'time', 'source', 'shuffle'"):
        split_demo(class_sorted.load_source(), PARAMS, _variant(replay_order="random"))
    with pytest.raises(DatasetError, match="replay_order 'time' needs a TIME_COLUMN"):
        split_demo(class_sorted.load_source(), PARAMS, _variant(replay_order="time"))


def test_the_feed_records_the_order_and_refuses_another_after_the_fact(settings):
    layout = settings.layout.ensure()
    feed = DemoFeed(layout, PARAMS, class_sorted)
    feed.ensure_gold()
    delivered = feed.deliver_next()
    assert delivered.name == "batch-0001.csv"
    other = DemoFeed(layout, PARAMS, _variant(replay_order="source"))
    with pytest.raises(ValueError, match="differs from the split"):
        other.deliver_next()
