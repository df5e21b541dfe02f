# SPDX-License-Identifier: Apache-2.0
"""nn.Module front ends of the fused linear + KL loss.

- FusedLinearKLDivLoss: the loss alone, given the head's weight per call (like Liger's
  LigerFusedLinearKLDivLoss and torch.nn.KLDivLoss): loss(hidden, lm_head.weight, teacher).
- FusedLinearKLDiv: a vocabulary head that owns its weight [V, H] (and bias [V]) and returns
  the distillation loss instead of logits: head(hidden, teacher).
- FusedLinearJSD: the online teacher's generalized JSD with Liger's LigerFusedLinearJSD
  signature: loss(student_input, student_weight, teacher_input, teacher_weight, shift_labels).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Union

import torch
from torch import nn

from ._checks import LossConfig, config_from_options
from .functional import LossComponents, fused_linear_kl_div

__all__ = ["FusedLinearKLDivLoss", "FusedLinearKLDiv", "FusedLinearJSD"]


class FusedLinearKLDivLoss(nn.Module):
    """KL(teacher || softmax((input @ weight.T + bias) / T)) without materializing the logits.

    Options are those of kljit.LossConfig: teacher_form (or teacher: 'dense_probs',
    'dense_logprobs', 'dense_logits', 'sparse_topk' or None to infer), mode ('fused' or
    'two_phase'), temperature, temperature_mode, teacher_temperature, scale_t_squared, reduction,
    ignore_index, eps, topk_values, tail, native_logits, allow_tf32, check_inputs,
    precise_accumulation, grad_weight_accum. They are validated here, once.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.config = config_from_options(options)

    def forward(self, input: torch.Tensor, weight: torch.Tensor,
                teacher: Optional[torch.Tensor] = None, *, bias: Optional[torch.Tensor] = None,
                labels: Optional[torch.Tensor] = None,
                teacher_ids: Optional[torch.Tensor] = None,
                teacher_values: Optional[torch.Tensor] = None,
                temperature: Optional[float] = None,
                grad_scale: Optional[float] = None,
                teacher_input: Optional[torch.Tensor] = None,
                teacher_weight: Optional[torch.Tensor] = None,
                teacher_bias: Optional[torch.Tensor] = None,
                accumulate_into_main_grad: bool = False,
                row_weights: Optional[torch.Tensor] = None, return_components: bool = False,
                **distributed: Any) -> Union[torch.Tensor, LossComponents]:
        """input [..., H], weight [V, H], teacher [..., V] or teacher_ids/teacher_values
        [..., K] or teacher_input [..., Ht] with teacher_weight [Vt, Ht] (and teacher_bias
        [Vt]), labels [...];
        temperature per call with temperature_mode='runtime'; grad_scale,
        accumulate_into_main_grad, row_weights, return_components, num_items_in_batch,
        process_group, vocab_start, vocab_total and sequence_parallel as fused_linear_kl_div's
        (a weight that is a DTensor sharded over the vocabulary selects its group by
        itself)."""
        return fused_linear_kl_div(input, weight, teacher, bias=bias, labels=labels,
                                   teacher_ids=teacher_ids, teacher_values=teacher_values,
                                   temperature=temperature, grad_scale=grad_scale,
                                   teacher_input=teacher_input, teacher_weight=teacher_weight,
                                   teacher_bias=teacher_bias,
                                   accumulate_into_main_grad=accumulate_into_main_grad,
                                   row_weights=row_weights,
                                   return_components=return_components,
                                   config=self.config, **_distributed(distributed))

    def extra_repr(self) -> str:
        c = self.config
        return (f"teacher={c.teacher}, mode={c.mode}, temperature={c.temperature}, "
                f"reduction={c.reduction}")


_DISTRIBUTED = ("num_items_in_batch", "process_group", "vocab_start", "vocab_total",
                "sequence_parallel")


def _distributed(given: Dict[str, Any]) -> Dict[str, Any]:
    """The distributed keywords of a module's forward, checked by name."""
    unknown = sorted(set(given) - set(_DISTRIBUTED))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; the forward takes "
                        f"{', '.join(_DISTRIBUTED)} besides its named arguments")
    return given


