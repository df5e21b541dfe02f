# SPDX-License-Identifier: Apache-2.0
"""Plain PyTorch implementations of the loss of include/kljit.h, for tests and benchmarks.

- kl_div_reference: what a PyTorch user would write: full logits, log_softmax, autograd.
  Differentiable; materializes N x V (several times). The "eager" and "torch.compile"
  baselines of bench/compare.py, and a readable statement of the contract.
- kl_div_fp64: the oracle. Float64, chunked over rows (only chunk_rows x V is live), gradients
  written out analytically rather than by autograd (no N x V graph). Mirrors tests/ref.c, the
  C reference the GPU tests use, choice for choice (duplicate ids, eps floors, the BUCKET
  tail's 1 - Q_S taken over the ids outside the support); python/tests/test_reference.py
  checks the two agree.

Both take the same arguments and options as kljit.fused_linear_kl_div.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F

from ._checks import LossConfig, config_from_options, infer_teacher

__all__ = ["kl_div_reference", "kl_div_fp64"]


def _config(config: Optional[LossConfig], options: Dict[str, Any], teacher: Any, ids: Any,
            vals: Any, temperature: Optional[float], teacher_weight: Any = None) -> LossConfig:
    """As kljit.fused_linear_kl_div: without a config, `temperature` is the loss's T, and the
    options are the functional's (teacher_form for the teacher form)."""
    if config is None:
        if temperature is not None:
            options["temperature"] = temperature
        config = config_from_options(options)
    elif options:
        raise TypeError("pass either config or keyword options, not both")
    return infer_teacher(config, teacher, ids, vals, teacher_weight)


def _temperature(config: LossConfig, temperature: Optional[float]) -> float:
    return float(config.temperature if temperature is None else temperature)


def _kept(labels: Optional[torch.Tensor], n: int, ignore_index: int,
          device: torch.device) -> torch.Tensor:
    if labels is None:
        return torch.ones(n, dtype=torch.bool, device=device)
    return labels.reshape(-1) != ignore_index


def _scale(config: LossConfig, kept: int, vocab: int) -> float:
    """The reduction's constant c (0 when no row is kept: every row then contributes 0)."""
    if config.reduction == "batchmean":
        return 1.0 / kept if kept else 0.0
    if config.reduction == "mean":
        return 1.0 / (kept * vocab) if kept else 0.0
    return 1.0


def _softcap(z: torch.Tensor, cap: float) -> "tuple[torch.Tensor, Optional[torch.Tensor]]":
    """(c tanh(z / c), dz'/dz = 1 / cosh^2(z / c)) for a cap c > 0, as tests/ref.c computes
    them; (z, None) without a cap."""
    if not cap:
        return z, None
    u = z / cap
    return cap * torch.tanh(u), 1.0 / torch.cosh(u) ** 2


def _ce(config: LossConfig, zc: torch.Tensor,
        y: torch.Tensor) -> "tuple[torch.Tensor, torch.Tensor]":
    """The hard-label CE of each row on the (capped) logits zc at temperature 1 and dCE/dz'
    (tests/ref.c; label smoothing ls, z-loss zl; y: the rows' labels, any valid id where a row
    is ignored): CE = lse - (1 - ls) z_y - ls / V sum z + zl lse^2, dCE/dz_v = (1 + 2 zl lse)
    softmax(z)_v - (1 - ls) [v = y] - ls / V."""
    ls, zl = float(config.label_smoothing), float(config.z_loss)
    vocab = zc.shape[-1]
    lse = torch.logsumexp(zc, dim=-1)
    zy = zc.gather(1, y[:, None]).squeeze(1)
    ce = lse - (1.0 - ls) * zy - ls / vocab * zc.sum(-1) + zl * lse * lse
    d = (1.0 + 2.0 * zl * lse)[:, None] * torch.exp(zc - lse[:, None]) - ls / vocab
    d.scatter_add_(1, y[:, None], torch.full_like(zy[:, None], -(1.0 - ls)))
    return ce, d


