import math

import numpy as np
import pytest

from resgrad.train.data import (
    CharTokenizer,
    default_corpus,
    get_batch,
    load_corpus,
    min_length,
    split_train_val,
    unigram_entropy,
)


def test_default_corpus_is_the_python_reference_manual_in_sorted_key_order():
    from pydoc_data.topics import topics

    text = default_corpus()
    assert text == "\n".join(topics[k] for k in sorted(topics))
    assert len(text) > 100_000
    first = sorted(topics)[0]
    assert text.startswith(topics[first])


def test_tokenizer_round_trips_and_is_sorted():
    tok = CharTokenizer.from_text("hello, wörld")
    assert tok.chars == "".join(sorted(set("hello, wörld")))
    ids = tok.encode("wörld hello")
    assert ids.dtype == np.int64 and ids.shape == (11,)
    assert tok.decode(ids) == "wörld hello"


def test_unknown_characters_are_named():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"'z'.*first at position 2"):
        tok.encode("abz")
    with pytest.raises(ValueError, match="outside"):
        tok.decode([0, 3])


def test_split_is_90_10_in_order():
    ids = np.arange(100)
    train, val = split_train_val(ids)
    assert len(train) == 90 and len(val) == 10
    assert np.array_equal(np.concatenate([train, val]), ids)


def test_batches_are_shifted_windows_and_seeded():
    data = np.arange(50)
    x, y = get_batch(data, block_size=8, batch_size=4, rng=np.random.default_rng(3))
    assert x.shape == y.shape == (4, 8)
    assert np.array_equal(y, x + 1)  # data[i] = i, so the target is the next integer
    assert np.array_equal(np.diff(x, axis=1), np.ones((4, 7)))
    x2, _ = get_batch(data, block_size=8, batch_size=4, rng=np.random.default_rng(3))
    assert np.array_equal(x, x2)
    x3, _ = get_batch(data, block_size=8, batch_size=4, rng=np.random.default_rng(4))
    assert not np.array_equal(x, x3)


def test_batches_reach_the_last_window():
    data = np.arange(10)
    rng = np.random.default_rng(0)
    starts = {int(get_batch(data, 8, 1, rng)[0][0, 0]) for _ in range(100)}
    assert starts == {0, 1}  # len - T possible windows, the last one ending at data[-1]


def test_load_corpus_from_a_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("abcdefghij" * 10, encoding="utf-8")
    c = load_corpus(p, block_size=8)
    assert c.tokenizer.chars == "abcdefghij"
    assert len(c.train) == 90 and len(c.val) == 10
    assert len(c.sha256) == 64


def test_empty_file(tmp_path):
    p = tmp_path / "e.txt"
    p.write_bytes(b"")
    with pytest.raises(ValueError, match="is empty"):
        load_corpus(p, block_size=8)


