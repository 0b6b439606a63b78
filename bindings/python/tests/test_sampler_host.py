"""rejection_sample on numpy arrays (volt8_rejection_sample_host)."""
import numpy as np
import pytest

import volt8
from fakes import FakeDeviceArray


def random_probs(rng, shape, zero_fraction=0.0):
    values = rng.random(shape) ** 3
    values[rng.random(shape) < zero_fraction] = 0.0
    values[..., 0] += 1e-3  # every row keeps a positive entry
    return (values / values.sum(-1, keepdims=True)).astype(np.float32)


def test_rows_hold_accepted_drafts_then_one_token_then_minus_one():
    rng = np.random.default_rng(1)
    batch, k, vocab = 64, 4, 50
    target = random_probs(rng, (batch, k + 1, vocab), 0.3)
    draft = random_probs(rng, (batch, k, vocab), 0.3)
    ids = np.stack([[rng.choice(vocab, p=draft[b, i] / draft[b, i].sum()) for i in range(k)]
                    for b in range(batch)]).astype(np.int32)
    num_draft = rng.integers(0, k + 1, size=batch).astype(np.int32)
    result = volt8.rejection_sample(target, ids, num_draft, draft, seed=5, offset=9)
    assert result.out_ids.shape == (batch, k + 1) and result.out_ids.dtype == np.int32
    assert result.num_accepted.shape == (batch,)
    for b in range(batch):
        accepted = result.num_accepted[b]
        assert 0 <= accepted <= num_draft[b]
        row = result.out_ids[b]
        np.testing.assert_array_equal(row[:accepted], ids[b, :accepted])
        assert 0 <= row[accepted] < vocab and target[b, accepted, row[accepted]] > 0
        assert (row[accepted + 1:] == -1).all()
    again = volt8.rejection_sample(target, ids, num_draft, draft, seed=5, offset=9)
    np.testing.assert_array_equal(again.out_ids, result.out_ids)
    moved = volt8.rejection_sample(target, ids, num_draft, draft, seed=5, offset=10)
    assert not np.array_equal(moved.out_ids, result.out_ids)


def test_outputs_given_by_the_caller_are_filled_in_place():
    rng = np.random.default_rng(2)
    target = random_probs(rng, (3, 3, 7))
    ids = rng.integers(0, 7, size=(3, 2)).astype(np.int32)
    out_ids, accepted = np.full((3, 3), 99, np.int32), np.full(3, 99, np.int32)
    result = volt8.rejection_sample(target, ids, out_ids=out_ids, num_accepted=accepted)
    assert result.out_ids is out_ids and result.num_accepted is accepted
    assert (out_ids[:, 0] != 99).all() and (accepted <= 2).all()


def test_first_emitted_token_follows_the_target_distribution():
    """The point of rejection sampling: whatever the draft distribution, what comes out is p."""
    rng = np.random.default_rng(3)
    batch, vocab = 40000, 5
    p = np.array([0.1, 0.4, 0.05, 0.25, 0.2], np.float32)
    q = np.array([0.3, 0.1, 0.3, 0.2, 0.1], np.float32)
    target = np.broadcast_to(p, (batch, 2, vocab)).copy()
    draft = np.broadcast_to(q, (batch, 1, vocab)).copy()
    ids = rng.choice(vocab, size=(batch, 1), p=q).astype(np.int32)
    result = volt8.rejection_sample(target, ids, None, draft, seed=11)
    counts = np.bincount(result.out_ids[:, 0], minlength=vocab)
    sigma = np.sqrt(batch * p * (1 - p))
    assert (np.abs(counts - batch * p) < 5 * sigma).all(), (counts, batch * p)
    acceptance = result.num_accepted.mean()
    assert abs(acceptance - np.minimum(p, q).sum()) < 0.02


def test_greedy_requests_accept_the_argmax():
    vocab = 6
    target = np.zeros((2, 3, vocab), np.float32)
    target[:, 0, 2] = 0.6
    target[:, 0, 4] = 0.4
    target[:, 1, 1] = 0.5
    target[:, 1, 3] = 0.5  # tie: the lowest token wins
    target[:, 2, 5] = 1.0
    ids = np.array([[2, 1], [2, 3]], np.int32)
    result = volt8.rejection_sample(target, ids, greedy=np.array([True, True]))
    np.testing.assert_array_equal(result.out_ids, [[2, 1, 5], [2, 1, -1]])
    np.testing.assert_array_equal(result.num_accepted, [2, 1])
    as_bytes = volt8.rejection_sample(target, ids, greedy=np.array([1, 1], np.uint8))
    np.testing.assert_array_equal(as_bytes.out_ids, result.out_ids)


def test_bonus_only_and_empty_batches():
    rng = np.random.default_rng(4)
    target = random_probs(rng, (4, 1, 9))
    result = volt8.rejection_sample(target)
    assert (result.num_accepted == 0).all() and ((0 <= result.out_ids[:, 0]) & (result.out_ids[:, 0] < 9)).all()
    empty = volt8.rejection_sample(np.zeros((0, 3, 9), np.float32), np.zeros((0, 2), np.int32))
    assert empty.out_ids.shape == (0, 3)


