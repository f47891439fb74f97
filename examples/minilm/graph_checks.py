"""The MXFP8 model under torch.compile and under a CUDA graph, compared bit for bit with eager.

Both run fixed padded batches ([batch, length] token ids), so that every linear call sees the
same M as in the eager run: the MXFP8 result of a row depends on the kernel chosen per M."""

import contextlib
import functools

import torch
import torch._dynamo
from mxlinear.nn import MXFP8Linear

OUTPUTS = ("token_embeddings", "sentence_embedding")


def padded_batches(tokenizer, sentences, batch, length, device):
    """Token batches of exactly [batch, length]; the last is filled up with the first sentences."""
    batches = []
    for start in range(0, len(sentences), batch):
        chunk = sentences[start:start + batch]
        chunk = chunk + sentences[:batch - len(chunk)]
        enc = tokenizer(chunk, padding="max_length", truncation=True, max_length=length,
                        return_tensors="pt")
        batches.append({key: value.to(device) for key, value in enc.items()})
    return batches


def forward(model, features):
    # sentence-transformers modules add their outputs to the dict they get: pass a copy.
    out = model(dict(features))
    return {key: out[key] for key in OUTPUTS}


def run_batches(model, batches):
    with torch.inference_mode():
        return [{k: v.clone() for k, v in forward(model, f).items()} for f in batches]


def first_difference(reference, candidate):
    """None when every output tensor of every batch is bitwise equal; else where they differ."""
    for i, (ref, got) in enumerate(zip(reference, candidate)):
        for key in OUTPUTS:
            a, b = ref[key], got[key]
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"batch {i} {key}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
            differ = a.view(torch.int16 if a.element_size() == 2 else torch.int32) != b.view(
                torch.int16 if b.element_size() == 2 else torch.int32)
            if bool(differ.any()):
                count = int(differ.sum().item())
                return f"batch {i} {key}: {count} of {a.numel()} elements differ"
    return None


class CountingInductor:
    """An inductor backend that counts compiled graphs and calls of them, so a run that fell
    back to eager (say, past the recompile limit) cannot pass as compiled."""

    def __init__(self):
        self.graphs = 0
        self.calls = 0

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        self.graphs += 1
        compiled = compile_fx(gm, example_inputs)

        def run(*args):
            self.calls += 1
            return compiled(*args)

        return run


@contextlib.contextmanager
def replaced_modules(model, replace):
    """Swaps every MXFP8Linear m of `model` for replace(m) while active."""
    # Listed before any swap: a wrapper holds its module, and walking it would revisit that.
    swapped = [(parent, name, child) for parent in model.modules()
               for name, child in parent.named_children() if isinstance(child, MXFP8Linear)]
    for parent, name, child in swapped:
        setattr(parent, name, replace(child))
    try:
        yield len(swapped)
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)


def compile_check(model, batches, eager):
    """Every MXFP8Linear compiled with fullgraph=True (a graph break is an error), the rest of
    the model eager: the outputs must equal eager MXFP8's bit for bit, and every linear call must
    have gone through a compiled graph."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    backend = CountingInductor()
    layers = sum(isinstance(m, MXFP8Linear) for m in model.modules())
    # One cache entry per module instance may be needed: allow them all, and fail rather than
    # fall back to eager silently.
    limits = torch._dynamo.config.patch(recompile_limit=max(64, 4 * layers),
                                        fail_on_recompile_limit_hit=True)
    compiled_linear = functools.partial(torch.compile, fullgraph=True, backend=backend)
    with limits, replaced_modules(model, compiled_linear):
        compiled = run_batches(model, batches)
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    expected_calls = layers * len(batches)
    diff = first_difference(eager, compiled)
    result = {
        "layers_compiled": layers,
        "graphs_compiled": backend.graphs,
        "compiled_calls": backend.calls,
        "expected_calls": expected_calls,
        "graph_breaks": breaks,
        "bit_identical": diff is None,
        "first_difference": diff,
    }
    result["ok"] = diff is None and breaks == 0 and backend.calls == expected_calls
    return result


def explain_whole_model(model, features):
    """Informational: how dynamo splits the whole sentence-transformers forward (not fullgraph)."""
    torch._dynamo.reset()
    with torch.inference_mode():
        explanation = torch._dynamo.explain(model)(dict(features))
    reasons = [str(getattr(b, "reason", b)).splitlines()[0] for b in explanation.break_reasons]
    return {
        "graphs": explanation.graph_count,
        "graph_breaks": explanation.graph_break_count,
        "break_reasons": reasons[:10],
    }


def cuda_graph_check(model, batches, eager, warmup=3):
    """The eager MXFP8 model captured once in a CUDA graph with static inputs of one padded batch
    shape, replayed for every batch: the outputs must equal eager's bit for bit."""
    static = {key: value.clone() for key, value in batches[0].items()}
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                forward(model, static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = forward(model, static)
        replayed = []
        for features in batches:
            for key, value in static.items():
                value.copy_(features[key])
            graph.replay()
            replayed.append({k: v.clone() for k, v in static_out.items()})
        torch.cuda.synchronize()
    diff = first_difference(eager, replayed)
    return {"replays": len(batches), "bit_identical": diff is None, "first_difference": diff,
            "ok": diff is None}
