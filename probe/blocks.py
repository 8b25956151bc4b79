"""The training rows in blocks, and the logits' products block by block.

Subsets are nested prefixes of one order per seed, so the rows are multiplied block by block,
each block only by the probes whose subsets reach into it (``plan_blocks``). The parameters of
the probes [S, Fr, L] lie flat in x [S, Fr, L, d], d = F K + K: the weights W [F, K] row-major,
then the bias b [K] (``split_params``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def split_params(x, F, K):
    return x[..., : F * K].reshape(x.shape[:-1] + (F, K)), x[..., F * K :]


MIN_BLOCK_SHARE = 0.1  # a block holds at least this share of the rows (benchmarks/probe_bench.py)


def plan_blocks(sizes: tuple[int, ...], min_rows: int | None = None) -> tuple[tuple[int, int, int], ...]:
    """Split the rows (in subset order) into blocks (lo, hi, first fraction using them).

    Subsets are nested prefixes: fraction j uses rows ``:sizes[j]``. A block of rows is
    multiplied only by the probes of the fractions that reach into it, so small subsets
    never pay for the rows they do not use. Each block costs compile time, so blocks
    smaller than ``min_rows`` are merged with the next one and the probes whose subsets
    end inside a block mask the rest of it: small problems get one dense block, large
    ones up to one block per fraction. Default ``min_rows``: 10 % of the rows, which gives
    four blocks for the default fractions (1, 2, 5, 10 % | 25 | 50 | 100 %).
    """
    if min_rows is None:
        min_rows = max(1, math.ceil(MIN_BLOCK_SHARE * sizes[-1]))
    blocks, lo = [], 0
    for j, hi in enumerate(sizes):
        if hi - lo >= min_rows or j == len(sizes) - 1:
            first = next(k for k, m in enumerate(sizes) if m > lo)
            blocks.append((lo, hi, first))
            lo = hi
    return tuple(blocks)


def as_columns(W):
    """Weights [S, J, L, F, K] as one matrix per seed, [S, F, J L K]: every probe's classes side by side."""
    S, J, L, F, K = W.shape
    return jnp.moveaxis(W, 3, 1).reshape(S, F, J * L * K)


def transposed_blocks(Xo, blocks) -> tuple:
    """Each block's rows of Xo [S, n, F] transposed, [S, F, hi - lo]: the XoT of ``block_logits``."""
    return tuple(jnp.swapaxes(Xo[:, lo:hi], 1, 2) for lo, hi, _ in blocks)


def plain_products(shape) -> bool:
    """Whether a solver loop of x's ``shape`` [S, Fr, L, d] multiplies in the plain forms of ``block_logits``:
    the loops of one fraction, whose few dozen columns per seed (L x K) meet thousands of rows.

    There XLA:CPU runs the products straight into the logits' rows-last layout at about half the rate of
    plain per-seed products; for the several fractions of a shared or joint loop (a hundred columns and
    more, a thousand rows or fewer) it is the other way round (benchmarks/probe_bench.py)."""
    return shape[1] == 1


def block_logits(x, Xo, blocks, XoT=None, plain=False):
    """Logits per block, linear in x [S, Fr, L, d]: [S, Fr - first, L, K, hi - lo] each.

    Xo [S, n, F] holds the training rows in each seed's subset order (``plan_blocks``);
    XoT, where given, each block's rows transposed ([S, F, hi - lo]), which lets the
    product run without a transposed copy. Rows are the last axis, so the per-row work
    over a handful of classes runs along long contiguous vectors. ``plain`` (``plain_products``):
    each seed's rows times its weights as one plain product (rows x features times features x
    probes' classes), turned rows-last afterwards; XoT is then not used.
    """
    F = Xo.shape[-1]
    W, b = split_params(x, F, x.shape[-1] // (F + 1))
    if XoT is None and not plain:
        XoT = transposed_blocks(Xo, blocks)
    out = []
    for i, (lo, hi, first) in enumerate(blocks):
        Wb = W[:, first:]
        if plain:  # the barrier keeps XLA from fusing the turn into the product, which runs it several times slower
            z = jax.lax.optimization_barrier(jnp.einsum("snf,sfc->snc", Xo[:, lo:hi], as_columns(Wb)))
            z = jnp.swapaxes(z, 1, 2).reshape(Wb.shape[:3] + (Wb.shape[-1], hi - lo))  # [S, J, L, K, rows]
        else:
            z = jnp.einsum("sfn,sjlfk->sjlkn", XoT[i], Wb)
        out.append(z + b[:, first:, :, :, None])
    return tuple(out)


def block_logits_T(dZ, Xo, blocks, shape, XoT=None, plain=False):
    """The transpose of ``block_logits``: cotangents per block -> x [S, Fr, L, d].

    Contracts each block's rows with Xo [S, n, F] as stored (rows major), so no transposed copy
    of X is made per iteration; ``plain``: with the block's transposed rows XoT (made from Xo where
    not given) as one plain product per seed, features x rows times rows x probes' classes.
    """
    S, Fr, L, d = shape
    F = Xo.shape[-1]
    K = d // (F + 1)
    gW = jnp.zeros((S, Fr, L, F, K), dZ[0].dtype)
    gb = jnp.zeros((S, Fr, L, K), dZ[0].dtype)
    if XoT is None and plain:
        XoT = transposed_blocks(Xo, blocks)
    for i, ((lo, hi, first), dz) in enumerate(zip(blocks, dZ)):  # dz [S, Fr - first, L, K, nb]
        if plain:
            J = Fr - first
            rows = jnp.swapaxes(dz.reshape(S, J * L * K, hi - lo), 1, 2)  # [S, nb, J L K]
            g = jnp.moveaxis(jnp.einsum("sfn,snc->sfc", XoT[i], rows).reshape(S, F, J, L, K), 1, 3)
        else:
            g = jnp.einsum("snf,sjlkn->sjlfk", Xo[:, lo:hi], dz)
        gW = gW.at[:, first:].add(g)
        gb = gb.at[:, first:].add(dz.sum(-1))
    return jnp.concatenate([gW.reshape(S, Fr, L, F * K), gb], axis=-1)


def along_blocks(Z, t, Zp):
    """Z + t * Zp per block; t [S, Fr, L]; a block spans the last fractions (its axis 1)."""
    return tuple(z + t[:, t.shape[1] - z.shape[1] :, :, None, None] * zp for z, zp in zip(Z, Zp))
