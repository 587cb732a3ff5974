"""The one SOURCE resolver: each kind named with what it loads, every flag meaningless for
the kind found refused in one line before any weight is read, and the loaders it calls."""

import os
import pickle
import shutil

import numpy as np
import pytest

from resgrad.formats.checkpoint import load_checkpoint, save_checkpoint
from resgrad.formats.hf import export_hf
from resgrad.train.bpe import char_tokenizer_json
from resgrad.train.config import TrainConfig
from resgrad.train.data import DEFAULT_SOURCE, CharTokenizer, default_corpus
from resgrad.train.loop import train
from resgrad.train.pretrained import load_pretrained
from resgrad.train.sample import load_model
from resgrad.train.source import (
    ALL,
    KINDS,
    MODELS,
    PRETRAINED,
    RESGRAD,
    Source,
    encode_text,
    load_source,
    resolve_source,
    sample_source,
)

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
CHARS = "".join(sorted(set(TEXT)))  # 28 characters: no capitals, no newline


def tiny_run(out_dir, data):
    """A resgrad run of one step, as ``resgrad train`` leaves it (about a second)."""
    cfg = TrainConfig(n_layer=1, n_head=1, n_embd=8, block_size=8, batch_size=2, max_iters=1,
                      eval_interval=1, eval_iters=1, warmup_iters=0, lr_decay_iters=1,
                      data=str(data), out_dir=str(out_dir))  # fmt: skip
    train(cfg, progress=False, log=lambda s: None)
    return str(out_dir)


def killed(run_dir, to):
    """What a run killed before its first checkpoint leaves: the run's files (metrics,
    dynamics, lock, plot), no last.ckpt or best.ckpt."""
    shutil.copytree(run_dir, to)
    for name in ("last.ckpt", "best.ckpt"):
        os.remove(os.path.join(to, name))
    assert os.path.exists(os.path.join(to, "metrics.jsonl"))
    return str(to)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """One of each kind but nanoGPT's (which needs torch): a trained run, its checkpoint
    file, the same model exported as a Hugging Face directory, a killed run, a text."""
    base = tmp_path_factory.mktemp("sources")
    (base / "data.txt").write_text(TEXT, encoding="utf-8")
    run = tiny_run(base / "run", base / "data.txt")
    model, tok, _ = load_model(run)
    hf = base / "hf"
    export_hf(model, hf, tokenizer_json=char_tokenizer_json(tok.chars))
    return {
        "run": run,
        "checkpoint": os.path.join(run, "last.ckpt"),
        "hf-dir": str(hf),
        "killed": killed(run, base / "killed"),
        "text": str(base / "data.txt"),
    }


@pytest.fixture
def nanogpt(torch, tmp_path):
    """nanoGPT's out/ckpt.pt beside data/shakespeare_char/meta.pkl; returns (ckpt, meta)."""
    from tests import nanogpt_reference

    stoi = {c: i for i, c in enumerate(CHARS)}
    (tmp_path / "data" / "shakespeare_char").mkdir(parents=True)
    meta = tmp_path / "data" / "shakespeare_char" / "meta.pkl"
    meta.write_bytes(pickle.dumps({"vocab_size": len(CHARS), "stoi": stoi,
                                   "itos": {i: c for c, i in stoi.items()}}))  # fmt: skip
    kw = dict(n_layer=1, n_head=1, n_embd=8, block_size=8, vocab_size=len(CHARS), bias=False)
    ref = nanogpt_reference.build(torch, **kw, dtype=torch.float32, seed=0)
    (tmp_path / "out").mkdir()
    ckpt = tmp_path / "out" / "ckpt.pt"
    torch.save(nanogpt_reference.train_py_checkpoint(torch, ref, **kw), ckpt)
    return str(ckpt), str(meta)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, sources):
    """A local Hugging Face cache holding 'gpt2' (the tiny exported model), read offline."""
    import huggingface_hub.constants as hc

    snap = tmp_path / "hub" / "models--openai-community--gpt2" / "snapshots" / "abc123"
    shutil.copytree(sources["hf-dir"], snap)
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    return str(snap)


# ------------------------------------------------------------------ each kind, named


