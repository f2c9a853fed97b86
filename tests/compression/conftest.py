"""A tiny trained MLP on a synthetic, learnable task, shared by the compression tests."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

N_FEATURES = 20


def make_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_FEATURES)).astype(np.float32) * 2 + 1
    logit = X[:, 0] - 0.8 * X[:, 1] + 0.5 * X[:, 2] * X[:, 3] - 1.5
    y = (logit + rng.normal(scale=0.5, size=n) > 0).astype(np.int64)
    return X, y


@pytest.fixture(scope="session")
def rows():
    return make_rows(600, 0)


@pytest.fixture(scope="session")
def held_out():
    return make_rows(400, 1)


@pytest.fixture(scope="session")
def trained(rows):
    """MLP(20, [32, 16]) trained 30 epochs on 600 rows (a second or so)."""
    import torch
    import torch.nn.functional as F

    from tasks.plugins.mlp.net import MLP

    X, y = rows
    torch.manual_seed(0)
    model = MLP(N_FEATURES, [32, 16])
    model.set_scaling(torch.from_numpy(X.mean(0)), torch.from_numpy(X.std(0)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, t = torch.from_numpy(X), torch.from_numpy(y).float()
    for _ in range(30):
        for i in range(0, len(x), 64):
            loss = F.binary_cross_entropy_with_logits(model(x[i : i + 64]), t[i : i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


@pytest.fixture(scope="session")
def data(rows):
    from tasks.compression.chain import CompressionData

    return CompressionData(*rows)


@pytest.fixture(scope="session")
def baseline(trained, tmp_path_factory):
    from tasks.compression.chain import export_baseline

    warnings.filterwarnings("ignore")
    logging.getLogger("torch").setLevel(logging.ERROR)
    return export_baseline(trained, tmp_path_factory.mktemp("compression"))


def torch_prob(model, X):
    import torch

    with torch.no_grad():
        return torch.sigmoid(model(torch.from_numpy(X))).numpy().astype(np.float64)
