"""The equal-loss study's views beyond the pooled answer, on synthetic models whose truth is
known: the dose inside a scheme, the curse of depth block by block, the recipe's pilot and
the rule that leaves a model out, and the levels named by phase."""

import math

import numpy as np
import pytest

from resgrad.lab.robustness import levels as rl
from resgrad.lab.robustness import profiles as pf
from resgrad.lab.robustness import recipe as rc
from resgrad.lab.robustness import stats as rs
from resgrad.lab.robustness.analysis import read_study, study_levels
from resgrad.lab.robustness.experiment import RobustnessConfig

IT = np.arange(8) * 100


def _loss(rng):
    return 2.4 + 0.2 * rng.random() + (1.8 + 0.2 * rng.random()) * np.exp(-IT / 250)


# --------------------------------------------------------------------------- the dose


def _dosed(beta, data_seed, seeds=5, noise=0.02):
    """rezero at depths 6 and 12, 4 doses x ``seeds`` seeds, and pre-ln beside it: inside
    rezero the dose moves path length and lesion cost = beta x path length + noise; pre-ln's
    lesion cost is unrelated to it (it has no dose)."""
    rng = np.random.default_rng(data_seed)
    out = []
    for L in (6, 12):
        for dose in (0.0, 0.05, 0.25, 1.0):
            for seed in range(seeds):
                loss = _loss(rng)
                path = 1.5 + 2.0 * dose + rng.normal(0, 0.1) + 0.3 * (loss - 3)
                cost = 0.2 + beta * path + 0.1 * (loss - 3) + rng.normal(0, noise, len(IT))
                key = rl.ModelKey("rezero", L, dose, seed)
                out.append(rl.Trajectory(key, IT, loss, {"mean_k": path, "block_dce": cost},
                                         tuple("x" for _ in IT)))  # fmt: skip
        for seed in range(seeds):
            loss = _loss(rng)
            m = {"mean_k": 1.0 + rng.normal(0, 0.1) + 0 * IT,
                 "block_dce": 0.1 + rng.normal(0, noise, len(IT))}  # fmt: skip
            out.append(rl.Trajectory(rl.ModelKey("pre-ln", L, 0.0, seed), IT, loss, m,
                                     tuple("x" for _ in IT)))  # fmt: skip
    return out


@pytest.mark.parametrize("beta, word", [(0.1, "supported"), (-0.1, "contradicted"),
                                        (0.0, "not resolved at this size")])  # fmt: skip
def test_the_dose_slope_inside_each_dosed_scheme_and_depth(beta, word):
    trajs = _dosed(beta, data_seed=4, noise=0.05 if beta == 0 else 0.02)
    levels = rl.choose_levels(trajs, n=2)
    doses, skipped = rs.dose_response(trajs, levels, B=300, permutations=100)
    assert sorted(doses) == [("rezero", 6), ("rezero", 12)] and skipped == []  # no pre-ln
    for rs_ in doses.values():
        assert [r.verdict for r in rs_] == [word] * 2, [r.sentence for r in rs_]
        assert all(r.models == 20 and r.names[:3] == ("intercept", "mean_k", "loss") for r in rs_)
        if beta:
            assert all(r.path_coef[0] == pytest.approx(beta, abs=0.03) for r in rs_)


def test_a_dosed_stratum_too_thin_is_named_and_skipped():
    trajs = [t for t in _dosed(0.1, 1) if t.model.depth == 6 or t.model.seed == 0]
    doses, skipped = rs.dose_response(trajs, rl.choose_levels(trajs, n=1), B=20)
    assert list(doses) == [("rezero", 6)]
    assert skipped == ["rezero L=12: 4 model(s) from 1 training seed(s); a dose's slope needs "
                       "at least 3 models and 2 seeds: skipped"]  # fmt: skip


# --------------------------------------------------------------------------- the curse of depth


def test_gap_is_the_later_half_less_the_earlier_and_an_odd_middle_is_in_neither():
    prof = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 4.0, 0.0, 0.0]])
    assert pf.gap(prof).tolist() == [(3.5 - 1.5), (0.0 - 4.0)]
    odd = np.array([[1.0, 100.0, 3.0]])  # the middle block, 100, counts in neither half
    assert pf.gap(odd).tolist() == [2.0]
    with pytest.raises(ValueError, match="a profile of 1 block"):
        pf.gap(np.ones((2, 1)))