def test_each_kind_is_named_with_the_path_it_loads(sources, tmp_path, monkeypatch):
    run, ckpt, hf = sources["run"], sources["checkpoint"], sources["hf-dir"]
    assert resolve_source(run) == Source(run, "run", os.path.join(run, "last.ckpt"))
    assert resolve_source(run, best=True).path == os.path.join(run, "best.ckpt")
    assert resolve_source(ckpt) == Source(ckpt, "checkpoint", ckpt)
    renamed = tmp_path / "model.bin"  # a checkpoint is known by its header, not its name
    shutil.copy(ckpt, renamed)
    assert resolve_source(str(renamed)).kind == "checkpoint"
    assert resolve_source(hf) == Source(hf, "hf-dir", hf)
    assert resolve_source("lesson", kinds=ALL) == Source("lesson", "lesson", None)
    monkeypatch.chdir(tmp_path)
    os.mkdir("lesson")  # 'lesson' is the lesson's where the caller takes it, a path elsewhere
    assert resolve_source("lesson", kinds=ALL).kind == "lesson"
    with pytest.raises(ValueError, match="'lesson' is a directory but not a model"):
        resolve_source("lesson", kinds=MODELS)


def test_a_nanogpt_ckpt_is_named_with_its_meta(nanogpt, tmp_path):
    ckpt, meta = nanogpt
    assert resolve_source(ckpt) == Source(ckpt, "nanogpt", ckpt)
    assert resolve_source(ckpt, meta=meta) == Source(ckpt, "nanogpt", ckpt, meta)
    model, tok = load_source(resolve_source(ckpt))  # data/<dataset>/meta.pkl found
    assert tok.chars == CHARS and model.cfg.activation == "gelu-erf"
    lone = tmp_path / "far" / "lone" / "ckpt.pt"  # no data/ near it: the meta.pkl given
    lone.parent.mkdir(parents=True)
    shutil.copy(ckpt, lone)
    with pytest.raises(ValueError, match="has no vocabulary"):
        load_source(resolve_source(str(lone)))
    assert load_source(resolve_source(str(lone), meta=meta))[1].chars == CHARS
    text = sample_source(resolve_source(str(lone), meta=meta), "the", 3, seed=1)
    assert text.startswith("the") and set(text) <= set(CHARS)


def test_a_hub_name_resolves_from_the_local_cache_only(hub_cache, sources):
    src = resolve_source("gpt2")
    assert src == Source("gpt2", "hub", hub_cache)
    assert "loading" in src.describe() and hub_cache in src.describe()
    model, tok = load_source(src)  # offline: the cached snapshot
    want, _ = load_pretrained(sources["hf-dir"])
    assert all(np.array_equal(model.params[k], want.params[k]) for k in want.params)
    assert tok.chars == CHARS
    other = resolve_source("someone/not-cached")
    assert other.kind == "hub" and other.path is None
    assert "not in the local cache" in other.describe()


def test_describe_names_the_kind_and_what_is_loaded(sources):
    run = sources["run"]
    assert resolve_source(run).describe() == (
        f"{run!r}: a resgrad run directory, loading {os.path.join(run, 'last.ckpt')!r}"
    )
    assert (
        resolve_source(sources["hf-dir"])
        .describe()
        .endswith(f"a Hugging Face GPT-2 directory, loading {sources['hf-dir']!r}")
    )
    assert resolve_source("lesson", kinds=ALL).describe() == "'lesson': the lesson's tanh stack"


def test_resolving_reads_no_weights(sources, nanogpt, monkeypatch):
    """Every kind is found, and every refusal made, before anything is loaded."""
    import resgrad.formats.hf as hf
    import resgrad.formats.nanogpt as ng
    import resgrad.train.sample as sample

    def boom(*a, **k):
        raise AssertionError("weights read while resolving")

    for mod, fn in ((sample, "load_checkpoint"), (hf, "read_hf_tensors"),
                    (hf, "read_hf_config"), (ng, "read_nanogpt_ckpt")):  # fmt: skip
        monkeypatch.setattr(mod, fn, boom)
    for s in (sources["run"], sources["checkpoint"], sources["hf-dir"], nanogpt[0]):
        assert resolve_source(s).kind in MODELS
    with pytest.raises(ValueError, match="--best"):
        resolve_source(sources["hf-dir"], best=True)
    with pytest.raises(ValueError, match="a directory; expected a file"):
        resolve_source(nanogpt[0], meta=os.path.dirname(nanogpt[1]))


