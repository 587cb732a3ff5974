"""Single gradient paths, and Veit et al.'s protocol that samples them (their section 5,
figure 6).

Legend: n = sublayer branches, k = the branches one path takes, K = the path lengths asked.

:func:`path_gradient` backpropagates the gradient of a :class:`~resgrad.lab.paths.chains.Chain`
through exactly the branches it is given and along the skip everywhere else: one of the 2^n
paths. :func:`veit_sample` draws k of the n branches, takes that one path's gradient and
records its magnitude at x_0; their figure 6(c) quantity is C(n, k) x the mean magnitude.
That is a sum of magnitudes: it counts every path as if its gradient added to the others in
phase. The exact split (:func:`resgrad.lab.paths.exact.split`) sums the paths' gradient
*vectors*, with their cancellation, so its norms are smaller and its shares say where the
gradient that reaches x_0 really comes from. :func:`veit_exact` enumerates every path
instead of sampling: the expectation the sample estimates, for small n.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from resgrad.lab.paths.chains import Chain
from resgrad.lab.paths.exact import Tick, _on_windows
from resgrad.lab.study.refusals import (
    BRANCH_NOT_IN_CHAIN,
    PATH_LENGTH_OUT_OF_RANGE,
    SAMPLES_NOT_POSITIVE,
    TOO_MANY_PATHS,
)
from resgrad.nn.model import GPT

__all__ = [
    "MAX_EXACT_PATHS",
    "VeitEstimate",
    "model_veit",
    "path_gradient",
    "veit_bytes",
    "veit_exact",
    "veit_sample",
]

MAX_EXACT_PATHS = 1 << 16  # veit_exact enumerates every path: refuse more than this


# --------------------------------------------------------------------------- one path


def _branch_set(chain: Chain, branches: Iterable[int]) -> frozenset:
    S = frozenset(int(b) for b in branches)
    bad = [b for b in S if not 0 <= b < chain.n]
    if bad:
        raise BRANCH_NOT_IN_CHAIN(branch=bad[0], last=chain.n - 1)
    return S


def path_gradient(chain: Chain, branches: Iterable[int]) -> np.ndarray:
    """The gradient at x_0 carried by one path: through exactly ``branches``, skips elsewhere.

    Parameters
    ----------
    chain : Chain
    branches : iterable of int
        Branch indices, 0 = the lowest (block 0's attention in a GPT).

    Returns
    -------
    ndarray, the shape of x_0
        Zero where the path needs a skip that the scheme lacks (``none``, a plain stack).
    """
    S = _branch_set(chain, branches)
    if not _exists(chain, S):
        return np.zeros_like(chain.dtop)  # no skip where it leaves a branch: no such path
    d = chain.dtop
    for j in reversed(range(chain.n)):
        s = chain.steps[j]
        if s.trunk is not None:
            d, _ = s.trunk(d)
        if j in S:
            d, _ = s.branch(d)  # through the branch
        else:
            d = s.skip(d)  # along the skip
    return d


def _exists(chain: Chain, S: frozenset) -> bool:
    """Whether the path through exactly the branches ``S`` exists: every step it does not
    take through its branch has a skip (in ``none`` and a plain stack, only k = n does)."""
    return all(j in S or s.skip is not None for j, s in enumerate(chain.steps))


@dataclass(frozen=True)
class VeitEstimate:
    """Veit et al.'s figure 6 for one chain: per path length k, single-path magnitudes at x_0.

    ``mean[j]`` is the mean ||path gradient|| over the paths of length ``ks[j]`` (sampled,
    or all of them for :func:`veit_exact`); ``total = count * mean`` is figure 6(c).
    """

    n: int
    ks: tuple[int, ...]
    mean: np.ndarray  # (K,)
    std: np.ndarray  # (K,) over the samples (or the paths)
    samples: int  # per k; 0 for the exact enumeration
    seed: int | None

    @property
    def count(self) -> np.ndarray:
        """(K,) C(n, k): how many paths have length k (figure 6(a))."""
        return np.array([math.comb(self.n, k) for k in self.ks], dtype=float)

    @property
    def total(self) -> np.ndarray:
        """(K,) C(n, k) x mean magnitude (figure 6(c))."""
        return self.count * self.mean


def _ks(chain: Chain, ks: Iterable[int] | None) -> tuple[int, ...]:
    ks = tuple(range(chain.n + 1)) if ks is None else tuple(int(k) for k in ks)
    for k in ks:
        if not 0 <= k <= chain.n:
            raise PATH_LENGTH_OUT_OF_RANGE(k=k, n=chain.n)
    return ks


def veit_sample(
    chain: Chain,
    samples: int,
    seed: int,
    ks: Iterable[int] | None = None,
    *,
    tick: Tick | None = None,
) -> VeitEstimate:
    """Veit's protocol: for each k, ``samples`` random sets of k branches (with replacement
    between samples), each backpropagated alone; the magnitude ||gradient at x_0||.

    Randomness: ``np.random.default_rng([seed, k])`` per k, so adding a k, or asking for
    the ks in another order, changes no other k's sample. ``std`` is over the samples,
    ddof=0. Memory: one float per sample (:func:`veit_bytes`). ``tick`` is called after
    each sample with the branch VJPs it took: its k, or 0 for a path that does not exist.
    """
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise SAMPLES_NOT_POSITIVE(samples=samples)
    ks = _ks(chain, ks)
    mean, std = np.zeros(len(ks)), np.zeros(len(ks))
    mags = np.empty(int(samples))  # (samples,) one k at a time
    for j, k in enumerate(ks):
        rng = np.random.default_rng([seed, k])  # its own stream: the other ks do not move it
        for i in range(samples):
            S = rng.choice(chain.n, size=k, replace=False)  # (k,) distinct branches
            mags[i] = np.linalg.norm(path_gradient(chain, S))
            if tick is not None:  # a path that does not exist took no VJP
                tick(k if _exists(chain, _branch_set(chain, S)) else 0)
        mean[j], std[j] = mags.mean(), mags.std()
    return VeitEstimate(chain.n, ks, mean, std, int(samples), seed)


def veit_bytes(samples: int) -> int:
    """Memory :func:`veit_sample` adds to its chain's: one float64 per sample."""
    return 8 * int(samples)


