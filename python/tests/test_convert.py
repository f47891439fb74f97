"""quantize_model's checks: layers it must skip rather than fail on, and options it must refuse
before converting anything. (Its conversions against the MXFP8 contract are in test_nn.py.)"""

import re
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


def test_quantize_model_moves_the_layers_hooks_to_the_replacement():
    # Forward pre-hooks and forward hooks (with their kwargs and always-call flags) and full
    # backward hooks fire on the replacement in their registration order, and the handles that
    # registered them still remove them; training and attached attributes come along.
    g = fresh_gen()
    k, n = random_width(g), random_width(g)
    model = torch.nn.Sequential(linear(k, n), torch.nn.ReLU())
    old = model[0]
    log = []

    def doubling_pre_hook(module, args):
        log.append(("pre", module))
        return (2 * args[0],)

    def kwargs_pre_hook(module, args, kwargs):  # called with kwargs only under with_kwargs=True
        log.append(("pre kwargs", module, dict(kwargs)))

    def recording_hook(module, args, output):
        log.append(("post", module, args[0], output))

    def always_hook(module, args, output):
        log.append(("always", module))

    def backward_hook(module, grad_input, grad_output):
        log.append(("backward", module, grad_output[0].shape))

    handles = [
        old.register_forward_pre_hook(doubling_pre_hook),
        old.register_forward_pre_hook(kwargs_pre_hook, with_kwargs=True),
        old.register_forward_hook(recording_hook),
        old.register_forward_hook(always_hook, always_call=True),
        old.register_full_backward_hook(backward_hook),
    ]
    old.layer_index = 7  # an attribute a user or a library attached
    model.eval()
    assert quantize_model(model).converted == ["0"]
    layer = model[0]
    assert isinstance(layer, MXFP8Linear) and layer is not old
    assert not layer.training and layer.layer_index == 7
    assert not old._forward_hooks and not old._forward_pre_hooks  # moved, not shared

    x = torch.randn(3, k, generator=g, requires_grad=True)
    y = model(x)
    assert [entry[0] for entry in log] == ["pre", "pre kwargs", "post", "always"]
    assert all(entry[1] is layer for entry in log)
    assert log[1][2] == {}
    _, _, seen_input, seen_output = log[2]
    assert torch.equal(seen_input, 2 * x)  # the pre-hook's change reached the layer
    assert torch.equal(seen_output, MXFP8Linear.forward(layer, 2 * x))
    assert torch.equal(y, torch.relu(seen_output))
    y.sum().backward()
    assert log[-1] == ("backward", layer, torch.Size([3, n]))

    log.clear()
    with pytest.raises(RuntimeError, match=r"argument 'weight' has shape"):
        layer(torch.randn(3, k + 32, generator=g))  # a forward that raises: always_call still fires
    assert [entry[0] for entry in log] == ["pre", "pre kwargs", "always"]

    for handle in handles:
        handle.remove()
    log.clear()
    with torch.no_grad():
        assert torch.equal(model(x), torch.relu(MXFP8Linear.forward(layer, x)))
    assert log == []
    for table in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                  "_forward_hooks_always_called", "_backward_hooks"):
        assert not getattr(layer, table), table


def weight_norm(layer):
    with warnings.catch_warnings():  # torch.nn.utils.weight_norm is deprecated
        warnings.simplefilter("ignore", FutureWarning)
        return torch.nn.utils.weight_norm(layer)


def legacy_backward_hook(layer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer.register_backward_hook(lambda *args: None)


ATTACHMENTS = {
    "legacy backward hook": (legacy_backward_hook, r"register_backward_hook"),
    "state dict hook": (lambda m: m.register_state_dict_post_hook(lambda *a: None),
                        r"state-dict hooks \(_state_dict_hooks\)"),
    "state dict pre-hook": (lambda m: m.register_state_dict_pre_hook(lambda *a: None),
                            r"state-dict hooks \(_state_dict_pre_hooks\)"),
    "load pre-hook": (lambda m: m.register_load_state_dict_pre_hook(lambda *a: None),
                      r"state-dict hooks \(_load_state_dict_pre_hooks\)"),
    "load post-hook": (lambda m: m.register_load_state_dict_post_hook(lambda *a: None),
                       r"state-dict hooks \(_load_state_dict_post_hooks\)"),
    "instance forward": (lambda m: setattr(m, "forward", lambda x: x),
                         r"its forward is replaced on the instance"),
    "compiled": (lambda m: m.compile(), r"compiled with Module.compile\(\)"),
    "buffer": (lambda m: m.register_buffer("mask", torch.ones(1)),
               r"holds the buffer\(s\) 'mask' of its own"),
    "weight norm": (weight_norm, r"holds the parameter\(s\) 'weight_g', 'weight_v' of its own"),
    "clashing attribute": (lambda m: setattr(m, "rule", "mine"),
                           r"attribute\(s\) 'rule' would clash with MXFP8Linear's own"),
}


@pytest.mark.parametrize("attachment", list(ATTACHMENTS))
def test_quantize_model_skips_a_layer_whose_hooks_or_state_cannot_move(attachment):
    attach, reason = ATTACHMENTS[attachment]
    g = fresh_gen()
    k, n = random_width(g), random_width(g)
    model = torch.nn.Sequential(linear(k, n), linear(n, n))
    attach(model[0])
    before = list(model)
    kept = dict(model[0].__dict__)
    result = quantize_model(model)
    assert result.converted == ["1"] and list(result.skipped) == ["0"]
    assert re.search(reason, result.skipped["0"]), result.skipped["0"]
    assert model[0] is before[0] and model[0].__dict__ == kept  # the layer keeps all it had
    # Named exactly in 'include', such a layer is an error naming it and why.
    model = torch.nn.Sequential(linear(k, n), linear(n, n))
    attach(model[0])
    with pytest.raises(ValueError, match=rf"'include' names layer '0', which cannot be "
                                         rf"converted: .*{reason}"):
        quantize_model(model, include=["0", "1"])
    assert not any(isinstance(m, MXFP8Linear) for m in model.modules())
