"""lab.study.runs, what runs must share to be compared, against the class of bug each mutant
stands for: a model described by another field of its config, a vocabulary or a text told
apart by its size only (or two equal ones told apart by their key order or dtype), a run
compared with the previous one instead of the first, a refusal naming the wrong field,
value or run, a run directory without kept checkpoints let through
(scripts/mutmut/run.py)."""

import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pytest

from resgrad.lab.study.refusals import NOT_ONE_RUN
from resgrad.lab.study.runs import (
    FIELD_NAMES,
    RunModel,
    check_comparable,
    describe_model,
    plan_runs,
    run_model,
)
from tests.kept_runs import TEXT, train_runs

CFG = SimpleNamespace(variant="post-ln", n_layer=3, n_embd=24, n_head=4, vocab_size=7)
IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6] * 130)  # (N,) N = 1,040


def _sha12(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _ckpt(vocab="abc", tokenizer=None):
    return SimpleNamespace(vocab=vocab, tokenizer=tokenizer)


# -- a model described


def test_a_run_model_is_the_config_s_scheme_and_shape_in_order():
    m = run_model(CFG, _ckpt(), None)
    assert (m.scheme, m.depth, m.width, m.heads) == ("post-ln", 3, 24, 4)
    assert m.tokens == ""  # no text yet
    d = describe_model(CFG, IDS)
    assert (d.scheme, d.depth, d.width, d.heads) == ("post-ln", 3, 24, 4)


def test_the_text_is_its_token_ids_whatever_their_dtype_or_layout():
    want = f"1,040 tokens, sha256 {_sha12(IDS.astype(np.int64).tobytes())}"
    strided = np.stack([IDS, IDS]).T[:, 0]  # the same ids, not contiguous
    for ids in (IDS, IDS.astype(np.int32), IDS.astype(np.uint16), strided, list(IDS)):
        assert run_model(CFG, _ckpt(), ids).tokens == want
        assert describe_model(CFG, ids).tokens == want  # the two agree
    other = IDS.copy()
    other[-1] = 0  # as many tokens, one other id
    assert run_model(CFG, _ckpt(), other).tokens != want


def test_a_character_vocabulary_is_listed_up_to_40_and_digested_beyond():
    # 40 characters still fit a one-line refusal; more are named by the SHA-256 of their text
    forty = "".join(chr(c) for c in range(60, 100))
    assert run_model(CFG, _ckpt(forty), None).vocabulary == f"40 characters {forty!r}"
    longer = forty + "é"
    assert run_model(CFG, _ckpt(longer), None).vocabulary == (
        f"41 characters (sha256 {_sha12(longer.encode())})"
    )


def test_a_tokenizer_is_told_apart_by_its_record_not_its_key_order():
    bpe = {"kind": "bpe", "merges": [[1, 2]], "vocab": 7}
    got = run_model(CFG, _ckpt("", bpe), None).vocabulary
    record = json.dumps(bpe, sort_keys=True).encode()
    assert got == f"bpe of 7 tokens (sha256 {_sha12(record)})"  # the config's vocabulary size
    reordered = dict(reversed(list(bpe.items())))
    assert run_model(CFG, _ckpt("", reordered), None).vocabulary == got
    assert run_model(CFG, _ckpt("", {**bpe, "merges": [[2, 1]]}), None).vocabulary != got
    kinded = run_model(CFG, _ckpt("", {**bpe, "kind": "sentencepiece"}), None).vocabulary
    assert kinded.startswith("sentencepiece of 7 tokens")  # the kind it names


def test_a_tokenizer_of_kind_char_is_the_character_vocabulary():
    assert run_model(CFG, _ckpt("ab", {"kind": "char"}), None).vocabulary == "2 characters 'ab'"


def test_describe_model_names_the_vocabulary_given_or_its_size():
    assert describe_model(CFG, IDS).vocabulary == "7 tokens"
    assert describe_model(CFG, IDS, "gpt2's 50257 tokens").vocabulary == "gpt2's 50257 tokens"


# -- runs compared with the first


A = RunModel("pre-ln", 2, 16, 2, "3 characters 'abc'", "10 tokens, sha256 0123456789ab")
OTHER = {"scheme": "post-ln", "depth": 4, "width": 32, "heads": 4,
         "vocabulary": "3 characters 'abd'",
         "tokens": "10 tokens, sha256 ba9876543210"}  # fmt: skip


def test_nothing_or_one_run_is_comparable():
    check_comparable([])
    check_comparable([("a", A)])
    check_comparable([("a", A), ("b", A), ("c", A._replace())])


@pytest.mark.parametrize("field", RunModel._fields)
def test_a_run_that_differs_in_any_field_is_refused_naming_it_the_field_and_both_values(field):
    b = A._replace(**{field: OTHER[field]})
    with pytest.raises(ValueError) as e:
        check_comparable([("runs/a", A), ("runs/b", b)])
    assert str(e.value) == (
        f"run 'runs/b' has {FIELD_NAMES[field]} {OTHER[field]}, run 'runs/a' has "
        f"{getattr(A, field)}: only runs of one model on one text are compared"
    )


def test_each_run_is_compared_with_the_first_not_the_one_before():
    b = A._replace(depth=4)
    with pytest.raises(ValueError, match=r"^run 'c' has depth \(n_layer\) 4, run 'a' has 2"):
        check_comparable([("a", A), ("b", A), ("c", b), ("d", b)])


def test_the_kind_and_the_refusal_given_are_the_ones_said():
    with pytest.raises(ValueError) as e:
        check_comparable([("ckpt-0", A), ("ckpt-5", A._replace(width=32))], "checkpoint",
                         NOT_ONE_RUN)  # fmt: skip
    assert str(e.value) == (
        "checkpoint 'ckpt-5' has width (n_embd) 32, checkpoint 'ckpt-0' has 16: not one run"
    )


# -- run directories read before any work


def test_a_run_directory_that_is_none_or_kept_nothing_is_refused_naming_it(tmp_path):
    f = tmp_path / "last.ckpt"
    f.write_bytes(b"x")
    with pytest.raises(NotADirectoryError, match=r"last\.ckpt' is not a directory"):
        plan_runs([str(f)], "some text")
    with pytest.raises(NotADirectoryError, match=r"nowhere' is not a directory"):
        plan_runs([str(tmp_path / "nowhere")], "some text")
    (tmp_path / "ckpt-x.ckpt").write_bytes(b"x")  # no iteration in its name: not kept
    with pytest.raises(ValueError, match=rf"^{str(tmp_path)!r} keeps no checkpoint per step"):
        plan_runs([str(tmp_path)], "some text")


# -- run directories planned: real runs that train kept


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of one model on one text, seeds 1 and 2, each keeping ckpt-0, -2 and -4."""
    return train_runs(tmp_path_factory.mktemp("runs"))


def test_a_plan_is_each_run_s_kept_checkpoints_model_text_and_identity(runs):
    from resgrad.train.rundir import kept_checkpoints, run_identity
    from resgrad.train.sample import load_model

    plans = plan_runs(runs, TEXT)
    assert [p.run_dir for p in plans] == runs
    for p in plans:
        model, tok, ckpt = load_model(p.kept[0][1])
        assert p.kept == kept_checkpoints(p.run_dir) and [it for it, _ in p.kept] == [0, 2, 4]
        assert p.cfg == model.cfg
        assert p.model == run_model(model.cfg, ckpt, tok.encode(TEXT))  # the text's tokens too
        assert p.model.tokens.endswith(_sha12(np.asarray(tok.encode(TEXT), np.int64).tobytes()))
        assert p.identity == run_identity(ckpt) and p.identity is not None
    assert plans[0].identity != plans[1].identity  # two seeds, two runs


def test_without_a_text_the_plan_reads_the_built_in_corpus(runs, monkeypatch):
    from resgrad.train import data

    monkeypatch.setattr(data, "default_corpus", lambda: TEXT[1:] + TEXT[0])
    got = plan_runs(runs[:1])
    assert got[0].model == plan_runs(runs[:1], TEXT[1:] + TEXT[0])[0].model
    assert got[0].model != plan_runs(runs[:1], TEXT)[0].model  # that text, not another


def test_a_copy_of_a_run_beside_it_is_refused_naming_both(runs, tmp_path):
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(runs[0], copy)
    with pytest.raises(ValueError) as e:
        plan_runs([runs[0], runs[1], copy], TEXT)
    assert str(e.value).startswith(f"run directories {runs[0]!r} and {copy!r} hold the same run")


def test_a_first_checkpoint_named_for_another_iteration_is_refused_naming_it(runs, tmp_path):
    import os
    import shutil

    run = str(tmp_path / "run")
    shutil.copytree(runs[0], run)
    first = os.path.join(run, "ckpt-0.ckpt")
    shutil.copyfile(os.path.join(run, "ckpt-2.ckpt"), first)
    with pytest.raises(ValueError, match=rf"^{first!r} is named for iteration 0"):
        plan_runs([run], TEXT)
