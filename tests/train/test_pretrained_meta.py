"""Where a nanoGPT ckpt.pt's vocabulary is found: data/<dataset>/meta.pkl in a stated
order, never outside data/, and the tokenizer beside the checkpoint (not at its path)."""

import os
import pickle

import numpy as np
import pytest

from resgrad.nn.model import GPT
from resgrad.train.bpe import char_tokenizer_json
from resgrad.train.pretrained import find_nanogpt_meta, load_pretrained
from resgrad.verify.selfcheck import randomize_params
from tests.formats.test_nanogpt import CFG, _nanogpt_ckpt

# three vocabularies of the model's 30 characters, told apart by which one a load reads
VOCABS = {
    "cwd": "abcdefghijklmnopqrstuvwxyz .,!",
    "here": "ABCDEFGHIJKLMNOPQRSTUVWXYZ:;?'",
    "above": "0123456789+-*/=<>()[]{}#$%&@^_",
}


def _meta(path, chars):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)),
            "stoi": {c: i for i, c in enumerate(chars)}}  # fmt: skip
    with open(path, "wb") as f:
        pickle.dump(meta, f)
    return path


@pytest.fixture
def layout(torch, tmp_path, monkeypatch):
    """nanoGPT's layout, root/out/ckpt.pt beside root/data/, run from another directory
    (cwd) that has a data/ of its own, and a data/ inside out/ too: every candidate there."""
    assert all(len(v) == CFG.vocab_size == len(set(v)) for v in VOCABS.values())
    root, cwd = tmp_path / "root", tmp_path / "cwd"
    (root / "out").mkdir(parents=True)
    cwd.mkdir()
    model = GPT(CFG, seed=0)
    randomize_params(model.params, np.random.default_rng(0))
    torch.save(_nanogpt_ckpt(torch, model), root / "out" / "ckpt.pt")  # dataset shakespeare_char
    where = {
        "cwd": cwd / "data" / "shakespeare_char" / "meta.pkl",
        "here": root / "out" / "data" / "shakespeare_char" / "meta.pkl",
        "above": root / "data" / "shakespeare_char" / "meta.pkl",
    }
    for k, path in where.items():
        _meta(path, VOCABS[k])
    monkeypatch.chdir(cwd)
    return root / "out" / "ckpt.pt", where


def test_the_search_order_is_cwd_then_the_checkpoints_directory_then_above(layout):
    """Each candidate present, each a different vocabulary: the first in the documented
    order wins; removed, the next. A swapped order reads another vocabulary."""
    ckpt, where = layout
    config = {"dataset": "shakespeare_char"}
    for k in ("cwd", "here", "above"):
        assert find_nanogpt_meta(ckpt, config) == str(where[k])
        _, tok = load_pretrained(str(ckpt))
        assert tok.chars == VOCABS[k], k
        os.remove(where[k])
    assert find_nanogpt_meta(ckpt, config) is None


def test_a_relative_checkpoint_path_searches_its_own_directory(layout, monkeypatch):
    ckpt, where = layout
    os.remove(where["cwd"])
    monkeypatch.chdir(ckpt.parent.parent)  # root: "out/ckpt.pt"; root/data is now the cwd's
    assert find_nanogpt_meta("out/ckpt.pt", {"dataset": "shakespeare_char"}) == os.path.join(
        str(ckpt.parent.parent), "data", "shakespeare_char", "meta.pkl"
    )
    os.remove(where["above"])
    assert find_nanogpt_meta("out/ckpt.pt", {"dataset": "shakespeare_char"}) == os.path.join(
        str(ckpt.parent.parent), "out", "data", "shakespeare_char", "meta.pkl"
    )


def test_meta_given_wins_over_every_candidate(layout, tmp_path):
    ckpt, _ = layout
    mine = _meta(tmp_path / "mine" / "meta.pkl", VOCABS["above"][::-1])
    _, tok = load_pretrained(str(ckpt), meta=mine)
    assert tok.chars == VOCABS["above"][::-1]


def test_no_dataset_finds_nothing_and_the_tokenizer_beside_the_checkpoint_is_read(layout):
    """Without a dataset meta.pkl, the tokenizer.json in the checkpoint's directory: the
    directory of the file, not the file's path, nor the directory above."""
    ckpt, where = layout
    for path in where.values():
        os.remove(path)
    (ckpt.parent / "tokenizer.json").write_text(char_tokenizer_json(VOCABS["here"]))
    (ckpt.parent.parent / "tokenizer.json").write_text(char_tokenizer_json(VOCABS["above"]))
    _, tok = load_pretrained(str(ckpt))
    assert tok.chars == VOCABS["here"]
    assert find_nanogpt_meta(ckpt, {}) is None
    os.remove(ckpt.parent / "tokenizer.json")  # not vacuous: without it, no vocabulary
    with pytest.raises(ValueError, match="has no vocabulary"):
        load_pretrained(str(ckpt))


@pytest.mark.parametrize("dataset", ["..", ".", "", "../data/x", "a/b", "/etc", "a\\b", "a\0b",
                                     5, ["shakespeare_char"]])  # fmt: skip
def test_a_dataset_that_is_not_a_name_under_data_is_refused_by_name(torch, layout, dataset):
    """sample.py joins data/ and the dataset: ".." reads ./meta.pkl, "/etc" an absolute
    path. resgrad names the value and reads nothing outside data/."""
    ckpt, where = layout
    for d in (ckpt.parent, ckpt.parent.parent, where["cwd"].parent.parent.parent):
        _meta(d / "meta.pkl", VOCABS["cwd"])  # where data/../meta.pkl would lead
    with pytest.raises(ValueError) as e:
        find_nanogpt_meta(ckpt, {"dataset": dataset})
    assert str(e.value) == (
        f"{str(ckpt)!r}: its config's dataset is {dataset!r}; expected one directory name "
        "under data/ (nanoGPT's data/<dataset>/meta.pkl): pass the vocabulary with --meta PATH"
    )
    ck = torch.load(ckpt, weights_only=True)
    ck["config"]["dataset"] = dataset
    torch.save(ck, ckpt)
    with pytest.raises(ValueError, match="its config's dataset is"):
        load_pretrained(str(ckpt))
    _, tok = load_pretrained(str(ckpt), meta=where["here"])  # --meta: the dataset is not read
    assert tok.chars == VOCABS["here"]


@pytest.mark.parametrize("dataset", ["...", "a.b", "..x", "shakespeare_char"])
def test_names_with_dots_are_names(layout, dataset):
    """Just inside: only "." and ".." are not directory names."""
    ckpt, where = layout
    path = _meta(where["cwd"].parent.parent / dataset / "meta.pkl", VOCABS["cwd"])
    assert find_nanogpt_meta(ckpt, {"dataset": dataset}) == str(path)