def _profiled(slope, data_seed, L=6, seeds=5, noise=0.01, groups=("pre-ln",)):
    """Models whose one-block lesion cost falls (slope < 0) or rises with block index."""
    rng = np.random.default_rng(data_seed)
    out = []
    for scheme in groups:
        for seed in range(seeds):
            loss = _loss(rng)
            m = {"mean_k": 1.0 + 0 * IT, "block_dce": 0.2 + 0 * IT}
            for b in range(L):
                m[f"dce_b{b}"] = 0.2 + slope * b + rng.normal(0, noise, len(IT))
                m[f"branch_b{b}"] = 0.5 - 0.05 * b + 0 * IT
            out.append(rl.Trajectory(rl.ModelKey(scheme, L, 0.0, seed), IT, loss, m,
                                     tuple("x" for _ in IT)))  # fmt: skip
    return out


@pytest.mark.parametrize("slope, word", [(-0.02, "supported"), (0.02, "contradicted"),
                                         (0.0, "not resolved at this size")])  # fmt: skip
def test_the_curse_of_depth_verdict_follows_the_profile(slope, word):
    trajs = _profiled(slope, data_seed=2)
    res, skipped = pf.curse_of_depth(trajs, rl.choose_levels(trajs, n=2), B=300,
                                     permutations=200)  # fmt: skip
    assert skipped == [] and [r.verdict for r in res] == [word] * 2, [r.sentence() for r in res]
    r = res[0]
    assert r.gap[0] == pytest.approx(slope * 3, abs=0.005)  # halves 3 blocks apart
    assert r.branch_gap[0] == pytest.approx(-0.15)  # the branch share falls 0.05 a block
    assert len(r.lesion) == len(r.branch) == 6 and all(
        lo <= m <= hi for m, lo, hi in zip(r.lesion, r.lesion_lo, r.lesion_hi))  # fmt: skip
    rec = r.record()
    assert rec["verdict"] == word and rec["permutations"] == 200 and len(rec["lesion"]) == 6


def test_on_flat_profiles_the_curse_verdict_says_yes_at_about_the_nominal_rate():
    """Over 40 draws of models whose blocks all cost the same (noise only), the halves'
    verdict says supported or contradicted rarely, as its calibration says it should."""
    said = []
    for d in range(40):
        trajs = _profiled(0.0, data_seed=100 + d, noise=0.05)
        (r,), _ = pf.curse_of_depth(trajs, [3.0], B=200, permutations=100)
        said.append(r.verdict != "not resolved at this size")
        assert r.calibration.rule_rate <= 0.1
    assert np.mean(said) <= 0.15


def test_a_group_without_profiles_or_seeds_is_named_and_skipped():
    trajs = _profiled(-0.02, 3) + _profiled(-0.02, 3, groups=("post-ln",), seeds=1)
    bare = _profiled(0.0, 5, groups=("rezero",))
    bare = [t._replace(metrics={"mean_k": t.metrics["mean_k"]}) for t in bare]
    res, skipped = pf.curse_of_depth(trajs + bare, [3.0], B=20)
    assert {r.scheme for r in res} == {"pre-ln"}
    assert skipped == ["post-ln L=6 dose=0: 1 training seed(s); an interval needs at least 2: "
                       "skipped", "rezero L=6 dose=0: no per-block profile in its rows: "
                       "skipped"]  # fmt: skip


# --------------------------------------------------------------------------- the recipe


def _pilot(scheme, depth, lr, loss, diverged=False):
    return {"scheme": scheme, "depth": depth, "lr": lr, "val_loss": loss, "diverged": diverged}


def test_the_pilot_chooses_the_lowest_loss_never_a_diverged_one_and_ties_go_smaller():
    rows = [_pilot("pre-ln", 6, 1e-3, 2.9), _pilot("pre-ln", 6, 3e-3, 2.5),
            _pilot("pre-ln", 6, 1e-2, 2.1, diverged=True),  # lowest, but it diverged
            _pilot("residual", 6, 3e-3, 2.6), _pilot("residual", 6, 1e-3, 2.6),  # a tie
            _pilot("rezero", 6, 1e-3, math.nan), _pilot("rezero", 6, 3e-3, 3.0),
            _pilot("deepnorm", 12, 3e-3, 1.0, True),
            _pilot("deepnorm", 12, 1e-3, 1.0, True)]  # fmt: skip
    assert rc.choose_lrs(rows) == {("pre-ln", 6): 3e-3, ("residual", 6): 1e-3,
                                   ("rezero", 6): 3e-3, ("deepnorm", 12): 1e-3}  # fmt: skip
    lines = rc.pilot_lines(rows, rc.choose_lrs(rows))
    assert lines[0] == ("  pre-ln L=6: lr 0.001 -> 2.900, lr 0.003 -> 2.500 (chosen), "
                        "lr 0.01 -> diverged")  # fmt: skip