def test_the_loader_is_the_kinds_own(sources, tmp_path):
    for s in ("run", "checkpoint"):
        model, tok = load_source(resolve_source(sources[s]))
        want, want_tok, _ = load_model(sources["run"])
        assert tok.chars == want_tok.chars
        assert all(np.array_equal(model.params[k], want.params[k]) for k in want.params)
    d = tmp_path / "run"  # a run whose best.ckpt is another model than its last.ckpt
    shutil.copytree(sources["run"], d)
    ckpt = load_checkpoint(d / "best.ckpt")
    ckpt.params["wte"] = ckpt.params["wte"] * 2
    save_checkpoint(d / "best.ckpt", ckpt)
    best, _ = load_source(resolve_source(str(d), best=True))
    last, _ = load_source(resolve_source(str(d)))
    assert np.array_equal(best.params["wte"], 2 * last.params["wte"])
    model, tok = load_source(resolve_source(sources["hf-dir"]))
    assert tok.chars == CHARS and model.cfg.n_layer == 1
    seen = []
    load_source(resolve_source(sources["run"]), fits=seen.append)  # the memory check
    load_source(resolve_source(sources["hf-dir"]), fits=seen.append)
    assert [c.n_embd for c in seen] == [8, 8]
    with pytest.raises(ValueError, match="not a GPT"):
        load_source(resolve_source("lesson", kinds=ALL))


def test_sample_source_draws_from_every_kind_alike(sources):
    """The run, its checkpoint file and its export are one model: the same seeded text."""
    texts = {
        s: sample_source(resolve_source(sources[s]), "the ", 12, top_k=5, seed=7)
        for s in ("run", "checkpoint", "hf-dir")
    }
    assert len(set(texts.values())) == 1 and texts["run"].startswith("the ")
    assert len(texts["run"]) == 16


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("kind", ["checkpoint", "hf-dir", "lesson"])
def test_best_is_refused_for_anything_but_a_run_directory(sources, kind):
    name = sources.get(kind, "lesson")
    with pytest.raises(ValueError) as e:
        resolve_source(name, best=True, kinds=ALL)
    assert str(e.value) == f"--best picks a run directory's best.ckpt; {name!r} is {KINDS[kind]}"


def test_best_and_meta_are_refused_for_nanogpt_and_hub(nanogpt, hub_cache):
    ckpt, meta = nanogpt
    with pytest.raises(ValueError, match=f"^--best picks .*; {ckpt!r} is a nanoGPT ckpt.pt$"):
        resolve_source(ckpt, best=True)
    with pytest.raises(ValueError, match="^--best picks .*; 'gpt2' is a hub model name"):
        resolve_source("gpt2", best=True)
    with pytest.raises(ValueError, match="^--meta is .*; 'gpt2' is a hub model name .*: its "
                                         "tokenizer comes with it$"):  # fmt: skip
        resolve_source("gpt2", meta=meta)


@pytest.mark.parametrize(
    "kind, why",
    [("run", "its vocabulary is in its checkpoint"), ("checkpoint", "its vocabulary is in it"),
     ("hf-dir", "its tokenizer is in the directory"), ("killed", "its vocabulary is in its "
     "checkpoint"), ("lesson", "the lesson's stack reads no text")],
)  # fmt: skip
def test_meta_is_refused_for_anything_but_a_nanogpt_ckpt(sources, kind, why):
    name = sources.get(kind, "lesson")
    with pytest.raises(ValueError) as e:
        resolve_source(name, meta=sources["text"], kinds=ALL)
    found = KINDS["run" if kind == "killed" else kind]
    assert str(e.value) == (
        f"--meta is the vocabulary of a nanoGPT ckpt.pt; {name!r} is {found}: {why}"
    )


