"""Torch fake quantization of an actor MLP with the seed's n-bit affine quantizer (quantize.affine).

Used three ways: n-bit PTQ evaluation (weights, optionally activations with calibrated ranges), QAT
(the seed's Algorithm 2: monitor activation min/max during a quantization delay, then train with
quantization on frozen ranges) and the n = 8 QDQ export (quantize.qdq_export).

Quantization points, as in the seed: every Linear's weights, the observation entering the first
layer and each hidden ReLU output. The logits are not quantized (see quantize.ptq). All rounding goes
through ``torch.fake_quantize_per_tensor_affine``, whose straight-through gradient QAT needs:

* weights, ``rounding="nearest"`` (the default here and in ``quantize qat`` / ``quantize sweep``): the
  seed's public code (np.rint). ``rounding="floor"`` is the paper's formula as printed:
  floor(W / delta) = round(W / delta - 1/2), so the op is applied to W - delta/2 (the two differ only
  when W / delta is exactly an integer inside the range, where round-half-even may pick the lower
  code; measure zero for trained float weights). The floor biases every weight by -delta/2 on average;
  over 1032 inputs that shifts each first-layer pre-activation by about -delta/2 * sum(obs), which is
  why PTQ with the printed formula loses far more than the seed's code.
* activations round to nearest (what QuantizeLinear does on the device), with delta and z from the
  seed's formula applied to the monitored range.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn

from quantize.affine import AffineParams, Rounding, affine_params_from_range, check_bits

if TYPE_CHECKING:  # a type only: this module needs torch alone (quarl quantizes any SB3 network with it)
    from policies.actor import DiscreteActor


def weight_params(w: torch.Tensor, bits: int) -> AffineParams:
    w = w.detach()
    return affine_params_from_range(float(w.min()), float(w.max()), bits)


def fake_quant_weight(w: torch.Tensor, bits: int, rounding: Rounding = "nearest") -> torch.Tensor:
    p = weight_params(w, bits)
    if p.delta == 0.0:
        return w
    shift = p.delta / 2 if rounding == "floor" else 0.0
    return torch.fake_quantize_per_tensor_affine(w - shift, p.delta, p.zero_point, 0, p.qmax)


class ActivationQuant(nn.Module):
    """Monitors min/max while ``observing``; fake-quantizes with the frozen range once ``frozen``."""

    # buffers (register_buffer): saved with the module's state and moved with it
    lo: torch.Tensor
    hi: torch.Tensor
    mean: torch.Tensor
    count: torch.Tensor

    def __init__(self, bits: int):
        super().__init__()
        self.bits = check_bits(bits)
        self.register_buffer("lo", torch.tensor(float("inf")))
        self.register_buffer("hi", torch.tensor(float("-inf")))
        # per-feature mean of what passes through (for bias correction); sized on first use
        self.register_buffer("mean", torch.zeros(0))
        self.register_buffer("count", torch.tensor(0.0))
        self.observing, self.frozen = True, False

    def params(self) -> AffineParams:
        return affine_params_from_range(float(self.lo), float(self.hi), self.bits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.observing and not self.frozen:
            d = x.detach()
            self.lo = torch.minimum(self.lo, d.min())
            self.hi = torch.maximum(self.hi, d.max())
            d2 = d.reshape(-1, d.shape[-1])
            if self.mean.numel() != d2.shape[1]:
                self.mean, self.count = torch.zeros(d2.shape[1]), torch.tensor(0.0)
            n = self.count + d2.shape[0]
            self.mean = self.mean + (d2.sum(0) - d2.shape[0] * self.mean) / n
            self.count = n
        if not self.frozen:
            return x
        p = self.params()
        if p.delta == 0.0:
            return x
        return torch.fake_quantize_per_tensor_affine(x, p.delta, p.zero_point, 0, p.qmax)


class QuantLinear(nn.Module):
    """An existing nn.Linear (same Parameter objects, so an optimizer holding them keeps working)
    whose weights are fake-quantized when ``enabled``. Biases stay float (int32 in the export)."""

    def __init__(self, linear: nn.Linear, bits: int, rounding: Rounding = "nearest"):
        super().__init__()
        self.linear, self.bits, self.enabled, self.rounding = linear, check_bits(bits), False, rounding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = fake_quant_weight(self.linear.weight, self.bits, self.rounding) if self.enabled else self.linear.weight
        return nn.functional.linear(x, w, self.linear.bias)


class QuantBody(nn.Module):
    """obs -> [actq] -> (QuantLinear -> ReLU -> actq) x hidden: drop-in for SB3's policy_net."""

    def __init__(self, body: nn.Module, bits: int, quantize_activations: bool = True, rounding: Rounding = "nearest"):
        super().__init__()
        layers = list(body) if isinstance(body, nn.Sequential) else []
        if not layers or not all(isinstance(m, (nn.Linear, nn.ReLU)) for m in layers):
            raise ValueError(f"expected a Sequential of Linear/ReLU, got {body}")
        self.input_quant = ActivationQuant(bits) if quantize_activations else None
        mods: list[nn.Module] = []
        for m in layers:
            if isinstance(m, nn.Linear):
                mods.append(QuantLinear(m, bits, rounding))
            else:
                mods.append(m)
                if quantize_activations:
                    mods.append(ActivationQuant(bits))
        self.layers = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_quant is not None:
            x = self.input_quant(x)
        return self.layers(x)