def test_an_invalid_request_is_flagged_and_raises_when_strict():
    rng = np.random.default_rng(5)
    target = random_probs(rng, (3, 2, 8))
    target[1, 0, 3] = np.nan
    ids = np.zeros((3, 1), np.int32)
    with pytest.raises(volt8.InvalidArgumentError) as caught:
        volt8.rejection_sample(target, ids)
    error = caught.value
    assert "target_probs[1][0][3]" in error.message and "1 of 3 requests invalid" in error.message
    assert error.function == "volt8_rejection_sample_host"
    assert (error.result.out_ids[1] == -1).all() and error.result.num_accepted[1] == 0
    assert (error.result.out_ids[[0, 2], 0] >= 0).all()
    relaxed = volt8.rejection_sample(target, ids, strict=False)
    np.testing.assert_array_equal(relaxed.out_ids, error.result.out_ids)
    ids[2, 0] = 8
    relaxed = volt8.rejection_sample(target, ids, strict=False)
    assert (relaxed.out_ids[2] == -1).all()


@pytest.mark.parametrize("change, message", [
    (dict(target_probs=np.zeros((2, 3, 5), np.float64)), "target_probs: dtype is float64, needs float32"),
    (dict(target_probs=np.zeros((2, 15), np.float32)), "target_probs: has 2 dimensions"),
    (dict(target_probs=np.zeros((2, 0, 5), np.float32)), "K\\+1 = 0 rows"),
    (dict(target_probs=np.zeros((2, 5, 3), np.float32).transpose(0, 2, 1)), "target_probs: is not C-contiguous"),
    (dict(draft_ids=None), "draft_ids: needed for K = 2"),
    (dict(draft_ids=np.zeros((2, 3), np.int32)), r"draft_ids: has shape \[2, 3\], needs \[2, 2\]"),
    (dict(draft_ids=np.zeros((2, 2), np.int64)), "draft_ids: dtype is int64"),
    (dict(num_draft=np.zeros(3, np.int32)), r"num_draft: has shape \[3\], needs \[2\]"),
    (dict(draft_probs=np.zeros((2, 2, 4), np.float32)), r"draft_probs: has shape \[2, 2, 4\], needs \[2, 2, 5\]"),
    (dict(greedy=np.zeros(2, np.int32)), "greedy: dtype is int32, needs bool or uint8"),
    (dict(seed=-1), "seed: -1 is not an unsigned 64-bit integer"),
    (dict(offset=1 << 64), "offset"),
    (dict(out_ids=np.zeros((2, 3), np.int64)), "out_ids: dtype is int64"),
    (dict(num_draft=FakeDeviceArray((2,), "<i4")), "num_draft: needs a host array"),
    (dict(target_probs=FakeDeviceArray((2, 3, 5), "<f4")), "ctx: device tensors need the volt8.Context"),
])
def test_sampler_checks(change, message):
    args = dict(target_probs=np.full((2, 3, 5), 0.2, np.float32), draft_ids=np.zeros((2, 2), np.int32))
    args.update(change)
    with pytest.raises(volt8.InvalidArgumentError, match=message):
        volt8.rejection_sample(**args)


def test_read_only_outputs_are_refused():
    out_ids = np.zeros((2, 3), np.int32)
    out_ids.setflags(write=False)
    with pytest.raises(volt8.InvalidArgumentError, match="out_ids: is read-only"):
        volt8.rejection_sample(np.full((2, 3, 5), 0.2, np.float32), np.zeros((2, 2), np.int32), out_ids=out_ids)


def test_device_arrays_must_not_be_mixed_with_host_ones():
    from fakes import RecordingContext
    target = FakeDeviceArray((2, 3, 5), "<f4")
    ids = FakeDeviceArray((2, 2), "<i4")
    out_ids, accepted = FakeDeviceArray((2, 3), "<i4"), FakeDeviceArray((2,), "<i4")
    num_draft = FakeDeviceArray((2,), "<i4")
    with pytest.raises(volt8.InvalidArgumentError, match="draft_ids: needs a CUDA device array"):
        volt8.rejection_sample(target, np.zeros((2, 2), np.int32), ctx=RecordingContext())
    with pytest.raises(volt8.InvalidArgumentError, match="num_draft, out_ids, num_accepted: needed"):
        volt8.rejection_sample(target, ids, ctx=RecordingContext())
    ctx = RecordingContext()
    result = volt8.rejection_sample(target, ids, num_draft, out_ids=out_ids, num_accepted=accepted, ctx=ctx, seed=3,
                                    offset=4, stream=7)
    assert result.out_ids is out_ids
    function, (handle, args, stream) = ctx.calls[-1]
    assert function == "volt8_rejection_sample" and stream == 7
