"""Streaming a data version: the order every rank derives, the bounded cache, the statistics."""

import numpy as np
import pytest
import torch

from tasks.datasets import load_dataset
from tasks.registry import Registry
from tasks.training.data import EpochOrder, FeatureStats, PartitionCache, StreamingVersion
from tasks.training.spread import variance_across_ranks


def labeled_partition(emails, tmp_path, name, rows):
    df = emails.iloc[rows].drop(columns=["spam"]).copy()
    df["label"] = emails["spam"].iloc[rows].to_numpy()
    df.loc[df.index[:5], "label"] = -1  # rows every LF abstained on: never trained on
    df["label_prob"] = df["label"].clip(lower=0).astype(float)
    path = tmp_path / f"{name}.parquet"
    df.to_parquet(path, index=False)
    return path


@pytest.fixture
def three_partitions(settings, emails, tmp_path):
    reg = Registry(settings)
    parts = {
        f"batch-000{i}": labeled_partition(emails, tmp_path, f"p{i}", slice(200 * i, 200 * i + 150 + 20 * i))
        for i in range(1, 4)
    }
    return reg.snapshot(parts, {"rows_by_batch": {}})["data_version"]


def test_an_epoch_visits_every_row_once_and_depends_only_on_seed_and_epoch():
    counts = [7, 0, 13, 5]
    order = EpochOrder(counts, seed=3, epoch=2)
    seen = [(part, int(r)) for part, rows in order.locate(0, 25) for r in rows]
    assert sorted(seen) == sorted((p, r) for p, n in enumerate(counts) for r in range(n))
    # Any cut of the positions gives the same rows as one pass (a batch may span partitions).
    pieces = [(part, int(r)) for a, b in ((0, 4), (4, 11), (11, 25)) for part, rows in order.locate(a, b) for r in rows]
    assert pieces == seen
    again = [(part, int(r)) for part, rows in EpochOrder(counts, 3, 2).locate(0, 25) for r in rows]
    other = [(part, int(r)) for part, rows in EpochOrder(counts, 3, 3).locate(0, 25) for r in rows]
    assert again == seen and other != seen


def test_feature_stats_over_chunks_equal_the_whole():
    x = torch.randn(1000, 6) * torch.arange(1, 7) + 100  # a large mean: the sums must not lose it
    y = torch.rand(1000)
    stats = FeatureStats.of([(x[:300], y[:300]), (x[300:301], y[300:301]), (x[301:], y[301:])])
    assert stats.rows == 1000
    torch.testing.assert_close(stats.mean, x.double().mean(0).float())
    torch.testing.assert_close(stats.std, x.double().std(0).float())
    assert stats.positive_share == pytest.approx(float(y.double().mean()))
    with pytest.raises(ValueError, match="no trainable rows"):
        FeatureStats.of([])


def test_cache_evicts_least_recently_used_past_its_budget():
    loaded = []

    def load(i):
        loaded.append(i)
        return torch.zeros(250), torch.zeros(0)  # 1,000 bytes each

    cache = PartitionCache(load, budget_bytes=2_500)
    for i in (0, 1, 0, 2, 1, 0):
        cache.get(i)
    assert loaded == [0, 1, 2, 1, 0] and list(cache.items) == [1, 0]  # LRU: 1, 0, 2 went in turn
    big = PartitionCache(lambda i: (torch.zeros(10_000), torch.zeros(0)), budget_bytes=10)
    big.get(0), big.get(1)
    assert list(big.items) == [1]  # one partition over budget still works


def test_streaming_reads_the_version_whatever_the_cache(settings, three_partitions):
    whole = Registry(settings).read_data_version(three_partitions)
    whole = whole[whole["label"] != -1]
    x_all = torch.from_numpy(load_dataset().featurize(whole))
    roomy = StreamingVersion(three_partitions, cache_mb=256, seed=1)
    tight = StreamingVersion(three_partitions, cache_mb=1e-6, seed=1)  # one partition at a time
    assert len(roomy) == len(whole) == sum(roomy.counts) and len(roomy.counts) == 3
    torch.testing.assert_close(roomy.stats.mean, x_all.double().mean(0).float())
    for epoch in (0, 1):
        xr, yr = roomy.rows(epoch, 0, len(roomy))
        xt, yt = tight.rows(epoch, 0, len(tight))
        assert torch.equal(xr, xt) and torch.equal(yr, yt)
        # the same multiset of rows as the whole version, in another order each epoch
        assert torch.equal(torch.sort(xr[:, 0]).values, torch.sort(x_all[:, 0]).values)
    assert roomy.cache.loads == 3  # stayed in memory after the first pass
    assert tight.cache.loads > 3 and len(tight.cache.items) == 1
    assert not torch.equal(roomy.rows(0, 0, 50)[0], roomy.rows(1, 0, 50)[0])