def test_a_run_killed_before_its_first_checkpoint_is_said_to_be_one(sources, tmp_path):
    d = str(tmp_path / "out")
    shutil.copytree(sources["killed"], d)
    want = (f"{d!r} is a resgrad run directory with no checkpoint yet (killed before its first "
            f"checkpoint?); train it on with resgrad train --out-dir {d}")  # fmt: skip
    for best in (False, True):  # no best.ckpt either: the run has none at all
        with pytest.raises(ValueError) as e:
            resolve_source(d, best=best, kinds=ALL)
        assert str(e.value) == want
    # as the message says: a fresh run there is not refused, and is then a run
    tiny_run(d, sources["text"])
    assert resolve_source(d).path == os.path.join(d, "last.ckpt")


@pytest.mark.parametrize("left", ["metrics.jsonl", "dynamics.bin", "dynamics.json"])
def test_any_file_a_run_writes_first_marks_a_killed_run(sources, tmp_path, left):
    d = tmp_path / "out"
    d.mkdir()
    shutil.copy(os.path.join(sources["killed"], left), d / left)
    with pytest.raises(ValueError, match="with no checkpoint yet"):
        resolve_source(str(d))


def test_a_run_that_kept_checkpoints_but_no_last_names_them(sources, tmp_path):
    d = tmp_path / "out"
    shutil.copytree(sources["killed"], d)
    shutil.copy(sources["checkpoint"], d / "ckpt-5.ckpt")
    shutil.copy(sources["checkpoint"], d / "ckpt-10.ckpt")
    with pytest.raises(ValueError, match=r"no last.ckpt; it kept ckpt-10.ckpt: pass that file$"):
        resolve_source(str(d))


def test_best_on_a_run_without_best_ckpt_says_so(sources, tmp_path):
    d = tmp_path / "out"
    shutil.copytree(sources["run"], d)
    os.remove(d / "best.ckpt")
    with pytest.raises(ValueError) as e:
        resolve_source(str(d), best=True)
    assert str(e.value) == (f"--best: {str(d)!r} is a resgrad run directory with no best.ckpt; "
                            "without --best, its last.ckpt is read")  # fmt: skip
    assert resolve_source(str(d)).path == str(d / "last.ckpt")
    shutil.copy(sources["checkpoint"], d / "best.ckpt")
    os.remove(d / "last.ckpt")
    with pytest.raises(ValueError, match="no last.ckpt but a best.ckpt: pass --best to read it"):
        resolve_source(str(d))
    assert resolve_source(str(d), best=True).path == str(d / "best.ckpt")
    alone = tmp_path / "alone"  # a best.ckpt, nothing else: still a run directory
    alone.mkdir()
    shutil.copy(sources["checkpoint"], alone / "best.ckpt")
    assert resolve_source(str(alone), best=True) == Source(str(alone), "run",
                                                           str(alone / "best.ckpt"))  # fmt: skip
    with pytest.raises(ValueError, match="no last.ckpt but a best.ckpt: pass --best"):
        resolve_source(str(alone))


def test_meta_that_is_a_directory_or_missing_is_named(nanogpt, tmp_path):
    ckpt, meta = nanogpt
    d = os.path.dirname(meta)
    with pytest.raises(ValueError) as e:
        resolve_source(ckpt, meta=d)
    assert str(e.value) == (f"meta.pkl {d!r} is a directory; expected a file, nanoGPT's "
                            "data/<dataset>/meta.pkl")  # fmt: skip
    with pytest.raises(ValueError, match="^meta.pkl .* does not exist; expected nanoGPT's"):
        resolve_source(ckpt, meta=str(tmp_path / "nope.pkl"))
    with pytest.raises(ValueError, match="is a directory; expected a file"):
        load_pretrained(ckpt, meta=d)  # the loader says the same, called alone