def _labels(config: LossConfig, labels: Optional[torch.Tensor], n: int) -> Optional[torch.Tensor]:
    """The labels as int64 [N] where the loss has a hard-label CE (hard_weight > 0), else None;
    an ignored row's label becomes 0 (any valid id: its row is masked)."""
    if not config.hard_weight:
        return None
    if labels is None:
        raise ValueError(f"hard_weight={config.hard_weight!r} needs labels")
    y = labels.reshape(-1).long()
    if y.shape[0] != n:
        raise ValueError(f"labels has {y.shape[0]} rows, input {n}")
    return torch.where(y == config.ignore_index, torch.zeros_like(y), y)


def _row_weights(row_weights: torch.Tensor, n: int) -> torch.Tensor:
    """The row weights as [N] (given [N] or in the input's leading shape)."""
    w = row_weights.reshape(-1)
    if w.shape[0] != n:
        raise ValueError(f"row_weights has {w.shape[0]} elements, the input {n} rows")
    return w


def _dense_teacher(config: LossConfig, t: torch.Tensor, T: float,
                   dtype: torch.dtype) -> "tuple[torch.Tensor, torch.Tensor]":
    """(p, log max(p, eps)) of a dense teacher row block in `dtype`."""
    t = t.to(dtype)
    if config.teacher == "dense_probs":
        return t, torch.log(torch.clamp_min(t, config.eps))
    if config.teacher in ("dense_logits", "dense_hidden"):
        tt = config.teacher_temperature or T  # the teacher's cap comes before its T
        t = torch.log_softmax(_softcap(t, float(config.teacher_softcap))[0] / tt, dim=-1)
    return torch.exp(t), torch.clamp_min(t, math.log(config.eps))


def _is_forward(config: LossConfig) -> bool:
    """The divergences that are the forward KL: itself, the JSD at beta 0, the skew forward KL
    at skew_alpha 0 (tests/ref.c's ref_is_forward)."""
    div = config.divergence
    return div == "forward_kl" or (div == "jsd" and float(config.beta) == 0.0) or (
        div == "skew_forward_kl" and float(config.skew_alpha) == 0.0)


def _divergence(config: LossConfig, p: torch.Tensor, lp: torch.Tensor, logq: torch.Tensor,
                q: Optional[torch.Tensor] = None) -> "tuple[torch.Tensor, torch.Tensor]":
    """The row losses of a row block over its last dim (columns, or categories) and g = dl/dq
    for the divergences other than the forward KL (tests/ref.c's ref_row_dense and
    ref_div_categories; g is None for the forward KL, whose dl/ds is sum(p) q - p): the reverse
    KL, the JSD, TVD and the skew KLs. q: exp(logq) unless given (a category of Q = 0 whose log
    is a placeholder adds nothing)."""
    beta, a = float(config.beta), float(config.skew_alpha)
    div = config.divergence
    jsd = div == "jsd"
    if _is_forward(config):
        return torch.where(p != 0, p * (lp - logq), 0.0).sum(-1), None
    if q is None:
        q = torch.exp(logq)
    if div == "reverse_kl" or (jsd and beta == 1.0) or (div == "skew_reverse_kl" and a == 0.0):
        g = torch.where(q != 0, logq - lp, 0.0)  # q = 0 (log q may be -inf) adds nothing
        return (q * g).sum(-1), g
    if div == "tvd":  # g = sign(q - p) / 2, 0 at a tie
        return 0.5 * (p - q).abs().sum(-1), 0.5 * torch.sign(q - p)
    if div == "skew_forward_kl":  # m = a p + (1 - a) q: KL(p || m), g = -(1 - a) p / m
        m = a * p + (1.0 - a) * q
        g = torch.where(m > 0, -(1.0 - a) * p / m, 0.0)
        return torch.where(p != 0, p * (lp - torch.log(m)), 0.0).sum(-1), g
    if div == "skew_reverse_kl":  # m = a q + (1 - a) p: KL(q || m), g = log(q / m) - a q / m
        m = a * q + (1.0 - a) * p
        logm = torch.log(m)
        g = torch.where(q != 0, logq - logm - a * q / m, 0.0)
        return torch.where(q != 0, q * (logq - logm), 0.0).sum(-1), g
    m = beta * p + (1.0 - beta) * q
    logm = torch.log(m)
    g = torch.where(m > 0, (1.0 - beta) * (logq - logm), 0.0)
    row = (torch.where(p != 0, beta * p * (lp - logm), 0.0)
           + torch.where(q != 0, (1.0 - beta) * q * (logq - logm), 0.0)).sum(-1)
    return row, g


