"""A registry remote URL that carries user:password never shows its password in an error: a failed mirror push,
a failed clone by DVC (data and model reads with `repo_url`), a failed git command. Settings refuse such URLs
(tests/core/test_settings_security.py); these errors are the second line, for one that gets through anyway
(a Settings made in code, a `repo_url` passed by a caller). Real git and DVC against a closed loopback port."""

from __future__ import annotations

import traceback

import pytest

from ops.services import free_port
from tasks.registry import MirrorError, Registry, RegistryError

PASSWORD = "s3cret-pw-7731"


@pytest.fixture
def url() -> str:
    return f"http://sluice:{PASSWORD}@127.0.0.1:{free_port()}/registry.git"  # nothing listens there


def _everything_said(exc: BaseException) -> str:
    """What a person or a log sees: the message, its causes and the traceback as Python prints it."""
    return "".join(traceback.format_exception(exc)) + repr(exc.args)


def test_a_failed_mirror_push_does_not_show_the_password(settings, url):
    reg = Registry(settings.model_copy(update={"registry_git_remote": url}))
    with pytest.raises(MirrorError) as caught:
        reg.record_audit("check", who="test")
    text = _everything_said(caught.value)
    assert PASSWORD not in text, text
    assert "registry mirror http://***@127.0.0.1" in str(caught.value)  # the remote is still named


@pytest.mark.parametrize(
    "read",
    [
        lambda reg, url: reg.read_data_version("data-v1", repo_url=url),
        lambda reg, url: reg.open_data_version("data-v1", repo_url=url),
        lambda reg, url: reg.read_model_artifact("model-v1", "model.int8.onnx", repo_url=url),
    ],
    ids=["read_data_version", "open_data_version", "read_model_artifact"],
)
def test_a_failed_clone_does_not_show_the_password(settings, url, read):
    reg = Registry(settings)
    with pytest.raises(Exception) as caught:
        read(reg, url)
    text = _everything_said(caught.value)
    assert PASSWORD not in text, text
    assert "http://***@127.0.0.1" in str(caught.value), str(caught.value)  # says where it tried


def test_a_failed_git_command_does_not_show_the_password(settings, url):
    reg = Registry(settings)
    reg.ensure()
    with pytest.raises(RegistryError) as caught:
        reg.git("ls-remote", url)
    text = _everything_said(caught.value)
    assert PASSWORD not in text, text
    assert "git ls-remote http://***@127.0.0.1" in str(caught.value)