def test_missing_paths_directories_and_files_that_are_no_model(sources, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as e:
        resolve_source("nope", kinds=RESGRAD, flag="--out-dir")
    assert str(e.value) == ("'nope' does not exist (expected a resgrad run directory or a "
                            "resgrad checkpoint file)")  # fmt: skip
    with pytest.raises(ValueError, match=r"^'gone.pt' does not exist and is not a hub model name"):
        resolve_source("gone.pt")
    with pytest.raises(ValueError, match=r"or 'lesson' \(the lesson's tanh stack\)\)$"):
        resolve_source("./nope", kinds=ALL)
    os.mkdir("empty")
    with pytest.raises(ValueError) as e:
        resolve_source("empty")
    assert str(e.value) == ("'empty' is a directory but not a model: it has no last.ckpt (a "
                            "resgrad run directory's) and no config.json (a Hugging Face GPT-2 "
                            "directory's)")  # fmt: skip
    os.mkdir("out-x")
    (tmp_path / "out-x" / "ckpt.pt").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"'out-x' is a nanoGPT out directory; pass its "
                                         r"checkpoint, 'out-x/ckpt.pt'$"):  # fmt: skip
        resolve_source("out-x")
    shutil.copy(sources["text"], "data.txt")
    with pytest.raises(ValueError, match=r"^'data.txt' is a file, not a model: expected a "):
        resolve_source("data.txt")


def test_a_kind_the_caller_does_not_take_is_named(sources):
    with pytest.raises(ValueError) as e:
        resolve_source(sources["run"], kinds=PRETRAINED, flag="--init-from")
    assert str(e.value) == (
        f"--init-from {sources['run']!r} is a resgrad run directory; --init-from takes a Hugging "
        "Face GPT-2 directory, a hub model name (gpt2, owner/name) or a nanoGPT ckpt.pt"
    )
    with pytest.raises(ValueError, match="^--out-dir .* is a Hugging Face GPT-2 directory; "):
        resolve_source(sources["hf-dir"], kinds=RESGRAD, flag="--out-dir")
    with pytest.raises(ValueError, match="^SOURCE 'lesson' is the lesson's tanh stack; SOURCE"):
        resolve_source("lesson")


def test_a_flag_no_kind_of_the_caller_takes_is_refused_first(sources):
    """Before the SOURCE is even looked at: a missing one is not the first thing said."""
    with pytest.raises(ValueError) as e:
        resolve_source("nope", meta=sources["text"], kinds=RESGRAD, flag="--out-dir")
    assert str(e.value) == (
        "--meta cannot be combined with --out-dir: it is the vocabulary of a nanoGPT ckpt.pt, "
        "and --out-dir takes a resgrad run directory or a resgrad checkpoint file"
    )
    with pytest.raises(ValueError, match="^--best cannot be combined with --init-from: it "):
        resolve_source("nope", best=True, kinds=PRETRAINED, flag="--init-from")


def test_the_checks_come_in_order(sources, nanogpt):
    """kind allowed, then the flags for the kind, then what the kind needs."""
    killed, hf = sources["killed"], sources["hf-dir"]
    with pytest.raises(ValueError, match="is a resgrad run directory; --init-from takes"):
        resolve_source(killed, kinds=PRETRAINED, flag="--init-from")  # before 'killed'
    with pytest.raises(ValueError, match="Face GPT-2 directory; SOURCE takes"):
        resolve_source(hf, meta=nanogpt[1], kinds=("run", "nanogpt"))  # before '--meta is'
    with pytest.raises(ValueError, match="^--meta is the vocabulary"):
        resolve_source(killed, meta=os.path.dirname(nanogpt[1]))  # before 'killed', 'a dir'
    with pytest.raises(ValueError, match="^--best picks"):
        resolve_source(nanogpt[0], best=True, meta=os.path.dirname(nanogpt[1]))


# ------------------------------------------------------------------ the text a model reads


def test_a_text_outside_the_vocabulary_names_the_built_in_corpus_and_the_fix(sources):
    tok = CharTokenizer(CHARS)
    with pytest.raises(ValueError) as e:
        encode_text(tok, default_corpus(), None)
    msg = str(e.value)
    assert msg.startswith(f"the built-in corpus ({DEFAULT_SOURCE}, used without --text): ")
    assert "pydoc_data.topics" in msg and " character(s) not in the model's vocabulary" in msg
    assert msg.endswith("; pass --text FILE, a text in the model's vocabulary")
    with pytest.raises(ValueError, match=r"^--text 'x.txt': 1 character\(s\) not in .*'Z'"):
        encode_text(tok, "the Zoo", "x.txt")
    np.testing.assert_array_equal(encode_text(tok, "the", "x.txt"), tok.encode("the"))