class FakeQuantActor(nn.Module):
    """(action, logits) like policies.actor.DiscreteActor, with n-bit fake quantization."""

    def __init__(
        self,
        body: nn.Module,  # a QuantBody, or a Sequential of Linear/ReLU to wrap in one
        head: nn.Linear | QuantLinear,
        obs_dim: int,
        bits: int,
        quantize_activations: bool = True,
        rounding: Rounding = "nearest",
    ):
        super().__init__()
        self.bits, self.obs_dim, self.rounding = check_bits(bits), obs_dim, rounding
        self.body = body if isinstance(body, QuantBody) else QuantBody(body, bits, quantize_activations, rounding)
        self.head = head if isinstance(head, QuantLinear) else QuantLinear(head, bits, rounding)

    @classmethod
    def from_actor(
        cls, actor: DiscreteActor, bits: int, quantize_activations: bool = True, rounding: Rounding = "nearest"
    ) -> FakeQuantActor:
        """A copy of a DiscreteActor (body Sequential + head Linear) with quantizers inserted."""
        a = copy.deepcopy(actor)
        first = next(m for m in a.body.modules() if isinstance(m, nn.Linear))
        return cls(a.body, a.head, first.in_features, bits, quantize_activations, rounding)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.body(obs))
        return torch.argmax(logits, dim=1), logits


class QuantConv2d(nn.Module):
    """QuantLinear's counterpart for an existing nn.Conv2d (CNN policies: MinAtar, Atari)."""

    def __init__(self, conv: nn.Conv2d, bits: int, rounding: Rounding = "nearest"):
        super().__init__()
        self.conv, self.bits, self.enabled, self.rounding = conv, check_bits(bits), False, rounding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        w = fake_quant_weight(c.weight, self.bits, self.rounding) if self.enabled else c.weight
        return c._conv_forward(x, w, c.bias)


# activation functions whose outputs the seed quantizes (SB3's MLPs use ReLU or Tanh)
ACTIVATIONS = (nn.ReLU, nn.Tanh, nn.LeakyReLU, nn.ELU, nn.SiLU)


