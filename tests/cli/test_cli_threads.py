"""``--threads``: without it a command runs on the load-aware default (resgrad.perf.threads),
with it on exactly the count given; ``sample`` without it puts a small model on one thread.

The policy is replaced by a stub, so that no test needs a loaded machine, and the thread
count is read with threadpoolctl inside the command.
"""

import pytest
from threadpoolctl import threadpool_info

import resgrad.cli as cli
from resgrad.cli import flow_cmds, main
from resgrad.formats.hf import export_hf
from resgrad.nn.model import GPT, GPTConfig
from resgrad.train import sample
from resgrad.train.bpe import char_tokenizer_json

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
        "--batch-size", "4", "--eval-iters", "2", "--warmup-iters", "0"]  # fmt: skip
FLOW = ["flow", "--depth", "2", "--width", "8", "--heads", "2", "--seq", "4", "--batch", "2",
        "--format", "json"]  # fmt: skip


def blas_threads() -> int:
    """The loaded BLAS's thread count now."""
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


@pytest.fixture(autouse=True)
def count_free(monkeypatch):
    """A BLAS whose sums do not depend on the thread count (SkylakeX's): the load decides.
    The tests of a BLAS whose sums do (Haswell's) set it otherwise."""
    monkeypatch.setattr(cli, "sums_depend_on_count", lambda: False)


def never():
    raise AssertionError("the load was read although --threads was given")


@pytest.fixture
def seen(monkeypatch):
    """The BLAS thread counts that ``resgrad flow`` runs on (its work replaced by the reading)."""
    got = []
    monkeypatch.setattr(flow_cmds, "cmd_flow", lambda args: got.append(blas_threads()) or 0)
    return got


@pytest.mark.parametrize("policy", [1, 2])
def test_without_threads_the_load_aware_default_is_applied(monkeypatch, seen, policy):
    monkeypatch.setattr(cli, "load_aware_threads", lambda: policy)
    assert main(["flow"]) == 0
    assert seen == [policy]


@pytest.mark.parametrize("policy", [1, 2])
def test_where_the_count_changes_bits_the_load_is_not_read(monkeypatch, seen, policy):
    monkeypatch.setattr(cli, "sums_depend_on_count", lambda: True)
    monkeypatch.setattr(cli, "usable_cores", lambda: 2)
    monkeypatch.setattr(cli, "load_aware_threads", never)
    assert main(["flow"]) == 0
    assert seen == [2]  # one per usable core, whatever the load


@pytest.mark.parametrize("n", [1, 2])
def test_an_explicit_threads_wins_and_the_load_is_not_read(monkeypatch, seen, n):
    monkeypatch.setattr(cli, "load_aware_threads", never)
    assert main(["flow", "--threads", str(n)]) == 0
    assert seen == [n]


def test_the_limit_ends_with_the_command(monkeypatch, seen):
    before = blas_threads()
    other = 2 if before == 1 else 1
    monkeypatch.setattr(cli, "load_aware_threads", lambda: other)
    assert main(["flow"]) == 0
    assert seen == [other] and blas_threads() == before


def test_the_default_adds_nothing_to_the_output(monkeypatch, capsys):
    monkeypatch.setattr(cli, "load_aware_threads", lambda: 1)
    assert main(FLOW) == 0
    default = capsys.readouterr()
    assert main([*FLOW, "--threads", "1"]) == 0
    given = capsys.readouterr()
    assert default.out == given.out and default.out.startswith("[")  # the JSON alone
    assert default.err == given.err == ""


def test_every_command_with_threads_says_what_its_default_is():
    parser = cli.build_parser()
    (sub,) = (a for a in parser._actions if a.dest == "command")
    helps = {
        name: a.help
        for name, p in sub.choices.items()
        for a in p._actions
        if "--threads" in a.option_strings
    }
    assert {"train", "sample", "flow", "paths", "lesion"} <= set(helps)
    for name, text in helps.items():
        assert "one per core that other processes leave free" in text, name
        assert "at least 1" in text, name
    assert "MFLOP: one thread" in helps["sample"]


# -- sample: a model too small for threads generates on one, unless --threads says otherwise


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("threads")
    text = d / "text.txt"
    text.write_text("the residual stream carries the gradient past every block. " * 30)
    args = ["train", "--out-dir", str(d / "run"), "--data", str(text), *TINY, "--max-iters", "1"]
    assert main([*args, "--threads", "1"]) == 0
    return str(d / "run")


@pytest.fixture
def sampled(monkeypatch):
    """The BLAS thread count at each token ``resgrad sample`` draws."""
    got, draw = [], sample.sample_token

    def counting(*args, **kwargs):
        got.append(blas_threads())
        return draw(*args, **kwargs)

    monkeypatch.setattr(sample, "sample_token", counting)
    return got


def test_sample_puts_a_small_model_on_one_thread(monkeypatch, capsys, run_dir, sampled):
    monkeypatch.setattr(cli, "load_aware_threads", lambda: 2)  # an idle 2-core machine
    assert main(["sample", "--out-dir", run_dir, "--start", "the ", "--num-tokens", "3"]) == 0
    assert sampled == [1, 1, 1]  # 1 layer, C=16: far below 4 MFLOP a token
    out = capsys.readouterr().out
    assert out.startswith("the ") and len(out) == len("the ") + 3 + 1  # 3 tokens, a newline


def test_sample_with_threads_keeps_them(monkeypatch, capsys, run_dir, sampled):
    monkeypatch.setattr(cli, "load_aware_threads", never)
    args = ["sample", "--out-dir", run_dir, "--start", "the ", "--num-tokens", "3"]
    assert main([*args, "--threads", "2"]) == 0
    assert sampled == [2, 2, 2]


def test_sample_from_a_pretrained_directory_puts_it_on_one_thread(
    monkeypatch, capsys, tmp_path, sampled
):
    chars = "abcdefghij klmnopqrs"  # a Hugging Face directory of 2 layers, C=8
    cfg = GPTConfig(vocab_size=len(chars), block_size=16, n_layer=2, n_head=2, n_embd=8)
    export_hf(GPT(cfg, seed=0), tmp_path / "hf", tokenizer_json=char_tokenizer_json(chars))
    args = ["sample", "--from-pretrained", str(tmp_path / "hf"), "--start", "abc",
            "--num-tokens", "2"]  # fmt: skip
    monkeypatch.setattr(cli, "load_aware_threads", lambda: 2)
    assert main(args) == 0
    assert main([*args, "--threads", "2"]) == 0
    assert sampled == [1, 1, 2, 2]  # the default, then --threads 2
