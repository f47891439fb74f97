"""Writes run.py's results as results.json (everything) and results.md (a short summary)."""

import json
from pathlib import Path


def _status(step: dict) -> str:
    if "skipped" in step:
        return f"skipped ({step['skipped']})"
    if "error" in step:
        return f"FAILED: {step['error']}"
    return "ok" if step.get("ok") else "FAILED"


def markdown(data: dict) -> str:
    env = data["environment"]
    steps = data["steps"]
    where = env.get("gpu", "CPU (C++ reference)")
    lines = [
        "# all-MiniLM-L6-v2 through mxlinear",
        "",
        (f"{data['sentences']} sentences ({data['tokens']['total']} tokens, "
         f"{data['tokens']['min']}-{data['tokens']['max']} a sentence) on {where}; torch "
         f"{env['torch']}, transformers {env['transformers']}, sentence-transformers "
         f"{env['sentence_transformers']}, mxlinear {env['mxlinear']}."),
        "",
        "| step | result |",
        "| --- | --- |",
    ]
    s = steps.get("mxfp8_vs_bf16", {})
    if "cosine" in s:
        c = s["cosine"]
        lines.append(f"| MXFP8 vs bf16 embeddings ({s['swapped_layers']} layers swapped) | "
                     f"cosine min {c['min']:.5f}, median {c['median']:.5f}, mean {c['mean']:.5f}"
                     f" (required min >= {s['min_cosine_required']}): {_status(s)} |")
    else:
        lines.append(f"| MXFP8 vs bf16 embeddings | {_status(s)} |")
    s = steps.get("emulation_bound", {})
    if "max_ratio" in s:
        lines.append(
            f"| every layer vs float64 emulation | max abs(err)/bound {s['max_ratio']:.4f} over "
            f"{s['elements']} outputs of {s['calls']} calls ({s['layers']} layers); "
            f"{100 * s['correctly_rounded_fraction']:.2f}% equal the rounded float64 result; "
            f"activation bytes differing from the emulation: {s['quantize_mismatches']}; "
            f"calls with the underflow term: {s['underflow_calls']}: {_status(s)} |")
    else:
        lines.append(f"| every layer vs float64 emulation | {_status(s)} |")
    if "padded_batches" in data:
        pb = data["padded_batches"]
        shape = f"{pb['count']} padded batches of {pb['shape'][0]} x {pb['shape'][1]} tokens"
        s = steps.get("eager_padded", {})
        lines.append(f"| eager MXFP8, {shape}, run twice | same bits: {_status(s)} |")
        s = steps.get("compile", {})
        if "compiled_calls" in s:
            explain = s.get("whole_model_explain", {})
            whole = (f"; whole model under dynamo: {explain['graphs']} graphs, "
                     f"{explain['graph_breaks']} breaks" if "graphs" in explain else "")
            lines.append(
                f"| torch.compile of every MXFP8Linear (fullgraph) | {s['graphs_compiled']} "
                f"graphs, {s['compiled_calls']}/{s['expected_calls']} calls compiled, "
                f"{s['graph_breaks']} graph breaks, bit-identical to eager: {s['bit_identical']}"
                f"{whole}: {_status(s)} |")
        else:
            lines.append(f"| torch.compile of every MXFP8Linear (fullgraph) | {_status(s)} |")
        s = steps.get("cuda_graph", {})
        if "replays" in s:
            lines.append(f"| whole model in one CUDA graph | {s['replays']} replays, "
                         f"bit-identical to eager: {s['bit_identical']}: {_status(s)} |")
        else:
            lines.append(f"| whole model in one CUDA graph | {_status(s)} |")
    lines += ["", f"All checks passed: **{'yes' if data['ok'] else 'NO'}**", ""]
    return "\n".join(lines)


def write_report(data: dict, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    text = markdown(data)
    (out / "results.md").write_text(text)
    return text
