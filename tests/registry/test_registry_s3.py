"""The registry's DVC remote on an S3 API: a real S3 server (moto's server mode) on loopback."""

import subprocess

import boto3
import pandas as pd
import pytest

from tasks.core.settings import Settings
from tasks.registry import Registry
from tests.conftest import S3_BUCKET as BUCKET
from tests.registry.test_registry import partition

pytestmark = pytest.mark.slow


def test_snapshot_pushes_to_s3_and_a_clone_reads_it_back(settings, tmp_path, s3_server, monkeypatch):
    monkeypatch.setenv("SLUICE_DVC_REMOTE", f"s3://{BUCKET}/registry")
    monkeypatch.setenv("SLUICE_S3_ENDPOINT_URL", s3_server)
    s3_settings = Settings.from_env()
    reg = Registry(s3_settings)
    p1, df1 = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p1}, {"rows_by_batch": {"batch-0001": len(df1)}})
    p2, df2 = partition(tmp_path, "b2", seed=2)
    reg.snapshot({"batch-0002": p2}, {"rows_by_batch": {"batch-0002": len(df2)}})

    keys = [
        o["Key"] for o in boto3.client("s3", endpoint_url=s3_server).list_objects_v2(Bucket=BUCKET).get("Contents", [])
    ]
    assert len(keys) == 2 and all(k.startswith("registry/files/md5/") for k in keys)
    config = (reg.root / ".dvc" / "config").read_text()
    assert s3_server in config and "test-secret" not in config and "test-key" not in config
    assert not (s3_settings.layout.dvc_remote).exists()  # nothing went to the local folder

    clone = tmp_path / "pod-clone"
    subprocess.run(["git", "clone", "-q", str(reg.root), str(clone)], check=True)
    got = reg.read_data_version("data-v2", repo_url=str(clone))
    pd.testing.assert_frame_equal(got, pd.concat([df1, df2], ignore_index=True))


def test_remote_must_be_a_path_or_s3():
    from tasks.core.settings import SettingsError

    with pytest.raises(SettingsError, match="s3://"):
        Settings.from_env({"SLUICE_DVC_REMOTE": "gs://bucket/x"})
