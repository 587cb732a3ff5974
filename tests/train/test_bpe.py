"""Byte-level BPE through the tokenizers library: trained on a corpus, read from GPT-2's files."""

import json

import numpy as np
import pytest

from resgrad.train.bpe import (
    BPETokenizer,
    char_tokenizer_json,
    check_vocab,
    load_tokenizer_dir,
    tokenizer_from_record,
    tokenizer_record,
    train_bpe,
)
from resgrad.train.data import CharTokenizer

TEXT = "the quick brown fox jumps over the lazy dog. Ünïcode → ok\n" * 50


def test_train_bpe_is_deterministic_and_round_trips():
    a, b = train_bpe(TEXT, 300), train_bpe(TEXT, 300)
    assert a.to_json() == b.to_json()  # same text, same size: the same bytes
    assert 256 < a.vocab_size <= 300
    ids = a.encode(TEXT)
    assert ids.dtype == np.int64 and len(ids) < len(TEXT) / 2  # merges shorten the text
    assert a.decode(ids) == TEXT
    other = "bytes it never saw: 日本語 \x00 🙂"
    assert a.decode(a.encode(other)) == other  # every byte is in the vocabulary


def test_train_bpe_refuses_a_vocabulary_below_the_bytes():
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 256"):
        train_bpe(TEXT, 100)


def test_records_round_trip_both_kinds():
    bpe = train_bpe(TEXT, 280)
    back = tokenizer_from_record(json.loads(json.dumps(tokenizer_record(bpe))), "")
    assert back.to_json() == bpe.to_json()
    char = tokenizer_from_record(tokenizer_record(CharTokenizer("abc")), "abc")
    assert char.chars == "abc"
    assert tokenizer_from_record(None, "xy").chars == "xy"  # old checkpoints: char
    with pytest.raises(ValueError, match="unknown tokenizer kind 'wordpiece'"):
        tokenizer_from_record({"kind": "wordpiece"}, "")


def test_load_tokenizer_dir_reads_tokenizer_json_or_vocab_and_merges(tmp_path):
    bpe = train_bpe(TEXT, 290)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tokenizer.json").write_text(bpe.to_json())
    a = load_tokenizer_dir(tmp_path / "a")
    np.testing.assert_array_equal(a.encode(TEXT), bpe.encode(TEXT))
    # GPT-2's other form: vocab.json + merges.txt, as the tokenizers model saves them
    (tmp_path / "b").mkdir()
    bpe.tokenizer.model.save(str(tmp_path / "b"))
    b = load_tokenizer_dir(tmp_path / "b")
    np.testing.assert_array_equal(b.encode(TEXT), bpe.encode(TEXT))
    assert b.decode(b.encode(TEXT)) == TEXT
    assert load_tokenizer_dir(tmp_path) is None  # neither: no tokenizer
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        load_tokenizer_dir(tmp_path / "c")


def test_a_tokenizer_larger_than_the_model_is_refused():
    bpe = train_bpe(TEXT, 300)
    check_vocab(bpe, bpe.vocab_size, "m")  # equal: fine
    check_vocab(bpe, bpe.vocab_size + 47, "m")  # smaller than the model (padded): fine
    with pytest.raises(ValueError, match=f"tokenizer has {bpe.vocab_size} tokens"):
        check_vocab(bpe, 200, "m")
    with pytest.raises(ValueError, match="outside"):
        bpe.decode([bpe.vocab_size])
    bpe.decode([0, bpe.vocab_size - 1])  # both ends of the vocabulary: fine
    with pytest.raises(ValueError, match=rf"token id -1 outside \[0, {bpe.vocab_size}\)"):
        bpe.decode([5, -1])  # tokenizers' own error would be an OverflowError


def test_from_json_refuses_garbage():
    with pytest.raises(ValueError, match="not a tokenizer.json"):
        BPETokenizer.from_json("[]")


def test_streamed_decoding_prints_whole_characters_never_pieces():
    # "✓" is 3 UTF-8 bytes, "é" 2: with 4 merges they stay split over byte tokens, and
    # decoding each token alone gives U+FFFD for every piece
    tok = train_bpe("héllo wörld ✓ naïve café " * 20 + "plain ascii text " * 50, 260)
    text = "a ✓ b é"
    ids = tok.encode(text).tolist()
    assert len(ids) > len(text)  # some character spans several tokens
    step = tok.decode_stream()
    pieces = [step(i) for i in ids]
    assert "".join(pieces) == text and "\ufffd" not in "".join(pieces)
    assert "" in pieces  # held back while a character was partial
    chars = CharTokenizer("ab")
    step = chars.decode_stream()
    assert [step(i) for i in (1, 0)] == ["b", "a"]


def test_sampling_streams_pieces_that_add_up_to_the_text():
    from resgrad.nn.model import GPT, GPTConfig
    from resgrad.train.sample import continue_text

    tok = train_bpe("héllo wörld ✓ naïve café " * 20 + "plain ascii text " * 50, 260)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                          n_embd=16), seed=0)  # fmt: skip
    start = "café "
    for seed in range(3):  # random weights: byte tokens, valid UTF-8 or not, and a tail held
        got = []
        text = continue_text(model, tok, start, tok.encode(start), 40, 1.0, None, seed, got.append)
        assert "".join(got) == text and got[0] == start


def _sparse_tokenizer(top: int):
    """A valid tokenizer.json of 20 characters whose last token has the id ``top``."""
    spec = json.loads(char_tokenizer_json("abcdefghij klmnopqrs"))
    spec["model"]["vocab"]["s"] = top
    return BPETokenizer.from_json(json.dumps(spec))


def test_check_vocab_holds_the_largest_id_not_the_count_against_the_model():
    """20 tokens, one of them id 5000: the count fits a model of 20, the ids do not (sampling
    's' indexed row 5000 of a 20-row embedding: an IndexError traceback after the start)."""
    tok = _sparse_tokenizer(5000)
    assert tok.vocab_size == 20 and tok.encode("s").tolist() == [5000]
    with pytest.raises(ValueError) as e:
        check_vocab(tok, 20, "m")
    msg = str(e.value)
    assert msg == ("m: the tokenizer has token id 5000 ('s'), beyond the model's vocab_size 20; "
                   "expected every id below 20"), msg  # fmt: skip
    check_vocab(tok, 5001, "m")  # the largest id is the last row: fine
    with pytest.raises(ValueError, match="token id 5000"):
        check_vocab(tok, 5000, "m")  # one row short
    chars = CharTokenizer("abc")
    check_vocab(chars, 3, "m")
    with pytest.raises(ValueError, match="the tokenizer has 3 tokens but the model's vocab_size"):
        check_vocab(chars, 2, "m")  # more tokens than rows: said so, before any id


def test_the_smallest_bpe_is_the_256_bytes():
    assert train_bpe(TEXT, 256).vocab_size == 256  # no merge: each byte a token
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 256"):
        train_bpe(TEXT, 255)
