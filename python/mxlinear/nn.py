"""``MXFP8Linear``: an inference-only linear layer over MXFP8 weights.

The weight is stored quantized (E4M3 elements, one E8M0 scale per 32 elements along K) and the
layer calls ``mxlinear.linear``, which MX-quantizes the activation (W8A8) or multiplies a bfloat16
or float16 activation as it is (W8A16), and runs the exact reference on CPU or the GPU kernels on
CUDA. Nothing in the layer is trainable: the weight, its scales and the bias are buffers, so
``.to(device)``, ``state_dict`` and ``load_state_dict`` carry them; the activation mode and the
batch-invariant switch are plain attributes, not part of the state. Gradients still flow through
the layer to its input (``grad_y @ W``, W the dequantized weight; in W8A8 straight through the
activation's quantization), so layers ahead of it train.
"""

from __future__ import annotations

import torch

import mxlinear  # the package's ops; looked up at call time, so import order does not matter

BLOCK = 32
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SCALE_DTYPES = (torch.uint8, torch.float8_e8m0fnu)
_RULES = ("rceil", "floor")
_ACTIVATIONS = ("mx", "bf16")


def _dtype_names(dtypes) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def _check_tensor(where: str, name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{where}: argument '{name}' is a {type(value).__name__}; expected a torch.Tensor"
        )
    return value


def _is_block_multiple(k: int) -> bool:
    return k >= BLOCK and k % BLOCK == 0


def _check_out_dtype(where: str, out_dtype) -> None:
    if out_dtype is not None and out_dtype not in _FLOAT_DTYPES:
        # A value that is no dtype shows its type, so that the string "bfloat16" is told apart.
        value = out_dtype if isinstance(out_dtype, torch.dtype) else (
            f"{out_dtype!r} (a {type(out_dtype).__name__})"
        )
        raise TypeError(
            f"{where}: argument 'out_dtype' is {value}; expected None or one of "
            f"{_dtype_names(_FLOAT_DTYPES)}"
        )


def _dequantized(weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """float32 ``value(q) * 2^(b - 127)`` of e4m3 codes and their E8M0 scale bytes (uint8 or
    float8_e8m0fnu), NaN where a scale byte is 0xFF."""
    scales = weight_scale.view(torch.uint8).to(torch.int32)
    factor = torch.ldexp(torch.ones_like(scales, dtype=torch.float32), scales - 127)
    factor = torch.where(scales == 0xFF, torch.full_like(factor, float("nan")), factor)
    w = weight.to(torch.float32).unflatten(-1, (-1, BLOCK))
    return (w * factor.unsqueeze(-1)).flatten(-2)


def _check_rule(where: str, rule, optional: bool = False) -> None:
    """A scale rule to quantize with; `optional`: None too (a rule only recorded)."""
    if not (optional and rule is None) and rule not in _RULES:
        raise ValueError(f"{where}: argument 'rule' is {rule!r}; expected 'rceil' or 'floor'")


def _check_activation(where: str, activation) -> None:
    if activation is not None and not (isinstance(activation, str) and activation in _ACTIVATIONS):
        raise ValueError(
            f"{where}: argument 'activation' is {activation!r}; expected None (the default, "
            "MXLINEAR_ACTIVATION), 'mx' (W8A8) or 'bf16' (W8A16)"
        )


def _check_batch_invariant(where: str, batch_invariant) -> None:
    if batch_invariant is not None and not isinstance(batch_invariant, bool):
        raise TypeError(
            f"{where}: argument 'batch_invariant' is {batch_invariant!r} (a "
            f"{type(batch_invariant).__name__}); expected None (the default, "
            "MXLINEAR_BATCH_INVARIANT), True or False"
        )


def _check_bias(where: str, bias, n: int, device: torch.device) -> None:
    _check_tensor(where, "bias", bias)
    if bias.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{where}: argument 'bias' has dtype {bias.dtype}; expected one of "
            f"{_dtype_names(_FLOAT_DTYPES)}"
        )
    if bias.dim() != 1 or bias.shape[0] != n:
        raise ValueError(
            f"{where}: argument 'bias' has shape {list(bias.shape)}; expected [{n}] (N)"
        )
    if bias.device != device:
        raise ValueError(
            f"{where}: argument 'bias' is on {bias.device}; expected the weight's device {device}"
        )


