"""Mutation run: plant realistic bugs one at a time and check that the tests catch each.

Each mutant replaces one exact piece of source (found exactly once) by a plausible
mistake: a backward pass that drops a term, AdamW with the wrong beta, a training
loop that skips clipping or evaluates with dropout on, a checkpoint that is not
verified, a sampler with an off-by-one mask. For every mutant the source and the
tests are copied to a fresh temporary directory, the mutation is applied to the
copy, and the test files that cover that module run there (``pytest -x``, with
``PYTHONPATH`` pointing at the copy). The working tree is never modified.

A mutant is *killed* when its tests fail, and *survives* when they pass. The run
first checks that every test subset passes on the unmutated copy (otherwise a
"kill" would mean nothing), then prints one row per mutant and exits 1 if any
survived.

    python scripts/mutants.py               # all mutants
    python scripts/mutants.py --no-torch    # the same with PyTorch hidden: the
                                            # torch-free tests alone must kill them
    python scripts/mutants.py --only adamw  # mutants whose name contains "adamw"
    python scripts/mutants.py --kind bounds # the mutants of one class of bug (KINDS)
    python scripts/mutants.py --list        # the table of mutants, without running
    python scripts/mutants.py --jobs 2      # two mutants at a time (one BLAS thread each)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ATOMIC = ("tests/formats/test_atomic.py",)
BLOCKS = ("tests/nn/test_blocks.py",)
BPE = ("tests/train/test_bpe.py",)
CHECKPOINT = ("tests/formats/test_checkpoint.py",)
CLAIMS = ("tests/lab/test_claims.py",)
CLI_LAB = ("tests/cli/test_cli_lab.py",)
DATA = ("tests/train/test_data.py",)
DEPTHTRAIN = ("tests/lab/test_depthtrain.py",)
DYNAMICS = ("tests/train/test_dynamics.py",)
EXPERIMENTS = ("tests/lab/test_experiments.py",)
EXPLORE = ("tests/lab/test_explore.py",)
FLOW = ("tests/lab/test_flow.py",)
HF = ("tests/formats/test_hf.py",)
HF_CLI_PRETRAINED = ("tests/formats/test_hf.py", "tests/cli/test_cli_pretrained.py")
HF_NANOGPT = ("tests/formats/test_hf.py", "tests/formats/test_nanogpt.py")
LAYERS = ("tests/nn/test_layers.py",)
LAYERS_TORCH_PARITY = ("tests/nn/test_layers.py", "tests/verify/test_torch_parity.py")
KERNELS = ("tests/nn/test_kernels.py",)
LAYERS_KERNELS = ("tests/nn/test_layers.py", "tests/nn/test_kernels.py")
LESSON = ("tests/lab/test_lesson.py",)
LOCK = ("tests/formats/test_lock.py",)
LOOP = ("tests/train/test_loop.py",)
LOOP_CHECKPOINT_COMPAT = ("tests/train/test_loop.py", "tests/train/test_checkpoint_compat.py")
LOOP_DYNAMICS = ("tests/train/test_loop.py", "tests/train/test_dynamics.py")
MODEL = ("tests/nn/test_model.py",)
NANOGPT = ("tests/formats/test_nanogpt.py",)
OPTIM = ("tests/train/test_optim.py",)
PATHS = ("tests/lab/test_paths.py",)
KEEP_EVERY = ("tests/train/test_keep_every.py",)
PLOTS = ("tests/test_plots.py",)
PRETRAINED = ("tests/train/test_pretrained.py",)
PRETRAINED_CLI_PRETRAINED = ("tests/train/test_pretrained.py", "tests/cli/test_cli_pretrained.py")
REALFLOW = ("tests/lab/test_realflow.py",)
RECORDS = ("tests/formats/test_records.py",)
RESIDUAL = ("tests/nn/test_residual.py",)
RUNDIR = ("tests/train/test_rundir.py",)
RUNS = ("tests/lab/test_runs.py",)
SAMPLE = ("tests/train/test_sample.py",)
SHARDS = ("tests/train/test_shards.py",)
SWEEP = ("tests/lab/test_sweep.py",)
EVENTS = ("tests/formats/test_events.py",)
TRACKERS = ("tests/train/test_trackers.py",)
DASHBOARDS = ("tests/cli/test_cli_dashboards.py",)


# the classes of bug a mutant plants; the run reports its kills per class
KINDS = (
    "formula",  # a wrong formula: a backward term, an optimizer constant, a loss
    "statistics",  # a figure written to a table: std's ddof, a range's ties or endpoint
    "bounds",  # a limit off by one, inclusive where it is exclusive
    "refusal",  # a check of bad input or a bad file dropped or weakened
    "ordering",  # an order-sensitive output: listdir order, search order, iteration order
    "durability",  # fsync, rename, atomic writes, resume after a kill, cleanup
    "records",  # values written to a record or file: a field, its type, its source
    "names",  # names and layouts: tags, run names, keys
    "aliases",  # another tool's names for the same thing (HF config, nanoGPT keys)
    "cache",  # the key of a cached or reused result missing a field
    "concurrency",  # locks, workers, watchdogs, processes
)


@dataclass(frozen=True)
class Mutant:
    name: str  # what the bug is
    file: str  # under src/resgrad/
    old: str  # exact source text, found exactly once
    new: str  # the bug
    tests: tuple[str, ...]  # the test files that should catch it
    kind: str  # the class of bug: one of KINDS

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"mutant {self.name!r}: kind {self.kind!r} is not one of {KINDS}")


MUTANTS = [
    # -- nn/kernels.py (4; the kernels of issue 35 in mutants_parts/kernels.py)
    Mutant('kernels: gelu_u without the cube', 'nn/kernels.py',
           'ui = ui * xi  # a x^3',
           'ui = ui  # a x^3', KERNELS, 'formula'),
    Mutant('kernels: gelu_out without the half', 'nn/kernels.py',
           'out[i] = o * half  # 0.5 x (1 + t)',
           'out[i] = o  # 0.5 x (1 + t)', KERNELS, 'formula'),
    Mutant("kernels: gelu_dx with tanh's derivative 1 + t^2", 'nn/kernels.py',
           'local = local * (one - ti * ti)  # * (1 - t^2)',
           'local = local * (one + ti * ti)  # * (1 - t^2)', KERNELS, 'formula'),
    Mutant('kernels: a strided array goes to the kernel', 'nn/kernels.py',
           'if any(not a.flags.c_contiguous or a.dtype != dt for a in arrays):',
           'if any(a.dtype != dt for a in arrays):', KERNELS, 'refusal'),
    # -- nn/residual.py (1)
    Mutant('residual: residual backward drops the identity path', 'nn/residual.py',
           'return dout + df  # fan-out',
           'return df  # fan-out', RESIDUAL, 'formula'),
    # -- nn/layers.py (21)
    Mutant('layers: linear db averaged instead of summed', 'nn/layers.py',
           'db = dout2.sum(axis=0) if has_bias else None  # (C_out,)',
           'db = dout2.mean(axis=0) if has_bias else None  # (C_out,)', LAYERS, 'formula'),
    Mutant('layers: linear dw averaged over rows', 'nn/layers.py',
           'dw = x.reshape(-1, C_in).T @ dout2',
           'dw = x.reshape(-1, C_in).T @ dout2 / len(dout2)', LAYERS, 'formula'),
    Mutant('layers: tanh backward uses 1 - out, not 1 - out^2', 'nn/layers.py',
           'return dout * (one - cache.out * cache.out)',
           'return dout * (one - cache.out)', LAYERS, 'formula'),
    Mutant('layers: relu backward passes negatives through', 'nn/layers.py',
           'return dout * cache.positive  # (...)',
           'return dout  # (...)', LAYERS, 'formula'),
    Mutant('layers: gelu backward: wrong constant in the direct term', 'nn/layers.py',
           'local += f(0.5)  # (...) + dx_direct',
           'local += f(0.25)  # (...) + dx_direct', LAYERS_KERNELS, 'formula'),
    Mutant("layers: gelu forward's NumPy passes drop the cube", 'nn/layers.py',
           '        u *= x  # (...) a x^3\n',
           '        # (...) a x^2\n', LAYERS_KERNELS, 'formula'),
    Mutant("layers: layernorm backward's NumPy passes drop the mean term", 'nn/layers.py',
           '    dx -= m1\n',
           '', LAYERS_KERNELS, 'formula'),
    Mutant("layers: layernorm backward's NumPy passes drop the rstd factor", 'nn/layers.py',
           '    dx *= rstd\n',
           '', LAYERS_KERNELS, 'formula'),
    Mutant("layers: layernorm forward's NumPy passes add the bias twice", 'nn/layers.py',
           '        out += b  # 7) (..., C)',
           '        out += b + b  # 7) (..., C)', LAYERS_KERNELS, 'formula'),
    Mutant('layers: layernorm backward forgets the gain', 'nn/layers.py',
           'dxhat = dout * g  # (..., C)',
           'dxhat = dout * 1.0  # (..., C)', LAYERS, 'formula'),
    Mutant('layers: dropout backward ignores the mask', 'nn/layers.py',
           'return dout * cache.mask  # (...)',
           'return dout  # (...)', LAYERS, 'formula'),
    Mutant('layers: embedding backward: repeated tokens overwrite, not add', 'nn/layers.py',
           'dwte[run_ids[starts]] += np.add.reduceat(rows, starts, axis=0)',
           'dwte[run_ids] += rows', LAYERS, 'formula'),
    Mutant('attention: softmax backward misses the row sum', 'nn/layers.py',
           '        datt -= np.einsum("...k,...k->...", datt, p)[..., None]',
           '        pass', LAYERS, 'formula'),
    Mutant('attention: dq misses the 1/sqrt(D) scale', 'nn/layers.py',
           'dq = dqs if scale_in_softmax else np.multiply(dqs, scale, out=dqs)  # (B,H,T,D)',
           'dq = dqs  # (B,H,T,D)', LAYERS, 'formula'),
    Mutant('attention: dropout mask skipped in the backward', 'nn/layers.py',
           '            datt *= m  # (B,H,Tb,S)',
           '            pass', LAYERS, 'formula'),
    Mutant('attention: query blocks overwrite dv instead of adding', 'nn/layers.py',
           '            dv[..., :i1, :] += p_d.swapaxes(-1, -2) @ dyb',
           '            dv[..., :i1, :] = p_d.swapaxes(-1, -2) @ dyb', LAYERS, 'formula'),
    Mutant('layers: cross-entropy gradient not divided by the count', 'nn/layers.py',
           'dnll = valid * f(float(dloss) / max(n_valid, 1))',
           'dnll = valid * f(float(dloss))', LAYERS, 'formula'),
    Mutant('layers: mlp backward skips GELU', 'nn/layers.py',
           'dh = ACTIVATIONS[activation][1](da, c_act)  # (..., F)',
           'dh = da  # (..., F)', LAYERS, 'formula'),
    Mutant('layers: exact GELU takes erf(x / 2), not erf(x / sqrt(2))', 'nn/layers.py',
           'u = x * f(_SQRT1_2)  # 1) (...) u = x / sqrt(2)',
           'u = x * f(0.5)  # 1) (...) u = x / sqrt(2)', LAYERS_TORCH_PARITY, 'formula'),
    Mutant("layers: exact GELU backward's density is exp(-x^2), not exp(-x^2 / 2)", 'nn/layers.py',
           '    local *= f(-0.5)\n',
           '    local *= f(-1.0)\n', LAYERS_TORCH_PARITY, 'formula'),
    Mutant('layers: exact GELU backward drops the Phi(x) term (x phi(x) alone)', 'nn/layers.py',
           '    local += cdf  # (...) + dx_direct / dout = cdf\n',
           '', LAYERS_TORCH_PARITY, 'formula'),
    Mutant("layers: ACTIVATIONS pairs the exact GELU with the tanh form's backward", 'nn/layers.py',
           '"gelu-erf": (gelu_erf_forward, gelu_erf_backward),',
           '"gelu-erf": (gelu_erf_forward, gelu_backward),', LAYERS_TORCH_PARITY, 'formula'),
    Mutant('layers: the MLP forward runs the tanh GELU whatever its activation', 'nn/layers.py',
           'a, c_act = ACTIVATIONS[activation][0](h)  # 2) (..., F) gelu(h), in the named form',
           'a, c_act = gelu_forward(h)  # 2) (..., F) gelu(h), in the named form', LAYERS_TORCH_PARITY, 'formula'),
    # -- nn/blocks.py (6)
    Mutant('blocks: pre-ln block backward drops + x', 'nn/blocks.py',
           '            return df  # no + x path: the gradient has only the sublayer route home\n        return residual_backward(dout, df)',
           '            return df  # no + x path: the gradient has only the sublayer route home\n        return df', BLOCKS, 'formula'),
    Mutant("rezero: the second sublayer overwrites alpha's gradient", 'nn/blocks.py',
           'grads[f"{p}.alpha"] += (dout * c.f).sum()',
           'grads[f"{p}.alpha"] = (dout * c.f).sum()', BLOCKS, 'formula'),
    Mutant('rezero: df misses the factor alpha', 'nn/blocks.py',
           'dfo = dout * alpha  # (B,T,C)',
           'dfo = dout  # (B,T,C)', BLOCKS, 'formula'),
    Mutant('deepnorm: the x path misses alpha', 'nn/blocks.py',
           'dskip = ds if variant == "post-ln" else ds * alpha',
           'dskip = ds', BLOCKS, 'formula'),
    Mutant('blocks: gpt2 init: output projections not scaled by 1/sqrt(2L)', 'nn/blocks.py',
           'std = 0.02 / math.sqrt(2 * L) if kind.endswith("w_proj") else 0.02',
           'std = 0.02', BLOCKS, 'formula'),
    Mutant("blocks: the block's MLP ignores the config's activation", 'nn/blocks.py',
           'return mlp_forward(x, *w, **kw, activation=cfg.activation)',
           'return mlp_forward(x, *w, **kw)', BLOCKS, 'formula'),
    # -- nn/model.py (2)
    Mutant("model: tied wte keeps only the head's gradient", 'nn/model.py',
           'grads["wte"], grads["wpe"] = embedding_backward(dx, cache.emb, dwte=dwte_head)',
           'grads["wte"], grads["wpe"] = dwte_head, embedding_backward(dx, cache.emb)[1]', MODEL, 'formula'),
    Mutant('model: embedding dropout skipped in the backward', 'nn/model.py',
           'dx = dropout_backward(dx, cache.drop)  # (B,T,C)',
           'dx = dx  # (B,T,C)', MODEL, 'formula'),
    # -- formats/atomic.py (7)
    Mutant('atomic: the temporary is renamed without being fsynced', 'formats/atomic.py',
           '            f.flush()\n            os.fsync(f.fileno())\n',
           '            f.flush()\n', ATOMIC, 'durability'),
    Mutant('atomic: the directory is not fsynced after the rename', 'formats/atomic.py',
           '        raise\n    _fsync_dir(directory)\n',
           '        raise\n', ATOMIC, 'durability'),
    Mutant('atomic: the temporary is copied over the destination, not renamed', 'formats/atomic.py',
           '            os.fsync(f.fileno())\n        os.replace(tmp, path)\n',
           '            os.fsync(f.fileno())\n        shutil.copyfile(tmp, path)\n        os.unlink(tmp)\n', ATOMIC, 'durability'),
    Mutant('atomic: a failed write leaves its temporary behind', 'formats/atomic.py',
           '    except BaseException:\n        try:\n            os.unlink(tmp)\n        except FileNotFoundError:\n            pass\n        raise\n',
           '    except BaseException:\n        raise\n', ATOMIC, 'durability'),
    Mutant('atomic: staged_dir renames the directory before its files are fsynced', 'formats/atomic.py',
           '        _fsync_tree(stage)  # every byte on disk before the rename makes it visible\n',
           '', ATOMIC, 'durability'),
    Mutant("atomic: a live process's staging temporaries are removed as stale", 'formats/atomic.py',
           'if m is None or m["name"] != name or _alive(int(m["pid"])):',
           'if m is None or m["name"] != name:', ATOMIC, 'durability'),
    Mutant('atomic: the old model moved aside by a killed export is deleted, not put back', 'formats/atomic.py',
           'if m["kind"] == "old" and not os.path.lexists(path):',
           'if m["kind"] == "old" and os.path.lexists(path):', ATOMIC, 'durability'),
    # -- formats/lock.py (5)
    Mutant('lock: a directory that existed before is taken away', 'formats/lock.py',
           'new = not os.path.isdir(directory)',
           'new = True', LOCK, 'durability'),
    Mutant('lock: a non-empty hidden file counts as bookkeeping', 'formats/lock.py',
           'empty_hidden = name.startswith(".") and os.path.getsize(path) == 0',
           'empty_hidden = name.startswith(".")', LOCK, 'durability'),
    Mutant('lock: cleanup removes files under a lock somebody holds', 'formats/lock.py',
           '            except filelock.Timeout:  # somebody holds it: leave everything\n                for held in locks:\n                    held.release()\n                return',
           '            except filelock.Timeout:  # somebody holds it: leave everything\n                continue', LOCK, 'concurrency'),
    Mutant('lock: the info records argv[0] verbatim, not the program', 'formats/lock.py',
           '"command": " ".join([_program(), *sys.argv[1:]])[:200],',
           '"command": " ".join(sys.argv)[:200],', LOCK, 'records'),
    Mutant('lock: the info records CPU time as the start time', 'formats/lock.py',
           '"started": time.time(),',
           '"started": time.process_time(),', LOCK, 'records'),
    # -- formats/records.py (5)
    Mutant('records: zero written as an empty cell', 'formats/records.py',
           '    if v is None:\n        return ""',
           '    if not v:\n        return ""', RECORDS, 'records'),
    Mutant('records: floats rounded to 6 digits', 'formats/records.py',
           'return repr(float(v)) if isinstance(v, float) else v',
           'return f"{v:.6g}" if isinstance(v, float) else v', RECORDS, 'records'),
    Mutant('records: JSON drops the meta fields', 'formats/records.py',
           'data = {**meta, "rows": data}',
           'data = {"rows": data}', RECORDS, 'records'),
    Mutant('records: JSON rows keep keys outside the fields', 'formats/records.py',
           'data: object = [{k: r[k] for k in fields} for r in rows]',
           'data: object = [dict(r) for r in rows]', RECORDS, 'records'),
    Mutant('records: CSV without its header', 'formats/records.py',
           '    w.writerow(fields)\n',
           '', RECORDS, 'records'),
    # -- formats/checkpoint.py (7)
    Mutant('checkpoint: checkpoint checksum not verified', 'formats/checkpoint.py',
           'if hashlib.sha256(zeroed).hexdigest() != field.group(1).decode("ascii"):',
           'if False:', CHECKPOINT, 'refusal'),
    Mutant('checkpoint: checkpoint drops the optimizer state', 'formats/checkpoint.py',
           'arrays.update({f"optim/{k}": np.asarray(v, order="C") for k, v in ckpt.optimizer.items()})',
           'pass', CHECKPOINT, 'records'),
    Mutant('checkpoint: the extra paths (best.ckpt) are not written', 'formats/checkpoint.py',
           '    for p in (path, *also):\n',
           '    for p in (path,):\n', CHECKPOINT, 'records'),
    Mutant('checkpoint: saved in place, not atomically', 'formats/checkpoint.py',
           '        atomic_write_bytes(p, data)',
           '        with open(p, "wb") as f:\n            f.write(data)', CHECKPOINT, 'durability'),
    Mutant('checkpoint: temporary and rename, but never fsynced', 'formats/checkpoint.py',
           '        atomic_write_bytes(p, data)',
           '        with open(f"{os.fspath(p)}.tmp", "wb") as f:\n            f.write(data)\n        os.replace(f"{os.fspath(p)}.tmp", p)', CHECKPOINT, 'durability'),
    Mutant('checkpoint: the tokenizer record is not written', 'formats/checkpoint.py',
           '**({} if self.tokenizer is None else {"tokenizer": self.tokenizer}),',
           '', CHECKPOINT, 'records'),
    Mutant("checkpoint: the metadata's format version is not checked", 'formats/checkpoint.py',
           'if missing or meta["format"] != version:',
           'if missing:', CHECKPOINT, 'refusal'),
    # -- formats/hf.py (17)
    Mutant('hf: activation_function "gelu" read as the tanh GELU', 'formats/hf.py',
           '"gelu": "gelu-erf",  # the exact form',
           '"gelu": "gelu-tanh",  # the exact form', HF, 'aliases'),
    Mutant('hf: export writes "gelu_new" for the exact GELU', 'formats/hf.py',
           '_HF_ACTIVATION = {"gelu-tanh": "gelu_new", "gelu-erf": "gelu"}',
           '_HF_ACTIVATION = {"gelu-tanh": "gelu_new", "gelu-erf": "gelu_new"}', HF, 'aliases'),
    Mutant("hf: layer_norm_epsilon not read (GPTConfig's 1e-5 kept)", 'formats/hf.py',
           '        ln_eps=_eps(cfg, where),\n',
           '', HF, 'aliases'),
    Mutant("hf: export writes GPT-2's epsilon, not the model's", 'formats/hf.py',
           '"layer_norm_epsilon": cfg.ln_eps,',
           '"layer_norm_epsilon": 1e-5,', HF, 'records'),
    Mutant('hf: export swaps n_layer and n_head', 'formats/hf.py',
           '"n_layer": cfg.n_layer,\n        "n_head": cfg.n_head,',
           '"n_layer": cfg.n_head,\n        "n_head": cfg.n_layer,', HF, 'records'),
    Mutant('hf: the old alias n_ctx is read before n_positions', 'formats/hf.py',
           '"n_positions", "n_ctx", "max_position_embeddings"',
           '"n_ctx", "n_positions", "max_position_embeddings"', HF, 'aliases'),
    Mutant("hf: nanoGPT's model_args mapped with GPT-2's tanh GELU", 'formats/hf.py',
           'activation="gelu-erf",  # nanoGPT\'s MLP: nn.GELU(), the exact form',
           'activation="gelu-tanh",  # nanoGPT\'s MLP: nn.GELU(), the exact form', HF_NANOGPT, 'aliases'),
    Mutant('hf: a boolean size (true) is read as the integer 1', 'formats/hf.py',
           'if isinstance(v, bool) or not isinstance(v, int) or v < 1:',
           'if not isinstance(v, int) or v < 1:', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: a size of 0 is accepted (bound off by one)', 'formats/hf.py',
           'if isinstance(v, bool) or not isinstance(v, int) or v < 1:',
           'if isinstance(v, bool) or not isinstance(v, int) or v < 0:', HF, 'refusal'),
    Mutant('hf: a weight_map that is not an object is not refused', 'formats/hf.py',
           '    if not isinstance(wm, dict):\n        raise',
           '    if wm is None:\n        raise', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: a weight_map entry may be a path out of the directory', 'formats/hf.py',
           'if not plain or os.path.basename(shard) != shard:',
           'if not plain:', HF, 'refusal'),
    Mutant("hf: a shard's tensors the index does not map to it are taken", 'formats/hf.py',
           '            if stray:\n',
           '            if False:\n', HF, 'refusal'),
    Mutant('hf: only int8 weights are refused, other integer types are cast', 'formats/hf.py',
           'if st in _ST_DTYPES and st not in _FLOATS and not _is_buffer(name):',
           'if st == "I8" and not _is_buffer(name):', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: weights are checked finite before the cast to float32', 'formats/hf.py',
           '        if not np.isfinite(params[ours]).all():  # NaN weights',
           '        if not np.isfinite(a).all():  # NaN weights', HF, 'ordering'),
    Mutant("hf: the config is not held against the weights' size before allocating", 'formats/hf.py',
           '    if weights is not None:\n        _refuse_larger(cfg, weights[1], where, weights[0])\n',
           '', HF_CLI_PRETRAINED, 'refusal'),
    Mutant('hf: export replaces a directory holding a model without force', 'formats/hf.py',
           '    if not force:\n',
           '    if False:\n', HF_CLI_PRETRAINED, 'refusal'),
    # -- formats/nanogpt.py (7)
    Mutant('nanogpt: ckpt.pt unpickled with weights_only=False (its code runs)', 'formats/nanogpt.py',
           'ckpt = torch.load(name, map_location="cpu", weights_only=True)',
           'ckpt = torch.load(name, map_location="cpu", weights_only=False)', NANOGPT, 'refusal'),
    Mutant('nanogpt: a float64 load reads the tensors through float32', 'formats/nanogpt.py',
           'want = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32',
           'want = torch.float32', NANOGPT, 'records'),
    Mutant('nanogpt: only model_args is checked to be a dict, not the state dict', 'formats/nanogpt.py',
           'for field in ("model", "model_args"):',
           'for field in ("model_args",):', NANOGPT, 'refusal'),
    Mutant('nanogpt: integer and bool tensors are cast, not refused', 'formats/nanogpt.py',
           'if not v.is_floating_point():  # cast, an int8 weight would be all zeros: refuse it',
           'if False:  # cast, an int8 weight would be all zeros: refuse it', NANOGPT, 'refusal'),
    Mutant("nanogpt: meta.pkl's unpickler looks globals up instead of refusing them", 'formats/nanogpt.py',
           '        raise _Refused(f"it names the global {module}.{name}")',
           '        return super().find_class(module, name)', NANOGPT, 'refusal'),
    Mutant("nanogpt: meta.pkl's walk uses isinstance, so True passes as an int", 'formats/nanogpt.py',
           'if type(x) not in _PLAIN:',
           'if not isinstance(x, _PLAIN):', NANOGPT, 'refusal'),
    Mutant('nanogpt: stoi checked for its characters, not their ids', 'formats/nanogpt.py',
           'stoi != {c: i for i, c in enumerate(chars)}',
           'set(stoi) != set(chars)', NANOGPT, 'refusal'),
    # -- plots.py (3)
    Mutant('plots: the trailing mean divides by the full window from the start', 'plots.py',
           'return (c[i] - c[lo]) / (i - lo)  # (N,)',
           'return (c[i] - c[lo]) / n  # (N,)', PLOTS, 'statistics'),
    Mutant('plots: a 1-step loss curve gets no marker', 'plots.py',
           'point = {"marker": "o", "ms": 4} if len(x) == 1 else {}',
           'point = {"marker": "o", "ms": 4} if len(x) == 0 else {}', PLOTS, 'records'),
    Mutant("plots: the val curve draws the evaluations' train loss", 'plots.py',
           'ax.plot(ex, [r["val_loss"] for r in evals]',
           'ax.plot(ex, [r["train_loss"] for r in evals]', PLOTS, 'records'),
    # -- train/data.py (5)
    Mutant('data: min_length lets the val split hold only block_size', 'train/data.py',
           'if n_val >= block_size + 1 and',
           'if n_val >= block_size and', DATA, 'bounds'),
    Mutant('data: unknown chars: first position in sorted order', 'train/data.py',
           'pos = min(text.index(c) for c in missing)',
           'pos = text.index(missing[0])', DATA, 'ordering'),
    Mutant('data: decode accepts negative ids', 'train/data.py',
           'bad = (ids < 0) | (ids >= self.vocab_size)',
           'bad = ids >= self.vocab_size', DATA, 'refusal'),
    Mutant('data: a text over the size limit is cut silently', 'train/data.py',
           'raw = f.read(MAX_DATA_BYTES + 1)',
           'raw = f.read(MAX_DATA_BYTES)', DATA, 'refusal'),
    Mutant('data: a pipe or directory is not refused up front', 'train/data.py',
           'if not stat.S_ISREG(os.fstat(fd).st_mode):',
           'if False:', DATA, 'refusal'),
    # -- train/bpe.py (5)
    Mutant("bpe: check_vocab's largest id bound off by one", 'train/bpe.py',
           '    if top >= vocab_size:\n',
           '    if top > vocab_size:\n', BPE, 'bounds'),
    Mutant('bpe: check_vocab holds only the count, not the largest id', 'train/bpe.py',
           '        token, top = max(vocab.items(), key=lambda kv: kv[1], default=("", -1))\n',
           '        token, top = "", tok.vocab_size - 1\n', BPE, 'refusal'),
    Mutant('bpe: a vocabulary of exactly the 256 bytes is refused', 'train/bpe.py',
           'or vocab_size < MIN_BPE_VOCAB',
           'or vocab_size <= MIN_BPE_VOCAB', BPE, 'refusal'),
    Mutant('bpe: decode accepts the id one past the vocabulary', 'train/bpe.py',
           'bad = (ids < 0) | (ids >= self.vocab_size)',
           'bad = (ids < 0) | (ids > self.vocab_size)', BPE, 'refusal'),
    Mutant('bpe: decode accepts negative ids', 'train/bpe.py',
           'bad = (ids < 0) | (ids >= self.vocab_size)',
           'bad = ids >= self.vocab_size', BPE, 'refusal'),
    # -- train/optim.py (12)
    Mutant('adamw: bias correction of v without the square root', 'train/optim.py',
           'bc2_sqrt = math.sqrt(1 - c.beta2**t)',
           'bc2_sqrt = 1 - c.beta2**t', OPTIM, 'formula'),
    Mutant('adamw: m updated with beta2', 'train/optim.py',
           'tmp *= 1 - c.beta1',
           'tmp *= 1 - c.beta2', OPTIM, 'formula'),
    Mutant('adamw: no bias correction of m', 'train/optim.py',
           'step_size = lr / (1 - c.beta1**t)',
           'step_size = lr', OPTIM, 'formula'),
    Mutant('adamw: eps dropped', 'train/optim.py',
           'denom += c.eps  # sqrt(v_hat) + eps',
           'denom += 0.0  # sqrt(v_hat) + eps', OPTIM, 'formula'),
    Mutant('adamw: weight decay on every parameter', 'train/optim.py',
           'self.decay = {k: p.ndim >= 2 for k, p in params.items()}',
           'self.decay = {k: True for k, p in params.items()}', OPTIM, 'formula'),
    Mutant('adamw: decay not scaled by lr', 'train/optim.py',
           'p *= 1 - lr * c.weight_decay',
           'p *= 1 - c.weight_decay', OPTIM, 'formula'),
    Mutant('adamw: parts on threads skip an element per slice', 'train/optim.py',
           'a, b = n * part // parts, n * (part + 1) // parts',
           'a, b = n * part // parts, max(n * (part + 1) // parts - 1, n * part // parts)', OPTIM, 'concurrency'),
    Mutant('adamw: parts on threads leave the small parameters out', 'train/optim.py',
           'a, b = 0, (n if part == 0 else 0)',
           'a, b = 0, (n if part == 1 else 0)', OPTIM, 'concurrency'),
    Mutant('adamw: pieces skip their last element', 'train/optim.py',
           'j = min(i + CHUNK, b)',
           'j = min(i + CHUNK, b) - 1', OPTIM, 'bounds'),
    Mutant('adamw: the fused kernel decays after the Adam step', 'train/optim.py',
           'p[i] = p[i] * decay - mi / (np.sqrt(vi) / bc2 + eps) * step',
           'p[i] = (p[i] - mi / (np.sqrt(vi) / bc2 + eps) * step) * decay', OPTIM, 'ordering'),
    Mutant('adamw: the fused kernel forgets to square g in v', 'train/optim.py',
           'vi = v[i] * b2 + (gi * c2) * gi',
           'vi = v[i] * b2 + gi * c2', OPTIM, 'formula'),
    Mutant("adamw: the fused kernel corrects v's bias inside the square root", 'train/optim.py',
           'mi / (np.sqrt(vi) / bc2 + eps) * step',
           'mi / (np.sqrt(vi / bc2) + eps) * step', OPTIM, 'formula'),
    Mutant('adamw: the fused path decays every parameter', 'train/optim.py',
           'dt(1 - lr * c.weight_decay) if self.decay[k] else dt(1),',
           'dt(1 - lr * c.weight_decay),', OPTIM, 'formula'),
    Mutant('optim: grad norms: a last piece of one element is left out', 'train/optim.py',
           'for i in range(0, flat.size, CHUNK):',
           'for i in range(0, flat.size - 1, CHUNK):', OPTIM, 'bounds'),
    Mutant('optim: clip_grad_norm scales up small gradients', 'train/optim.py',
           'if coef < 1.0:',
           'if coef > 1.0:', OPTIM, 'formula'),
    Mutant('schedule: warmup off by one', 'train/optim.py',
           'return self.lr * (it + 1) / (self.warmup_iters + 1)',
           'return self.lr * it / (self.warmup_iters + 1)', OPTIM, 'bounds'),
    # -- train/dynamics.py (9)
    Mutant('dynamics: the clipped flag is never recorded', 'train/dynamics.py',
           'rec["grad_norm"], rec["clipped"] = grad_norm, clipped',
           'rec["grad_norm"], rec["clipped"] = grad_norm, 0', DYNAMICS, 'records'),
    Mutant('dynamics: per-kind gradient norms without the square root', 'train/dynamics.py',
           'rec[kind] = np.sqrt(np.sum(sq, axis=0)) if sq else 0.0  # (L,)',
           'rec[kind] = np.sum(sq, axis=0) if sq else 0.0  # (L,)', DYNAMICS, 'formula'),
    Mutant('dynamics: update ratio of the squared norms', 'train/dynamics.py',
           'return np.sqrt(dw2) / np.sqrt(w2)  # (L,)',
           'return dw2 / w2  # (L,)', DYNAMICS, 'formula'),
    Mutant('dynamics: sync() before a checkpoint does not fsync', 'train/dynamics.py',
           '        os.fsync(self._fd)\n',
           '        pass\n', DYNAMICS, 'durability'),
    Mutant('dynamics: a repeated step is not damage', 'train/dynamics.py',
           '((step <= prev) & (np.arange(len(step)) > 0))',
           '((step < prev) & (np.arange(len(step)) > 0))', DYNAMICS, 'refusal'),
    Mutant('dynamics: the step bound is off by one', 'train/dynamics.py',
           '(step >= MAX_STEP)',
           '(step > MAX_STEP)', DYNAMICS, 'bounds'),
    Mutant('dynamics: clipped other than 0 or 1 is not checked', 'train/dynamics.py',
           'bad = bad_step | (records["clipped"] > 1) | bad_lr  # (N,)',
           'bad = bad_step | bad_lr  # (N,)', DYNAMICS, 'refusal'),
    Mutant('dynamics: n_layer has no upper bound', 'train/dynamics.py',
           'or not (1 <= n_layer <= MAX_N_LAYER)',
           'or not (1 <= n_layer)', DYNAMICS, 'refusal'),
    Mutant('dynamics: the damaged record is numbered from 0', 'train/dynamics.py',
           'damage = f"{DYNAMICS_BIN}: record {kept + 1} of {n} is damaged ({why}); "',
           'damage = f"{DYNAMICS_BIN}: record {kept} of {n} is damaged ({why}); "', DYNAMICS, 'records'),
    # -- train/sample.py (12)
    Mutant('sampler: causal mask off by one', 'train/sample.py',
           'future = np.arange(S)[None, :] > start + np.arange(T)[:, None]',
           'future = np.arange(S)[None, :] >= start + np.arange(T)[:, None]', SAMPLE, 'bounds'),
    Mutant('sampler: attention scaled by 1/D, not 1/sqrt(D)', 'train/sample.py',
           'att *= x.dtype.type(1.0 / math.sqrt(D))',
           'att *= x.dtype.type(1.0 / D)', SAMPLE, 'formula'),
    Mutant('sampler: new tokens get positions from 0', 'train/sample.py',
           'x = p["wte"][idx] + p["wpe"][t0 : t0 + T]',
           'x = p["wte"][idx] + p["wpe"][:T]', SAMPLE, 'formula'),
    Mutant('sampler: crop keeps the first block_size tokens', 'train/sample.py',
           'context = np.concatenate(out, axis=1)[:, -bs:]',
           'context = np.concatenate(out, axis=1)[:, :bs]', SAMPLE, 'formula'),
    Mutant('sampler: temperature multiplies the logits', 'train/sample.py',
           'z = l64 / temperature  # (B, V)',
           'z = l64 * temperature  # (B, V)', SAMPLE, 'formula'),
    Mutant("sample: the KV-cache step runs the default GELU, not the model's", 'train/sample.py',
           'return mlp_forward(h, *mlp, activation=cfg.activation)',
           'return mlp_forward(h, *mlp)', SAMPLE, 'formula'),
    Mutant('sample: a long prompt is prefilled uncropped', 'train/sample.py',
           'logits = forward_step(model, idx[:, -bs:], cache)[:, -1]',
           'logits = forward_step(model, idx, cache)[:, -1]', SAMPLE, 'bounds'),
    Mutant('sample: a long prompt keeps its first block_size tokens', 'train/sample.py',
           'logits = forward_step(model, idx[:, -bs:], cache)[:, -1]',
           'logits = forward_step(model, idx[:, :bs], cache)[:, -1]', SAMPLE, 'formula'),
    Mutant('sample: the context limit is off by one', 'train/sample.py',
           'if t0 + T > cfg.block_size:',
           'if t0 + T > cfg.block_size + 1:', SAMPLE, 'bounds'),
    Mutant('sample: the stream never sends the start text', 'train/sample.py',
           '        on_text(start)\n',
           '', SAMPLE, 'records'),
    Mutant('sample: a float64 checkpoint is loaded as float32', 'train/sample.py',
           'dtype = next(iter(ckpt.params.values())).dtype if ckpt.params else np.float32',
           'dtype = np.float32', SAMPLE, 'records'),
    Mutant('sample: --best on a checkpoint file is ignored', 'train/sample.py',
           '    elif best:\n        raise ValueError(',
           '    elif best and False:\n        raise ValueError(', SAMPLE, 'refusal'),
    # -- train/pretrained.py (7)
    Mutant("pretrained: data/<dataset>/meta.pkl not looked for above the checkpoint's directory", 'train/pretrained.py',
           'for base in (os.getcwd(), here, os.path.dirname(here)):',
           'for base in (os.getcwd(), here):', PRETRAINED, 'ordering'),
    Mutant("pretrained: the dataset's meta.pkl wins over --meta", 'train/pretrained.py',
           'found = os.fspath(meta) if meta is not None else find_nanogpt_meta(name, config)',
           'found = find_nanogpt_meta(name, config) or (os.fspath(meta) if meta is not None else None)', PRETRAINED, 'ordering'),
    Mutant("pretrained: a meta.pkl smaller than the model's vocabulary is taken", 'train/pretrained.py',
           'if tok.vocab_size != model.cfg.vocab_size:',
           'if tok.vocab_size > model.cfg.vocab_size:', PRETRAINED, 'refusal'),
    Mutant("pretrained: the tokenizer's ids are not held against the model's vocabulary", 'train/pretrained.py',
           '    check_vocab(tok, model.cfg.vocab_size, name)\n',
           '', PRETRAINED_CLI_PRETRAINED, 'refusal'),
    Mutant('pretrained: the memory check is not passed to load_hf (weights read first)', 'train/pretrained.py',
           'model = load_hf(where, dtype=dtype, fits=fits)',
           'model = load_hf(where, dtype=dtype)', PRETRAINED_CLI_PRETRAINED, 'refusal'),
    Mutant('pretrained: export_checkpoint ignores --best', 'train/pretrained.py',
           'model, tok, _ = load_model(path, best)',
           'model, tok, _ = load_model(path)', PRETRAINED_CLI_PRETRAINED, 'records'),
    # -- train/shards.py (4)
    Mutant('shards: evaluation runs in train mode (dropout on)', 'train/shards.py',
           'float(model.forward(x[r], y[r])[1])',
           'float(model.forward(x[r], y[r], train=True, rng=np.random.default_rng(0))[1])', LOOP, 'formula'),
    Mutant('shards: every shard weighted equally', 'train/shards.py',
           '(r.stop - r.start) / B, g, act_rms)',
           '1 / len(rows), g, act_rms)', SHARDS, 'formula'),
    Mutant("shards: the later shards' gradients dropped", 'train/shards.py',
           'grads[k] += a  # (shape of params[k])',
           'grads[k] += 0 * a', SHARDS, 'formula'),
    Mutant('shards: stream norms of the first shard only', 'train/shards.py',
           'stream = [math.hypot(*norms) for norms in zip(*(p[2] for p in parts))]',
           'stream = [norms[0] for norms in zip(*(p[2] for p in parts))]', SHARDS, 'formula'),
    # -- train/config.py (3)
    Mutant('config: grad_clip 0 (clipping off) is refused', 'train/config.py',
           '_float("grad_clip", self.grad_clip, 0.0)',
           '_float("grad_clip", self.grad_clip, 0.0, lo_open=True)', LOOP_CHECKPOINT_COMPAT, 'refusal'),
    Mutant('config: lr may change on resume', 'train/config.py',
           'RESUMABLE = ("max_iters", ',
           'RESUMABLE = ("lr", "max_iters", ', LOOP_CHECKPOINT_COMPAT, 'refusal'),
    Mutant('config: resume_config checks the merged config before naming the change', 'train/config.py',
           '    _refuse_changes({k: v for k, v in overrides.items() if k in fields}, saved, path)\n',
           '', LOOP_CHECKPOINT_COMPAT, 'ordering'),
    # -- train/rundir.py (5)
    Mutant("rundir: a kill's torn last line is reported as damage", 'train/rundir.py',
           'if line.endswith("\\n"):  # not the tail a kill cut short: damage',
           'if True:  # not the tail a kill cut short: damage', RUNDIR, 'durability'),
    Mutant('rundir: upto keeps the step at the checkpoint', 'train/rundir.py',
           'if r["iter"] >= upto if r["kind"] == "iter" else r["iter"] > upto:',
           'if r["iter"] > upto if r["kind"] == "iter" else r["iter"] > upto:', RUNDIR, 'bounds'),
    Mutant('rundir: upto drops the evaluation at the checkpoint', 'train/rundir.py',
           'if r["iter"] >= upto if r["kind"] == "iter" else r["iter"] > upto:',
           'if r["iter"] >= upto if r["kind"] == "iter" else r["iter"] >= upto:', RUNDIR, 'bounds'),
    Mutant('rundir: an evaluation without its losses is a record', 'train/rundir.py',
           'return all(isinstance(r.get(k), (int, float)) for k in _RECORD_FIELDS[r["kind"]])',
           'return True', RUNDIR, 'refusal'),
    Mutant('rundir: kept checkpoints listed by name, not by iteration', 'train/rundir.py',
           '    return sorted(found)\n',
           '    return sorted(found, key=lambda f: f[1])\n', RUNDIR, 'ordering'),
    # -- train/loop.py (10)
    Mutant('loop: keep_every keeps no checkpoint at the end', 'train/loop.py',
           'if cfg.keep_every and (it % cfg.keep_every == 0 or it >= cfg.max_iters):',
           'if cfg.keep_every and it % cfg.keep_every == 0:', KEEP_EVERY, 'durability'),
    Mutant('loop: a fresh run over kept checkpoints is not refused', 'train/loop.py',
           '        if os.path.exists(last_path) or kept:',
           '        if os.path.exists(last_path):', KEEP_EVERY, 'refusal'),
    Mutant('loop: trainer skips gradient clipping', 'train/loop.py',
           'total = clip_grad_norm(grads, grad_clip, norms)',
           'total = clip_grad_norm(grads, 0.0, norms)', LOOP, 'formula'),
    Mutant('loop: resume restarts the batch generator', 'train/loop.py',
           'data_rng=generator_from_state(ckpt.rng_states["data"]),',
           'data_rng=np.random.default_rng([cfg.seed, _SEED_DATA]),', LOOP, 'durability'),
    Mutant('loop: best checkpoint kept on a worse val loss', 'train/loop.py',
           'is_best = best is None or losses["val"] < best',
           'is_best = best is None or losses["val"] > best', LOOP, 'formula'),
    Mutant("loop: the step's lr is the next step's", 'train/loop.py',
           '            lr = schedule(it)\n            x, y = get_batch(',
           '            lr = schedule(it + 1)\n            x, y = get_batch(', LOOP_DYNAMICS, 'ordering'),
    Mutant('loop: clipping off still flags each step as clipped', 'train/loop.py',
           'clipped = clip_coef(total, grad_clip) < 1.0',
           'clipped = total > grad_clip', LOOP_DYNAMICS, 'records'),
    Mutant('loop: grad_clip 0 falls back to a clip of 1.0', 'train/loop.py',
           'total = clip_grad_norm(grads, grad_clip, norms)',
           'total = clip_grad_norm(grads, grad_clip or 1.0, norms)', LOOP_DYNAMICS, 'formula'),
    Mutant('loop: a refused run leaves dynamics.json behind', 'train/loop.py',
           '(TOKENIZER, METRICS, DYNAMICS_BIN, DYNAMICS_HEADER)]',
           '(TOKENIZER, METRICS, DYNAMICS_BIN)]', LOOP_DYNAMICS, 'durability'),
    Mutant('loop: the BPE size the text reaches is refused too', 'train/loop.py',
           'if tok.vocab_size < cfg.vocab_size:',
           'if tok.vocab_size <= cfg.vocab_size:', LOOP_DYNAMICS, 'bounds'),
    # -- lab/lesson.py (6)
    Mutant('lesson: dW forgets the tanh derivative', 'lab/lesson.py',
           'dW = x.T @ dz  # (C, B) @ (B, C) -> (C, C)',
           'dW = x.T @ dout  # (C, B) @ (B, C) -> (C, C)', LESSON, 'formula'),
    Mutant('lesson: activation norms of f(x), not of the stream', 'lab/lesson.py',
           '        act_norms.append(float(np.linalg.norm(x)))',
           '        act_norms.append(float(np.linalg.norm(f)))', LESSON, 'formula'),
    Mutant('lesson: weight-gradient norms in backward order', 'lab/lesson.py',
           'weight_grad_norms=tuple(reversed(dW_norms)),',
           'weight_grad_norms=tuple(dW_norms),', LESSON, 'ordering'),
    Mutant('lesson: gradcheck accepts eps = 0', 'lab/lesson.py',
           'if self.eps <= 0:',
           'if self.eps < 0:', LESSON, 'refusal'),
    Mutant('lesson: seed bound admits 2**32', 'lab/lesson.py',
           'not 0 <= v < 2**32:',
           'not 0 <= v <= 2**32:', LESSON, 'refusal'),
    Mutant('lesson: a bank too short for the depth is not refused', 'lab/lesson.py',
           '    if len(Ws) < N:\n',
           '    if len(Ws) < N - 1:\n', LESSON, 'refusal'),
    # -- lab/flow.py (6)
    Mutant('flow: a count K means seeds 1..K', 'lab/flow.py',
           'return tuple(range(int(seeds)))',
           'return tuple(range(1, int(seeds) + 1))', FLOW, 'bounds'),
    Mutant('flow: duplicate seeds accepted', 'lab/flow.py',
           '    if len(set(out)) != len(out):\n        twice',
           '    if False:\n        twice', FLOW, 'refusal'),
    Mutant('flow: seed 2**32 accepted', 'lab/flow.py',
           'or not 0 <= value < 2**32',
           'or not 0 <= value <= 2**32', FLOW, 'refusal'),
    Mutant('flow: the data generator is seeded by the seed alone', 'lab/flow.py',
           'data_rng = np.random.default_rng([seed, 1])',
           'data_rng = np.random.default_rng(seed)', FLOW, 'formula'),
    Mutant('flow: std over the seeds with ddof=1', 'lab/flow.py',
           'v.mean(0), v.std(0), v.min(0), v.max(0)',
           'v.mean(0), v.std(0, ddof=1), v.min(0), v.max(0)', FLOW, 'statistics'),
    Mutant('flow: the lm loss predicts the input token, not the next', 'lab/flow.py',
           'idx, targets = seq[:, :-1], seq[:, 1:]',
           'idx, targets = seq[:, :-1], seq[:, :-1]', FLOW, 'formula'),
    # -- lab/realflow.py (5)
    Mutant('realflow: the last window of the text is never drawn', 'lab/realflow.py',
           'starts = rng.integers(0, len(ids) - seq, size=batch)',
           'starts = rng.integers(0, len(ids) - seq - 1, size=batch)', REALFLOW, 'bounds'),
    Mutant('realflow: windows of T tokens, not T + 1', 'lab/realflow.py',
           'return ids[starts[:, None] + np.arange(seq + 1)]',
           'return ids[starts[:, None] + np.arange(seq)]', REALFLOW, 'bounds'),
    Mutant('realflow: windows seeded by the seed alone', 'lab/realflow.py',
           'rng = np.random.default_rng([seed, 1])',
           'rng = np.random.default_rng(seed)', REALFLOW, 'formula'),
    Mutant("realflow: every seed measures the first seed's windows", 'lab/realflow.py',
           'tokens = text_windows(ids, seq, batch, s)',
           'tokens = text_windows(ids, seq, batch, cfg.seeds[0])', REALFLOW, 'formula'),
    Mutant('realflow: a text of T tokens passes the length check', 'lab/realflow.py',
           'if len(ids) < seq + 1:',
           'if len(ids) < seq:', REALFLOW, 'refusal'),
    # -- lab/paths.py (9)
    Mutant("paths: post-ln's branch VJP skips the trunk's LayerNorm", 'lab/paths.py',
           "dx, gb = s.branch(t)  # the branch's VJP ...",
           "dx, gb = s.branch(d)  # the branch's VJP ...", PATHS, 'formula'),
    Mutant("paths: branch weights take the key after the branch", 'lab/paths.py',
           'add_params(j, key, {**g, **gb})  # parameters in the branch: the entering key',
           'add_params(j, up, {**g, **gb})  # parameters in the branch: the entering key', PATHS, 'ordering'),
    Mutant('paths: the tied wte loses the LM head\'s part (k = 0)', 'lab/pathchains.py',
           'top: dict[str, Any] = {"wte": dwte_head}',
           'top: dict[str, Any] = {}', PATHS, 'formula'),
    Mutant('paths: share of norm over ||dL/dx_i||, not the parts\' sum', 'lab/paths.py',
           'total = self.norms.sum(axis=1, keepdims=True)  # (L + 1, 1)',
           'total = self.full_norms[:, None]  # (L + 1, 1)', PATHS, 'statistics'),
    Mutant('paths: projection shares over ||g||, not ||g||^2', 'lab/paths.py',
           'sq = np.square(self.full_norms)[:, None]  # (L + 1, 1)',
           'sq = self.full_norms[:, None]  # (L + 1, 1)', PATHS, 'statistics'),
    Mutant("paths: Veit's sample may pass one branch twice", 'lab/paths.py',
           'rng.choice(chain.n, size=k, replace=False)',
           'rng.choice(chain.n, size=k, replace=True)', PATHS, 'formula'),
    Mutant('paths: the 90% range\'s cumulative sum lacks its leading 0', 'lab/paths.py',
           'c = np.concatenate([[0.0], np.cumsum(s)])  # (K + 1,)',
           'c = np.cumsum(s)  # (K + 1,)', PATHS, 'statistics'),
    Mutant('paths: the figure draws the top boundary x_L, not x_0', 'lab/pathfigs.py',
           'norms0 = np.array([s.norms[0] for s in splits])  # (S, K) ||part_k|| at x_0',
           'norms0 = np.array([s.norms[-1] for s in splits])  # (S, K) ||part_k|| at x_0', PATHS, 'records'),
    # -- lab/claims.py (5)
    Mutant('claims: update_size relative to the moved output', 'lab/claims.py',
           'np.linalg.norm(x1 - x0) / np.linalg.norm(x0)',
           'np.linalg.norm(x1 - x0) / np.linalg.norm(x1)', CLAIMS, 'formula'),
    Mutant('claims: the SGD step moves the embeddings too', 'lab/claims.py',
           '        if k.startswith("blocks."):\n            gpt.params[k] = gpt.params[k] - lr * g',
           '        if True:\n            gpt.params[k] = gpt.params[k] - lr * g', CLAIMS, 'formula'),
    Mutant('claims: unscaled init undoes 1/sqrt(L), not 1/sqrt(2L)', 'lab/claims.py',
           'p * math.sqrt(2 * depth)',
           'p * math.sqrt(depth)', CLAIMS, 'formula'),
    Mutant('claims: stream growth against x_1, not x_0', 'lab/claims.py',
           'return float(a[-1] / a[0])',
           'return float(a[-1] / a[1])', CLAIMS, 'formula'),
    Mutant('claims: the spread is the population std', 'lab/claims.py',
           'return statistics.stdev(self.values)',
           'return statistics.pstdev(self.values)', CLAIMS, 'statistics'),
    # -- lab/explore.py (4)
    Mutant("explore: gain 1 records read 'gpt2 x1'", 'lab/explore.py',
           'if cfg.is_lesson or gain == 1.0:',
           'if cfg.is_lesson:', EXPLORE, 'names'),
    Mutant('explore: gain 0 refused', 'lab/explore.py',
           'if not math.isfinite(value) or value < 0:',
           'if not math.isfinite(value) or value <= 0:', EXPLORE, 'refusal'),
    Mutant("explore: overflow note counts every quantity's layers", 'lab/explore.py',
           'if r.quantity == quantity and not all(math.isfinite(v) for v in vals):',
           'if not all(math.isfinite(v) for v in vals):', EXPLORE, 'statistics'),
    Mutant('explore: one seed still claims a min..max band', 'lab/explore.py',
           '(", band = min..max" if k > 1 else "")',
           '(", band = min..max" if k >= 1 else "")', EXPLORE, 'statistics'),
    # -- lab/runs.py (3)
    Mutant('runs: the compare profile averages the first steps', 'lab/runs.py',
           'prof = np.nanmean(np.where(np.isfinite(vals[-n:]), vals[-n:], np.nan), axis=0)',
           'prof = np.nanmean(np.where(np.isfinite(vals[:n]), vals[:n], np.nan), axis=0)', RUNS, 'statistics'),
    Mutant('runs: labels name the out_dir as a difference', 'lab/runs.py',
           'keys = sorted({k for c in configs for k in c} - set(_NOT_A_DIFFERENCE))',
           'keys = sorted({k for c in configs for k in c})', RUNS, 'names'),
    Mutant("runs: a 1-step run's heatmap lines get no marker", 'lab/runs.py',
           'point = {"marker": "o", "ms": 4} if len(steps) == 1 else {}',
           'point = {"marker": "o", "ms": 4} if len(steps) == 0 else {}', RUNS, 'records'),
    # -- lab/depthtrain.py (4)
    Mutant('depthtrain: the cosine ends at lr / 100', 'lab/depthtrain.py',
           'min_lr=self.lr / 10,',
           'min_lr=self.lr / 100,', DEPTHTRAIN, 'formula'),
    Mutant('depthtrain: a fixed warm-up of 100 steps', 'lab/depthtrain.py',
           'warmup_iters=self.max_iters // 10,',
           'warmup_iters=100,', DEPTHTRAIN, 'formula'),
    Mutant("depthtrain: the summary's last-step norms are the first step's", 'lab/depthtrain.py',
           '"last_step_layer_grad_norms": steps[-1]["layer_grad_norms"] if steps else None,',
           '"last_step_layer_grad_norms": steps[0]["layer_grad_norms"] if steps else None,', DEPTHTRAIN, 'formula'),
    Mutant("depthtrain: one step said as '1 steps'", 'lab/depthtrain.py',
           'return f"{n} step{\'s\' * (n != 1)}"',
           'return f"{n} steps"', DEPTHTRAIN, 'names'),
    # -- lab/sweep.py (6)
    Mutant('sweep: the sidecar append is not flushed', 'lab/sweep.py',
           '    f.write(_sidecar_line(key, rows))\n    f.flush()\n',
           '    f.write(_sidecar_line(key, rows))\n', SWEEP, 'durability'),
    Mutant('sweep: the sidecar append is not fsynced', 'lab/sweep.py',
           '    f.flush()\n    os.fsync(f.fileno())',
           '    f.flush()', SWEEP, 'durability'),
    Mutant('sweep: the torn-tail rewrite drops the header', 'lab/sweep.py',
           'kept = [_SIDECAR_HEADER] + [_sidecar_line(k, r) for k, r in done.items()]',
           'kept = [_sidecar_line(k, r) for k, r in done.items()]', SWEEP, 'durability'),
    Mutant('sweep: workers never start the parent-death watchdog', 'lab/sweep.py',
           '        _die_with_parent(parent)\n',
           '        pass\n', CLI_LAB, 'concurrency'),
    Mutant('sweep: the SIGTERM handler is never installed', 'lab/sweep.py',
           '    signal.signal(signal.SIGTERM, handler)\n    try:',
           '    try:', CLI_LAB, 'concurrency'),
    Mutant('sweep: seeds used as indices 0..K-1', 'lab/sweep.py',
           'for s in self.seeds',
           'for s in range(len(self.seeds))', SWEEP, 'formula'),
    # -- lab/experiments.py (9)
    Mutant("experiments: grad_block0 is the last block's gradient", 'lab/experiments.py',
           'grad0 = float(np.mean(dyn["grad"][-n:, 0]))',
           'grad0 = float(np.mean(dyn["grad"][-n:, -1]))', EXPERIMENTS, 'records'),
    Mutant('experiments: the last 10% of steps is one step too many', 'lab/experiments.py',
           'n = max(1, len(dyn.steps) // 10)',
           'n = len(dyn.steps) // 10 + 1', EXPERIMENTS, 'bounds'),
    Mutant('experiments: update_max: mean over blocks, max over steps', 'lab/experiments.py',
           'np.max(np.mean(dyn["update"][-n:], axis=0))',
           'np.max(np.mean(dyn["update"][-n:], axis=1))', EXPERIMENTS, 'statistics'),
    Mutant("experiments: best_val_loss is the last evaluation's", 'lab/experiments.py',
           'best_val_loss=last.get("best_val_loss")',
           'best_val_loss=last.get("val_loss")', EXPERIMENTS, 'formula'),
    Mutant('experiments: cells decay to a fixed min_lr, not lr / 10', 'lab/experiments.py',
           'max_iters=self.max_iters, lr=lr, min_lr=lr / 10,',
           'max_iters=self.max_iters, lr=lr,', EXPERIMENTS, 'formula'),
    Mutant("experiments: the depth experiment trains at GPT-2's init", 'lab/experiments.py',
           'max_iters=300, init="xavier", grad_clip=0.0),',
           'max_iters=300, grad_clip=0.0),', EXPERIMENTS, 'formula'),
    Mutant('experiments: the depth experiment clips at 1', 'lab/experiments.py',
           'max_iters=300, init="xavier", grad_clip=0.0),',
           'max_iters=300, init="xavier"),', EXPERIMENTS, 'formula'),
    Mutant('experiments: seeds used as indices 0..K-1', 'lab/experiments.py',
           'for s in self.seeds:',
           'for s in range(len(self.seeds)):', EXPERIMENTS, 'formula'),
    Mutant('experiments: val_min/val_max count the diverged seeds', 'lab/experiments.py',
           '"val_min": min(ok) if ok else None, "val_max": max(ok) if ok else None,',
           '"val_min": min(r["val_loss"] for r in rs) if ok else None,\n            "val_max": max(r["val_loss"] for r in rs) if ok else None,', EXPERIMENTS, 'statistics'),
    # -- formats/events.py (7)
    Mutant("events: a new file's name ignores the files already there", 'formats/events.py',
           'secs = max([int(now)] + [_seconds(p) + 1 for p in event_files(logdir)])',
           'secs = int(now)', EVENTS, 'ordering'),
    Mutant('events: masked CRC without the mask delta', 'formats/events.py',
           'return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF',
           'return ((c >> 15) | (c << 17)) & 0xFFFFFFFF', EVENTS, 'formula'),
    Mutant('events: sync() does not fsync', 'formats/events.py',
           '"""Put the events written so far on disk (fsync)."""\n        os.fsync(self._fd)',
           '"""Put the events written so far on disk (fsync)."""', EVENTS, 'durability'),
    # -- train/trackers.py (10)
    Mutant("trackers: the stream gradient after the last block is not 'output'", 'train/trackers.py',
           'if quantity == "stream_grad" and i == n_layer:',
           'if quantity == "stream_grad" and i == n_layer - 1:', TRACKERS, 'names'),
    Mutant('trackers: block numbers are not zero-padded', 'train/trackers.py',
           'return f"{quantity}/block_{i:0{max(2, len(str(n_layer - 1)))}d}"',
           'return f"{quantity}/block_{i}"', TRACKERS, 'names'),
    Mutant('trackers: eval/val_loss logs the train loss', 'train/trackers.py',
           'EVAL_TAGS = {"eval/train_loss": "train_loss", "eval/val_loss": "val_loss"}',
           'EVAL_TAGS = {"eval/train_loss": "train_loss", "eval/val_loss": "train_loss"}', TRACKERS, 'records'),
    Mutant('trackers: histograms of one bucket more', 'train/trackers.py',
           'counts, edges = np.histogram(v, bins=HIST_BINS, range=(lo, hi))',
           'counts, edges = np.histogram(v, bins=HIST_BINS + 1, range=(lo, hi))', TRACKERS, 'bounds'),
    Mutant('trackers: sum_squares is the squared sum', 'train/trackers.py',
           'float(np.dot(v64, v64))',
           'float(v64.sum()) ** 2', TRACKERS, 'formula'),
    Mutant("trackers: a bucket's limit is its left edge", 'train/trackers.py',
           'bucket_limit=h.edges[1:].tolist()',
           'bucket_limit=h.edges[:-1].tolist()', TRACKERS, 'formula'),
    # -- train/loop.py, the dashboards (5)
    Mutant('loop: the gradient histograms show the clipped gradients', 'train/loop.py',
           'kept = {k: g.copy() for k, g in grads.items()} if keep_grads else None',
           'kept = grads if keep_grads else None', TRACKERS, 'records'),
    Mutant('loop: histograms one step late', 'train/loop.py',
           'it % log_to.hist_every == 0',
           'it % log_to.hist_every == 1', TRACKERS, 'ordering'),
    Mutant('loop: the dashboards are not fsynced before a checkpoint', 'train/loop.py',
           '    dyn.sync()\n    for t in trackers:\n        t.sync()\n',
           '    dyn.sync()\n', TRACKERS, 'durability'),
    Mutant("loop: a resume does not log the checkpoint's evaluation again", 'train/loop.py',
           '        for t in trackers:\n            t.scalars(start, eval_scalars(at_start))\n',
           '        pass\n', TRACKERS, 'durability'),
    # -- cli/_common.py, the dashboards' flags (1)
    Mutant('_common: --hist-every without --log-to is ignored silently', 'cli/_common.py',
           'if clash and not args.log_to:',
           'if clash and args.log_to is None:', DASHBOARDS, 'refusal'),
    # -- cli/lab_cmds.py (1)
    Mutant('lab_cmds: dynamics prints its damage line on stdout', 'cli/lab_cmds.py',
           'print(f"resgrad dynamics: {args.run_dir}: {dyn.damage}", file=sys.stderr)',
           'print(f"resgrad dynamics: {args.run_dir}: {dyn.damage}")', RUNS, 'records'),
]  # fmt: skip



def _parts() -> list[Mutant]:
    """The mutants of scripts/mutants_parts/*.py (a list MUTANTS each, one file per area:
    dashboards, formats, lab, lesion, paths, source, docs, ...), after the table above."""
    import glob
    import importlib.util

    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "scripts", "mutants_parts", "*.py"))):
        spec = importlib.util.spec_from_file_location(f"_mutants_{os.path.basename(path)[:-3]}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.extend(mod.MUTANTS)
    return out


NO_TORCH = "raise ImportError('hidden by scripts/mutants.py --no-torch')\n"


def _copy_tree(dst: str) -> None:
    for d in ("src", "tests", "benchmarks"):  # tests read benchmarks/ scripts' models
        shutil.copytree(
            os.path.join(ROOT, d), os.path.join(dst, d),
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )  # fmt: skip
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), dst)


def _apply(root: str, m: Mutant) -> None:
    path = os.path.join(root, "src", "resgrad", m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutant {m.name!r}: its source text occurs {n} times in {m.file}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(m.old, m.new))


def _pytest(root: str, tests: tuple[str, ...], hide_torch: bool, jobs: int = 1) -> tuple[int, str]:
    paths = [os.path.join(root, "src")]
    if hide_torch:
        shim = os.path.join(root, "_no_torch")
        os.makedirs(shim, exist_ok=True)
        with open(os.path.join(shim, "torch.py"), "w") as f:
            f.write(NO_TORCH)
        paths.insert(0, shim)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "MPLBACKEND": "Agg"}
    if jobs > 1:  # several pytest runs share the cores: one BLAS thread each
        env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
    env.pop("RESGRAD_REQUIRE_TORCH", None)  # with torch hidden, its tests skip
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider",
         *tests],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, lines[-1] if lines else ""


def _per_kind(mutants: list[Mutant], survived: list[Mutant]) -> str:
    """The kills per class of bug, one line each, in KINDS' order."""
    lines = ["per class:"]
    for kind in KINDS:
        n = sum(m.kind == kind for m in mutants)
        if n:
            s = sum(m.kind == kind for m in survived)
            lines.append(f"  {kind:<12} {n - s:>4} of {n:<4} killed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--no-torch", action="store_true", help="hide PyTorch from the tests")
    ap.add_argument("--only", default="", help="run the mutants whose name contains this")
    ap.add_argument("--kind", choices=KINDS, help="run the mutants of this class of bug")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    args = ap.parse_args(argv)
    mutants = [m for m in MUTANTS + _parts() if args.only.lower() in m.name.lower()
               and args.kind in (None, m.kind)]  # fmt: skip
    if args.list:
        for i, m in enumerate(mutants, 1):
            print(f"{i:>3}  {m.kind:<11} {m.file:<22} {m.name}")
        return 0
    if not mutants:
        print(f"no mutant matches {args.only!r}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="resgrad-mutants-") as tmp:
        # the baseline: every subset must pass unmutated, or a "kill" means nothing
        base = os.path.join(tmp, "base")
        _copy_tree(base)
        subsets = sorted({m.tests for m in mutants})
        rc, last = _pytest(base, tuple(t for s in subsets for t in s), args.no_torch)
        if rc != 0:
            print(f"the unmutated tests fail ({last}); fix them first", file=sys.stderr)
            return 2
        print(f"baseline: the unmutated tests pass ({last})")
        torch_note = ", PyTorch hidden" if args.no_torch else ""
        print(f"{len(mutants)} mutants, each run in a fresh copy{torch_note}\n")
        header = f"{'#':>3}  {'mutant':<58} {'file':<22} {'tests run':<34} result"
        print(header)
        print("-" * len(header))
        survived = []
        t0 = time.perf_counter()

        def run_one(i: int, m: Mutant) -> bool:
            work = os.path.join(tmp, f"m{i}")
            _copy_tree(work)
            _apply(work, m)
            rc, _ = _pytest(work, m.tests, args.no_torch, args.jobs)
            shutil.rmtree(work)
            if rc == 5:  # no tests collected, which proves nothing
                raise SystemExit(f"mutant {m.name!r}: no tests collected from {m.tests}")
            return rc != 0

        # mutants are independent copies: --jobs of them run at once, reported in order
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_one, i, m) for i, m in enumerate(mutants, 1)]
            for i, (m, fut) in enumerate(zip(mutants, futures), 1):
                killed = fut.result()
                if not killed:
                    survived.append(m)
                tests = ", ".join(os.path.basename(t) for t in m.tests)
                print(f"{i:>3}  {m.name:<58} {m.file:<22} {tests:<34} "
                      f"{'killed' if killed else 'SURVIVED'}", flush=True)  # fmt: skip
    n = len(mutants)
    print(f"\n{n - len(survived)} of {n} killed, {len(survived)} survived "
          f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    print(_per_kind(mutants, survived))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
