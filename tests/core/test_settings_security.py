"""Settings and local state hardening: no credentials in URLs, clean-state only on a marked home,
private Airflow secrets."""

import os
import stat
import subprocess
import sys

import pytest

from ops.__main__ import main as ops_main
from ops.airflow_env import SecretFileError, ensure_secrets
from tasks.core.settings import HOME_MARKER, REPO_ROOT, Settings, SettingsError, redact

# ---- credentials in URLs (item 11) -----------------------------------------------------------


@pytest.mark.parametrize("name", ["SLUICE_REGISTRY_URL", "SLUICE_REGISTRY_GIT_REMOTE", "SLUICE_DVC_REMOTE"])
@pytest.mark.parametrize(
    "url",
    [
        "https://bot:s3cr3t@git.example.com/sluice/registry.git",
        "https://ghp_s3cr3t@github.com/o/registry.git",
        "s3://AKIA:s3cr3t@bucket/dvc",
    ],
)
def test_a_url_with_a_password_is_refused_without_echoing_it(name, url):
    if name != "SLUICE_DVC_REMOTE" and url.startswith("s3"):
        url = url.replace("s3://", "https://")
    if name == "SLUICE_DVC_REMOTE" and url.startswith("https"):  # a DVC remote is a path or s3://
        url = url.replace("https://", "s3://")
    with pytest.raises(SettingsError) as e:
        Settings.from_env({name: url})
    msg = str(e.value)
    assert name in msg and "credential helper" in msg and "Secret" in msg
    assert "s3cr3t" not in msg and "***@" in msg


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com/sluice/registry.git",
        "ssh://git@git.example.com/r.git",
        "git@git.example.com:sluice/registry.git",
        "https://deploy@git.example.com/r.git",
    ],
)
def test_urls_without_a_password_are_accepted(url):
    assert Settings.from_env({"SLUICE_REGISTRY_URL": url, "SLUICE_REGISTRY_GIT_REMOTE": url}).registry_url == url


def test_a_bad_dvc_remote_message_is_redacted():
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"SLUICE_DVC_REMOTE": "gs://u:s3cr3t@bucket/x"})
    assert "s3cr3t" not in str(e.value)


def test_redact_hides_every_userinfo_in_a_text():
    text = "git push https://bot:s3cr3t@h/r.git failed; dvc s3://k:s@b/p; ssh://git@h/x; plain /a/b"
    out = redact(text)
    assert "s3cr3t" not in out and "k:s" not in out and "git@" not in out
    assert out == "git push https://***@h/r.git failed; dvc s3://***@b/p; ssh://***@h/x; plain /a/b"
    assert redact("https://h/r.git") == "https://h/r.git"


def test_the_trainer_config_refuses_a_registry_url_with_a_password():
    from tasks.training.kubernetes import KubernetesTraining

    with pytest.raises(ValueError) as e:
        KubernetesTraining(registry_url="https://bot:s3cr3t@git.example.com/r.git")
    assert "s3cr3t" not in str(e.value) and "credential helper" in str(e.value)


# ---- make clean-state (item 7) ---------------------------------------------------------------


def test_ensure_marks_the_home(settings):
    settings.layout.ensure()
    assert (settings.home / HOME_MARKER).is_file()


def test_clean_state_refuses_a_folder_without_the_marker(tmp_path, monkeypatch, capsys):
    victim = tmp_path / "not-sluice"
    (victim / "sub").mkdir(parents=True)
    (victim / "sub" / "precious.txt").write_text("keep me")
    monkeypatch.setenv("SLUICE_HOME", str(victim))
    assert ops_main(["clean-state"]) == 2
    assert "no .sluice-home marker" in capsys.readouterr().err
    assert (victim / "sub" / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in victim.iterdir()) == ["sub"]  # not even the marker was written


def test_clean_state_removes_a_marked_home(settings, monkeypatch):
    settings.layout.ensure()
    assert ops_main(["clean-state"]) == 0
    assert not settings.home.exists()
    assert ops_main(["clean-state"]) == 0  # nothing left: fine


def test_clean_state_refuses_the_checkout_and_roots(monkeypatch, tmp_path):
    from ops.__main__ import clean_state_refusal

    assert clean_state_refusal(REPO_ROOT)
    assert clean_state_refusal(REPO_ROOT.parent)
    assert clean_state_refusal(tmp_path.anchor and type(tmp_path)(tmp_path.anchor))
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert "symbolic link" in clean_state_refusal(link)


def test_make_clean_state_goes_through_the_check(tmp_path):
    victim = tmp_path / "has space; touch pwned"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    out = subprocess.run(
        ["make", "-s", "-C", str(REPO_ROOT), "-n", "clean-state"],
        capture_output=True,
        text=True,
        env={**os.environ, "SLUICE_HOME": str(victim)},
    )
    assert "rm -rf" not in out.stdout and "-m ops clean-state" in out.stdout
    done = subprocess.run(
        [sys.executable, "-m", "ops", "clean-state"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "SLUICE_HOME": str(victim)},
    )
    assert done.returncode == 2 and (victim / "precious.txt").exists()


# ---- Airflow secrets (item 12) ---------------------------------------------------------------


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_airflow_home_and_secret_files_are_private(tmp_path):
    home = tmp_path / "airflow"
    sec = ensure_secrets(home)
    assert _mode(home) == 0o700
    for name in ("jwt_secret", "session_secret", "passwords.json"):
        assert _mode(home / name) == 0o600, name
    assert ensure_secrets(home) == sec  # read back, not regenerated
    assert not [p for p in home.iterdir() if p.name.endswith(".tmp")]


def test_a_loose_airflow_home_is_narrowed(tmp_path):
    home = tmp_path / "airflow"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    ensure_secrets(home)
    assert _mode(home) == 0o700


def test_a_group_readable_secret_is_refused(tmp_path):
    home = tmp_path / "airflow"
    ensure_secrets(home)
    os.chmod(home / "jwt_secret", 0o644)
    with pytest.raises(SecretFileError, match=r"jwt_secret.*0644.*chmod 600"):
        ensure_secrets(home)


def test_an_empty_secret_left_by_a_crash_is_generated_again(tmp_path):
    home = tmp_path / "airflow"
    home.mkdir(mode=0o700)
    fd = os.open(home / "session_secret", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # created, never written
    os.close(fd)
    sec = ensure_secrets(home)
    assert len(sec["session"]) == 64 and (home / "session_secret").read_text() == sec["session"]


def test_a_crash_while_writing_a_secret_leaves_no_file(tmp_path, monkeypatch):
    import ops.airflow_env as airflow_env

    def boom():
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        airflow_env._secret_file(tmp_path / "airflow" / "jwt_secret", boom)
    real_write = airflow_env.atomic_write_with

    def crash_after_write(path, write):
        def w(tmp):
            write(tmp)
            raise KeyboardInterrupt

        real_write(path, w)

    monkeypatch.setattr(airflow_env, "atomic_write_with", crash_after_write)
    with pytest.raises(KeyboardInterrupt):
        ensure_secrets(tmp_path / "airflow")
    assert list((tmp_path / "airflow").iterdir()) == []
