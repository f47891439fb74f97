"""all-MiniLM-L6-v2 through mxlinear: every nn.Linear of a real sentence-embedding model swapped
for MXFP8Linear, then checked.

1. bf16 reference embeddings of sentences.txt (the unmodified model);
2. the same sentences with every nn.Linear swapped for MXFP8Linear: cosine similarity per
   sentence to the bf16 embeddings;
3. every swapped layer's output of that run against the float64 emulation of the MXFP8 contract,
   element by element, within the fp32 accumulation bound (docs/MXFP8.md);
4. the MXFP8 model with its linears under torch.compile (fullgraph) and the whole model under a
   CUDA graph, each bit-identical to eager MXFP8 on the same padded batches.

Writes results.json and results.md to --out and prints them; exits 1 if a check fails, 2 if it
cannot run. The model directory comes from prepare_weights.py (no network needed here).
"""

import argparse
import hashlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import graph_checks
import mxlinear
import torch
from layer_check import LayerCheck
from mxlinear.convert import quantize_model
from mxlinear.nn import MXFP8Linear
from report import write_report

# Run as a script, this directory is first on sys.path: graph_checks, layer_check and report
# are the modules beside this file.
HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
DEFAULT_MODEL = REPO_ROOT / ".devrun" / "minilm"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL,
                   help="directory written by prepare_weights.py (default: %(default)s)")
    p.add_argument("--sentences", type=Path, default=HERE / "sentences.txt",
                   help="one sentence a line (default: %(default)s)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cuda (needs a Hopper GPU) or cpu (the exact C++ reference; slow: use "
                        "--limit); default: %(default)s")
    p.add_argument("--limit", type=int, default=None,
                   help="use only the first N sentences (default: all)")
    p.add_argument("--batch-size", type=int, default=32,
                   help="sentences per batch, encoding and padded batches (default: %(default)s)")
    p.add_argument("--min-cosine", type=float, default=0.97,
                   help="the smallest accepted cosine similarity of an MXFP8 embedding to its "
                        "bf16 one (default: %(default)s)")
    p.add_argument("--skip", nargs="*", default=[], choices=("compile", "cuda-graph"),
                   help="steps to leave out")
    p.add_argument("--out", type=Path, default=HERE / "results",
                   help="where results.json and results.md go (default: %(default)s)")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error(f"argument --limit: is {args.limit}; expected a positive number of sentences")
    if args.batch_size < 1:
        p.error(f"argument --batch-size: is {args.batch_size}; expected at least 1")
    return args


def fail(message: str) -> None:
    print(f"run.py: {message}", file=sys.stderr)
    sys.exit(2)


def check_model_dir(path: Path) -> str:
    manifest = path / "manifest.json"
    if not manifest.is_file():
        fail(f"argument '--model' is '{path}', which has no manifest.json; expected the directory "
             "that examples/minilm/prepare_weights.py writes (run it on a machine with the "
             "package index, then carry the directory here)")
    files = json.loads(manifest.read_text())["files"]
    for name, meta in files.items():
        f = path / name
        if not f.is_file() or f.stat().st_size != meta["bytes"]:
            fail(f"argument '--model' is '{path}', whose {name} is missing or of the wrong size; "
                 "expected the files manifest.json lists (prepare the directory again)")
    weights = path / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    if digest != files["model.safetensors"]["sha256"]:
        fail(f"argument '--model' is '{path}', whose model.safetensors does not match its "
             "manifest.json; expected an intact copy (prepare the directory again)")
    return digest


def read_sentences(path: Path, limit):
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    sentences = [s for s in lines if s]
    if not sentences:
        fail(f"argument '--sentences' is '{path}', which has no sentences; expected one a line")
    return sentences[:limit] if limit else sentences


def load_model(path: Path, device: str):
    # The GPU machine has no network: never let the hub client try it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device=device).to(torch.bfloat16).eval()


def encode(model, sentences, batch_size):
    with torch.inference_mode():
        emb = model.encode(sentences, batch_size=batch_size, convert_to_tensor=True,
                           show_progress_bar=False)
    return emb.float()


def cosine_stats(ref, got):
    cos = torch.nn.functional.cosine_similarity(ref.double(), got.double(), dim=-1)
    return {"min": cos.min().item(), "median": cos.median().item(), "mean": cos.mean().item(),
            "per_sentence": [round(c, 6) for c in cos.tolist()]}


