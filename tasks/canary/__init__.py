"""The canary: the rollout (every weight change of a release), the analysis of the challenger against the
champion from the prediction log, and the replay that sends held-out traffic to the server. Built on the
server (tasks/serving) and the registry (whose canary transactions are tasks/registry/canary.py)."""
