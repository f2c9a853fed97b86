"""Which unlabeled rows a person should label next: the labeling queue's acquisition rule (pure).

Per batch row, three signals in [0, 1] (docs/training.md "Queue gold"):

- LF conflict: the share of the row's LF votes in the minority class, doubled (`2 * min(pos, neg) /
  (pos + neg)`): 0 when every voting LF agrees (or fewer than two vote), 1 when they split evenly;
- label-model entropy: the binary entropy (bits) of the label model's P(positive); a row no LF
  votes on has no probability and counts as 1 (the label model knows nothing there);
- end-model uncertainty: `1 - |2 s - 1|` of the prod model's score s, when one is available.

The acquisition score is their weighted mean (queue.weights in params.yaml; a signal that is absent,
the model score before any prod model, drops out of the mean). The queue takes K rows of the batch:

- chosen, K - R of them, by greedy diversity: each pick maximises `(1 - d) * score + d * spread`, where
  spread is the row's distance to the nearest row picked so far (standardized features, divided by
  the largest such distance), so near-duplicates of a picked row lose to a slightly less useful row
  elsewhere (d = queue.diversity);
- random, R = round(K * queue.random_share) of them, uniformly without replacement from the rows not
  chosen.

Inclusion probabilities: a chosen row is taken for certain (pi = 1); a random row with
pi = R / (N - (K - R)). A gold label's importance weight is 1 / pi, and `weighted_mean` (the
Horvitz-Thompson estimator over the two strata) gives an unbiased estimate of a batch quantity (a
class's share, the model's accuracy) from the queue's gold: the chosen rows stand for themselves, each
random row for 1 / pi rows of the rest. Estimates of quality come from these weights, never from the
chosen rows alone (they are the hard ones, on purpose).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIGNALS = ("conflict", "entropy", "uncertainty")
CHOSEN, RANDOM = "chosen", "random"


def lf_conflict(L: np.ndarray, classes: int = 2) -> np.ndarray:
    """Per row: how split its votes are, (1 - votes for the most voted class / votes) / (1 - 1/K), 1 when
    they spread evenly over the K classes (binary: 2 * min(positive, negative) / votes); 0 with fewer
    than two votes."""
    L = np.asarray(L)
    if L.ndim != 2:
        raise ValueError(f"the label matrix must be 2-D, got shape {L.shape}")
    counts = np.stack([(L == c).sum(axis=1) for c in range(classes)], axis=1).astype(np.float64)
    votes, top = counts.sum(axis=1), counts.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(votes >= 2, (1.0 - top / votes) / (1.0 - 1.0 / classes), 0.0)
    return out


def entropy(prob: np.ndarray) -> np.ndarray:
    """Entropy of the label model's probabilities, in [0, 1]: of P(positive) [n] in bits, of [n, K] over
    log2 K; a row with no vote (nan) -> 1."""
    prob = np.asarray(prob, np.float64)
    if prob.ndim == 2:
        p = np.clip(prob, 1e-12, 1.0)
        h = -(p * np.log2(p)).sum(axis=1) / np.log2(prob.shape[1])
        return np.where(np.isnan(prob).any(axis=1), 1.0, np.clip(h, 0.0, 1.0))
    p = np.clip(prob, 1e-12, 1 - 1e-12)
    h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.where(np.isnan(prob), 1.0, h)


def uncertainty(score: np.ndarray) -> np.ndarray:
    """1 - the margin of a model's top class over the next: of P(positive), 1 - |2 s - 1| (1 at 0.5, 0 at
    0 or 1); of [n, K] probabilities, 1 - (top - second). nan -> 1."""
    s = np.asarray(score, np.float64)
    if s.ndim == 2:
        top2 = np.sort(np.nan_to_num(s), axis=1)[:, -2:]
        return np.where(np.isnan(s).any(axis=1), 1.0, 1.0 - (top2[:, 1] - top2[:, 0]))
    return np.where(np.isnan(s), 1.0, 1.0 - np.abs(2.0 * np.clip(s, 0, 1) - 1.0))


def summary_probability(prob: np.ndarray) -> np.ndarray:
    """One figure a row for the queue's display: P(positive) as it is, or the top class's probability."""
    prob = np.asarray(prob, np.float64)
    return prob if prob.ndim == 1 else prob.max(axis=1)


def acquisition_score(
    L: np.ndarray,
    prob: np.ndarray,
    model_score: np.ndarray | None,
    weights: dict[str, float],
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the score per row in [0, 1], each signal per row). `weights`: conflict, entropy, uncertainty."""
    missing = [s for s in SIGNALS if s not in weights]
    if missing:
        raise ValueError(f"acquisition weights lack {missing} (need {list(SIGNALS)})")
    if any(float(weights[s]) < 0 for s in SIGNALS):
        raise ValueError(f"acquisition weights must be >= 0, got {weights}")
    prob = np.asarray(prob, np.float64)
    classes = prob.shape[1] if prob.ndim == 2 else 2
    parts = {"conflict": lf_conflict(L, classes), "entropy": entropy(prob)}
    if model_score is not None:
        if len(model_score) != len(prob):
            raise ValueError(f"{len(model_score)} model scores for {len(prob)} rows")
        parts["uncertainty"] = uncertainty(model_score)
    total = sum(float(weights[k]) for k in parts)
    if total <= 0:
        raise ValueError(f"the acquisition weights of the signals present ({sorted(parts)}) sum to 0")
    score = sum(float(weights[k]) * v for k, v in parts.items()) / total
    return np.asarray(score, np.float64), parts


