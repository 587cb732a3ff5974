"""lab.study.protocol, the one way of following a study through training and across runs,
against the class of bug each mutant stands for: a run or a SOURCE given twice let through
(or one given once refused), a table's names that lose a run's, a study run at the wrong
checkpoint, with the wrong name, on another text or without its refusals and budget asked
first, runs lined up on iterations not all of them kept, two models' weights told apart by
less than their names, dtypes, shapes and bytes (scripts/mutmut/run.py). The study is a
recorder: what it was asked, in order."""

import os
import shutil

import numpy as np
import pytest

from resgrad.lab.study.protocol import (
    Checkpoint,
    _weights_digest,
    across_runs,
    common_steps,
    every_checkpoint,
    refuse_repeated,
    refuse_twice,
    run_names,
)
from resgrad.lab.study.runs import RunModel
from tests.kept_runs import TEXT, train_runs

# -- runs and sources given twice, names in a table


def test_a_run_directory_given_twice_in_any_spelling_is_refused_naming_the_second(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "other").mkdir()
    os.symlink(tmp_path / "run", tmp_path / "link")
    run, other = str(tmp_path / "run"), str(tmp_path / "other")
    refuse_twice([run, other])
    refuse_twice([run])
    refuse_twice([])
    for second in (run + "/", os.path.join(tmp_path, ".", "run"), str(tmp_path / "link")):
        with pytest.raises(ValueError, match=rf"{second!r}"):
            refuse_twice([run, other, second])
    with pytest.raises(ValueError) as e:
        refuse_twice([other, run, other])
    assert repr(other) in str(e.value)


def test_a_source_given_twice_as_typed_is_refused_naming_it():
    refuse_repeated(["gpt2", "run/", "./run/"])  # as typed: two spellings are two sources
    refuse_repeated([])
    with pytest.raises(ValueError, match=r"'run/'"):
        refuse_repeated(["gpt2", "run/", "ckpt", "run/"])


def test_run_names_are_the_last_part_unless_two_share_it():
    assert run_names(["out/a", "out/b/", "c.ckpt"]) == ["a", "b", "c.ckpt"]
    assert run_names(["x/run", "y/run", "z"]) == ["x/run", "y/run", "z"]  # as given
    assert run_names([]) == []


# -- weights told apart


def test_a_weights_digest_covers_names_dtypes_shapes_and_bytes():
    w = {"a": np.arange(6, dtype=np.float32), "b": np.ones(2, np.float32)}
    d = _weights_digest(w)
    assert d == _weights_digest({"b": w["b"].copy(), "a": w["a"].copy()})  # key order
    assert d == _weights_digest({**w, "a": np.asfortranarray(w["a"])})
    others = [
        {**w, "a": w["a"].reshape(2, 3)},  # the same bytes, another shape
        {**w, "a": w["a"].view(np.int32)},  # the same bytes, another dtype
        {"c": w["a"], "b": w["b"]},  # another name
        {**w, "b": np.full(2, 2, np.float32)},  # other bytes
        {"a": w["b"], "b": w["a"]},  # names swapped
    ]
    assert len({d, *map(_weights_digest, others)}) == len(others) + 1
    assert len(d) == 64 and int(d, 16) >= 0  # a whole SHA-256


# -- common steps


def _ck(run, it, shape=2):
    m = RunModel("pre-ln", shape, 16, 2, "v", "t")
    return Checkpoint(it, f"{run}/ckpt-{it}.ckpt", f"{run}@{it}", m)


def test_runs_are_lined_up_on_the_iterations_all_of_them_kept():
    a = [_ck("a", i) for i in (0, 2, 4, 6)]
    b = [_ck("b", i) for i in (6, 4, 3, 0)]
    steps = common_steps([a, b])
    assert [s.iteration for s in steps] == [0, 4, 6]
    assert [s.results for s in steps] == [["a@0", "b@0"], ["a@4", "b@4"], ["a@6", "b@6"]]
    assert [c.path for c in steps[1].checkpoints] == ["a/ckpt-4.ckpt", "b/ckpt-4.ckpt"]
    assert [s.iteration for s in common_steps([a])] == [0, 2, 4, 6]


