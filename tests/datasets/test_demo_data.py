from tasks.core.params import load_params
from tasks.datasets.demo_feed import DemoFeed, split_demo
from tasks.plugins import emails as ds
from tasks.plugins.emails import GOLD_COLUMN, ID_COLUMN, RAW_COLUMNS


def test_split_keeps_gold_rows_out_of_the_batches(emails):
    p = load_params().demo
    dev, test, batches = split_demo(emails, p, ds)
    batch_ids = set().union(*(set(b[ID_COLUMN]) for b in batches))
    assert not batch_ids & set(dev[ID_COLUMN]) and not batch_ids & set(test[ID_COLUMN])
    assert not set(dev[ID_COLUMN]) & set(test[ID_COLUMN])
    assert len(batch_ids) + len(dev) + len(test) == len(emails) == 3921
    # stratified: both gold sets hold spam near the overall 9% rate
    for gold in (dev, test):
        assert 0.07 < gold[GOLD_COLUMN].mean() < 0.12
    # batches are unlabeled, in time order, of the configured size
    assert all(GOLD_COLUMN not in b.columns and list(b.columns) == RAW_COLUMNS for b in batches)
    times = [t for b in batches for t in b["time"]]
    assert times == sorted(times)
    assert all(len(b) == p.batch_size for b in batches[:-1])


def test_feed_delivers_batches_in_order_then_stops(settings):
    layout = settings.layout.ensure()
    feed = DemoFeed(layout, load_params(overrides={"demo": {"batch_size": 1000}}).demo, ds)
    feed.ensure_gold()
    names = []
    while (path := feed.deliver_next()) is not None:
        names.append(path.name)
    assert names == ["batch-0001.csv", "batch-0002.csv", "batch-0003.csv"]
    assert feed.delivered() == 3


def test_changing_the_split_after_the_fact_is_refused(settings):
    import pytest

    layout = settings.layout.ensure()
    DemoFeed(layout, load_params().demo, ds).ensure_gold()
    other = DemoFeed(layout, load_params(overrides={"demo": {"seed": 99}}).demo, ds)
    with pytest.raises(ValueError, match="differs from the split"):
        other.deliver_next()
