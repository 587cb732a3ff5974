"""Mutants of the default thread count (src/resgrad/perf/threads.py, resgrad.cli._threads) and
of decoding's one-thread rule (src/resgrad/train/sample.py and what passes it down)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mutants import Mutant  # noqa: E402

PERF = ("tests/perf/test_threads.py",)
CLI = ("tests/cli/test_cli_threads.py",)
BOTH = PERF + CLI
T = "perf/threads.py"
S = "train/sample.py"

MUTANTS = [
    # formula: readings -> busy cores
    Mutant("threads: the mean of the readings, so an instant's task counts", T,
           "others = max(0.0, statistics.median(readings) - 1)",
           "others = max(0.0, statistics.mean(readings) - 1)", PERF, "formula"),
    Mutant("threads: the reading process counted as another", T,
           "others = max(0.0, statistics.median(readings) - 1)",
           "others = max(0.0, statistics.median(readings))", PERF, "formula"),
    Mutant("threads: every task on the machine counted on a cpuset's cores", T,
           "share = min(usable, online) / max(online, 1)", "share = 1.0", PERF, "formula"),
    Mutant("threads: busy cores truncated, not rounded", T,
           "return int(others * share + 0.5)", "return int(others * share)", PERF, "formula"),
    # bounds: never below 1, never above the usable cores
    Mutant("threads: no floor of one thread", T,
           "return max(1, min(usable, usable - max(0, busy)))",
           "return min(usable, usable - max(0, busy))", PERF, "bounds"),
    Mutant("threads: more threads than usable cores on a negative count", T,
           "return max(1, min(usable, usable - max(0, busy)))",
           "return max(1, usable - busy)", PERF, "bounds"),
    Mutant("threads: usable cores are the machine's, not the affinity's", T,
           "return max(1, len(os.sched_getaffinity(0)))",
           "return max(1, os.cpu_count() or 1)", PERF, "bounds"),
    # refusal: what the reader takes for a count
    Mutant("threads: procs_running matched as a prefix", T,
           'if name == "procs_running":', 'if name.startswith("procs_running"):', PERF, "refusal"),
    Mutant("threads: an unreadable count read as 0", T,
           "                return int(value)\n            except ValueError:\n"
           "                return None",
           "                return int(value)\n            except ValueError:\n"
           "                return 0", PERF, "refusal"),
    Mutant("threads: one reading fewer than asked", T,
           "    for i in range(reads):", "    for i in range(reads - 1):", PERF, "bounds"),
    # the CLI: the default applied when --threads is absent, the flag exactly when given
    Mutant("threads: without --threads, BLAS's own choice as before", "cli/__init__.py",
           "threadpool_limits(limits=load_aware_threads() if n is None else n)",
           "threadpool_limits(limits=n)", CLI, "formula"),
    Mutant("threads: the load-aware count overrides --threads", "cli/__init__.py",
           "threadpool_limits(limits=load_aware_threads() if n is None else n)",
           "threadpool_limits(limits=load_aware_threads())", CLI, "formula"),
    # decoding's rule
    Mutant("threads: a token's work without the LM head", S,
           "return L * 24 * C * C + 2 * C * V", "return L * 24 * C * C", PERF, "formula"),
    Mutant("threads: one thread also at the threshold", S,
           "return 1 if token_flops(cfg) < DECODE_ONE_THREAD_FLOPS else None",
           "return 1 if token_flops(cfg) <= DECODE_ONE_THREAD_FLOPS else None", PERF, "bounds"),
    Mutant("threads: generate takes one thread although the caller set the count", S,
           "one = decode_threads(model.cfg) if auto_threads else None",
           "one = decode_threads(model.cfg)", BOTH, "formula"),
    Mutant("threads: sample_text drops the rule", S,
           "model, tok, start, ids, num_tokens, temperature, top_k, seed, on_text, auto_threads\n",
           "model, tok, start, ids, num_tokens, temperature, top_k, seed, on_text\n", CLI,
           "records"),
    Mutant("threads: a pretrained model's sample drops the rule", "train/pretrained.py",
           "model, tok, start, ids, num_tokens, temperature, top_k, seed, on_text, auto_threads\n",
           "model, tok, start, ids, num_tokens, temperature, top_k, seed, on_text\n", CLI,
           "records"),
    Mutant("threads: sample's --threads also gets the small-model rule", "cli/train_cmds.py",
           "auto_threads=args.threads is None,", "auto_threads=True,", CLI, "formula"),
]  # fmt: skip
