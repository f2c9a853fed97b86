import pytest

from bench.orchestration_overhead import idle_share
from bench.record import Record, load_results, write_results


def test_idle_share_merges_overlaps_and_clips():
    share, busy = idle_share(0, 10, [(1, 3), (2, 4), (6, 7), (9, 12)])
    assert busy == pytest.approx(3 + 1 + 1) and share == pytest.approx(0.5)
    assert idle_share(0, 10, [])[0] == 1.0
    assert idle_share(0, 10, [(0, 10)])[0] == 0.0


def test_record_goal_comparison():
    assert Record("x", 1.2, "ratio", "<= 1.5").passed
    assert not Record("x", 1.6, "ratio", "<= 1.5").passed
    assert Record("x", 0.9, "ratio", ">= 0.85").passed
    assert Record("x", 0.9, "ratio", ">= 0.85").to_dict()["passed"] is True


def test_the_results_file_is_written_whole_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "results.json"
    write_results([{"name": "a", "notes": "é"}], path)
    write_results([{"name": "b"}], path)  # over the old one
    assert load_results(path) == [{"name": "b"}] and [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.slow  # two processes (gloo): the whole machine, in the serial part
def test_gpu_check_runs_the_engine_path_on_cpu_and_refuses_without_a_gpu():
    """The GPU script's own code path (process group, DDP and FSDP2, autocast choice, FLOP count) on gloo."""
    import json
    import subprocess
    import sys

    import torch

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gpu_check",
            "--device",
            "cpu",
            "--nproc",
            "2",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--batch",
            "64",
            "--peak-tflops",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = [json.loads(x) for x in run.stdout.strip().splitlines() if x.startswith("{")]
    assert [r["strategy"] for r in results] == ["ddp", "fsdp2"]  # DDP, then the FSDP2 case
    for result in results:
        assert result["backend"] == "gloo" and result["processes"] == 2 and result["steps"] == 2
        assert result["bf16_autocast"] is False and 9e6 < result["parameters"] < 11e6  # the ~10M bench model
        expected = 6 * result["parameters"] * result["samples_per_s"] / 1e12
        assert result["achieved_tflops"] == pytest.approx(expected) and result["mfu"] == pytest.approx(expected / 2)
    # On the CPU the FSDP2 case keeps fp32 parameters (bf16 is its GPU setting).
    assert results[1]["mixed_precision"] == "fp32" and results[1]["bf16_parameters"] is False
    if not torch.cuda.is_available():
        gpu = subprocess.run([sys.executable, "-m", "bench.gpu_check"], capture_output=True, text=True, timeout=120)
        assert gpu.returncode == 2 and "no NVIDIA GPU" in gpu.stderr
