"""`resgrad experiment robustness --quick`: the equal-loss study end to end, its cache, its
outputs, and its refusals before any model trains."""

import csv
import itertools
import json
import os
import re

import numpy as np
import pytest

from resgrad.cli import main
from resgrad.lab.lesion import LesionStudy, rows, summary
from resgrad.lab.paths import PathsStudy, path_table
from resgrad.lab.robustness import (
    RobustnessConfig,
    distinct_resamples,
    equal_loss,
    trajectories,
)
from resgrad.train.sample import load_model

QUICK = ["experiment", "robustness", "--quick", "--threads", "1", "--jobs", "2"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("robustness") / "out")
    plot = os.path.join(os.path.dirname(out), "r.png")
    assert main([*QUICK, "--out-dir", out, "--plot", plot]) == 0
    return out, plot


def test_the_quick_study_prints_levels_verdicts_and_points_to_its_checkpoints(study, capsys):
    out, plot = study
    assert main([*QUICK, "--out-dir", out]) == 0  # the cells are cached: nothing trains
    text = capsys.readouterr().out
    assert text.startswith("Equal-loss robustness: 12 models: pre-ln, post-ln, rezero")
    verdicts = [ln for ln in text.splitlines() if ln.startswith("loss ")]
    assert len(verdicts) == 4
    assert all(any(v in ln for v in ("supported", "contradicted", "not resolved")) for ln in
               verdicts)  # fmt: skip
    assert f"--text {out}/validation.txt" in text and "ckpt-" in text
    assert os.path.getsize(plot) > 10_000
    assert sorted(os.listdir(out)) == [".checkpoints.csv.partial.jsonl", ".resgrad.lock",
                                       "checkpoints.csv", "pilot", "runs",
                                       "validation.txt"]  # fmt: skip


def test_a_rerun_trains_nothing_and_gives_the_same_bytes(study, capsys):
    out, _ = study
    last = os.path.join(out, "runs", "rezero_L2_a1_s0", "last.ckpt")
    before = os.stat(last).st_mtime_ns
    assert main([*QUICK, "--out-dir", out, "--format", "json"]) == 0
    first = capsys.readouterr().out
    assert main([*QUICK, "--out-dir", out, "--format", "json"]) == 0
    assert capsys.readouterr().out == first
    assert os.stat(last).st_mtime_ns == before
    doc = json.loads(first)
    assert len(doc["levels"]) == 4 and len(doc["results"]) == 4
    assert len(doc["points"]) == 4 * 12  # every model at every level