def test_no_run_no_common_iteration_or_unlike_runs_are_refused():
    with pytest.raises(ValueError, match="^no run to compare"):
        common_steps([])
    with pytest.raises(ValueError, match="^the runs kept no iteration in common"):
        common_steps([[_ck("a", 0)], [_ck("b", 2)]])
    with pytest.raises(ValueError, match=r"^run 'b' has depth \(n_layer\) 3, run 'a' has 2"):
        common_steps([[_ck("a", 0)], [_ck("b", 0, shape=3)]])  # named by their directories


# -- a study followed through real runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of one model on one text, seeds 1 and 2, each keeping ckpt-0, -2 and -4."""
    return train_runs(tmp_path_factory.mktemp("runs"))


class Recorder:
    """A study that says what it was asked, in order, and returns a digest of what it saw."""

    name, seeds = "recorder", (0,)

    def __init__(self):
        self.asked = []

    def fits(self, cfg):
        self.asked.append(("fits", cfg.n_layer))

    def cost(self, cfg, models):
        self.asked.append(("cost", models))
        assert cfg.n_layer == 1  # the model's config, not another's or none
        return models

    def require(self, cfg, models, runs=None):
        self.asked.append(("require", models, runs))
        assert cfg.n_layer == 1

    def bar(self, cost):
        rec = self

        class Bar:
            def __enter__(self):
                rec.asked.append(("bar", cost))
                return self

            def __exit__(self, *exc):
                rec.asked.append(("bar done",))

            def update(self, n):
                rec.asked.append(("tick", n))

        return Bar()

    def run(self, model, ids, name="", tick=None):
        tick(1)
        self.asked.append(("run", name))
        return (name, _weights_digest(model.params), len(ids), int(np.asarray(ids)[:50].sum()))


def _alone(path, text=TEXT):
    """What the recorder's run gives for one checkpoint studied alone."""
    from resgrad.train.sample import load_model

    model, tok, _ = load_model(path)
    ids = tok.encode(text)
    return _weights_digest(model.params), len(ids), int(np.asarray(ids)[:50].sum())


def test_every_checkpoint_is_each_checkpoint_alone_in_order_asked_first(runs):
    study = Recorder()
    got = every_checkpoint(study, runs, TEXT)
    assert [[(c.iteration, os.path.basename(c.path)) for c in r] for r in got] == [
        [(0, "ckpt-0.ckpt"), (2, "ckpt-2.ckpt"), (4, "ckpt-4.ckpt")]
    ] * 2
    for run, steps in zip(runs, got):
        for c in steps:
            assert c.path == os.path.join(run, f"ckpt-{c.iteration}.ckpt")
            assert c.result == (os.path.basename(run), *_alone(c.path))
            assert c.model == steps[0].model and c.model.tokens  # the text's tokens
    # every refusal before the first study: each run's first model, then all 6 checkpoints
    first_run = study.asked.index(("run", "s1"))
    assert study.asked[:first_run] == [
        ("fits", 1), ("fits", 1), ("require", 6, 2), ("cost", 6), ("bar", 6), ("fits", 1),
        ("tick", 1),
    ]  # fmt: skip
    assert study.asked.count(("tick", 1)) == 6 and study.asked[-1] == ("bar done",)


def test_without_a_text_every_checkpoint_reads_the_built_in_corpus(runs, monkeypatch):
    from resgrad.train import data

    monkeypatch.setattr(data, "default_corpus", lambda: TEXT[1:] + TEXT[0])
    got = every_checkpoint(Recorder(), runs[:1])
    assert got[0][0].result[1:] == _alone(got[0][0].path, TEXT[1:] + TEXT[0])


def test_a_run_given_twice_is_refused_before_any_study(runs):
    study = Recorder()
    with pytest.raises(ValueError, match=rf"^run directory {runs[0] + '/'!r} is given twice"):
        every_checkpoint(study, [runs[0], runs[0] + "/"], TEXT)
    assert study.asked == []


