"""The unfused attention the layers ran before the fused op, kept as a test reference: score
GEMMs into a (B, Tq, Tk) array, the backend's masked softmax, a dropout mask drawn whole by
``Backend.example_dropout_mask`` (the stream ``KeyedDropoutMixin`` used), then the value
GEMM; and its backward through ``masked_softmax_bprop``.  Same signature as
``Backend.attention`` / ``attention_bprop``; the probabilities of the last call are kept in
``STATE`` for the backward (``lse`` is not written: the unfused path has none)."""
import inspect

import numpy as np

STATE = {}


def _keep_mask(be, B, heads, Tq, Tk, key_mask, blocks):
    """(N, Tk) key mask, or, with blocks, a (B, Tq, Tk) 0/1 visibility (None: no mask)."""
    if blocks is None:
        return key_mask, None
    visible = np.broadcast_to(blocks.visible(heads, Tq, Tk)[None],
                              (B // heads, heads, Tq, Tk)).reshape(B, Tq, Tk)
    if key_mask is not None:
        visible = visible & (key_mask.get() != 0).repeat(heads, 0)[:, None, :]
    return None, visible


def attention(be, q, k, v, out, lse, scale, causal=False, key_mask=None, dropout=None,
              blocks=None, heads=1):
    B, Tq, _ = q.shape
    Tk = k.shape[1]
    probs = be.zeros((B, Tq, Tk))
    be.batched_dot(q, k, probs, transB=True)
    mask, visible = _keep_mask(be, B, heads, Tq, Tk, key_mask, blocks)
    if visible is not None:
        s = probs.get()
        probs.set(np.where(visible, s, -np.inf))
    be.masked_softmax(probs, probs, scale, causal, mask)
    used = probs
    zmask = None
    if dropout is not None:
        zmask = be.ones((B, Tq, Tk))
        be.example_dropout_mask(zmask, dropout.keep, dropout.key, dropout.step, dropout.stream,
                                dropout.first, examples=B // heads)
        used = be.zeros((B, Tq, Tk))
        used[:] = probs * zmask
    be.batched_dot(used, v, out)
    STATE.update(probs=probs, used=used, zmask=zmask, scale=scale)
    return out


def attention_bprop(be, q, k, v, out, lse, dout, dq, dk, dv, scale, causal=False, key_mask=None,
                    dropout=None, blocks=None, heads=1):
    probs, used, zmask = STATE["probs"], STATE["used"], STATE["zmask"]
    dprobs = be.zeros(probs.shape)
    be.batched_dot(used, dout, dv, transA=True)
    be.batched_dot(dout, v, dprobs, transB=True)
    if zmask is not None:
        dprobs[:] = dprobs * zmask
    be.masked_softmax_bprop(probs, dprobs, dprobs, scale)
    be.batched_dot(dprobs, k, dq)
    be.batched_dot(dprobs, q, dk, transA=True)
    return dq


def _head_major(be, fn, operands, written):
    """``fn`` as the fused op is called, with token-major (N, T, H, d) operands (named in
    ``operands``) copied into head-major (N*H, T, d) ones and those in ``written`` copied back
    after the call."""
    signature = inspect.signature(fn)

    def call(*args, **kw):
        bound = signature.bind(be, *args, **kw)
        bound.apply_defaults()
        staged = {}
        for name in operands:
            t = bound.arguments[name]
            if len(t.shape) == 4:
                N, T, H, d = t.shape
                staged[name] = (t, be.zeros((N * H, T, d)))
                be.permute_axes(t, staged[name][1].reshape(N, H, T, d), (0, 2, 1, 3))
                bound.arguments[name] = staged[name][1]
        result = fn(*bound.args, **bound.kwargs)
        for name in written:
            if name in staged:
                t, heads = staged[name]
                N, T, H, d = t.shape
                be.permute_axes(heads.reshape(N, H, T, d), t, (0, 2, 1, 3))
        return result
    return call


def patch(monkeypatch, be):
    """Make backend ``be`` run the unfused attention (token-major operands through head-major
    copies)."""
    monkeypatch.setattr(be, "attention", _head_major(be, attention, ("q", "k", "v", "out"),
                                                     ("out",)))
    monkeypatch.setattr(be, "attention_bprop", _head_major(
        be, attention_bprop, ("q", "k", "v", "out", "dout", "dq", "dk", "dv"),
        ("dq", "dk", "dv")))
