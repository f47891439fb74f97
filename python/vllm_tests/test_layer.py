"""The kernel on a layer shaped like vLLM's MXFP8 linear layers, with CPU tensors: weight
processing, then the forward pass through mxlinear's CPU reference op against the float64
emulation of the MXFP8 contract."""

import emulation
import pytest
import torch
from conftest import adapter, install_platform, require_extension


def fresh_gen() -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(torch.seed())
    return g


def quantized_weight(n: int, k: int, g: torch.Generator):
    """(e4m3 [N, K], uint8 [N, K/32]) from random rows whose blocks span 2^-6..2^6."""
    mag = torch.pow(2.0, torch.randint(-6, 7, (n, k // 32, 1), generator=g).float())
    w = (torch.randn(n, k // 32, 32, generator=g) * mag).reshape(n, k)
    data, scales = emulation.quantize(w)
    return data.view(torch.float8_e4m3fn), scales


def make_layer(weight, weight_scale, params_dtype=torch.bfloat16) -> torch.nn.Module:
    """A module holding what vLLM's MXFP8 schemes register (as plain Parameters), loaded."""
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(weight_scale, requires_grad=False)
    if params_dtype is not None:
        layer.params_dtype = params_dtype
    return layer


@pytest.fixture
def make_kernel(unregistered, monkeypatch):
    """make_kernel(n, k): the kernel vLLM's own selection builds for an [N, K] layer on a faked
    Hopper GPU with the GPU kernels reported present. The fakes end with the selection; the
    layer's tensors stay on the CPU."""
    from vllm.model_executor.kernels.linear import init_mxfp8_linear_kernel

    assert adapter.register() is True

    def make(n: int, k: int):
        with monkeypatch.context() as m:
            m.setattr(adapter, "_cuda_kernels_loaded", lambda: True)
            install_platform(m, 9, 0)
            kernel = init_mxfp8_linear_kernel(weight_shape=(n, k))
        assert type(kernel) is adapter.kernel_class()
        return kernel

    return make


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def padded(scales: torch.Tensor, rows: int, cols: int, g) -> torch.Tensor:
    """scales inside a larger buffer of random bytes, as a loader padding to a tile leaves them."""
    n, kb = scales.shape
    buf = torch.randint(0, 256, (n + rows, kb + cols), generator=g, dtype=torch.uint8)
    buf[:n, :kb] = scales
    return buf


@pytest.mark.parametrize(
    "n, k, pad_rows, pad_cols", [(1, 32, 0, 0), (37, 96, 3, 5), (64, 544, 128, 4)]
)
def test_process_weights_trims_scale_padding(make_kernel, n, k, pad_rows, pad_cols):
    g = fresh_gen()
    w, s = quantized_weight(n, k, g)
    layer = make_layer(w.clone(), padded(s, pad_rows, pad_cols, g))
    make_kernel(n, k).process_weights_after_loading(layer)
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight.shape == (n, k)
    assert layer.weight.is_contiguous() and same_bytes(layer.weight, w)
    assert layer.weight_scale.dtype == torch.uint8 and layer.weight_scale.shape == (n, k // 32)
    assert layer.weight_scale.is_contiguous() and torch.equal(layer.weight_scale, s)
    assert isinstance(layer.weight, torch.nn.Parameter) and not layer.weight.requires_grad


def test_process_weights_makes_strided_weight_contiguous_and_takes_e8m0_scales(make_kernel):
    g = fresh_gen()
    n, k = 48, 160
    w, s = quantized_weight(n, k, g)
    transposed = w.t().contiguous().t()  # [N, K] with column-major strides
    layer = make_layer(transposed, s.view(torch.float8_e8m0fnu))
    make_kernel(n, k).process_weights_after_loading(layer)
    assert layer.weight.is_contiguous() and same_bytes(layer.weight, w)
    assert layer.weight_scale.dtype == torch.uint8 and torch.equal(layer.weight_scale, s)


def test_process_weights_twice_changes_nothing(make_kernel):
    # supports_pre_processed_weights: processed weights go through processing unchanged.
    g = fresh_gen()
    n, k = 20, 128
    w, s = quantized_weight(n, k, g)
    layer = make_layer(w.clone(), padded(s, 4, 2, g))
    kernel = make_kernel(n, k)
    kernel.process_weights_after_loading(layer)
    first = (layer.weight.clone(), layer.weight_scale.clone())
    kernel.process_weights_after_loading(layer)
    assert same_bytes(layer.weight, first[0])
    assert torch.equal(layer.weight_scale, first[1])


def scale_bytes(rows: int, cols: int) -> torch.Tensor:
    return torch.full((rows, cols), 127, dtype=torch.uint8)


@pytest.mark.parametrize(
    "weight, weight_scale, argument",
    [
        (torch.zeros(8, 64, dtype=torch.bfloat16), scale_bytes(8, 2), "layer.weight"),
        (torch.zeros(8, 64).to(torch.float8_e4m3fn), torch.zeros(8, 2), "layer.weight_scale"),
        (torch.zeros(8, 64).to(torch.float8_e4m3fn), scale_bytes(8, 1), "layer.weight_scale"),
        (torch.zeros(8, 64).to(torch.float8_e4m3fn), scale_bytes(7, 2), "layer.weight_scale"),
    ],
)
def test_process_weights_rejects_bad_parameters(make_kernel, weight, weight_scale, argument):
    layer = make_layer(weight, weight_scale)
    with pytest.raises(ValueError, match=rf"{adapter.KERNEL_NAME}: {argument} has dtype"):
        make_kernel(8, 64).process_weights_after_loading(layer)


def assert_one_rounding(out: torch.Tensor, ref64: torch.Tensor):
    """The CPU reference accumulates in float64 and rounds once: within 1 ulp of the rounded
    float64 emulation in the output dtype."""
    assert torch.isfinite(ref64).all()
    rounded = ref64.to(out.dtype)
    up = torch.nextafter(rounded, torch.tensor(float("inf"), dtype=out.dtype)).double()
    ulp = (up - rounded.double()).abs()
    assert ((out.double() - rounded.double()).abs() <= ulp).all()


@pytest.mark.parametrize(
    "x_shape, n, x_dtype, params_dtype, with_bias",
    [
        ((5, 64), 24, torch.bfloat16, torch.bfloat16, True),
        ((2, 3, 96), 17, torch.bfloat16, torch.bfloat16, False),
        ((1, 544), 40, torch.float16, torch.float16, True),
        ((4, 128), 8, torch.float32, torch.bfloat16, True),  # output in the model's dtype
        ((3, 2, 32), 5, torch.float16, None, True),  # no params_dtype: x's dtype
    ],
)
def test_apply_weights_matches_emulation(
    make_kernel, x_shape, n, x_dtype, params_dtype, with_bias
):
    require_extension()
    g = fresh_gen()
    k = x_shape[-1]
    w, s = quantized_weight(n, k, g)
    layer = make_layer(w.clone(), padded(s, 2, 3, g), params_dtype)
    kernel = make_kernel(n, k)
    kernel.process_weights_after_loading(layer)
    x = (torch.randn(*x_shape, generator=g) * 4).to(x_dtype)
    bias = (torch.randn(n, generator=g) * 2).to(params_dtype or x_dtype) if with_bias else None
    out = kernel.apply_weights(layer, x, bias)
    assert out.shape == (*x_shape[:-1], n) and out.dtype == (params_dtype or x_dtype)
    ref = emulation.linear(x.reshape(-1, k), w, s, bias).reshape(*x_shape[:-1], n)
    assert_one_rounding(out, ref)