def _sparse_div(config: LossConfig) -> bool:
    """True for the top-K teacher's reverse KL, JSD (beta > 0), TVD and skew KLs: K + 1
    categories (BUCKET) or the renormalized support (RENORM), include/kljit.h; False for its
    forward KL (JSD beta 0 and the skew forward KL at skew_alpha 0 included). The categories
    with tail='none' are refused, as tests/ref.c refuses them."""
    if _is_forward(config):
        return False
    if config.tail == "none":
        raise ValueError(f"the top-K teacher's {config.divergence} needs tail='bucket' or "
                         f"'renorm'")
    return True


def _g_less_e(q: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """g - E, E = sum q g over the last dim, formed about the entry of the largest q as (g -
    g_r) + sum q (g_r - g) (tests/ref.c's ref_div_categories says why)."""
    g_r = g.gather(-1, q.argmax(-1, keepdim=True))
    return (g - g_r) + (q * (g_r - g)).sum(-1, keepdim=True)


def _categories(config: LossConfig, P: torch.Tensor, lP: torch.Tensor, Q: torch.Tensor,
                lQ: torch.Tensor) -> "tuple[torch.Tensor, torch.Tensor]":
    """The reverse KL, JSD, TVD or skew KL over categories (the last dim) and g - E for each
    (tests/ref.c's ref_div_categories; a category with Q = 0 and P = 0 adds nothing)."""
    loss, g = _divergence(config, P, lP, lQ, Q)
    return loss, _g_less_e(Q, g)


def _sparse_categories(config: LossConfig, vals: torch.Tensor, ids: torch.Tensor,
                       logq: torch.Tensor, q: torch.Tensor) -> "tuple[torch.Tensor, torch.Tensor]":
    """The top-K divergences over categories of a row block (tests/ref.c's ref_row_sparse_div):
    row losses and dl/ds. BUCKET: the support and the tail (P_tail = max(1 - M, 0), Q_tail =
    1 - Q_S as the q mass off the support; no tail category where the support covers V);
    RENORM: p / M and q / Q_S on the support, nothing where M = 0. Distinct ids only."""
    dtype = logq.dtype
    cnt = torch.zeros_like(q).scatter_add_(1, ids, torch.ones_like(ids, dtype=dtype))
    if bool((cnt > 1).any()):
        raise ValueError("the top-K reverse KL / JSD: a row with duplicate ids")
    v = vals.to(dtype)
    log_eps = math.log(config.eps)
    probs = config.topk_values == "probs"
    p = v if probs else torch.exp(v)
    m = p.sum(-1, keepdim=True)
    lq_s = logq.gather(1, ids)
    if config.tail == "renorm":
        live = m > 0
        safe = torch.where(live, m, torch.ones_like(m))
        P = torch.where(live, p / safe, torch.zeros_like(p))
        lP = (torch.log(torch.clamp_min(P, config.eps)) if probs
              else torch.clamp_min(v - torch.log(safe), log_eps))
        lQ = lq_s - torch.logsumexp(lq_s, dim=-1, keepdim=True)
        Q = torch.exp(lQ)
        loss, ge = _categories(config, P, lP, Q, lQ)
        live1 = live.squeeze(-1)
        ds = torch.zeros_like(q).scatter_(1, ids, torch.where(live, Q * ge, 0.0))
        return torch.where(live1, loss, 0.0), ds
    lP = torch.log(torch.clamp_min(p, config.eps)) if probs else torch.clamp_min(v, log_eps)
    off = cnt == 0
    has_off = off.any(-1, keepdim=True)
    log_off = torch.logsumexp(logq.masked_fill(~off, -math.inf), dim=-1, keepdim=True)
    t = torch.clamp_min(1.0 - m, 0.0)
    P_t = torch.where(has_off, t, 0.0)
    lP_t = torch.where(P_t > config.eps, torch.log(torch.clamp_min(P_t, config.eps)), log_eps)
    lQ_t = torch.where(has_off, log_off, 0.0)
    Q_t = torch.where(has_off, torch.exp(lQ_t), 0.0)
    loss, ge = _categories(config, torch.cat([p, P_t], -1), torch.cat([lP, lP_t], -1),
                           torch.cat([q.gather(1, ids), Q_t], -1), torch.cat([lq_s, lQ_t], -1))
    ds = q * ge[:, -1:]
    ds.scatter_(1, ids, q.gather(1, ids) * ge[:, :-1])
    return loss, ds


def _sparse_teacher(config: LossConfig, vals: torch.Tensor,
                    dtype: torch.dtype) -> "tuple[torch.Tensor, torch.Tensor, torch.Tensor]":
    """(p, log max(p, eps), M) on the support, after RENORM if asked (M is then 1 where the
    mass was positive, 0 where it was 0: such rows contribute nothing)."""
    v = vals.to(dtype)
    log_eps = math.log(config.eps)
    if config.topk_values == "probs":
        p, lp = v, torch.log(torch.clamp_min(v, config.eps))
    else:
        p, lp = torch.exp(v), torch.clamp_min(v, log_eps)
    m = p.sum(dim=-1, keepdim=True)
    if config.tail == "renorm":
        pos = m > 0
        safe = torch.where(pos, m, torch.ones_like(m))
        p = torch.where(pos, p / safe, torch.zeros_like(p))
        if config.topk_values == "probs":
            lp = torch.log(torch.clamp_min(p, config.eps))
        else:
            lp = torch.clamp_min(v - torch.log(safe), log_eps)
        m = pos.to(dtype)
    return p, lp, m


def kl_div_reference(input: torch.Tensor, weight: torch.Tensor,
                     teacher: Optional[torch.Tensor] = None, *,
                     bias: Optional[torch.Tensor] = None,
                     labels: Optional[torch.Tensor] = None,
                     teacher_ids: Optional[torch.Tensor] = None,
                     teacher_values: Optional[torch.Tensor] = None,
                     temperature: Optional[float] = None,
                     config: Optional[LossConfig] = None,
                     compute_dtype: torch.dtype = torch.float32,
                     sparse_impl: str = "gather", teacher_input: Optional[torch.Tensor] = None,
                     teacher_weight: Optional[torch.Tensor] = None,
                     teacher_bias: Optional[torch.Tensor] = None,
                     row_weights: Optional[torch.Tensor] = None,
                     **options: Any) -> torch.Tensor:
    """The loss in plain PyTorch (differentiable wrt input, weight, bias).

    The logits come from F.linear in the input dtype (as a user's model computes them) and are
    upcast to compute_dtype for the softmax and the loss. Sparse teachers: sparse_impl='gather'
    gathers log q at the ids (every tail); 'dense' scatters the (renormalized) teacher into a
    dense [N, V] tensor first and runs the dense formula (tails 'none' and 'renorm' only): the
    "dense-from-sparse" baseline. Duplicate ids are assumed absent by the BUCKET tail here.
    With hard_weight > 0 the loss is hard_weight * F.cross_entropy (label_smoothing, plus
    z_loss * lse^2) + soft_weight * the divergence, on the softcapped logits. row_weights
    [N] (or the input's leading shape) multiply each row's loss, never the divisor.
    """
    if teacher_input is not None:  # the online teacher: its logits, no gradient
        teacher = F.linear(teacher_input.reshape(-1, teacher_input.shape[-1]),
                           teacher_weight[:weight.shape[0]],
                           None if teacher_bias is None else teacher_bias[:weight.shape[0]]
                           ).detach()
    config = _config(config, options, teacher, teacher_ids, teacher_values, temperature,
                     teacher_weight)
    T = _temperature(config, temperature)
    x = input.reshape(-1, input.shape[-1])
    n, vocab = x.shape[0], weight.shape[0]
    zc = _softcap(F.linear(x, weight, bias).to(compute_dtype), float(config.softcap))[0]
    logq = torch.log_softmax(zc / T, dim=-1)
    if config.teacher == "sparse_topk":
        if _sparse_div(config):
            raise ValueError("kl_div_reference has the top-K teacher's forward KL only; its "
                             "reverse KL and JSD are in kl_div_fp64")
        ids = teacher_ids.reshape(n, -1).long()
        p, lp, m = _sparse_teacher(config, teacher_values.reshape(n, -1), compute_dtype)
        if sparse_impl == "dense":
            if config.tail == "bucket":
                raise ValueError("sparse_impl='dense' has no BUCKET tail")
            dense_p = torch.zeros(n, vocab, dtype=compute_dtype, device=x.device)
            dense_p.scatter_(1, ids, p)
            dense_lp = torch.zeros_like(dense_p).scatter_(1, ids, lp)
            row = torch.where(dense_p != 0, dense_p * (dense_lp - logq), 0.0).sum(-1)
        elif sparse_impl == "gather":
            lq = logq.gather(1, ids)
            row = torch.where(p != 0, p * (lp - lq), 0.0).sum(-1)
            if config.tail == "bucket":
                t = (1.0 - m).squeeze(-1)
                in_s = torch.zeros_like(logq, dtype=torch.bool).scatter_(1, ids, True)
                log_1mq = torch.logsumexp(logq.masked_fill(in_s, -math.inf), dim=-1)
                live = (t > 0) & torch.isfinite(log_1mq)
                t_safe = torch.where(live, t, torch.ones_like(t))
                l1 = torch.where(live, log_1mq, torch.zeros_like(log_1mq))
                row = row + torch.where(live, t_safe * (torch.log(t_safe) - l1), 0.0)
        else:
            raise ValueError(f"sparse_impl must be 'gather' or 'dense', got {sparse_impl!r}")
    else:
        p, lp = _dense_teacher(config, teacher.reshape(n, vocab), T, compute_dtype)
        row = _divergence(config, p, lp, logq)[0]
    row = row * (float(config.soft_weight) * (T * T if config.scale_t_squared else 1.0))
    y = _labels(config, labels, n)
    if y is not None:  # torch's CE (its label smoothing is tests/ref.c's) and the z-loss
        ce = F.cross_entropy(zc, y, reduction="none",
                             label_smoothing=float(config.label_smoothing))
        if config.z_loss:
            ce = ce + float(config.z_loss) * torch.logsumexp(zc, dim=-1) ** 2
        row = row + float(config.hard_weight) * ce
    if row_weights is not None:
        row = row * _row_weights(row_weights, n).to(row.device, row.dtype)
    kept_count = n
    if labels is not None:
        kept = _kept(labels, n, config.ignore_index, x.device)
        row = torch.where(kept, row, torch.zeros_like(row))
        # The count of kept rows is data (a host sync, a graph break under torch.compile).
        kept_count = int(kept.sum().item())
    if config.reduction == "none":
        return row.reshape(input.shape[:-1])
    return row.sum() * _scale(config, kept_count, vocab)


@torch.no_grad()
def kl_div_fp64(input: torch.Tensor, weight: torch.Tensor,
                teacher: Optional[torch.Tensor] = None, *,
                bias: Optional[torch.Tensor] = None,
                labels: Optional[torch.Tensor] = None,
                teacher_ids: Optional[torch.Tensor] = None,
                teacher_values: Optional[torch.Tensor] = None,
                temperature: Optional[float] = None,
                grad_output: Optional[torch.Tensor] = None,
                config: Optional[LossConfig] = None, chunk_rows: int = 256,
                want_grads: bool = True, teacher_input: Optional[torch.Tensor] = None,
                teacher_weight: Optional[torch.Tensor] = None,
                teacher_bias: Optional[torch.Tensor] = None,
                row_weights: Optional[torch.Tensor] = None,
                **options: Any) -> Dict[str, Optional[torch.Tensor]]:
    """Loss, per-row loss and gradients in float64, chunk_rows rows at a time, on the inputs'
    device. Returns {'loss', 'row_loss', 'loss_soft', 'loss_hard', 'grad_input',
    'grad_weight', 'grad_bias'} (float64; the gradients are None when want_grads is False);
    loss_soft and loss_hard are the loss's two reduced parts, soft_weight (T^2) divergence and
    hard_weight CE (tests/ref.c's loss_soft and loss_hard). grad_output: dL_outer/dloss, a scalar or
    one per row for reduction='none' (default 1). teacher_input [N, Ht] and teacher_weight
    [Vt, Ht] (and teacher_bias [Vt]): the online teacher, its logits computed here in float64
    (columns [0, V)). row_weights [N] (or the input's leading shape): each row's loss and
    gradient times its weight, the reduction's divisor as without them (include/kljit.h)."""
    if teacher_input is not None:
        teacher = teacher_input
    config = _config(config, options, teacher, teacher_ids, teacher_values, temperature,
                     teacher_weight)
    T = _temperature(config, temperature)
    f64 = torch.float64
    x = input.reshape(-1, input.shape[-1])
    n, h = x.shape
    vocab = weight.shape[0]
    dev = x.device
    w = weight.to(f64)
    b = bias.to(f64) if bias is not None else None
    kept = _kept(labels, n, config.ignore_index, dev)
    c = _scale(config, int(kept.sum().item()), vocab)
    t2 = T * T if config.scale_t_squared else 1.0
    ws, wh = float(config.soft_weight), float(config.hard_weight)
    y_all = _labels(config, labels, n)
    rw = (torch.ones(n, dtype=f64, device=dev) if row_weights is None
          else _row_weights(row_weights, n).to(dev, f64))
    if grad_output is None:
        g_rows = torch.ones(n, dtype=f64, device=dev)
    elif config.reduction == "none":
        g_rows = grad_output.reshape(-1).to(f64)
    else:
        g_rows = grad_output.reshape(()).to(f64).expand(n)
    soft_rows = torch.zeros(n, dtype=f64, device=dev)
    hard_rows = torch.zeros(n, dtype=f64, device=dev)
    dx = torch.zeros(n, h, dtype=f64, device=dev) if want_grads else None
    dw = torch.zeros(vocab, h, dtype=f64, device=dev) if want_grads else None
    db = torch.zeros(vocab, dtype=f64, device=dev) if want_grads and b is not None else None
    sparse = config.teacher == "sparse_topk"
    if sparse:
        ids_all = teacher_ids.reshape(n, -1).long()
        vals_all = teacher_values.reshape(n, -1)
    elif config.teacher == "dense_hidden":
        xt_all = teacher.reshape(n, -1)
        wt = teacher_weight[:vocab].to(f64)
        bt = None if teacher_bias is None else teacher_bias[:vocab].to(f64)
    else:
        t_all = teacher.reshape(n, vocab)
    for i0 in range(0, n, chunk_rows):
        i1 = min(n, i0 + chunk_rows)
        xc = x[i0:i1].to(f64)
        z = xc @ w.T
        if b is not None:
            z += b
        zc, dc = _softcap(z, float(config.softcap))
        logq = torch.log_softmax(zc / T, dim=-1)
        q = torch.exp(logq)
        if sparse and _sparse_div(config):
            l_row, ds = _sparse_categories(config, vals_all[i0:i1], ids_all[i0:i1], logq, q)
        elif sparse:
            ids = ids_all[i0:i1]
            p, lp, m = _sparse_teacher(config, vals_all[i0:i1], f64)
            l_row = torch.where(p != 0, p * (lp - logq.gather(1, ids)), 0.0).sum(-1)
            ds = m * q
            ds.scatter_add_(1, ids, -p)
            if config.tail == "bucket":
                l_row, ds = _bucket(l_row, ds, logq, q, ids, m)
        else:
            tc = (xt_all[i0:i1].to(f64) @ wt.T if config.teacher == "dense_hidden"
                  else t_all[i0:i1])
            if config.teacher == "dense_hidden" and bt is not None:
                tc = tc + bt
            p, lp = _dense_teacher(config, tc, T, f64)
            l_row, dq = _divergence(config, p, lp, logq)
            if dq is None:
                ds = p.sum(-1, keepdim=True) * q - p
            else:
                ds = q * _g_less_e(q, dq)
        k = kept[i0:i1]
        wk = rw[i0:i1]
        soft_rows[i0:i1] = torch.where(k, wk * (ws * t2 * l_row), 0.0)
        dce = None
        if y_all is not None:
            ce, dce = _ce(config, zc, y_all[i0:i1])
            hard_rows[i0:i1] = torch.where(k, wk * (wh * ce), 0.0)
        if want_grads:
            gk = torch.where(k, g_rows[i0:i1] * c * wk, 0.0)[:, None]
            g = ds * (gk * (ws * t2 / T))
            if dce is not None:
                g = g + dce * (gk * wh)
            if dc is not None:
                g = g * dc
            g = torch.where(k[:, None], g, 0.0)  # an ignored row's ds may be anything
            dx[i0:i1] = g @ w
            dw += g.T @ xc
            if db is not None:
                db += g.sum(0)
    c_out = c if config.reduction != "none" else 1.0
    row_loss = soft_rows + hard_rows
    return {"loss": row_loss.sum() * c_out, "row_loss": row_loss,
            "loss_soft": soft_rows.sum() * c_out, "loss_hard": hard_rows.sum() * c_out,
            "grad_input": dx, "grad_weight": dw, "grad_bias": db}


def _bucket(l_row: torch.Tensor, ds: torch.Tensor, logq: torch.Tensor, q: torch.Tensor,
            ids: torch.Tensor, m: torch.Tensor) -> "tuple[torch.Tensor, torch.Tensor]":
    """The ghost-token term t log(t / (1 - Q_S)), t = 1 - M, and its gradient, as tests/ref.c
    computes them: 1 - Q_S as the q mass outside the support (a log-sum-exp, which keeps its
    digits when the support is nearly complete) less the extra occurrences of duplicate ids."""
    f64 = torch.float64
    cnt = torch.zeros_like(q).scatter_add_(1, ids, torch.ones_like(ids, dtype=f64))
    big_q = q.gather(1, ids).sum(-1)
    off = cnt == 0
    log_off = torch.logsumexp(logq.masked_fill(~off, -math.inf), dim=-1)
    dup_q = ((cnt - 1).clamp_min(0) * q).sum(-1)
    one_minus_q = torch.exp(log_off) - dup_q
    t = (1.0 - m).squeeze(-1)
    live = (t > 0) & off.any(-1)
    if bool((live & (one_minus_q <= 0)).any()):
        raise ValueError("BUCKET: 1 - Q_S <= 0 (duplicate ids in a row)")
    has_dup = (cnt > 1).any(-1)
    log_1mq = torch.where(has_dup, torch.log(one_minus_q.clamp_min(1e-300)), log_off)
    t_safe = torch.where(live, t, torch.ones_like(t))
    l_row = l_row + torch.where(live, t_safe * (torch.log(t_safe) - log_1mq), 0.0)
    ratio = torch.where(live, torch.exp(torch.log(t_safe) - log_1mq), 0.0)
    fac = torch.where(off, -big_q[:, None], (cnt - 1) + one_minus_q[:, None])
    return l_row, ds + ratio[:, None] * q * fac
