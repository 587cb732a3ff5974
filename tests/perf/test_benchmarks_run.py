"""Every script in benchmarks/ runs to the end at its smallest setting.

The benchmarks' figures are not checked here (timings belong to benchmarks/, never
to tests); what is checked is that each script still runs against the library as it
is now. A library change that breaks a benchmark's call (``bench_shards.py`` once
called ``_pass`` without an argument added later) fails here, not in front of a user.
"""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# script -> (its smallest run's arguments, the referees it imports)
SMALLEST = {
    "bench_adamw.py": (["--config", "cpu-recipe", "--steps", "2"], ()),
    "bench_dynamics.py": (["--steps", "2", "--block", "1"], ()),
    "bench_estimates.py": (["--quick"], ()),
    "bench_flow.py": (["--repeat", "1"], ()),
    "bench_flow_profile.py": (
        ["--config", "cpu-recipe", "--seq", "16", "--batch", "2", "--repeat", "1"],
        (),
    ),
    "bench_kernels.py": (["--config", "cpu-recipe", "--repeat", "1", "--rounds", "1"], ()),
    "bench_generate.py": (["--config", "cpu-recipe", "--new-tokens", "8", "--repeat", "1"], ()),
    "bench_gradcheck.py": (["--directions", "2", "--repeat", "1"], ()),
    "bench_nanogpt_recipe.py": ([], ()),
    "bench_ops.py": (["--config", "cpu-recipe", "--steps", "1"], ("torch",)),
    "bench_paths.py": (["--small"], ()),
    "bench_lesion.py": (["--small"], ("torch", "transformers")),
    "bench_sample.py": (["--config", "cpu-recipe", "--context", "8", "--repeat", "1"], ()),
    "bench_shards.py": (["--seconds", "0.01"], ()),
    "bench_threads.py": (["--quick", "--loads", "1"], ()),
    "bench_train_recipe.py": (["--iters", "2", "--warmup", "1"], ()),
    "bench_train_step.py": (["--config", "cpu-recipe", "--steps", "10"], ("torch",)),
    "bench_trackers.py": (["--steps", "2", "--block", "1", "--hist-every", "1"], ("tensorboardX",)),
    "gpt2_parity.py": ([], ("torch", "transformers")),
}


def test_every_benchmark_is_listed():
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert scripts == sorted(SMALLEST)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_benchmark_runs_at_its_smallest_setting(script):
    args, referees = SMALLEST[script]
    for name in referees:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{script} needs {name}")
    env = dict(os.environ, MPLBACKEND="Agg")  # OPENBLAS_* as the machine sets them
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip(), f"{script} printed nothing"
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