def test_too_short_file(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("abcdefgh", encoding="utf-8")  # 8 < block_size + 1
    with pytest.raises(ValueError, match="shorter than block_size \\+ 1 = 9"):
        load_corpus(p, block_size=8)
    p.write_text("abcdefghijklmnop", encoding="utf-8")  # long enough for one window, not two
    with pytest.raises(ValueError, match="validation split"):
        load_corpus(p, block_size=8)
    p.write_text("x" * min_length(8), encoding="utf-8")
    c = load_corpus(p, block_size=8)
    assert len(c.val) >= 9 and len(c.train) >= 9


def test_non_utf8_file(tmp_path):
    p = tmp_path / "b.txt"
    p.write_bytes(b"hello \xff\xfe world" * 10)
    with pytest.raises(ValueError, match="not UTF-8.*0xff at offset 6"):
        load_corpus(p, block_size=8)


def test_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        load_corpus(tmp_path / "nope.txt", block_size=8)


def test_existing_vocabulary_is_enforced(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("abcabcabcz" * 10, encoding="utf-8")
    with pytest.raises(ValueError, match="'z'"):
        load_corpus(p, block_size=8, tokenizer=CharTokenizer("abc"))


def test_unigram_entropy():
    assert unigram_entropy("aaaa") == 0.0
    assert unigram_entropy("abab") == pytest.approx(math.log(2))
    assert unigram_entropy("abcd") == pytest.approx(math.log(4))


def test_min_length_is_the_shortest_text_whose_two_splits_hold_a_window():
    # from first principles: the smallest n whose 90/10 split leaves T + 1 tokens in each
    for T in (1, 2, 7, 8, 9, 31, 64, 100):
        n = next(
            n for n in range(1, 100 * (T + 1))
            if min(len(s) for s in split_train_val(np.arange(n))) >= T + 1
        )  # fmt: skip
        assert min_length(T) == n
    assert min_length(8) == 81  # by hand: int(81 * 0.9) = 72 train, 9 val; 80 gives 72 / 8


def test_unknown_characters_name_the_first_position_in_the_text():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"2 character\(s\).*'y', 'z'.*first at position 2"):
        tok.encode("abzyy")  # 'z' comes first in the text, 'y' first in sorted order


def test_decode_refuses_negative_ids():
    tok = CharTokenizer("abc")
    for ids in ([-1], [0, -3]):
        with pytest.raises(ValueError, match=r"token id -\d outside \[0, 3\)"):
            tok.decode(ids)


def test_a_text_over_the_limit_is_refused_not_cut(tmp_path, monkeypatch):
    import resgrad.train.data as data

    monkeypatch.setattr(data, "MAX_DATA_BYTES", 100)
    p = tmp_path / "t.txt"
    p.write_text("x" * 100, encoding="utf-8")
    assert data.read_text(p) == "x" * 100  # exactly the limit is read whole
    p.write_text("x" * 101, encoding="utf-8")
    with pytest.raises(ValueError, match="larger than"):
        data.read_text(p)


def test_a_directory_or_a_pipe_is_refused_as_not_a_regular_file(tmp_path):
    import os

    from resgrad.train.data import check_text_file, read_text

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (tmp_path, fifo):
        for f in (check_text_file, read_text, lambda p: load_corpus(p, block_size=8)):
            with pytest.raises(ValueError, match="not a regular file"):
                f(p)


def test_the_bounds_of_windows_ids_and_texts_just_inside_and_just_outside(tmp_path):
    """A split of exactly T + 1 tokens holds one window (always the same one), T tokens
    none; ids run 0..V-1; a text of exactly T + 1 characters passes the first length
    check and min_length characters the second, one fewer fails each."""
    x, y = get_batch(np.arange(9), block_size=8, batch_size=3, rng=np.random.default_rng(0))
    assert x.tolist() == [list(range(8))] * 3 and y.tolist() == [list(range(1, 9))] * 3
    with pytest.raises(ValueError, match="split of 8 tokens is shorter than block_size"):
        get_batch(np.arange(8), block_size=8, batch_size=1, rng=np.random.default_rng(0))
    tok = CharTokenizer("abc")
    assert tok.decode([2, 0]) == "ca"
    with pytest.raises(ValueError, match=r"token id 3 outside \[0, 3\)"):
        tok.decode([0, 3])
    p = tmp_path / "t.txt"
    p.write_text("x" * 9, encoding="utf-8")  # T + 1: past the first check, not the second
    with pytest.raises(ValueError, match="needs at least 81"):
        load_corpus(p, block_size=8)
    p.write_text("x" * 8, encoding="utf-8")
    with pytest.raises(ValueError, match="shorter than block_size"):
        load_corpus(p, block_size=8)
    p.write_text("x" * 80, encoding="utf-8")
    with pytest.raises(ValueError, match="has 80 characters; with block_size 8 it needs"):
        load_corpus(p, block_size=8)
    p.write_text("x" * 81, encoding="utf-8")
    c = load_corpus(p, block_size=8)
    assert (len(c.train), len(c.val)) == (72, 9)