def veit_exact(chain: Chain, ks: Iterable[int] | None = None) -> VeitEstimate:
    """The expectation :func:`veit_sample` estimates: every path of each length, enumerated."""
    ks = _ks(chain, ks)
    paths = sum(math.comb(chain.n, k) for k in ks)
    if paths > MAX_EXACT_PATHS:
        raise TOO_MANY_PATHS(paths=paths, most=MAX_EXACT_PATHS)
    mean, std = np.zeros(len(ks)), np.zeros(len(ks))
    for j, k in enumerate(ks):
        mags = [np.linalg.norm(path_gradient(chain, S))
                for S in itertools.combinations(range(chain.n), k)]  # fmt: skip
        mean[j], std[j] = np.mean(mags), np.std(mags)
    return VeitEstimate(chain.n, ks, mean, std, 0, None)


# --------------------------------------------------------------------------- real models


def model_veit(
    model: GPT,
    ids: np.ndarray,
    seq: int,
    batch: int,
    seeds: Sequence[int],
    samples: int,
    sample_seed: int = 0,
    *,
    tick: Tick | None = None,
) -> list[VeitEstimate]:
    """Veit's sampled estimate (:func:`veit_sample`) on the windows of each seed, one chain
    at a time: the same batches as :func:`~resgrad.lab.paths.exact.model_splits` with the
    same arguments."""

    def sample(s: int, chain: Chain) -> VeitEstimate:
        return veit_sample(chain, samples, sample_seed, tick=tick)  # one seed for every batch

    return _on_windows(model, ids, seq, batch, seeds, sample)