class FusedLinearKLDiv(nn.Module):
    """A vocabulary head (weight [vocab, hidden], optional bias [vocab]) whose forward returns
    the distillation loss against a teacher instead of the logits.

        head = kljit.FusedLinearKLDiv(4096, 128256, teacher="dense_probs", mode="fused",
                                      temperature=2.0, device="cuda", dtype=torch.bfloat16)
        loss = head(hidden_states, teacher_probs, labels=labels)
        loss.backward()   # grads of hidden_states, head.weight (and head.bias)

    process_group: the head is sharded over the vocabulary across the group's ranks, as
    ColwiseParallel shards an nn.Linear (torch.chunk's split: rank r owns rows [r c, r c + V_r)
    of the vocab, c = ceil(vocab / ranks)): the module holds only its rows (weight [V_r,
    hidden], vocab_start = r c), a dense teacher passes those columns, and each rank's forward
    returns the whole loss (kljit.fused_linear_kl_div's process_group). Options: as
    FusedLinearKLDivLoss. The weight is initialized like nn.Linear's (per shard).
    """

    def __init__(self, hidden: int, vocab: int, *, bias: bool = False,
                 device: Optional[Any] = None, dtype: Optional[torch.dtype] = None,
                 process_group: Any = None, **options: Any) -> None:
        super().__init__()
        for name, value in (("hidden", hidden), ("vocab", vocab)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {hidden}")
        if vocab < 2:
            raise ValueError(f"vocab must be >= 2, got {vocab}")
        self.hidden, self.vocab = hidden, vocab
        self.config = config_from_options(options)
        self.process_group, self.vocab_start, rows = process_group, 0, vocab
        if process_group is not None:
            import torch.distributed as dist

            chunk = -(-vocab // dist.get_world_size(process_group))
            self.vocab_start = min(dist.get_rank(process_group) * chunk, vocab)
            rows = min(chunk, vocab - self.vocab_start)
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(rows, hidden, **factory))
        self.bias = nn.Parameter(torch.empty(rows, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialization: kaiming-uniform weight, uniform bias in +-1/sqrt(H)."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.hidden)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: torch.Tensor, teacher: Optional[torch.Tensor] = None, *,
                labels: Optional[torch.Tensor] = None,
                teacher_ids: Optional[torch.Tensor] = None,
                teacher_values: Optional[torch.Tensor] = None,
                temperature: Optional[float] = None,
                grad_scale: Optional[float] = None,
                teacher_input: Optional[torch.Tensor] = None,
                teacher_weight: Optional[torch.Tensor] = None,
                teacher_bias: Optional[torch.Tensor] = None,
                accumulate_into_main_grad: bool = False,
                num_items_in_batch: Any = None, sequence_parallel: bool = False,
                row_weights: Optional[torch.Tensor] = None,
                return_components: bool = False) -> Union[torch.Tensor, LossComponents]:
        """input [..., hidden]; teacher [..., vocab] (with a process_group: the rank's columns)
        or teacher_ids/teacher_values [..., K] or teacher_input [..., Ht] with teacher_weight
        [Vt, Ht] (and teacher_bias [Vt]); num_items_in_batch, sequence_parallel, row_weights
        and return_components as fused_linear_kl_div's."""
        shard = {} if self.process_group is None else {
            "process_group": self.process_group, "vocab_start": self.vocab_start,
            "vocab_total": self.vocab, "sequence_parallel": sequence_parallel}
        return fused_linear_kl_div(input, self.weight, teacher, bias=self.bias, labels=labels,
                                   teacher_ids=teacher_ids, teacher_values=teacher_values,
                                   temperature=temperature, grad_scale=grad_scale,
                                   teacher_input=teacher_input, teacher_weight=teacher_weight,
                                   teacher_bias=teacher_bias,
                                   accumulate_into_main_grad=accumulate_into_main_grad,
                                   num_items_in_batch=num_items_in_batch,
                                   row_weights=row_weights,
                                   return_components=return_components, config=self.config,
                                   **shard)

    def extra_repr(self) -> str:
        c = self.config
        return (f"hidden={self.hidden}, vocab={self.vocab}, bias={self.bias is not None}, "
                f"teacher={c.teacher}, mode={c.mode}, temperature={c.temperature}, "
                f"reduction={c.reduction}")


class FusedLinearJSD(nn.Module):
    """The generalized Jensen-Shannon divergence between a student head and an online teacher
    head, neither's logits materialized; the signature of Liger's LigerFusedLinearJSD:

        jsd = kljit.FusedLinearJSD(jsd_beta=0.5, temperature=1.0)
        loss = jsd(student_hidden, lm_head.weight, teacher_hidden, teacher_head.weight,
                   shift_labels)   # labels optional: rows equal to ignore_index are left out
        loss.backward()            # grads of student_hidden and lm_head.weight only

    JSD(beta) with m = beta p + (1 - beta) q (p the teacher's softmax, q the student's, both
    at `temperature`): beta 0 is the forward KL(p || q), 1 the reverse KL(q || p), as Liger
    defines the end points. The loss is averaged over the kept rows (reduction 'batchmean').
    Other options of kljit.LossConfig (mode, softcap, ...) may be given as keywords.
    """

    def __init__(self, jsd_beta: float = 0.5, ignore_index: int = -100,
                 temperature: float = 1.0, **options: Any) -> None:
        super().__init__()
        self.config = config_from_options({"teacher_form": "dense_hidden", "divergence": "jsd",
                                           "beta": jsd_beta, "ignore_index": ignore_index,
                                           "temperature": temperature, **options})

    def forward(self, student_input: torch.Tensor, student_weight: torch.Tensor,
                teacher_input: torch.Tensor, teacher_weight: torch.Tensor,
                shift_labels: Optional[torch.Tensor] = None, *,
                teacher_bias: Optional[torch.Tensor] = None,
                row_weights: Optional[torch.Tensor] = None, return_components: bool = False,
                **distributed: Any) -> Union[torch.Tensor, LossComponents]:
        """student_input [..., H], student_weight [V, H], teacher_input [..., Ht],
        teacher_weight [Vt, Ht] (Vt >= V), shift_labels [...] (optional), teacher_bias [Vt]
        (optional; Liger's LigerFusedLinearJSD has none); row_weights, return_components,
        num_items_in_batch, process_group (both heads' rows of the rank's vocabulary),
        vocab_start, vocab_total and sequence_parallel as fused_linear_kl_div's."""
        return fused_linear_kl_div(student_input, student_weight, labels=shift_labels,
                                   teacher_input=teacher_input, teacher_weight=teacher_weight,
                                   teacher_bias=teacher_bias, row_weights=row_weights,
                                   return_components=return_components, config=self.config,
                                   **_distributed(distributed))

    def extra_repr(self) -> str:
        c = self.config
        return f"jsd_beta={c.beta}, ignore_index={c.ignore_index}, temperature={c.temperature}"