def test_each_row_is_what_the_studies_give_on_that_checkpoint_alone(study):
    out, _ = study
    cfg = RobustnessConfig.quick()
    trajs = equal_loss(cfg, out).trajs
    t = next(t for t in trajs if t.model.scheme == "post-ln" and t.model.seed == 1)
    j = 3  # a middle checkpoint
    model, tok, _ = load_model(t.paths[j])
    val = open(os.path.join(out, "validation.txt"), encoding="utf-8").read()
    ids = tok.encode(val)
    paths_study, lesion_study = cfg.studies()
    shares = np.array([r.share_norm for r in path_table(paths_study.run(model, ids).splits)])
    assert t.metrics["mean_k"][j] == pytest.approx(float(np.arange(len(shares)) @ shares))
    assert t.metrics["share0"][j] == pytest.approx(shares[0])
    L = t.model.depth  # the share of paths with k <= L // 4 (L = 2: k = 0 alone)
    assert t.metrics["share_short"][j] == pytest.approx(shares[: L // 4 + 1].sum())
    table = rows(lesion_study.run(model, ids))
    assert t.loss[j] == pytest.approx(summary(table).ce)  # the loss is the intact CE
    assert t.metrics["block_dce"][j] == pytest.approx(summary(table).block_dce)
    d2 = next(r for r in table if r.kind == "delete" and r.k == 2).get("dce")[0]
    assert t.metrics["delete2_dce"][j] == pytest.approx(d2)
    # the profiles: block b's own deletion, and its sublayers' branch share (mean of two)
    for b in range(L):
        blk = next(r for r in table if r.kind == "block" and r.layer == b).get("dce")[0]
        assert t.metrics[f"dce_b{b}"][j] == pytest.approx(blk)
    splits = paths_study.run(model, ids).splits
    share = np.mean([sp.branch_share() for sp in splits], axis=0)  # (2L,)
    for b in range(L):
        assert t.metrics[f"branch_b{b}"][j] == pytest.approx(share[2 * b : 2 * b + 2].mean())
    # the measures made comparable across depths
    assert t.metrics["k_frac"][j] == pytest.approx(t.metrics["mean_k"][j] / (2 * L))
    assert t.metrics["sum_dce"][j] == pytest.approx(L * t.metrics["block_dce"][j])
    assert isinstance(PathsStudy, type) and isinstance(LesionStudy, type)


def test_trajectories_group_rows_by_model_in_iteration_order():
    rows_ = [{"scheme": "pre-ln", "depth": 2, "dose": 0.0, "seed": s, "iteration": it,
              "checkpoint": f"runs/x{s}/ckpt-{it}.ckpt", "loss": 5.0 - it,
              **{m: float(it) for m in ("mean_k", "share0", "share_short", "block_dce",
                                         "worst_dce", "delete2_dce")}}
             for s in (0, 1) for it in (2, 0, 1)]  # fmt: skip
    trajs = trajectories(rows_, "OUT")
    assert [t.model.seed for t in trajs] == [0, 1]
    assert list(trajs[0].iterations) == [0, 1, 2] and list(trajs[0].loss) == [5.0, 4.0, 3.0]
    assert trajs[1].paths[0] == os.path.join("OUT", "runs/x1/ckpt-0.ckpt")


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--doses", "0,1", "--variants", "pre-ln,post-ln"],
            "--doses 0,1 are rezero's dose; add rezero to the schemes, or give --doses 0 alone",
        ),
        (
            ["--doses", "0,-1"],
            "--doses: -1.0 is not an alpha rezero can start at; expected a number in [0, 10]",
        ),
        (["--doses", "0,11"], "--doses: 11.0 is not an alpha rezero can start at"),
        (
            ["--powers", "0,1.5"],
            "--powers: 1.5 is not an exponent ln-scaling can take; expected a number in [0, 1]",
        ),
        (
            ["--powers", "0,0.5"],
            "--powers 0,0.5 are ln-scaling's dose; add ln-scaling to the schemes, or give "
            "--powers 0.5 alone",
        ),
        (["--pilot-iters", "5"], "--pilot-iters 5: expected a whole number of steps, at least 10"),
        (
            ["--keep-every", "60", "--max-iters", "60"],
            "--keep-every 60 keeps 2 checkpoint(s) "
            "per model of 60 steps; expected at least 3, so that a loss level falls between two",
        ),
        (["--budget", "0.5"], "this study (12 models) would take about"),
        (["--variants", "pre-ln,none"], "scheme 'none' has no + x path to study"),
        (["--warmups", "10"], "--warmups cannot be combined with experiment robustness"),
        (["--levels", "3,9.9"], "level 9.9 is above the loss every model starts near, ln V = "),
        (["--seeds", "1"], "--seeds 0 is 1 training seed; the analysis resamples the seeds"),
        (["--seeds", "5-5"], "--seeds 5 is 1 training seed"),
        (
            ["--backend", "dask", "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "1"],
            "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_model_trains(tmp_path, capsys, flags, message):
    out = str(tmp_path / "never")
    rc = main([*QUICK, "--out-dir", out, *flags])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and message in err, err
    assert not os.path.exists(out)


def test_three_kept_checkpoints_are_enough_and_two_are_not():
    assert len(RobustnessConfig.quick(keep_every=30).cells(".")) == 12  # 0, 30, 60
    assert RobustnessConfig.quick(keep_every=59).max_iters == 60  # 0, 59, 60: the end is kept
    with pytest.raises(ValueError, match="--keep-every 60 keeps 2 checkpoint"):
        RobustnessConfig.quick(keep_every=60)


def test_the_robustness_flags_are_refused_for_another_experiment(tmp_path, capsys):
    assert main(["experiment", "warmup", "--doses", "1", "--out-dir", str(tmp_path / "w")]) == 2
    assert "--doses cannot be combined with experiment warmup" in capsys.readouterr().err


def test_a_level_outside_the_common_range_is_refused_naming_it(study, capsys):
    out, _ = study
    assert main([*QUICK, "--out-dir", out, "--levels", "1.5"]) == 2  # the models are cached
    err = capsys.readouterr().err
    # every model finished before: nothing is left to train, and nothing is announced
    assert "level 1.5 is outside the range every model reaches" in err and err.count("\n") == 1


def test_minus_zero_is_the_dose_zero_one_model_one_name():
    cfg = RobustnessConfig.quick(doses=(-0.0, 1.0))
    assert cfg.doses == (0.0, 1.0) and str(cfg.doses[0]) == "0.0"
    names = [name for name, _, _ in cfg.cells(".")]
    assert "rezero_L2_a0_s0" in names and not any("a-0" in n for n in names)


def test_a_one_character_text_is_refused_before_any_model_trains(tmp_path, capsys):
    text = tmp_path / "a.txt"
    text.write_text("a" * 5000, encoding="utf-8")
    out = str(tmp_path / "never")
    assert main([*QUICK, "--out-dir", out, "--data", str(text)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 1 distinct character" in err and "--data" in err
    assert not os.path.exists(out)


def test_an_out_dir_that_is_a_file_is_refused_by_its_flag(tmp_path, capsys):
    out = tmp_path / "file"
    out.write_text("mine", encoding="utf-8")
    assert main([*QUICK, "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out-dir {str(out)!r} is a file" in err
    assert out.read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("name", ["validation.txt", "checkpoints.csv"])
def test_files_no_study_wrote_are_never_replaced(tmp_path, capsys, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("my own notes", encoding="utf-8")
    assert main([*QUICK, "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"holds {name}, which no study wrote there" in err
    assert sorted(os.listdir(out)) == [name]  # nothing written, nothing replaced
    assert (out / name).read_text(encoding="utf-8") == "my own notes"


def test_each_printed_read_again_command_gives_its_row(study, capsys):
    # the command the table prints beside its checkpoints, run as printed, gives the row's
    # path length and lesion cost for that checkpoint: --seeds is read back as the seeds
    import csv
    import re
    import shlex

    out, _ = study
    assert main([*QUICK, "--out-dir", out]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("the checkpoints nearest"))
    paths_cmd = line.split("resgrad paths CKPT ")[1].split(", and resgrad lesion CKPT")[0]
    lesion_cmd = line.split("resgrad lesion CKPT ")[1].rstrip(":")
    ckpt = re.search(r"(\S+\.ckpt) \(loss", text.split("\n  level ")[-1])[1]
    row = next(r for r in csv.DictReader(open(os.path.join(out, "checkpoints.csv")))
               if os.path.join(out, r["checkpoint"]) == ckpt)  # fmt: skip
    assert main(["paths", ckpt, *shlex.split(paths_cmd), "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["rows"]
    mean_k = sum(r["k"] * r["share_norm"] for r in got)
    assert mean_k == pytest.approx(float(row["mean_k"]), rel=1e-12)
    assert got[0]["share_norm"] == pytest.approx(float(row["share0"]), rel=1e-12)
    assert main(["lesion", ckpt, *shlex.split(lesion_cmd), "--format", "json"]) == 0
    rows_ = json.loads(capsys.readouterr().out)["rows"]
    d2 = next(r for r in rows_ if r["kind"] == "delete" and r["k"] == 2)
    assert d2["dce"] == pytest.approx(float(row["delete2_dce"]), rel=1e-12)


def test_a_lone_window_seed_is_printed_as_that_seed():
    from resgrad.cli._common import seeds
    from resgrad.lab.robustness.report import seeds_flag

    for given in [(0,), (5,), (0, 1), (3, 5), (0, 1, 2), (2, 3)]:
        assert seeds(seeds_flag(given)) == given  # what the parser reads back is the seeds


# ------------------------------------------------------ output a reader cannot misread


def test_distinct_resamples_counts_the_multisets_a_bootstrap_can_draw():
    """C(2C - 1, C): checked against every draw of C clusters from C, enumerated."""
    for c in range(1, 6):
        draws = {tuple(sorted(d)) for d in itertools.product(range(c), repeat=c)}
        assert distinct_resamples(c) == len(draws)
    assert (distinct_resamples(3), distinct_resamples(5)) == (10, 126)


def test_the_table_states_the_claim_what_each_column_holds_fixed_and_its_evidence(study, capsys):
    out, _ = study
    assert main([*QUICK, "--out-dir", out]) == 0
    text = capsys.readouterr().out.splitlines()
    claim = next(ln for ln in text if ln.startswith("the claim: "))
    assert "shorter paths" in claim and "supported: shorter paths, cheaper lesions" in claim
    head = next(ln for ln in text if ln.lstrip().startswith("level |"))
    assert "b(path length | scheme, depth, loss)" in head and "rho(k, cost | loss)" in head
    (evidence,) = [ln for ln in text if ln.startswith("evidence: ")]
    cfg = RobustnessConfig.quick()
    assert f"{len(cfg.seeds)} training seeds" in evidence
    assert f"{distinct_resamples(len(cfg.seeds))} distinct bootstrap resamples" in evidence
    assert f"({cfg.bootstrap} drawn)" in evidence
    assert "--quick: a smoke test" in evidence  # the quick study says so; the default does not
    assert not RobustnessConfig().smoke and cfg.smoke
    gap = float(re.search(r"at most ([0-9.]+) nats apart", evidence)[1])
    rows = _rows(out)  # the widest gap is one between two checkpoints a model kept
    losses = {}
    for r in rows:
        losses.setdefault((r["scheme"], r["dose"], r["seed"]), []).append(float(r["loss"]))
    steps = [abs(a - b) for ls in losses.values() for a, b in zip(ls[:-1], ls[1:])]
    assert 0 < gap <= max(steps) + 5e-4


def test_the_json_names_the_bootstrap_count_for_what_it_is(study, capsys):
    out, _ = study
    assert main([*QUICK, "--out-dir", out, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    r0 = doc["results"][0]
    assert "B" not in r0 and r0["bootstrap_resamples"] == RobustnessConfig.quick().bootstrap
    assert r0["distinct_resamples"] == distinct_resamples(r0["seeds"])
    # one depth (2): its stratum is the whole study, without a depth term
    assert list(doc["by_depth"]) == ["2"] and doc["depths_skipped"] == []
    assert doc["by_depth"]["2"][0]["b_mean_k"] == pytest.approx(r0["b_mean_k"])
    assert not any(k.startswith("b_depth=") for k in r0)


def test_the_figure_legend_is_words(study):
    from resgrad.lab.robustness import robustness_figure

    out, _ = study
    cfg = RobustnessConfig.quick()
    fig = robustness_figure(equal_loss(cfg, out, jobs=1), "resgrad experiment robustness --quick")
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts]
    assert "pre-ln" in labels and any(lb.startswith("at loss ") for lb in labels), labels
    assert all(len(lb) > 2 for lb in labels)  # no bare marker codes ("s", "D")
    titles = " ".join(ax.get_title() for ax in fig.axes)
    assert "marker:" not in titles


def _rows(out: str) -> list[dict]:
    with open(os.path.join(out, "checkpoints.csv"), encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    "flag, value", [("--doses", "1,1"), ("--powers", "0,0"), ("--lrs", "1e-3,1e-3")]
)
def test_a_value_given_twice_is_refused_by_the_parser(tmp_path, capsys, flag, value):
    out = str(tmp_path / "never")
    with pytest.raises(SystemExit) as e:
        main([*QUICK, "--out-dir", out, flag, value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert f"argument {flag}: expected distinct values, got '{value}'" in err
    assert not os.path.exists(out)


def test_the_library_refuses_what_the_parser_lets_through_naming_the_flag():
    with pytest.raises(ValueError, match=r"^--doses 1,1: expected distinct doses"):
        RobustnessConfig.quick(doses=(1.0, 1))
    with pytest.raises(ValueError, match=r"^--lrs 0.001,0.001: expected one or more distinct"):
        RobustnessConfig.quick(lrs=(1e-3, 1e-3))
    with pytest.raises(ValueError, match=r"^--lrs : expected one or more distinct"):
        RobustnessConfig.quick(lrs=())
    with pytest.raises(ValueError, match=r"^--permutations -1: expected a whole number"):
        RobustnessConfig.quick(permutations=-1)


def test_the_pilot_trains_each_scheme_and_depth_at_every_rate_on_an_unused_seed():
    cfg = RobustnessConfig.quick()
    pilots = cfg.pilot_cells("OUT")
    assert [g for _, _, g in pilots] == [(s, 2, lr) for s in cfg.schemes for lr in cfg.lrs]
    for _, c, (s, L, lr) in pilots:
        assert (c.variant, c.n_layer, c.lr, c.min_lr) == (s, L, lr, lr / 10)
        assert c.max_iters == c.lr_decay_iters == c.eval_interval == cfg.pilot_iters
        assert c.seed not in cfg.seeds and c.keep_every == 0  # no checkpoint kept
        assert c.out_dir.startswith(os.path.join("OUT", "pilot"))
        assert c.rezero_alpha == 0.0  # rezero's reference dose: ReZero's own alpha 0
    assert RobustnessConfig.quick(lrs=(1e-2,)).pilot_cells("OUT") == []  # one rate: no pilot
    # the models of a scheme and depth all train at its chosen rate, whatever their dose
    chosen = {("pre-ln", 2): 3e-3, ("post-ln", 2): 1e-2, ("rezero", 2): 3e-3}
    for _, c, key in cfg.cells("OUT", chosen):
        assert c.lr == chosen[key.scheme, key.depth] and c.min_lr == c.lr / 10
    # ln-scaling's dose is its exponent, named p in the model's directory
    ln = RobustnessConfig.quick(schemes=("ln-scaling",), doses=(0.0,), powers=(0.0, 0.5))
    assert [(n, c.ln_scaling_power) for n, c, _ in ln.cells(".")][::3] == [
        ("ln-scaling_L2_p0_s0", 0.0), ("ln-scaling_L2_p0.5_s0", 0.5)]  # fmt: skip
    assert [c.ln_scaling_power for _, c, _ in ln.pilot_cells(".")] == [0.5, 0.5]


def test_the_quick_study_prints_its_recipe_and_every_view(study, capsys):
    out, _ = study
    assert main([*QUICK, "--out-dir", out]) == 0
    text = capsys.readouterr().out
    assert "recipe: 60 steps at each scheme and depth's learning rate" in text
    for s in ("pre-ln", "post-ln", "rezero"):  # each pilot line: both rates, one chosen
        line = next(ln for ln in text.splitlines() if ln.startswith(f"  {s} L=2: lr 0.003 -> "))
        assert line.count("(chosen)") == 1 and "lr 0.01 -> " in line
    assert "(--quick: the plateau part not applied" in text
    assert (
        "the dose, inside each dosed scheme and depth" in text and "rezero L=2 (alpha0 0,1)" in text
    )
    assert "the curse of depth: does the later half of the blocks cost less" in text
    assert "calibration, lesion costs shuffled within (scheme, depth) 50 times a level" in text
    assert main([*QUICK, "--out-dir", out, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["pilot"]) == 6 and {r["lr"] for r in doc["pilot"]} == {3e-3, 1e-2}
    assert [d["scheme"] for d in doc["doses"]] == ["rezero"]
    assert len(doc["curse_of_depth"]) == 4 * 4  # 4 groups (rezero twice) at 4 levels
    assert all(r["permutations"] == 50 for r in doc["results"])
    assert doc["left_out"] == [] and len(doc["phases"]) == len(doc["levels"])


@pytest.mark.parametrize("threads", [1, 3])
def test_on_a_dask_cluster_the_estimate_counts_its_worker_threads(tmp_path, capsys, threads):
    """The study's estimate shares its work among the cluster's worker threads, as the
    scheduler counts them: one thread takes the whole estimate, three take a third of the
    work (their start-up paid once). Refused over budget, the command says the time it
    needs, from that estimate, before anything is written."""
    import math

    distributed = pytest.importorskip("dask.distributed")
    from resgrad.lab.experiments.grid import connected, parallelism
    from resgrad.train.data import load_corpus

    cfg = RobustnessConfig.quick()
    V = load_corpus(cfg.data, cfg.block_size).tokenizer.vocab_size
    need = math.ceil(cfg.seconds(V, threads) * 1.25)
    assert need != math.ceil(cfg.seconds(V, 4 - threads) * 1.25)  # the count is seen
    with distributed.LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                                  dashboard_address=None) as cluster:  # fmt: skip
        with connected("dask", cluster.scheduler_address, 5.0) as client:
            assert parallelism(7, client) == threads
        out = str(tmp_path / "never")
        rc = main([*QUICK, "--out-dir", out, "--budget", "0.5", "--backend", "dask",
                   "--scheduler", cluster.scheduler_address])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and f"pass --budget {need} to allow it" in err, err
    assert not os.path.exists(out)


def test_local_workers_are_the_jobs_asked_for():
    from resgrad.lab.experiments.grid import connected, parallelism

    with connected("loky", None, 5.0) as client:
        assert client is None and parallelism(3, client) == 3
