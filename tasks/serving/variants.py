"""The models being served: following the serving state, loading and warming versions off the
request path, and swapping them in atomically.

The registry's serving state (tasks.registry.serving.ServingState, the one schema) names what to
serve; only the pipeline and the rollback DAG change it. A `Follower` thread polls it; when it
changes, the new versions are read from the registry (never from anywhere else), checked against
their recorded sha256, opened in onnxruntime and warmed, all before anything is swapped. The swap
is one reference assignment of an immutable `Snapshot`: a request takes the snapshot once and
finishes on it, so a promote, a weight change or a rollback drops no request. A version that fails
to read, verify, load or warm, or that fails its self-test (the dataset's sample rows and one Open
Inference Protocol request through the routes' own code path, selftest.py), is logged, counted
(`sluice_model_load_failures_total`), and the previous snapshot keeps serving; the same state is
retried after `retry_s`. A champion is never swapped in unless it answers as a client would be answered.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tasks.core.log import log
from tasks.registry.serving import CHALLENGER, CHAMPION, ServedModel, ServingState


class LoadError(RuntimeError):
    """A model version could not be read, verified, loaded or warmed."""


class ScoreError(ValueError):
    """A model answered with a score that is not a number (NaN or infinite): a model defect.
    The request fails (a 5xx), an error record goes to the prediction log against the variant,
    and the canary counts it in the variant's error rate; a NaN is never served as an answer."""


class FeaturizeError(ValueError):
    """Raw rows that passed the raw contract could not be turned into the model's input (the plug-in's
    featurize or the artifact's tokenizer failed, or gave misshaped or non-finite inputs): the request
    fails as a 500 against the variant and is logged as its error (the canary counts it)."""


@dataclass
class LoadedModel:
    """An onnxruntime session of one verified, warmed model version."""

    spec: ServedModel
    sha256: str
    session: Any
    input_name: str
    output_name: str
    n_features: int
    loaded_at: float = field(default_factory=time.time)
    encoder: Any = None  # a text model's tokenizer (tasks.models.tokens.Encoder, from the artifact); None: dense

    @property
    def takes_tokens(self) -> bool:
        return self.encoder is not None

    def rows_to_inputs(self, dataset: Any, df: Any) -> np.ndarray:
        """Raw rows -> this model's input array: the dataset's features, or ids of the dataset's texts
        from the artifact's own tokenizer (the path training took: tasks.models.metadata_input_encoder).

        Raises FeaturizeError when the plug-in fails or its output does not fit the model: rows that
        passed the raw contract and cannot be scored are the server's failure, never the client's."""
        try:
            if self.encoder is None:
                x = np.ascontiguousarray(dataset.featurize(df), dtype=np.float32)
            else:
                x = self.encoder.encode(dataset.texts(df))
        except Exception as exc:  # noqa: BLE001 - the plug-in's or the tokenizer's own error, named
            raise FeaturizeError(f"rows could not be featurized: {type(exc).__name__}: {exc}") from exc
        if x.shape != (len(df), self.n_features) or not np.all(np.isfinite(x)):
            raise FeaturizeError(
                f"rows featurize to non-finite or misshaped inputs ({x.dtype} {list(x.shape)}; "
                f"{self.spec.model_version} takes [{len(df)}, {self.n_features}])"
            )
        return x

    @property
    def classes(self) -> int:
        """K: a binary model's output is P(class 1) [batch], a K-class model's [batch, K]."""
        shape = self.session.get_outputs()[0].shape
        return shape[1] if len(shape) == 2 and isinstance(shape[1], int) and shape[1] > 1 else 2

    def predict(self, x: np.ndarray) -> np.ndarray:
        """float32 [n, n_features] (or int64 ids [n, max_len]) -> scores float64: P(class 1) [n] (binary),
        or the K class probabilities [n, K]; ScoreError if any score is NaN or infinite."""
        out = np.asarray(self.session.run([self.output_name], {self.input_name: x})[0], dtype=np.float64)
        scores = out if out.ndim == 2 and out.shape[1] > 1 else out.reshape(len(x))
        bad = ~np.isfinite(scores) if scores.ndim == 1 else ~np.isfinite(scores).all(axis=1)
        if bad.any():
            first = int(np.argmax(bad))
            raise ScoreError(
                f"{self.spec.model_version} gave a non-finite score ({scores[first].tolist()}) for "
                f"{int(bad.sum())} of {len(scores)} rows (first: row {first})"
            )
        return scores