def insert_fake_quant(
    module: nn.Module, bits: int, rounding: Rounding = "nearest", skip: tuple[nn.Module, ...] = ()
) -> None:
    """In place, for any network (the SB3 policies of quarl): every Linear / Conv2d below ``module`` gets n-bit
    weight fake-quant and every activation function's output an ActivationQuant, except modules in ``skip``
    (e.g. an output squash). The wrappers hold the same Parameter objects in the same order, so an optimizer
    or a target-network copy that iterates ``parameters()`` keeps working. Nothing is quantized until
    ``freeze_and_quantize`` (or ``calibrate_module``)."""
    for name, child in module.named_children():
        if any(child is s for s in skip):
            continue
        if isinstance(child, nn.Linear):
            setattr(module, name, QuantLinear(child, bits, rounding))
        elif isinstance(child, nn.Conv2d):
            setattr(module, name, QuantConv2d(child, bits, rounding))
        elif isinstance(child, ACTIVATIONS):
            setattr(module, name, nn.Sequential(child, ActivationQuant(bits)))
        elif not isinstance(child, (QuantLinear, QuantConv2d, ActivationQuant)):
            insert_fake_quant(child, bits, rounding, skip)


def weight_quantizers(module: nn.Module) -> list[QuantLinear | QuantConv2d]:
    return [m for m in module.modules() if isinstance(m, (QuantLinear, QuantConv2d))]


def calibrate_module(module: nn.Module, run, obs: torch.Tensor, batch: int = 2048, before_freeze=None) -> None:
    """PTQ for any module with quantizers inserted: ``run(obs_batch)`` pushes observations through it with float
    weights while activation ranges are recorded (then ``before_freeze()``, if given); then ranges freeze and
    weights quantize."""
    start_observing(module)
    for q in weight_quantizers(module):
        q.enabled = False
    with torch.no_grad():
        for i in range(0, len(obs), batch):
            run(obs[i : i + batch])
    if before_freeze is not None:
        before_freeze()
    freeze_and_quantize(module)


def activation_quants(module: nn.Module) -> list[ActivationQuant]:
    return [m for m in module.modules() if isinstance(m, ActivationQuant)]


def quant_linears(module: nn.Module) -> list[QuantLinear]:
    return [m for m in module.modules() if isinstance(m, QuantLinear)]


def start_observing(module: nn.Module) -> None:
    for q in activation_quants(module):
        q.observing, q.frozen = True, False


def freeze_and_quantize(module: nn.Module) -> None:
    """End of the quantization delay: freeze activation ranges, quantize weights from now on."""
    for q in activation_quants(module):
        if not torch.isfinite(q.lo):
            raise RuntimeError("an activation quantizer saw no data before freezing")
        q.observing, q.frozen = False, True
    for w in weight_quantizers(module):
        w.enabled = True


def correct_biases(body: QuantBody, head: QuantLinear) -> None:
    """Bias correction (Nagel et al. 2019, "Data-free quantization"): add (W - W_hat) E[x] to each
    layer's bias, E[x] being the mean input monitored before freezing, so the quantized layer's
    expected output matches the float one. It cancels the floor's systematic -delta/2 shift, which
    otherwise drives every first-layer ReLU negative (dead units pass no gradient, so QAT alone
    cannot recover from it)."""
    if body.input_quant is None:
        raise ValueError("bias correction needs activation quantizers (their monitored means)")
    pending: list[tuple[QuantLinear, ActivationQuant]] = []
    prev = body.input_quant
    for m in body.layers:
        if isinstance(m, ActivationQuant):
            prev = m
        elif isinstance(m, QuantLinear):
            pending.append((m, prev))
    pending.append((head, prev))
    with torch.no_grad():
        for lin, q in pending:
            if q.mean.numel() != lin.linear.in_features or lin.linear.bias is None:
                raise RuntimeError("bias correction: no monitored input mean for a layer")
            w = lin.linear.weight
            lin.linear.bias.add_((w - fake_quant_weight(w, lin.bits, lin.rounding)) @ q.mean)


def calibrate(actor: FakeQuantActor, obs: torch.Tensor, batch: int = 2048, bias_correction: bool = False) -> None:
    """PTQ: record activation ranges on observations (float weights, as the deployed model sees
    them before quantization), then freeze and quantize."""
    correction = (lambda: correct_biases(actor.body, actor.head)) if bias_correction else None
    calibrate_module(actor, actor, obs, batch, correction)
