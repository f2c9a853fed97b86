"""The self-test every variant passes before it is swapped in: readiness that proves the served path.

A model that loads and warms on random inputs can still fail every real request: a text model that
lost its tokenizer, a plug-in whose featurize no longer fits the artifact, a K-class file served for a
binary dataset. So, on every load and every swap (tasks/serving/variants.py), each variant answers
the dataset's sample rows through the routes' own code:

    /v1/predict   the rows as a client sends them (JSON), validated by the row model the route uses,
                  framed and featurized (or tokenized by the artifact's own tokenizer) by the same
                  functions as the route (scoring.rows_frame, LoadedModel.rows_to_inputs), scored
    OIP infer     one request in the model's declared input (FP32 features, or INT64 ids), and for a
                  text model one in BYTES text as well, decoded by the route's own tensors.model_input

Each answer must be a probability per row ([n], or [n, K] with K the dataset's classes, each row
summing to 1), and the paths must agree. A variant that fails is not swapped in: the previous
snapshot keeps serving and the load failure names the path and the cause.

The sample rows are the gold test set's first rows in $SLUICE_HOME (what the canary replays), else
the first rows of the plug-in's own `load_source()` (a replica on a cluster has no gold set on disk).
Where neither can be read (the slim server image has no demo source: `load_source` fails to import
it), the self-test says so once in the log and variants are swapped after their warm-up only, as
before it existed: the gap is logged, never silent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tasks.core.log import log
from tasks.serving.errors import ApiError
from tasks.serving.scoring import rows_frame
from tasks.serving.tensors import TEXT_INPUT, model_input
from tasks.serving.v2_models import InferenceRequest
from tasks.serving.variants import FeaturizeError, LoadedModel

SAMPLE_ROWS = 8
AGREEMENT = 1e-5  # the same rows through /v1 and OIP score the same (the same session, the same inputs)


class SelfTestError(RuntimeError):
    """A variant does not answer on the served path; the message names the path and what was wrong."""


class NoSampleRows(RuntimeError):
    """Neither the gold test set nor the plug-in's source can be read here: the self-test cannot run."""


def json_rows(df: Any, dataset: Any) -> list[dict[str, Any]]:
    """A frame's raw columns as a client's JSON rows: datetimes as ISO 8601 strings, NaN as null."""
    import pandas as pd

    from tasks.core.files import json_safe

    raw = df[list(dataset.RAW_COLUMNS)]
    for col in raw.columns:
        if pd.api.types.is_datetime64_any_dtype(raw[col]):
            raw = raw.assign(**{col: raw[col].dt.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return json_safe(raw.to_dict("records"))


def sample_rows(dataset: Any, home: Path | str | None, n: int = SAMPLE_ROWS) -> list[dict[str, Any]]:
    """`n` raw rows of the dataset as JSON: the gold test set's first rows under `home`, else the
    plug-in's own source's."""
    import pandas as pd

    gold = Path(home) / "gold" / "test.parquet" if home is not None else None
    if gold is not None and gold.exists():
        return json_rows(pd.read_parquet(gold).head(n), dataset)
    try:
        df = dataset.load_source()
    except Exception as exc:  # noqa: BLE001 - whatever the plug-in's source needs and this host lacks
        raise NoSampleRows(
            f"no gold test set in {home} and the plug-in's load_source() failed: {type(exc).__name__}: {exc}"
        ) from None
    return json_rows(df.head(n), dataset)


class SelfTest:
    """Callable on a LoadedModel: raises SelfTestError unless it answers the sample rows on both paths.

    `rows()` gives the sample rows (read once, on the first test: off the request path, in the follower)."""

    def __init__(self, dataset: Any, row_model: Any, rows: Callable[[], list[dict[str, Any]]], max_rows: int):
        from tasks.datasets import class_names

        self.dataset, self.row_model, self.max_rows = dataset, row_model, max_rows
        self.classes = len(class_names(dataset))
        self._rows_source, self._rows = rows, None
        self.unavailable: str | None = None  # why the self-test cannot run here (logged once)

    def rows(self) -> list[Any]:
        """The sample rows validated as /v1/predict validates a body's rows (JSON, strict)."""
        if self._rows is None:
            raw = self._rows_source()[: self.max_rows]
            if not raw:
                raise SelfTestError("no sample rows: the gold test set and the plug-in's source are empty")
            from pydantic import ValidationError

            try:
                self._rows = [self.row_model.model_validate_json(json.dumps(r)) for r in raw]
            except ValidationError as exc:
                raise SelfTestError(f"the dataset's own sample rows fail /v1/predict's row schema: {exc}") from None
        return self._rows

    def __call__(self, model: LoadedModel) -> str:
        """-> what was proved, for the load's log line ("self-test unavailable" where it cannot run)."""
        if self.unavailable is not None:
            return "self-test unavailable"
        try:
            rows = self.rows()
        except NoSampleRows as exc:
            self.unavailable = str(exc)
            log(f"serving: SELF-TEST UNAVAILABLE on this server: {exc}; variants are swapped after their warm-up only")
            return "self-test unavailable"
        df = rows_frame(self.dataset, rows)
        try:
            x = model.rows_to_inputs(self.dataset, df)  # /v1/predict's featurize, or the artifact's tokenizer
        except FeaturizeError as exc:
            raise SelfTestError(f"/v1/predict: {exc}") from None
        v1 = self._check("/v1/predict", model, model.predict(x), len(rows))
        declared = "INT64" if model.takes_tokens else "FP32"  # what GET /v2/models/{name} declares
        requests = {
            f"OIP {declared} {model.input_name}": {
                "name": model.input_name,
                "datatype": declared,
                "shape": list(x.shape),
                "data": x.ravel().tolist(),
            }
        }
        if model.takes_tokens:
            texts = self.dataset.texts(df)
            requests[f"OIP BYTES {TEXT_INPUT}"] = {
                "name": TEXT_INPUT,
                "datatype": "BYTES",
                "shape": [len(texts)],
                "data": texts,
            }
        for path, tensor in requests.items():
            try:
                decoded, _ = model_input(InferenceRequest(inputs=[tensor]), b"", model, self.max_rows)
            except ApiError as exc:
                raise SelfTestError(f"{path}: HTTP {exc.status}: {exc.message}") from None
            scores = self._check(path, model, model.predict(decoded), len(rows))
            if not np.allclose(scores, v1, rtol=AGREEMENT, atol=AGREEMENT):
                raise SelfTestError(f"{path} and /v1/predict score the same rows differently")
        return f"self-test passed on {len(rows)} rows: /v1/predict, " + ", ".join(requests)

    def _check(self, path: str, model: LoadedModel, scores: np.ndarray, n: int) -> np.ndarray:
        k = self.classes
        want = (n,) if k == 2 else (n, k)
        if scores.shape != want:
            raise SelfTestError(
                f"{path}: {model.spec.model_version} answers shape {list(scores.shape)} for {n} rows, the dataset's "
                f"{k} classes need {list(want)}"
            )
        if scores.min() < 0 or scores.max() > 1 or (k > 2 and not np.allclose(scores.sum(1), 1.0, atol=1e-3)):
            raise SelfTestError(f"{path}: {model.spec.model_version}'s answers are not probabilities")
        return scores
