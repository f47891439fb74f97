"""quantize_model's checks: layers it must skip rather than fail on, and options it must refuse
before converting anything. (Its conversions against the MXFP8 contract are in test_nn.py.)"""

import warnings

import emulation
import pytest
import torch

from mxlinear.convert import quantize_model
from mxlinear.nn import MXFP8Linear


def fresh_gen() -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(torch.seed())
    return g


def random_width(g, low: int = 1, high: int = 5) -> int:
    return 32 * int(torch.randint(low, high, (1,), generator=g))


def linear(k: int, n: int, dtype=torch.float32) -> torch.nn.Linear:
    with warnings.catch_warnings():  # a zero-size layer warns that its init is a no-op
        warnings.simplefilter("ignore", UserWarning)
        return torch.nn.Linear(k, n, dtype=dtype)


def test_quantize_model_skips_layers_it_cannot_serve():
    g = fresh_gen()  # also reseeds the global generator the layers draw their weights from
    k, n = random_width(g), random_width(g)
    model = torch.nn.Sequential(
        linear(k, n),
        linear(k, n, torch.float64),
        linear(k, n, torch.bfloat16),
        linear(0, n),
        linear(k, 0),
    )
    before = list(model)
    result = quantize_model(model)
    assert result.converted == ["0", "2"]
    assert result.skipped == {
        "1": "weight dtype float64 is not one of bfloat16, float16, float32",
        "3": "in_features = 0 is not a positive multiple of 32",
        "4": "out_features = 0; an MXFP8 layer needs at least one output",
    }
    for i in (1, 3, 4):
        assert model[i] is before[i]
    assert model[1].weight.dtype == torch.float64
    for i in (0, 2):
        data, scales = emulation.quantize(before[i].weight.detach())
        assert isinstance(model[i], MXFP8Linear)
        assert torch.equal(model[i].weight.view(torch.uint8), data)
        assert torch.equal(model[i].weight_scale, scales)
    # Named exactly in 'include', such a layer is an error that says why.
    fresh = torch.nn.Sequential(linear(k, n), linear(k, n, torch.float64))
    with pytest.raises(ValueError, match=r"'include' names layer '1'.*weight dtype float64"):
        quantize_model(fresh, include=["0", "1"])
    assert not any(isinstance(m, MXFP8Linear) for m in fresh.modules())


@pytest.mark.parametrize("convertible", [True, False])
def test_quantize_model_checks_rule_and_out_dtype_first(convertible):
    # With or without a layer to convert, a bad option is refused before any layer is touched,
    # and the error names quantize_model's argument, not from_linear's.
    g = fresh_gen()
    k, n = random_width(g), random_width(g)
    cases = [
        (ValueError, "rule", "nearest", r"'nearest'; expected 'rceil' or 'floor'"),
        (ValueError, "rule", None, r"None; expected 'rceil' or 'floor'"),
        (TypeError, "out_dtype", torch.int8, r"torch.int8; expected None or one of bfloat16"),
        (TypeError, "out_dtype", torch.float64, r"torch.float64; expected None or one of "),
        (TypeError, "out_dtype", "bfloat16", r"'bfloat16' \(a str\); expected None or one "),
    ]
    for error, argument, value, expected in cases:
        layers = [linear(k, n)] if convertible else [torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, linear(k + 8, n))
        before = list(model)
        with pytest.raises(error, match=rf"^quantize_model: argument '{argument}' is {expected}"):
            quantize_model(model, **{argument: value})
        assert list(model) == before