def _token_encoder(spec: ServedModel, sess: Any, graph_input: Any) -> Any:
    """A text model's encoder, from its artifact's metadata (tokenizer, sha256, max_len), when its input
    is int64 ids; None for a dense model. LoadError when the two disagree."""
    import json

    from tasks.models.artifact import METADATA_KEY

    meta = json.loads(sess.get_modelmeta().custom_metadata_map.get(METADATA_KEY) or "{}")
    ids = graph_input.type == "tensor(int64)"
    if ids != ("tokenizer" in meta):
        what = "int64 ids but no tokenizer in its metadata" if ids else "a tokenizer but no int64 ids input"
        raise LoadError(f"{spec.model_version}: {spec.artifact} takes {what}")
    if not ids:
        return None
    from tasks.models.tokens import Encoder, TokenizerError

    try:
        return Encoder(meta["tokenizer"], meta["max_len"], meta["vocab_size"], meta["tokenizer_sha256"])
    except (TokenizerError, KeyError) as exc:
        raise LoadError(f"{spec.model_version}: its tokenizer cannot be used: {exc}") from None


def open_model(spec: ServedModel, data: bytes, n_features: int, warm_rows: tuple[int, ...] = (1, 32)) -> LoadedModel:
    """Verify `data` against the spec's sha256, open it, check its signature, warm it.

    Raises LoadError naming what was wrong. Warming runs the shapes requests will use, so the
    first request after a swap does not pay onnxruntime's first-run allocation."""
    import onnxruntime as ort

    digest = hashlib.sha256(data).hexdigest()
    if spec.sha256 and digest != spec.sha256:
        raise LoadError(
            f"{spec.model_version}: {spec.artifact} has sha256 {digest[:12]}..., "
            f"the registry recorded {spec.sha256[:12]}... (corrupt or replaced artifact)"
        )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types for a bad model
        raise LoadError(
            f"{spec.model_version}: onnxruntime cannot load {spec.artifact}: "
            f"{type(exc).__name__}: {str(exc).strip()[:300]}"
        ) from None
    inputs, outputs = sess.get_inputs(), sess.get_outputs()
    if len(inputs) != 1 or len(outputs) < 1:
        raise LoadError(
            f"{spec.model_version}: expected one input and an output, got "
            f"{[i.name for i in inputs]} -> {[o.name for o in outputs]}"
        )
    shape = inputs[0].shape
    encoder = _token_encoder(spec, sess, inputs[0])
    if encoder is None and (
        inputs[0].type != "tensor(float)" or len(shape) != 2 or (isinstance(shape[1], int) and shape[1] != n_features)
    ):
        raise LoadError(
            f"{spec.model_version}: input {inputs[0].name} is {inputs[0].type} {shape}, "
            f"the dataset has {n_features} features (float [batch, {n_features}])"
        )
    width = encoder.max_len if encoder is not None else n_features
    model = LoadedModel(spec, digest, sess, inputs[0].name, outputs[0].name, width, encoder=encoder)
    rng = np.random.default_rng(0)
    for n in warm_rows:
        warm = (
            rng.integers(2, encoder.vocab_size, (n, width), dtype=np.int64)
            if encoder is not None
            else rng.random((n, n_features), dtype=np.float32)
        )
        try:
            scores = model.predict(warm)
        except Exception as exc:  # noqa: BLE001
            raise LoadError(f"{spec.model_version}: warm-up on {n} rows failed: {type(exc).__name__}: {exc}") from None
        if not np.all(np.isfinite(scores)) or scores.min() < 0 or scores.max() > 1:
            raise LoadError(
                f"{spec.model_version}: warm-up scores are not probabilities "
                f"(range {scores.min():.3g}..{scores.max():.3g})"
            )
    return model


@dataclass(frozen=True)
class Snapshot:
    """What is served now: immutable, replaced whole."""

    desired: ServingState
    models: dict[str, LoadedModel]

    @property
    def champion(self) -> LoadedModel | None:
        return self.models.get(CHAMPION)

    @property
    def challenger(self) -> LoadedModel | None:
        return self.models.get(CHALLENGER)

    def by_version(self, version: str) -> tuple[str, LoadedModel] | None:
        for variant, m in self.models.items():
            if m.spec.model_version == version:
                return variant, m
        return None


EMPTY = Snapshot(ServingState(), {})