def _row(scheme, seed, it, loss, diverged=False):
    return {"scheme": scheme, "depth": 6, "dose": 0.0, "seed": seed, "iteration": it,
            "loss": loss, "diverged": diverged}  # fmt: skip


def test_the_rule_leaves_out_a_diverged_model_and_one_that_never_left_the_plateau():
    plateau = 3.25
    rows = [_row("pre-ln", 0, it, 4.0 - it / 100) for it in (0, 100, 200)]  # reaches 2.0
    rows += [_row("residual", 0, it, 4.0 - it / 1000) for it in (0, 100, 200)]  # 3.8: above
    rows += [_row("rezero", 0, it, 4.0 - it / 100, True) for it in (0, 100)]
    edge = plateau - rc.PLATEAU_MARGIN
    rows += [_row("post-ln", 0, 0, 4.0), _row("post-ln", 0, 100, edge)]  # at the bar: out
    rows += [_row("deepnorm", 0, 0, 4.0), _row("deepnorm", 0, 100, np.nextafter(edge, 0))]
    gone = rc.left_out(rows, plateau)
    assert sorted(k[0] for k in gone) == ["post-ln", "residual", "rezero"]
    assert gone["rezero", 6, 0.0, 0] == "diverged (read up to step 100)"
    assert gone["residual", 6, 0.0, 0] == ("its lowest loss 3.800 stays above the unigram "
                                           "plateau less 0.1 (3.150)")  # fmt: skip


def test_phases_are_named_against_the_plateau():
    assert rc.phase(3.5, 3.25) == "descent to the plateau"
    assert rc.phase(3.35, 3.25) == rc.phase(3.15, 3.25) == "on the plateau"
    assert rc.phase(2.75, 3.25) == "learning, 0.50 below the plateau"


def test_read_study_leaves_out_by_the_rule_and_lists_what_it_left():
    cfg = RobustnessConfig.quick(bootstrap=20, permutations=0, plateau_rule=True)
    rows = []
    for s in ("pre-ln", "post-ln"):
        for seed in range(3):
            for it, loss in zip(IT, 2.5 + 2.0 * np.exp(-IT / 200) + 0.01 * seed):
                rows.append({"scheme": s, "depth": 2, "dose": 0.0, "seed": seed,
                             "iteration": int(it), "checkpoint": f"runs/{s}{seed}/c{it}",
                             "loss": float(loss), "diverged": False,
                             **{m: float(loss) * (1 + seed) for m in
                                ("mean_k", "share0", "share_short", "block_dce", "worst_dce",
                                 "delete2_dce", "k_frac", "sum_dce")}})  # fmt: skip
    stuck = [{**r, "scheme": "rezero", "loss": 4.0 - r["iteration"] / 1e4} for r in rows[:8]]
    study = read_study(cfg, rows + stuck, "OUT", plateau=3.25)
    assert list(study.left_out) == [("rezero", 2, 0.0, 0)]
    assert {t.model.scheme for t in study.trajs} == {"pre-ln", "post-ln"}
    assert study.profiles == [] and study.across == []  # no profiles, one depth
    # the levels: the common range's bottom up to 0.3 above the plateau
    lo, hi = rl.common_range(study.trajs)
    assert all(lo < lv < 3.25 + 0.3 for lv in study.levels) and len(study.levels) == 4
    assert study_levels(cfg, study.trajs, 3.25) == study.levels
    quick = read_study(RobustnessConfig.quick(bootstrap=20, permutations=0), rows + stuck,
                       "OUT", plateau=3.25)  # fmt: skip
    assert quick.left_out == {}  # --quick: the plateau part of the rule is off
    with pytest.raises(ValueError, match="every model of the study was left out"):
        read_study(cfg, stuck, "OUT", plateau=3.25)


# --------------------------------------------------------------------------- the study written out