def _check_layer_options(where, in_features, out_features, bias_dtype, out_dtype, activation,
                         batch_invariant) -> None:
    """The constructor arguments every MXFP8 layer (whole or sharded) shares."""
    for name, value in (("in_features", in_features), ("out_features", out_features)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(
                f"{where}: argument '{name}' is a {type(value).__name__}; expected an int"
            )
    if in_features <= 0 or in_features % BLOCK != 0:
        raise ValueError(
            f"{where}: argument 'in_features' is {in_features}; expected a positive multiple "
            f"of {BLOCK} (the MX block size)"
        )
    if out_features <= 0:
        raise ValueError(f"{where}: argument 'out_features' is {out_features}; expected >= 1")
    if bias_dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{where}: argument 'bias_dtype' is {bias_dtype}; expected one of "
            f"{_dtype_names(_FLOAT_DTYPES)}"
        )
    _check_out_dtype(where, out_dtype)
    _check_activation(where, activation)
    _check_batch_invariant(where, batch_invariant)


def _check_quantized(where: str, weight, weight_scale, bias) -> tuple[int, int]:
    """Checks a whole quantized layer's tensors (weight, scales, bias); returns (N, K)."""
    _check_tensor(where, "weight", weight)
    _check_tensor(where, "weight_scale", weight_scale)
    if weight.dtype != torch.float8_e4m3fn:
        raise TypeError(
            f"{where}: argument 'weight' has dtype {weight.dtype}; expected float8_e4m3fn"
        )
    if weight.dim() != 2 or weight.shape[0] < 1 or not _is_block_multiple(weight.shape[1]):
        raise ValueError(
            f"{where}: argument 'weight' has shape {list(weight.shape)}; expected [N, K] with "
            f"N >= 1 and K a positive multiple of {BLOCK}"
        )
    n, k = weight.shape
    if weight_scale.dtype not in _SCALE_DTYPES:
        raise TypeError(
            f"{where}: argument 'weight_scale' has dtype {weight_scale.dtype}; expected uint8 or "
            "float8_e8m0fnu"
        )
    if tuple(weight_scale.shape) != (n, k // BLOCK):
        raise ValueError(
            f"{where}: argument 'weight_scale' has shape {list(weight_scale.shape)}; expected "
            f"[{n}, {k // BLOCK}] (N, K/32)"
        )
    if weight_scale.device != weight.device:
        raise ValueError(
            f"{where}: argument 'weight_scale' is on {weight_scale.device}; expected the weight's "
            f"device {weight.device}"
        )
    if bias is not None:
        _check_bias(where, bias, n, weight.device)
    return n, k


def _check_linear(where: str, linear, rule) -> None:
    """Checks an nn.Linear to quantize and the rule to quantize it with."""
    if not isinstance(linear, torch.nn.Linear):
        raise TypeError(
            f"{where}: argument 'linear' is a {type(linear).__name__}; expected torch.nn.Linear"
        )
    if linear.in_features % BLOCK != 0:
        raise ValueError(
            f"{where}: argument 'linear' has in_features = {linear.in_features}; expected a "
            f"multiple of {BLOCK} (the MX block size)"
        )
    if linear.weight.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{where}: argument 'linear' has weight dtype {linear.weight.dtype}; expected one of "
            f"{_dtype_names(_FLOAT_DTYPES)}"
        )
    _check_rule(where, rule)


