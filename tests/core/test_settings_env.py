"""Settings reads every SLUICE_* variable there is, and refuses one that is none of them."""

import pytest

from tasks.core.settings import Settings, SettingsError


@pytest.mark.parametrize(
    "name, closest",
    [
        ("SLUICE_K8S_NODE", "SLUICE_K8S_NODES"),
        ("SLUICE_HOEM", "SLUICE_HOME"),
        ("SLUICE_TRAIN_BACKENDS", "SLUICE_TRAIN_BACKEND"),
        ("SLUICE_K8S_SOCKET_IFACE", "SLUICE_K8S_SOCKET_IFNAME"),
    ],
)
def test_an_unknown_variable_is_an_error_naming_the_closest_setting(name, closest):
    with pytest.raises(SettingsError, match=f"^{name}: not a Sluice setting \\(did you mean {closest}\\?\\)$"):
        Settings.from_env({name: "1"})


def test_an_unknown_variable_far_from_every_setting_points_at_the_list():
    with pytest.raises(
        SettingsError, match=r"SLUICE_ZZZ: not a Sluice setting \(the settings are listed in docs/settings\.md\)"
    ):
        Settings.from_env({"SLUICE_ZZZ": ""})  # even empty: a typo is reported, not ignored


def test_unknown_and_malformed_variables_are_reported_together():
    with pytest.raises(SettingsError) as exc:
        Settings.from_env({"SLUICE_API_PROT": "8080", "SLUICE_API_PORT": "x"})
    assert str(exc.value).startswith(
        "SLUICE_API_PROT: not a Sluice setting (did you mean SLUICE_API_PORT?); SLUICE_API_PORT: "
    )


def test_other_variables_are_not_sluices_business():
    assert Settings.from_env({"AIRFLOW_CONN_SLUICE_SMTP": "x", "SLUICEBOX": "1", "HOME": "/"}).train_backend == "local"


def test_every_variable_the_code_names_is_a_setting():
    """SLUICE_K8S_SOCKET_IFNAME was read by tasks/training/kubernetes.py behind Settings' back."""
    s = Settings.from_env({"SLUICE_K8S_SOCKET_IFNAME": "ens5"})
    assert s.k8s_socket_ifname == "ens5" and "SLUICE_K8S_SOCKET_IFNAME" in Settings.variables()
    with pytest.raises(SettingsError, match="SLUICE_K8S_SOCKET_IFNAME"):
        Settings.from_env({"SLUICE_K8S_SOCKET_IFNAME": "eth0; rm -rf /"})


def test_every_setting_has_a_description():
    assert [n for n, f in Settings.model_fields.items() if not (f.description or "").strip()] == []