def _study_rows(data_seed=0):
    """Rows of pre-ln and rezero (alpha0 0 and 1) at depths 2 and 4, 3 seeds, 8 checkpoints,
    with every metric and both profiles: what run_cells returns, without training."""
    rng = np.random.default_rng(data_seed)
    rows = []
    for scheme, doses in (("pre-ln", (0.0,)), ("rezero", (0.0, 1.0))):
        for L in (2, 4):
            for dose in doses:
                for seed in range(3):
                    loss = _loss(rng)
                    for j, it in enumerate(IT):
                        k = 1.0 + dose + 0.1 * L + rng.normal(0, 0.05)
                        cost = 0.1 + 0.05 * k + rng.normal(0, 0.01)
                        r = {"scheme": scheme, "depth": L, "dose": dose, "seed": seed,
                             "iteration": int(it), "loss": float(loss[j]), "diverged": False,
                             "checkpoint": f"runs/{scheme}{L}{dose}{seed}/ckpt-{it}.ckpt",
                             "mean_k": k, "share0": 0.5, "share_short": 0.6,
                             "block_dce": cost, "worst_dce": 2 * cost, "delete2_dce": 2 * cost,
                             "k_frac": k / (2 * L), "sum_dce": L * cost}  # fmt: skip
                        r |= {f"dce_b{b}": cost * (1 - 0.2 * b) for b in range(L)}
                        r |= {f"branch_b{b}": 0.4 - 0.05 * b for b in range(L)}
                        rows.append(r)
    return rows


def test_the_study_written_out_has_every_view_and_the_figure_its_six_panels():
    import json

    from resgrad.lab.robustness.figure import robustness_figure
    from resgrad.lab.robustness.report import render

    cfg = RobustnessConfig.quick(depths=(2, 4), bootstrap=50, permutations=20)
    pilot = [{"scheme": s, "depth": L, "lr": lr, "val_loss": 3.0 - lr, "diverged": False}
             for s in cfg.schemes for L in cfg.depths for lr in cfg.lrs]  # fmt: skip
    study = read_study(cfg, _study_rows(), "OUT", 3.25, pilot, rc.choose_lrs(pilot))
    assert sorted(study.by_depth) == [2, 4] and len(study.across) == len(study.levels)
    assert sorted(study.doses) == [("rezero", 2), ("rezero", 4)]
    assert len(study.profiles) == 6 * len(study.levels)  # 3 groups x 2 depths
    assert all(r.names[-1] != "depth=4" for r in study.across)  # no depth term across depths
    assert study.results[0].names[-1] == "depth=4"
    text = render(study, command="CMD")
    for needle in ("within depth, pooled (the answer):", "each depth alone", "  L=2  ",
                   "rezero L=4 (alpha0 0,1): ", "across depths (secondary", "the curse of depth",
                   "    rezero L=4 dose=1: ", "evidence: 3 training seeds"):  # fmt: skip
        assert needle in text, needle
    doc = json.loads(render(study, "json", command="CMD"))
    assert doc["command"] == "CMD" and len(doc["across_depths"]) == len(study.levels)
    assert [d["doses"] for d in doc["doses"]] == [[0.0, 1.0], [0.0, 1.0]]
    assert doc["curse_of_depth"][0]["lesion"] == list(study.profiles[0].lesion)
    csv_text = render(study, "csv")
    assert csv_text.count("\n") == 1 + len(study.levels)
    fig = robustness_figure(study, "CMD")
    assert len(fig.axes) == 6 and "CMD" in fig._suptitle.get_text()
    titles = [ax.get_title() for ax in fig.axes]
    assert "the curse of depth at loss" in titles[3] and "L=4" in titles[3]
    assert len(fig.axes[3].lines) == 3  # pre-ln, rezero at both doses, at the deepest depth


def test_a_pilot_cell_is_its_runs_last_evaluation_in_process(tmp_path, monkeypatch):
    """The pilot's row, taken where it runs (the grid's workers run it elsewhere): its
    scheme, depth and rate as given, and the run's last evaluation; a run that diverged
    before any evaluation is a NaN loss, marked diverged."""
    from resgrad.train.rundir import read_metrics

    cfg = RobustnessConfig.quick(pilot_iters=10)
    _, c, g = cfg.pilot_cells(str(tmp_path))[0]
    (row,) = rc.pilot_cell((c, g))
    evals = [r for r in read_metrics(c.out_dir) if r["kind"] == "eval"]
    assert row == {"scheme": g[0], "depth": g[1], "lr": g[2], "diverged": False,
                   "val_loss": evals[-1]["val_loss"]}  # fmt: skip
    assert [type(row[k]) for k in ("depth", "lr", "diverged", "val_loss")] == [
        int, float, bool, float]  # fmt: skip
    monkeypatch.setattr(rc, "run_cell", lambda cfg: [{"val_loss": None, "diverged": 1}])
    (gone,) = rc.pilot_cell((c, ("post-ln", np.int64(4), np.float32(0.5))))
    assert math.isnan(gone["val_loss"]) and gone["diverged"] is True
    assert (gone["scheme"], gone["depth"], gone["lr"]) == ("post-ln", 4, 0.5)
    assert type(gone["depth"]) is int and type(gone["lr"]) is float
