"""Every per-element pass of the pipeline, behind one interface with two implementations.

``quantize``, ``sketch``, ``packing``, ``bindiff`` and the ANS back end of ``entropy`` call
the functions below instead of owning loops. Two implementations stand behind them:

* ``reference`` (:mod:`ckptzip.kernels._reference`): torch ops on the tensor's own device
  (CUDA included), NumPy on the host and ``constriction``'s ANS coder. It *defines* the
  results.
* ``fast`` (:mod:`ckptzip.kernels._fast`): C compiled by the package's build
  (``_native.c``), called through ctypes, which releases the GIL, so the encoding threads run
  it in parallel. It writes the same bits as the reference: the same codes, indices, packed
  bytes, ANS words (its coder is word-for-word constriction's ``AnsCoder`` with
  ``Categorical(counts, perfect=False)``) and the same measured errors. Inputs it does not
  cover (CUDA tensors, float64 values) are passed to the reference.

The implementation is chosen once, at import: ``fast`` when the compiled library is present,
else ``reference``; the environment variable ``CKPTZIP_KERNELS=reference`` forces the
reference (``fast`` insists on the compiled one and fails to import without it).
:data:`IMPLEMENTATION` says which runs.

The functions (flat 1-D inputs throughout):

``sketch_codes(work, thresholds, cap, *, histogram=True) -> (codes, counts)``
    Bucket code of every value: ``m = #{j : thresholds[j] < |x|}`` (raised to 1 for any
    non-zero ``x``), code ``cap ± m`` by the sign of ``x``; ``codes`` int32 on the device,
    ``counts`` the int64 histogram over ``2·cap + 1`` codes (or ``None``) — one pass.
``key_scan(work, table) -> (hist, lo, hi, finite)``
    The quantizer's sketch pass, which stores nothing per element: every value's key
    ``#{table.thresholds < |x|}`` (:class:`KeyTable`, one table of float32 bucket edges for
    every tensor) counted by sign (``hist[0]`` values with the sign bit set, ``hist[1]`` the
    others; key 0 is zero), with ``min`` and ``max``; ``finite`` is false when a NaN or inf
    was seen (``hist``, ``lo``, ``hi`` are then undefined). On x86-64 with AVX-512 the
    compiled pass computes sixteen keys at a time from a fitted log2 of ``|x|`` (the table
    looked up only within the fit's error of a threshold), with AVX2 eight by table gathers
    (``CKPTZIP_NO_AVX512=1``: the AVX2 loop; ``CKPTZIP_NO_AVX2=1``: the scalar loop; the same
    counts, and the same extremes to the bit).
``members(work, ranges) -> positions``
    For each ``(lo, hi)`` of ``ranges`` (at most two), the ascending int64 positions with
    ``lo < |x| <= hi``: the sketch buckets a protect or prune cut-off falls in. On x86-64
    with AVX2 the compiled pass tests sixteen values at a time (``CKPTZIP_NO_AVX2=1``: the
    block loop; the same positions).
``assign_fused(v, plan) -> (indices, protected, err2, norm2)``
    One pass for what :class:`Assignment` ``plan`` describes: the level index of every value
    (``o2i[#{cuts < v}]``, ``zero_fix`` for exact zeros when >= 0), the protected positions
    (ascending: ``|x| > t``, or ``|x| == t`` at a position ``<= p``), pruned values set to
    their index, and the squared error as :func:`squared_error` measures it. On x86-64 with
    AVX2 the compiled pass takes eight values at a time, with AVX-512 (BW, DQ, VBMI2) sixteen
    where every index is below 32 (cut-offs, levels and indices in registers, no gathers)
    (``CKPTZIP_NO_AVX512=1``: the AVX2 loop; ``CKPTZIP_NO_AVX2=1``: the scalar loop other
    processors run; all write the same bits).
``fit_sums(work, second, eps, thresholds, cap, protect, prune) -> sums``
    The level fit's weight of every bucket code of the finite values ``work`` (as
    :func:`sketch_codes` gives them; float64, ``2·cap + 1``): the sum, in position order, of
    Adam's step weights
    ``step_weights(second, eps)`` (a NaN or inf weight counted as 0) of the values neither
    protected (``|x| > t``, or ``|x| == t`` at a position ``<= p``: ``protect = (t, p)``) nor
    pruned (``|x| < t``, or ``|x| == t`` at a position ``<= p``: ``prune = (t, p)``); one
    pass, with no weight tensor made. The order is ``torch.bincount``'s, so the sums are the
    same bits. On x86-64 the compiled pass takes eight values at a time, their buckets from a
    fitted log2 with AVX-512, by table gathers with AVX2 (``CKPTZIP_NO_AVX512=1``,
    ``CKPTZIP_NO_AVX2=1`` take the others; all write the same bits).
``step_weights(second, eps) -> weights``
    ``1/(sqrt(max(v, 0)) + eps)²`` of every entry ``v`` of ``second`` (an Adam second
    moment), computed in float64 and rounded to float32: the level-fit weights that make a
    first moment's levels minimize the error of Adam's step.
``assign_codes(codes, v, lut, sentinel, cuts, o2i, zero_fix) -> indices``
    Level index (uint8) of every value: ``lut[code]``, or for buckets marked ``sentinel``
    ``o2i[#{cuts < v}]`` (``zero_fix`` for exact zeros when it is >= 0).
``nearest(v, mids) -> indices``
    Index of the nearest of sorted levels given their midpoints: ``#{mids < v}`` (uint8).
``squared_error(v, indices, levels, protected) -> (err2, norm2)``
    ``Σ (levels[idx] − v)²`` over the non-protected entries (difference in ``v``'s dtype,
    sum in float64) and ``Σ v²``.
``round_stochastic(v, indices, levels, protected, seed) -> indices``
    Unbiased rounding: each entry's nearest-level index (``indices``, of the sorted float32
    ``levels``) moved to the lower or the upper of the two levels around its value, the upper
    with probability ``(v − lo) / (hi − lo)`` (float64), so the expectation of the rounded
    value is ``v``; entries outside the levels' range, non-finite ones and ``protected``
    positions keep their index. Position ``i``'s draw is a 32-bit hash of ``i`` under
    ``seed`` (lowbias32's finaliser on the low, then the high half of ``i``) over ``2^32``:
    the same integers in both implementations, so the same indices. On x86-64 the compiled
    pass is vectorised (AVX2; AVX-512 with at most 32 levels, the levels in registers;
    ``CKPTZIP_NO_AVX512=1`` and ``CKPTZIP_NO_AVX2=1`` take the others, the same indices).
``residual_error(x, y) -> (err2, norm2)``
    ``Σ (y − x)²`` and ``Σ x²`` in float64 over the entries where ``x`` is finite (a
    residual's reconstruction ``y`` against the tensor ``x``).
``bucket_extremes(codes, v, n_codes) -> (lo, hi)``, ``magnitude_rank(codes, cap)``
(``|code − cap|``), ``positions(x, lo, hi)`` (sorted int64 positions of ``lo <= x <= hi``),
``blocks(n, x)``
    The smaller passes of the quantizer's protect/prune selection.
``kmeans(pts, w, k, n_init, rng, max_iter) -> centres``
    Weighted 1-D k-means on sorted points: ``n_init`` k-means++ seedings (draws from
    ``rng``), then Lloyd iterations; the ``(n_init, k)`` centres.
``gather(levels, idx) -> tensor``
    ``levels[idx]``, decoded straight into a new tensor of ``levels``' dtype.
``pack(flat, bits, nbytes) -> bytes``, ``unpack(raw, bits, n) -> uint8``
    The LSB-first bit stream of :mod:`ckptzip.packing` (inputs already checked).
``unpack_gather(raw, bits, table, out, base=None) -> int``
    ``out[i] = table[index i]`` of that stream, straight into the tensor ``out`` (no index
    array between); returns the largest index, for the caller to check. With ``base`` (a
    tensor of ``out``'s size and dtype, which may be ``out`` itself) ``out[i] = base[i] +
    table[index i]``, one addition in the dtype (a residual's reconstruction, in one pass).
``delta_encode(prev, now, bins, rearrange) -> (symbols, groups)``,
``delta_decode(prev, symbols, bins, rearrange, groups=None, out=None) -> now``
    ``(prev − now) mod bins``, grouped stably by ``prev`` when ``rearrange``, and back
    (``groups``: ``bin_counts(prev)`` when the caller has it, which the decoder then does not
    count again; ``out``: a flat, writable uint8 array of ``prev``'s size to decode into,
    which may be ``prev`` itself, else a new array is returned); decoding raises
    :class:`~ckptzip.errors.CorruptCheckpointError` on a symbol ``>= bins``. On x86-64 with
    AVX-512 (BW, DQ, VBMI2) the compiled coder rearranges and applies a delta of at most 32
    bins 64 indices at a time, and ``bin_counts`` counts indices below 32 64 at a time
    (``CKPTZIP_NO_AVX512=1`` makes them take the scalar loops other processors run; both
    write the same bits).
``ans_encode(symbols, bounds, alphabet) -> (counts, words)``,
``ans_decode(words, bounds, counts, n) -> symbols``
    The ANS stage of :mod:`ckptzip.entropy` for contexts ``symbols[bounds[c]:bounds[c+1]]``;
    decoding raises :class:`~ckptzip.errors.CorruptCheckpointError` on a stream that does
    not end empty.
``ans_decode_pair((words, bounds, counts, n), (words, bounds, counts, n)) -> (symbols, symbols)``
    ``ans_decode`` of two independent streams, in one loop that steps both (the compiled
    one: each stream's steps wait on each other, not on the other stream's); errors as two
    calls in turn raise them.
``ans_counts(symbols, bounds, alphabet) -> counts``
    The ``(contexts, alphabet)`` uint32 symbol counts of each context.
``ans_lanes_encode(symbols, bounds, counts, block, lanes, threads=1) -> (lengths, words)``,
``ans_lanes_decode(words, lengths, bounds, counts, n, block, lanes, *, table, out, threads, base)``
    The ``"ans-lanes"`` layout of :mod:`ckptzip.entropy`: blocks of ``block`` symbols, each
    split into ``lanes`` interleaved streams (symbol ``i`` of a block in lane ``i mod lanes``),
    every stream its own ``AnsCoder``; ``lengths`` holds each stream's word count, block by
    block, lane by lane. Decoding returns the symbols, or with ``table`` and ``out`` writes
    ``table[symbol]`` straight into the tensor ``out`` (2, 4 or 8 bytes an element) and
    returns ``None`` (added to ``base`` as ``unpack_gather`` adds). ``threads`` code or
    decode contiguous ranges of blocks in parallel (the compiled kernels release the GIL; the
    reference runs on one).
``ans_wide_encode(symbols, counts, block, threads=1) -> (lengths, words)``,
``ans_wide_decode(words, lengths, counts, n, block, *, table, out, threads, base)``
    The ``"ans-wide"`` layout of :mod:`ckptzip.entropy` (one context, ``counts`` its
    symbol counts): blocks of ``block`` symbols (a multiple of 32), each one stream of uint16
    words of 32 interleaved 32-bit rANS lanes at 12-bit precision (C in ``_wide.c``, whose
    comment describes the coder); ``lengths`` holds each block's word count. Decoding as
    ``ans_lanes_decode`` (symbols, or levels straight into ``out``, ``threads`` over blocks)
    and raises :class:`~ckptzip.errors.CorruptCheckpointError` unless every block decodes to
    exactly its symbols, reads all its words and leaves each lane in its initial state. On
    x86-64 with AVX2 the compiled decoder steps 32 lanes in four vectors, with AVX-512 (BW,
    VBMI2) and at most 32 symbols in two, and the encoder then codes full steps in two
    vectors (``CKPTZIP_NO_AVX512=1``: the AVX2 decoders and the scalar encoder;
    ``CKPTZIP_NO_AVX2=1``: the scalar loops; the same words and values). The reference steps every
    block's lanes together in NumPy: correct, and slow (0.1-0.2 s to encode and about 0.3 s to
    decode a stream of one to four 2^18-symbol blocks, which step together).
``ans_wide_ctx_encode(symbols, bounds, counts, block, threads=1) -> (lengths, words)``,
``ans_wide_ctx_decode(words, lengths, bounds, counts, n, block, threads=1) -> symbols``
    The ``"ans-wide-ctx"`` layout: ``"ans-wide"``'s blocks, lanes and words under one model
    per context (symbols ``bounds[c]`` to ``bounds[c + 1]`` are context ``c``; ``counts``
    one row per context, the stream's own counts as ``ans_counts`` gives them: the encoder
    codes each symbol by its context's model and does not check it against them). A lane
    takes each symbol's own context's model, so the models switch where the contexts change,
    even inside a step; a context's model covers only the symbols it holds, and a context
    holding fewer than two distinct symbols codes nothing (``_reference.wide_ctx_models``;
    ``_wide.c`` describes the layout). Whole steps inside one context run ``"ans-wide"``'s
    vector loops; the steps a boundary cuts go lane by lane. Decoding returns the uint8
    symbols and raises :class:`~ckptzip.errors.CorruptCheckpointError` as
    ``ans_wide_decode`` does.
``rle_split(symbols, bounds) -> (tokens, values, others, base, extra, extra_bits)``,
``rle_join(tokens, values, extra, extra_bits, bounds, others, base) -> symbols``
    The run-length form of the ``"rle+ans"`` back end of :mod:`ckptzip.entropy` (C in
    ``_delta.c``): per context its base (most frequent symbol, the smallest on a tie), the
    length of the run of base symbols before each other symbol and after the last
    (``others[c] + 1`` runs; none for an empty context), a run below 16 its own token, a
    longer one the token ``11 + bitlen(r)`` and the ``bitlen(r) - 1`` bits of ``r`` under its
    leading one LSB first in ``extra``; the other symbols in order. ``rle_join`` raises
    :class:`~ckptzip.errors.CorruptCheckpointError` on parts that do not fit. On x86-64 with
    AVX-512 (BW, DQ, VBMI2) ``rle_split`` takes 64 symbols at a time (``CKPTZIP_NO_AVX512=1``:
    the scalar loop; the same parts).
``zero_runs_encode(symbols) -> (data, nonzero)``,
``zero_runs_decode(data, n, nonzero) -> symbols``
    The ``"rle"`` back ends' run-length form (:mod:`ckptzip.entropy`) and its inverse: for
    each nonzero symbol the length of the zero run before it as 255-escaped bytes (``g //
    255`` bytes 255, then ``g % 255``), then the ``nonzero`` nonzero symbols (C in
    ``_delta.c``: one pass each); decoding raises
    :class:`~ckptzip.errors.CorruptCheckpointError` on a payload that does not fit ``n`` and
    ``nonzero``.
``requantize(work, qidx, own_zero, protected, mids, zero_at, values, o2i=None)``
    ``-> (indices, err2, norm2)``:
    :func:`ckptzip.quantize.requantize`'s pass: the nearest of the new levels
    (``#{mids < v}``, mapped through ``o2i`` when given: a log-domain codebook's value-space
    cut-offs between its non-zero levels, ``o2i`` their indices), ``zero_at`` where the first
    quantization gave exact zero (``own_zero[qidx]``, protected entries aside), and
    :func:`squared_error` of the result, in one pass (C in ``_delta.c``; the count of
    ``mids`` below each value eight at a time with AVX2, ``CKPTZIP_NO_AVX2=1`` the generic
    loop); ``None`` when a zero is to be kept but ``zero_at < 0`` (no zero level).
``bin_counts(prev) -> counts``
    ``np.bincount(prev, minlength=256)`` of uint8 indices (int64): the group sizes of a
    rearranged delta stream.

>>> import torch
>>> codes, counts = sketch_codes(torch.tensor([-2.0, 0.0, 3.0]), torch.tensor([1.0, 2.5]), 2)
>>> codes.tolist(), int(counts.sum())
([1, 2, 4], 3)
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType

from ckptzip.errors import ConfigError, KernelsFallbackWarning, StaleKernelsError
from ckptzip.kernels import _reference as reference

__all__ = [
    "IMPLEMENTATION",
    "Assignment",
    "KeyTable",
    "assign_fused",
    "key_scan",
    "members",
    "ans_counts",
    "ans_decode",
    "ans_decode_pair",
    "ans_encode",
    "ans_lanes_decode",
    "ans_lanes_encode",
    "ans_wide_ctx_decode",
    "ans_wide_ctx_encode",
    "ans_wide_decode",
    "ans_wide_encode",
    "assign_codes",
    "bin_counts",
    "blocks",
    "bucket_extremes",
    "delta_decode",
    "delta_encode",
    "fast",
    "fit_sums",
    "gather",
    "kmeans",
    "magnitude_rank",
    "nearest",
    "pack",
    "positions",
    "reference",
    "requantize",
    "residual_error",
    "rle_join",
    "round_stochastic",
    "rle_split",
    "sketch_codes",
    "squared_error",
    "step_weights",
    "unpack",
    "unpack_gather",
    "zero_runs_decode",
    "zero_runs_encode",
]

_CHOICE = os.environ.get("CKPTZIP_KERNELS", "auto")
if _CHOICE not in ("auto", "fast", "reference"):
    raise ConfigError(f"CKPTZIP_KERNELS={_CHOICE!r} must be 'auto', 'fast' or 'reference'")

fast: ModuleType | None
try:
    from ckptzip.kernels import _fast as fast
except StaleKernelsError as exc:
    # a build is there but from other sources: unlike a package installed without a
    # compiler, its user expects the fast kernels, so the fallback must not be silent
    if _CHOICE == "fast":
        raise
    if _CHOICE == "auto":
        warnings.warn(
            f"{exc}; running the reference kernels meanwhile (the same results, slower)",
            KernelsFallbackWarning,
            stacklevel=2,
        )
    fast = None
except ImportError:
    if _CHOICE == "fast":
        raise
    fast = None

_active: ModuleType = fast if fast is not None and _CHOICE != "reference" else reference

IMPLEMENTATION: str = _active.NAME
"""``"fast"`` or ``"reference"``: the implementation this process runs."""

# The public names are the active implementation's functions, bound once at import.
KeyTable = reference.KeyTable
Assignment = reference.Assignment
key_scan = _active.key_scan
members = _active.members
assign_fused = _active.assign_fused
fit_sums = _active.fit_sums
step_weights = _active.step_weights
sketch_codes = _active.sketch_codes
assign_codes = _active.assign_codes
squared_error = _active.squared_error
residual_error = _active.residual_error
round_stochastic = _active.round_stochastic
nearest = _active.nearest
bucket_extremes = _active.bucket_extremes
magnitude_rank = _active.magnitude_rank
positions = _active.positions
blocks = _active.blocks
gather = _active.gather
kmeans = _active.kmeans
pack = _active.pack
unpack = _active.unpack
unpack_gather = _active.unpack_gather
delta_encode = _active.delta_encode
delta_decode = _active.delta_decode
ans_encode = _active.ans_encode
ans_decode = _active.ans_decode
ans_decode_pair = _active.ans_decode_pair
ans_counts = _active.ans_counts
ans_lanes_encode = _active.ans_lanes_encode
ans_lanes_decode = _active.ans_lanes_decode
ans_wide_encode = _active.ans_wide_encode
ans_wide_decode = _active.ans_wide_decode
ans_wide_ctx_encode = _active.ans_wide_ctx_encode
ans_wide_ctx_decode = _active.ans_wide_ctx_decode
rle_split = _active.rle_split
rle_join = _active.rle_join
zero_runs_decode = _active.zero_runs_decode
zero_runs_encode = _active.zero_runs_encode
bin_counts = _active.bin_counts
requantize = _active.requantize
