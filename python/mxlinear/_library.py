"""The part of the mxlinear op library defined in Python: ``mxlinear::quantize(Tensor x, str
rule="rceil")``. It maps the rule's name to its index and calls the C++ op ``mxlinear::_quantize``;
the name is resolved here because a str argument does not cross torch's stable ABI safely. As a
CompositeImplicitAutograd op it decomposes into ``_quantize`` under torch.compile and on meta
tensors, so it needs no fake implementation of its own."""

import torch

RULES = ("rceil", "floor")

_lib = torch.library.Library("mxlinear", "FRAGMENT")
_lib.define('quantize(Tensor x, str rule="rceil") -> (Tensor, Tensor)')


def _quantize(x: torch.Tensor, rule: str = "rceil"):
    if rule not in RULES:
        raise RuntimeError(
            f"mxlinear.quantize: argument 'rule' is '{rule}'; expected 'rceil' or 'floor'"
        )
    return torch.ops.mxlinear._quantize(x, RULES.index(rule))


_lib.impl("quantize", _quantize, "CompositeImplicitAutograd")