class Variants:
    """Holds the current Snapshot and applies serving states to it (one applier at a time)."""

    def __init__(
        self,
        read_serving: Callable[[], ServingState],
        read_artifact: Callable[[str, str], bytes],
        n_features: int,
        metrics: Any = None,
        retry_s: float = 30.0,
        self_test: Callable[[LoadedModel], str] | None = None,
    ):
        self.read_serving = read_serving
        self.read_artifact = read_artifact
        self.n_features = n_features
        self.metrics = metrics
        self.retry_s = retry_s
        self.self_test = self_test  # selftest.py: the served path, run on every variant before a swap
        self.current: Snapshot = EMPTY
        self.pending: ServingState | None = None  # a state seen but not (yet) applied
        self.last_error: str | None = None
        self._failed: dict[ServingState, float] = {}  # state -> monotonic time of its last failure
        self._apply_lock = threading.Lock()

    @property
    def ready(self) -> bool:
        """A complete serving state is loaded and warmed (see docs/serving.md for why a failed later
        load does not make a serving replica unready)."""
        return self.current.champion is not None

    def poll(self) -> bool:
        """Read the serving state once and apply it if it changed. True when a swap happened."""
        try:
            desired = self.read_serving()
        except Exception as exc:  # noqa: BLE001 - a bad read must not stop the follower
            self._fail(None, f"cannot read the serving state: {type(exc).__name__}: {exc}")
            return False
        return self.apply(desired)

    def apply(self, desired: ServingState) -> bool:
        with self._apply_lock:
            if desired == self.current.desired:
                self.pending = None
                return False
            failed_at = self._failed.get(desired)
            if failed_at is not None and time.monotonic() - failed_at < self.retry_s:
                return False
            self.pending = desired
            try:
                models = self._load(desired)
            except LoadError as exc:
                self._failed[desired] = time.monotonic()
                self._fail(str(exc).split(":", 1)[0], f"{exc}; still serving {self.describe()}")
                return False
            self._failed.pop(desired, None)
            before = self.describe()
            self.current = Snapshot(desired, models)  # the atomic swap
            self.pending, self.last_error = None, None
            if self.metrics is not None:
                self.metrics.swaps.inc()
                self.metrics.set_loaded({v: (m.spec.model_version, m.sha256) for v, m in models.items()})
                self.metrics.ready.set(1 if self.ready else 0)
            log(f"serving: {before} -> {self.describe()}")
            return True

    def _load(self, desired: ServingState) -> dict[str, LoadedModel]:
        """Every variant of `desired`, reusing sessions already loaded for the same artifact."""
        have = {(m.spec.model_version, m.spec.artifact): m for m in self.current.models.values()}
        models: dict[str, LoadedModel] = {}
        for variant, spec in desired.variants().items():
            reuse = have.get((spec.model_version, spec.artifact))
            if reuse is not None and (spec.sha256 is None or spec.sha256 == reuse.sha256):
                # The loaded model kept whole, only its spec replaced: a field added to LoadedModel
                # later (as `encoder` was) cannot be dropped here.
                models[variant] = dataclasses.replace(reuse, spec=spec)
                proved = self._self_test(variant, models[variant])
                log(f"serving: kept {variant} {spec.model_version} loaded" + (f"; {proved}" if proved else ""))
                continue
            t0 = time.perf_counter()
            try:
                data = self.read_artifact(spec.model_version, spec.artifact_name)
            except Exception as exc:  # noqa: BLE001 - registry/DVC errors of any kind
                raise LoadError(
                    f"{spec.model_version}: cannot read {spec.artifact} from the registry: {type(exc).__name__}: {exc}"
                ) from None
            models[variant] = open_model(spec, data, self.n_features)
            proved = self._self_test(variant, models[variant])
            log(
                f"serving: loaded {variant} {spec.model_version} ({len(data):,} B, sha256 "
                f"{models[variant].sha256[:12]}) in {time.perf_counter() - t0:.2f} s"
                + (f"; {proved}" if proved else "")
            )
        return models

    def _self_test(self, variant: str, model: LoadedModel) -> str | None:
        """The variant answers requests through the routes' own code path before it is swapped in
        (tasks/serving/selftest.py): what it proved; LoadError naming the failure otherwise."""
        if self.self_test is None:
            return None
        try:
            return self.self_test(model)
        except Exception as exc:  # noqa: BLE001 - whatever the served path raised, the swap is refused
            raise LoadError(
                f"{model.spec.model_version}: the {variant} fails its self-test on the served path: "
                f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
            ) from None

    def _fail(self, version: str | None, message: str) -> None:
        self.last_error = message
        log(f"serving: LOAD FAILED: {message}")
        if self.metrics is not None:
            self.metrics.load_failures.labels(version or "unknown").inc()

    def describe(self) -> str:
        snap = self.current
        if not snap.models:
            return "nothing"
        parts = [f"{v} {m.spec.model_version}" for v, m in snap.models.items()]
        if snap.challenger is not None:
            parts.append(f"{snap.desired.mode} {snap.desired.challenger_weight:g}%")
        return ", ".join(parts)


class Follower(threading.Thread):
    """Polls the serving state every `poll_s` seconds, off the request path."""

    def __init__(self, variants: Variants, poll_s: float):
        super().__init__(name="serving-follower", daemon=True)
        self.variants = variants
        self.poll_s = poll_s
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.variants.poll()
            except Exception as exc:  # noqa: BLE001 - the follower must survive anything
                log(f"serving: follower error: {type(exc).__name__}: {exc}")
            self.stop_event.wait(self.poll_s)

    def stop(self) -> None:
        self.stop_event.set()
