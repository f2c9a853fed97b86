"""A data version streamed partition by partition, in a seeded order every rank derives alike.

Memory stays bounded whatever the dataset size: featurized partitions are kept in an
LRU cache of `cache_mb` (a small dataset stays whole in memory; a large one is read
again from DVC each epoch), and the one full pass at start (row counts, the input
scaling, the label balance) reads one partition at a time.

The order of an epoch: the partitions in a seeded permutation, the rows of each in a
seeded permutation of their own. Global position k of epoch e is therefore a pure
function of (seed, e, k): a step's global batch is positions [s*B, (s+1)*B), the same
for any number of processes, and a run's exact data position is its step number.
Each rank reads only the partitions its own slice of a batch touches.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from tasks.training.batching import seeded_permutation

if TYPE_CHECKING:
    from tasks.core.settings import Settings


@dataclass(frozen=True)
class FeatureStats:
    """Row count, per-feature mean and standard deviation, and each class's share of the soft labels
    (weighted by the rows' loss weights), of the trainable rows, accumulated one chunk at a time
    (float64 sums, so the order of chunks hardly matters). Targets: `[n]` (P(class 1)), `[n, 2]`
    (P(class 1), weight), or `[n, K + 1]` (K class probabilities, weight): see `training_targets`."""

    rows: int
    mean: torch.Tensor
    std: torch.Tensor
    class_shares: tuple[float, ...]

    @property
    def classes(self) -> int:
        return len(self.class_shares)

    @property
    def positive_share(self) -> float:
        """Binary: the share of class 1."""
        return self.class_shares[1]

    @staticmethod
    def of(chunks) -> "FeatureStats":
        n, s, sq, ysum, wsum = 0, None, None, None, 0.0
        for x, y in chunks:
            target, weight = split_targets(y.to(torch.float64))
            x64 = x.to(torch.float64)
            s = x64.sum(0) if s is None else s + x64.sum(0)
            sq = x64.pow(2).sum(0) if sq is None else sq + x64.pow(2).sum(0)
            n += len(x)
            part = (target * weight.unsqueeze(-1)).sum(0)
            ysum = part if ysum is None else ysum + part
            wsum += float(weight.sum())
        if not n:
            raise ValueError("no trainable rows")
        mean = s / n
        var = (sq - n * mean.pow(2)) / max(n - 1, 1)  # unbiased, like torch.std
        shares = (ysum / wsum).tolist() if wsum > 0 else [0.0] * len(ysum)
        if len(shares) == 1:  # binary: P(class 1)
            shares = [1.0 - shares[0], shares[0]]
        return FeatureStats(n, mean.float(), var.clamp_min(0).sqrt().float(), tuple(shares))


def split_targets(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets -> (class targets [n, 1] (binary P(class 1)) or [n, K], row weights [n])."""
    if y.dim() == 1:
        return y.unsqueeze(-1), torch.ones_like(y)
    if y.shape[1] == 3:
        raise ValueError("targets [n, 3] are neither binary (P(class 1), weight) nor K >= 3 classes plus a weight")
    return y[:, :-1], y[:, -1]


class PartitionCache:
    """Least recently used featurized partitions, evicted past `budget_bytes` (the one just
    loaded always stays, so a single partition larger than the budget still works)."""

    def __init__(self, load: Callable[[int], tuple[torch.Tensor, torch.Tensor]], budget_bytes: int):
        self.load, self.budget = load, budget_bytes
        self.items: OrderedDict[int, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self.loads = 0

    @staticmethod
    def _size(item: tuple[torch.Tensor, torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in item)

    def get(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i in self.items:
            self.items.move_to_end(i)
            return self.items[i]
        item = self.load(i)
        self.loads += 1
        self.items[i] = item
        while len(self.items) > 1 and sum(map(self._size, self.items.values())) > self.budget:
            self.items.popitem(last=False)
        return item


class EpochOrder:
    """Where each global position of an epoch lives: (partition, row within it)."""

    def __init__(self, counts: list[int], seed: int, epoch: int):
        self.seed, self.epoch = seed, epoch
        self.parts = [int(i) for i in seeded_permutation(len(counts), seed, epoch, salt=0) if counts[int(i)] > 0]
        self.starts = np.cumsum([0] + [counts[i] for i in self.parts]).tolist()
        self._perms: dict[int, torch.Tensor] = {}

    def _rows(self, part: int, count: int) -> torch.Tensor:
        if part not in self._perms:
            if len(self._perms) >= 8:  # positions advance: old partitions are done
                self._perms.pop(next(iter(self._perms)))
            self._perms[part] = seeded_permutation(count, self.seed, self.epoch, salt=part + 1)
        return self._perms[part]

    def locate(self, start: int, stop: int) -> list[tuple[int, torch.Tensor]]:
        """Positions [start, stop) as (partition, row indices) groups, in order."""
        groups, k = [], start
        while k < stop:
            j = bisect.bisect_right(self.starts, k) - 1
            end = min(stop, self.starts[j + 1])
            part = self.parts[j]
            rows = self._rows(part, self.starts[j + 1] - self.starts[j])
            groups.append((part, rows[k - self.starts[j] : end - self.starts[j]]))
            k = end
        return groups


def training_targets(df) -> np.ndarray:
    """The loss's targets of labeled rows, float32: `[n, 2]` (soft label, row weight) when binary,
    `[n, K + 1]` (the K class probabilities, row weight) for K > 2 classes.

    Binary `label_prob` is P(class 1): the gold 0/1 on gold rows, the label model's probability on weak
    ones; K classes have `label_prob_0` .. `label_prob_<K-1>` (tasks/labeling/mix.py). `label_weight`
    is the row's weight in the noise-aware loss (partitions written before it existed train every
    row at weight 1)."""
    columns = (
        ["label_prob"]
        if "label_prob" in df
        else sorted((c for c in df.columns if c.startswith("label_prob_")), key=lambda c: int(c.rsplit("_", 1)[1]))
    )
    if not columns:
        raise ValueError("labeled rows carry no training target (label_prob, or label_prob_0 .. label_prob_<K-1>)")
    prob = df[columns].to_numpy(np.float32)
    weight = df["label_weight"].to_numpy(np.float32) if "label_weight" in df else np.ones(len(df), np.float32)
    return np.concatenate([prob, weight[:, None]], axis=1) if len(df) else np.zeros((0, len(columns) + 1), np.float32)


def trainable_rows(fs, path: str):
    """A partition's trainable rows (label != -1 and label_weight > 0), as a DataFrame."""
    import pandas as pd

    with fs.open(path, "rb") as f:
        df = pd.read_parquet(f)
    df = df[df["label"] != -1]
    if "label_weight" in df:
        df = df[df["label_weight"] > 0]  # rows that teach nothing (e.g. weak rows of a gold_only mix)
    return df


def version_texts(data_version: str, dataset, registry_url: str | None, settings: Settings) -> list[str]:
    """The dataset's `texts` of every trainable row of a data version (what a tokenizer learns from)."""
    from tasks.registry import Registry

    fs, info = Registry(settings).open_data_version(data_version, repo_url=registry_url)
    return [t for p in info["partitions"] for t in dataset.texts(trainable_rows(fs, p["path"]))]


class StreamingVersion:
    """The trainable rows (label != -1 and label_weight > 0) of a data version: features and
    (soft target, weight) pairs."""

    def __init__(
        self,
        data_version: str,
        registry_url: str | None = None,
        cache_mb: float = 256,
        seed: int = 0,
        settings: Settings | None = None,
        inputs: Callable | None = None,
    ):
        """`settings`: the process's Settings (else read from the environment); `inputs`: rows -> the
        model's input array (else the dataset's `featurize`: tasks/training/inputs.py)."""
        from tasks.core.settings import Settings
        from tasks.datasets import load_dataset
        from tasks.registry import Registry

        settings = settings if settings is not None else Settings.from_env()
        self.fs, info = Registry(settings).open_data_version(data_version, repo_url=registry_url)
        self.paths = [p["path"] for p in info["partitions"]]
        self.featurize = inputs if inputs is not None else load_dataset(settings=settings).featurize
        self.seed = seed
        self.cache = PartitionCache(self._read, int(cache_mb * 2**20))
        counts: list[int] = []

        def each():
            for i in range(len(self.paths)):
                x, y = self.cache.get(i)
                counts.append(len(x))
                yield x, y

        try:
            self.stats = FeatureStats.of(each())
        except ValueError:
            raise ValueError(f"data version {data_version} has no labeled rows to train on") from None
        self.counts = counts
        self._order: EpochOrder | None = None

    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        df = trainable_rows(self.fs, self.paths[i])
        return torch.from_numpy(self.featurize(df)), torch.from_numpy(training_targets(df))

    def __len__(self) -> int:
        return self.stats.rows

    @property
    def n_features(self) -> int:
        return len(self.stats.mean)

    def rows(self, epoch: int, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and targets ([n, 2]: soft label, weight) at positions [start, stop) of `epoch`'s order."""
        if self._order is None or self._order.epoch != epoch:
            self._order = EpochOrder(self.counts, self.seed, epoch)
        xs, ys = [], []
        for part, idx in self._order.locate(start, stop):
            x, y = self.cache.get(part)
            xs.append(x[idx])
            ys.append(y[idx])
        if not xs:
            return torch.empty(0, self.n_features), torch.empty(0, 2)
        return torch.cat(xs), torch.cat(ys)