def test_a_kept_checkpoint_of_another_run_is_refused_naming_it(runs, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(runs[0], run)
    shutil.copyfile(os.path.join(runs[1], "ckpt-2.ckpt"), os.path.join(run, "ckpt-2.ckpt"))
    study = Recorder()
    with pytest.raises(ValueError) as e:
        every_checkpoint(study, [run], TEXT)
    assert str(e.value).startswith(f"{os.path.join(run, 'ckpt-2.ckpt')!r} belongs to another run")
    assert "seed 1 against 2" in str(e.value)


def test_across_runs_studies_each_source_in_order_after_every_refusal(runs):
    study = Recorder()
    got = across_runs(study, runs, TEXT)
    assert [m.name for m in got] == ["s1", "s2"]
    for m, run in zip(got, runs):
        assert m.result == (m.name, *_alone(os.path.join(run, "last.ckpt")))
        assert m.cfg.n_layer == 1 and m.model.tokens
    # both models read and refused or not before the first study; each study its own bar
    first_run = study.asked.index(("run", "s1"))
    assert study.asked[:first_run] == [("fits", 1), ("require", 2, None)] * 2 + [
        ("cost", 1), ("bar", 1), ("tick", 1)
    ]  # fmt: skip


def test_across_runs_refuses_a_copy_of_a_model_naming_both(runs, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(runs[0], copy)
    study = Recorder()
    with pytest.raises(ValueError) as e:
        across_runs(study, [runs[0], runs[1], copy], TEXT)
    assert str(e.value).startswith(f"SOURCE {copy!r} holds the same weights as {runs[0]!r}")
    assert ("run", "s1") not in study.asked


def test_across_runs_describes_each_model_as_asked(runs):
    seen = []

    def describe(cfg, ids):
        seen.append(len(ids))
        return RunModel("x", cfg.n_layer, cfg.n_embd, cfg.n_head, "v", str(len(seen)))

    with pytest.raises(ValueError, match=r"the text's token ids 2, run 's1' has 1"):
        across_runs(Recorder(), runs, TEXT, describe=describe)
    assert seen == [len(TEXT)] * 2


def test_across_runs_reads_a_run_s_last_checkpoint_or_with_best_its_best(runs, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(runs[0], run)
    shutil.copyfile(os.path.join(run, "ckpt-2.ckpt"), os.path.join(run, "best.ckpt"))
    (got,) = across_runs(Recorder(), [run], TEXT)
    assert got.result[1:] == _alone(os.path.join(run, "last.ckpt"))
    (got,) = across_runs(Recorder(), [run], TEXT, best=True)
    assert got.result[1:] == _alone(os.path.join(run, "ckpt-2.ckpt"))


def test_across_runs_checks_each_source_against_the_kinds_flag_and_meta_given(runs):
    with pytest.raises(ValueError, match=rf"^SOURCE {runs[0]!r} is "):
        across_runs(Recorder(), runs, TEXT, kinds=("checkpoint",))
    with pytest.raises(ValueError, match=rf"^--model {runs[0]!r} is .*; --model takes"):
        across_runs(Recorder(), runs, TEXT, kinds=("checkpoint",), flag="--model")
    with pytest.raises(ValueError, match=r"^--meta is the vocabulary of a nanoGPT ckpt\.pt"):
        across_runs(Recorder(), runs, TEXT, meta="meta.pkl")


def test_across_runs_names_the_text_it_cannot_encode_and_reads_the_corpus_by_default(
    runs, monkeypatch
):
    study = Recorder()
    with pytest.raises(ValueError, match=r"^--text 'notes\.txt': "):
        across_runs(study, runs, TEXT + "Z", text_path="notes.txt")  # no Z in the vocabulary
    assert ("run", "s1") not in study.asked
    from resgrad.train import data

    monkeypatch.setattr(data, "default_corpus", lambda: TEXT[1:] + TEXT[0])
    (got,) = across_runs(Recorder(), runs[:1])
    assert got.result[1:] == _alone(os.path.join(runs[0], "last.ckpt"), TEXT[1:] + TEXT[0])
