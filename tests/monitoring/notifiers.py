"""A real Airflow notifier for the tests: a BaseNotifier subclass that appends its rendered message to a file."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import BaseNotifier


class FileNotifier(BaseNotifier):
    """Appends `message` (a Jinja template over the notifier's context) to `path`."""

    template_fields = ("message",)

    def __init__(self, path: str, message: str = "{{ sluice_run_id }} {{ sluice_task }}\n{{ sluice_alerts_text }}"):
        super().__init__()
        self.path, self.message = path, message

    def notify(self, context) -> None:
        with open(Path(self.path), "a") as f:
            f.write(self.message + "\n")


class BrokenNotifier(BaseNotifier):
    def notify(self, context) -> None:
        raise ConnectionRefusedError("mail server down")
