"""The canary: rollout (every weight change of a release), the analysis of champion against challenger,
and the replay that sends interleaved traffic to both. Built on the server (tasks/serving) and the registry."""