def test_a_version_without_trainable_rows_is_named(settings, emails, tmp_path):
    path = labeled_partition(emails, tmp_path, "none", slice(0, 20))
    import pandas as pd

    df = pd.read_parquet(path)
    df["label"] = -1
    df.to_parquet(path, index=False)
    version = Registry(settings).snapshot({"batch-0001": path}, {"rows_by_batch": {}})["data_version"]
    with pytest.raises(ValueError, match=f"data version {version} has no labeled rows"):
        StreamingVersion(version)


def test_variance_across_ranks_is_the_spread_of_the_local_gradients():
    g = [np.array([1.0, 2.0]), np.array([3.0, -2.0])]
    mean = (g[0] + g[1]) / 2
    expected = np.mean([np.sum((gi - mean) ** 2) for gi in g])
    got = variance_across_ranks([float(np.sum(gi**2)) for gi in g], float(np.sum(mean**2)))
    assert got == pytest.approx(expected)
    assert variance_across_ranks([4.0, 4.0], 4.0) == 0.0  # ranks that agree


def test_metrics_window_covers_every_step_since_the_last_line(tmp_path):
    import json
    import statistics

    from tasks.training.telemetry import TrainingMetrics

    model = torch.nn.Linear(3, 1)
    model(torch.ones(2, 3)).sum().backward()
    before = [t.detach().clone() for t in model.parameters()]
    m = TrainingMetrics(tmp_path / "m.jsonl", enabled=True)
    for loss in (1.0, 2.0, 4.0):
        m.observe(loss)
    m.record(3, 0, 4.0, model, before, [8], 8, 0.01, local_grad_sq=[5.0, 3.0])
    (line,) = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert line["loss_std"] == pytest.approx(statistics.pstdev([1.0, 2.0, 4.0]))
    grad_sq = line["grad_norm"] ** 2
    assert line["grad_var_across_ranks"] == pytest.approx(max(0.0, 4.0 - grad_sq))
    assert m.window == []  # the next window starts empty


def test_streamed_targets_carry_each_rows_loss_weight(settings, emails, tmp_path):
    """A partition with label sources: gold rows weigh 1, weak rows their weight, weight-0 rows are left
    out; a partition from before label_weight existed trains every row at weight 1."""
    import pandas as pd

    from tasks.labeling.mix import training_labels

    new = emails.iloc[:100].drop(columns=["spam"]).reset_index(drop=True)
    weak = np.where(np.arange(100) % 10 == 0, np.nan, np.linspace(0.05, 0.95, 100))
    gold = np.where(np.arange(100) % 4 == 0, emails["spam"].iloc[:100].to_numpy(float), np.nan)
    labels = training_labels(weak, gold, "weak_plus_gold", 0.25)
    for column in labels.columns:
        new[column] = labels[column].to_numpy()
    new_path, old_path = tmp_path / "new.parquet", labeled_partition(emails, tmp_path, "old", slice(100, 150))
    new.to_parquet(new_path, index=False)
    version = Registry(settings).snapshot({"batch-0001": new_path, "batch-0002": old_path}, {"rows_by_batch": {}})
    data = StreamingVersion(version["data_version"], seed=0)
    trains = labels["label_weight"] > 0
    assert len(data) == int(trains.sum()) + 45  # the old partition: 50 rows, 5 unlabeled
    _, y = data.rows(0, 0, len(data))
    assert y.shape == (len(data), 2)
    weights = sorted(set(y[:, 1].tolist()))
    assert weights == [0.25, 1.0]  # weak at 0.25; gold and the old partition's rows at 1
    assert int((y[:, 1] == 0.25).sum()) == int((labels["label_source"] == "weak").sum())
    expected = float(
        np.average(
            np.r_[labels["label_prob"][trains], pd.read_parquet(old_path).query("label != -1")["label_prob"]],
            weights=np.r_[labels["label_weight"][trains], np.ones(45)],
        )
    )
    assert data.stats.positive_share == pytest.approx(expected, rel=1e-6)