class _MXFP8Buffers(torch.nn.Module):
    """A module whose ``weight`` buffer is float8_e4m3fn and ``weight_scale`` buffer E8M0 codes:
    keeps ``.to(dtype)`` from converting them and ``load_state_dict`` to the stored formats.
    ``MXFP8Linear`` and the tensor-parallel layers (``mxlinear.distributed``) share it."""

    def _options_repr(self, middle: str) -> str:
        # The defaults (MXLINEAR_ACTIVATION's mode, MXLINEAR_BATCH_INVARIANT's switch) are left
        # out: a layer that follows the process's defaults prints only its sizes and dtypes.
        out = "input" if self.out_dtype is None else str(self.out_dtype).removeprefix("torch.")
        bias = "None" if self.bias is None else str(self.bias.dtype).removeprefix("torch.")
        text = (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={bias}, "
            f"{middle}, out_dtype={out}"
        )
        if self.activation is not None:
            text += f", activation={self.activation}"
        if self.batch_invariant is not None:
            text += f", batch_invariant={self.batch_invariant}"
        return text

    def _register_weight_buffers(self, rows: int, k: int, bias: bool, bias_dtype, device) -> None:
        # Zero weights with unit scales (E8M0 127 is 2^0) until the real ones are copied in.
        self.register_buffer(
            "weight", torch.zeros(rows, k, dtype=torch.float8_e4m3fn, device=device)
        )
        self.register_buffer(
            "weight_scale",
            torch.full((rows, k // BLOCK), 127, dtype=torch.uint8, device=device),
        )
        self.register_buffer(
            "bias", torch.zeros(rows, dtype=bias_dtype, device=device) if bias else None
        )

    def _apply(self, fn, recurse=True):
        # Module.to(dtype), .half() and .float() convert every floating-point tensor, and torch
        # counts float8 as floating point; a uint8 view of the weight follows device moves only.
        self._buffers["weight"] = self._buffers["weight"].view(torch.uint8)
        try:
            return super()._apply(fn, recurse)
        finally:
            self._buffers["weight"] = self._buffers["weight"].view(torch.float8_e4m3fn)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # load_state_dict copies with copy_, which would convert a float weight to E4M3 without
        # scaling and an E8M0 scale to its numeric value; only the stored formats are accepted.
        weight_key, scale_key = prefix + "weight", prefix + "weight_scale"
        weight = state_dict.get(weight_key)
        if isinstance(weight, torch.Tensor) and weight.dtype != torch.float8_e4m3fn:
            error_msgs.append(f"'{weight_key}' has dtype {weight.dtype}; expected float8_e4m3fn")
            return
        scale = state_dict.get(scale_key)
        if isinstance(scale, torch.Tensor):
            if scale.dtype not in _SCALE_DTYPES:
                error_msgs.append(
                    f"'{scale_key}' has dtype {scale.dtype}; expected uint8 or float8_e8m0fnu"
                )
                return
            state_dict[scale_key] = scale.view(torch.uint8)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


class MXFP8Linear(_MXFP8Buffers):
    """``y = mxlinear.linear(x, weight, weight_scale, bias, out_dtype, activation,
    batch_invariant)``: its own tensors are constants (gradients reach ``x``, not the layer).

    Buffers: ``weight`` float8_e4m3fn [out_features, in_features], ``weight_scale`` uint8
    [out_features, in_features / 32] (E8M0 bytes, bias 127) and optionally ``bias``
    [out_features] (bfloat16, float16 or float32, kept in the dtype given). ``out_dtype`` None
    means the input's dtype (bfloat16 for a pre-quantized input). ``rule`` records the scale rule
    the weight was quantized with (None when unknown, e.g. loaded from a checkpoint).

    ``activation`` is the mode of the layer's calls: ``"mx"`` (W8A8: the activation is
    MX-quantized first), ``"bf16"`` (W8A16: a bfloat16 or float16 activation is multiplied as it
    is by the dequantized weight) or None for the process default (``MXLINEAR_ACTIVATION``). It is
    an attribute that may be changed at any time, not a buffer: ``state_dict`` and checkpoints do
    not carry it. A pre-quantized input is W8A8 whatever the attribute says.

    ``batch_invariant`` is the layer's batch-invariant switch: True makes each output row's bits
    depend only on that row of the input (never on the batch size or the row's place in the
    batch), False keeps the default mode, None takes the process default
    (``MXLINEAR_BATCH_INVARIANT``); see ``mxlinear.linear``. Like ``activation`` it is a plain
    attribute, applied to pre-quantized inputs too.

    ``Module.to(dtype)``, ``.half()`` and ``.float()`` convert the bias but never the quantized
    weight, which follows device moves only.

    Build one with ``from_linear`` (quantizes an ``nn.Linear``) or ``from_quantized`` (takes
    tensors as stored in a checkpoint); the constructor makes a zero layer of the given size,
    ready for ``load_state_dict``.
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor
    bias: torch.Tensor | None
    # Also a class default, so that a pickled layer whose state lacks the attribute unpickles
    # into one that runs in the process default mode.
    batch_invariant: bool | None = None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        bias_dtype: torch.dtype = torch.float32,
        out_dtype: torch.dtype | None = None,
        rule: str | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        where = "MXFP8Linear"
        _check_layer_options(where, in_features, out_features, bias_dtype, out_dtype, activation,
                             batch_invariant)
        _check_rule(where, rule, optional=True)
        self.in_features = in_features
        self.out_features = out_features
        self.out_dtype = out_dtype
        self.rule = rule
        self.activation = activation
        self.batch_invariant = batch_invariant
        self._register_weight_buffers(out_features, in_features, bias, bias_dtype, device)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_quantized(
        cls,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        out_dtype: torch.dtype | None = None,
        rule: str | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "MXFP8Linear":
        """A layer over already quantized tensors (used as they are, not copied).

        ``weight`` float8_e4m3fn [N, K] with K a positive multiple of 32; ``weight_scale`` uint8 or
        float8_e8m0fnu [N, K/32] (stored as a uint8 view); ``bias`` [N] bfloat16, float16 or
        float32; all on one device. A wrong type or dtype raises TypeError, a wrong shape or
        device ValueError, each naming the argument, as does an ``activation`` other than None,
        ``"mx"`` or ``"bf16"``; a ``batch_invariant`` other than None or a bool raises TypeError.
        """
        where = "MXFP8Linear.from_quantized"
        n, k = _check_quantized(where, weight, weight_scale, bias)
        _check_out_dtype(where, out_dtype)
        _check_rule(where, rule, optional=True)
        _check_activation(where, activation)
        _check_batch_invariant(where, batch_invariant)
        layer = cls(
            k,
            n,
            bias=False,
            out_dtype=out_dtype,
            rule=rule,
            activation=activation,
            batch_invariant=batch_invariant,
            device="meta",
        )
        layer.weight = weight
        layer.weight_scale = weight_scale.view(torch.uint8)
        layer.bias = bias
        return layer

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        rule: str = "rceil",
        out_dtype: torch.dtype | None = None,
        activation: str | None = None,
        batch_invariant: bool | None = None,
    ) -> "MXFP8Linear":
        """Quantizes ``linear.weight`` with ``mxlinear.quantize(weight, rule)`` on the weight's own
        device (CPU or CUDA) and keeps a copy of its bias. The weight must be bfloat16, float16 or
        float32 and ``in_features`` a multiple of 32. ``activation`` and ``batch_invariant`` are
        the layer's mode and switch (see the class)."""
        where = "MXFP8Linear.from_linear"
        _check_linear(where, linear, rule)
        _check_activation(where, activation)
        _check_batch_invariant(where, batch_invariant)
        with torch.no_grad():
            weight, weight_scale = mxlinear.quantize(linear.weight.detach(), rule)
            bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls.from_quantized(
            weight,
            weight_scale,
            bias,
            out_dtype=out_dtype,
            rule=rule,
            activation=activation,
            batch_invariant=batch_invariant,
        )

    # ------------------------------------------------------------------ use

    def forward(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """``x`` [..., in_features] bfloat16/float16/float32 (bfloat16/float16 in W8A16), or a
        pre-quantized ``(data, scales)`` pair as ``mxlinear.quantize`` returns it (W8A8)."""
        activation = None if isinstance(x, tuple) else self.activation
        return mxlinear.linear(
            x,
            self.weight,
            self.weight_scale,
            self.bias,
            self.out_dtype,
            activation,
            batch_invariant=self.batch_invariant,
        )

    def dequantized_weight(self) -> torch.Tensor:
        """The weight as float32: ``value(q) * 2^(b - 127)`` per element (NaN where the scale byte
        is 0xFF), exact except where the product leaves float32's range."""
        return _dequantized(self.weight, self.weight_scale)

    def extra_repr(self) -> str:
        return self._options_repr(f"rule={self.rule}")

    # ------------------------------------------------------------------ nn.Module hooks

