"""The model server (python -m tasks.serving): Open Inference Protocol v2 and /v1 routes, their pydantic
models, the body-size middleware, metrics, the prediction log, the served variants and their split.
The canary that judges what it serves is tasks/canary."""