class Steps:
    """Runs steps in order; a step that raises is recorded as failed and the others still run.
    `state` holds what steps produce; a step that needs a missing entry fails without running."""

    def __init__(self, state):
        self.results = {}
        self.state = state

    def run(self, name, fn, needs=None):
        if needs is not None and needs not in self.state:
            self.results[name] = {"ok": False, "error": f"not run: no {needs} result"}
            print(f"[{name}] FAILED: not run, no {needs} result", flush=True)
            return self.results[name]
        start = time.perf_counter()
        try:
            result = fn()
        except Exception as e:  # reported in the results, then the run goes on
            traceback.print_exc()
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        result["seconds"] = round(time.perf_counter() - start, 2)
        self.results[name] = result
        print(f"[{name}] {'ok' if result.get('ok') else 'FAILED'} ({result['seconds']} s)",
              flush=True)
        return result

    def skip(self, name, reason):
        self.results[name] = {"ok": True, "skipped": reason}
        print(f"[{name}] skipped: {reason}", flush=True)


def environment(device):
    import sentence_transformers
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__,
           "sentence_transformers": sentence_transformers.__version__,
           "mxlinear": mxlinear.__version__, "device": device}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("argument '--device' is 'cuda', but torch sees no CUDA device; expected a Hopper "
             "GPU, or --device cpu with a small --limit")
    digest = check_model_dir(args.model)
    sentences = read_sentences(args.sentences, args.limit)
    torch.manual_seed(0)

    model = load_model(args.model, args.device)
    tokenizer = model.tokenizer
    lengths = [len(ids) for ids in tokenizer(sentences, truncation=True,
                                             max_length=model.max_seq_length)["input_ids"]]
    data = {"environment": environment(args.device), "model": str(args.model),
            "weights_sha256": digest, "sentences": len(sentences),
            "tokens": {"total": sum(lengths), "min": min(lengths), "max": max(lengths)}}
    state = {}
    steps = Steps(state)

    def reference():
        state["bf16"] = encode(model, sentences, args.batch_size)
        return {"ok": bool(torch.isfinite(state["bf16"]).all()),
                "shape": list(state["bf16"].shape)}

    def swap():
        skipped = quantize_model(model).skipped
        swapped = sum(isinstance(m, MXFP8Linear) for m in model.modules())
        left = [n for n, m in model.named_modules() if type(m) is torch.nn.Linear]
        state["mxfp8"] = encode(model, sentences, args.batch_size)
        cos = cosine_stats(state["bf16"], state["mxfp8"])
        return {"ok": swapped > 0 and not left and not skipped and cos["min"] >= args.min_cosine,
                "swapped_layers": swapped, "linear_layers_left": left, "layers_not_swapped": skipped,
                "min_cosine_required": args.min_cosine, "cosine": cos}

    def emulation():
        with LayerCheck(model) as check:
            again = encode(model, sentences, args.batch_size)
        summary = check.summary()
        # Hooks only read: the hooked run must give the same bits as the run of step 2.
        summary["same_bits_as_step_2"] = bool(torch.equal(again, state["mxfp8"]))
        summary["ok"] = (summary["max_ratio"] <= 1.0 and summary["quantize_mismatches"] == 0
                         and summary["same_bits_as_step_2"])
        return summary

    def compiled():
        result = graph_checks.compile_check(model, batches, state["eager"])
        try:
            result["whole_model_explain"] = graph_checks.explain_whole_model(model, batches[0])
        except Exception as e:  # informational only
            result["whole_model_explain"] = {"error": f"{type(e).__name__}: {e}"}
        return result

    def eager():
        state["eager"] = graph_checks.run_batches(model, batches)
        again = graph_checks.run_batches(model, batches)
        diff = graph_checks.first_difference(state["eager"], again)
        return {"ok": diff is None, "deterministic": diff is None, "first_difference": diff}

    batch = min(args.batch_size, len(sentences))
    length = -(-max(lengths) // 8) * 8
    batches = graph_checks.padded_batches(tokenizer, sentences, batch, length, args.device)
    data["padded_batches"] = {"count": len(batches), "shape": [batch, length]}

    steps.run("bf16_reference", reference)
    steps.run("mxfp8_vs_bf16", swap, needs="bf16")
    steps.run("emulation_bound", emulation, needs="mxfp8")
    steps.run("eager_padded", eager, needs="mxfp8")
    if "compile" in args.skip:
        steps.skip("compile", "--skip compile")
    else:
        steps.run("compile", compiled, needs="eager")
    if args.device != "cuda":
        steps.skip("cuda_graph", "needs CUDA")
    elif "cuda-graph" in args.skip:
        steps.skip("cuda_graph", "--skip cuda-graph")
    else:
        steps.run("cuda_graph",
                  lambda: graph_checks.cuda_graph_check(model, batches, state["eager"]),
                  needs="eager")

    data["steps"] = steps.results
    data["ok"] = all(r.get("ok") for r in steps.results.values())
    markdown = write_report(data, args.out)
    print(markdown)
    print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}")
    return 0 if data["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