def standardize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if not len(x):
        return x
    sd = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def greedy_diverse(score: np.ndarray, features: np.ndarray, k: int, diversity: float) -> list[int]:
    """k row indices, each maximising (1 - diversity) * score + diversity * spread (see the module doc)."""
    if not 0 <= diversity <= 1:
        raise ValueError(f"diversity must be in [0, 1], got {diversity}")
    n = len(score)
    k = min(k, n)
    if k <= 0:
        return []
    x = standardize(features)
    picked: list[int] = []
    nearest = np.full(n, np.inf)
    free = np.ones(n, bool)
    for _ in range(k):
        if picked:
            spread = nearest / (nearest[free].max() or 1.0)
        else:
            spread = np.ones(n)  # nothing picked yet: every row is equally far
        gain = np.where(free, (1 - diversity) * score + diversity * spread, -np.inf)
        i = int(np.argmax(gain))  # ties: the lowest index (the batch's order), so a re-run picks the same
        picked.append(i)
        free[i] = False
        nearest = np.minimum(nearest, np.sqrt(((x - x[i]) ** 2).sum(axis=1)))
    return picked


@dataclass
class Selection:
    index: np.ndarray
    """Row indices into the batch, chosen ones first (in pick order), then the random ones."""
    kind: np.ndarray
    """Per selected row: "chosen" or "random"."""
    inclusion: np.ndarray
    """Per selected row: its probability of being in the queue (1 for chosen rows)."""
    score: np.ndarray
    """Per selected row: its acquisition score."""

    @property
    def weight(self) -> np.ndarray:
        """Importance weights 1 / pi (Horvitz-Thompson)."""
        return 1.0 / self.inclusion


def select(
    score: np.ndarray,
    features: np.ndarray,
    *,
    k: int,
    random_share: float,
    diversity: float,
    seed: int,
    eligible: np.ndarray | None = None,
) -> Selection:
    """The queue's K rows of a batch (see the module doc). `eligible`: rows that may enter at all (the
    gold test set's rows and rows already gold never do); the inclusion probabilities are over them."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if not 0 <= random_share <= 1:
        raise ValueError(f"random_share must be in [0, 1], got {random_share}")
    score = np.asarray(score, np.float64)
    n = len(score)
    ok = np.ones(n, bool) if eligible is None else np.asarray(eligible, bool)
    pool = np.flatnonzero(ok)
    k = min(k, len(pool))
    n_random = int(round(k * random_share))
    n_chosen = k - n_random
    chosen = pool[greedy_diverse(score[pool], np.asarray(features)[pool], n_chosen, diversity)]
    rest = np.setdiff1d(pool, chosen)
    rng = np.random.default_rng(seed)
    randoms = np.sort(rng.choice(rest, size=n_random, replace=False)) if n_random else np.zeros(0, int)
    pi_random = n_random / len(rest) if len(rest) else 1.0
    index = np.concatenate([chosen, randoms]).astype(int)
    return Selection(
        index=index,
        kind=np.array([CHOSEN] * len(chosen) + [RANDOM] * len(randoms), dtype=object),
        inclusion=np.concatenate([np.ones(len(chosen)), np.full(len(randoms), pi_random)]),
        score=score[index],
    )


def weighted_mean(values: np.ndarray, inclusion: np.ndarray, population: int) -> float:
    """Horvitz-Thompson estimate of the mean of `values` over a batch of `population` rows from a sample
    with these inclusion probabilities: sum(v / pi) / N (unbiased over the random draw)."""
    values, inclusion = np.asarray(values, np.float64), np.asarray(inclusion, np.float64)
    if population <= 0:
        raise ValueError("population must be > 0")
    if (inclusion <= 0).any() or (inclusion > 1).any():
        raise ValueError("inclusion probabilities must be in (0, 1]")
    return float((values / inclusion).sum() / population)
