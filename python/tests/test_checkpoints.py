"""Reading and writing MXFP8 checkpoints: both layouts, written here by hand and by save_mxfp8,
and every way a checkpoint can be wrong."""

import json
import os
import random
import re
import struct

import emulation
import pytest
import torch

from safetensors.torch import save_file
from mxlinear.checkpoints import (
    CheckpointError,
    detect_format,
    load_mxfp8,
    read_safetensors,
    save_mxfp8,
)
from mxlinear.convert import quantize_model
from mxlinear.nn import MXFP8Linear
from test_ops import fresh_seed

MODELOPT_CONFIG = {"producer": {"name": "modelopt", "version": "0.40.0"},
                   "quantization": {"quant_algo": "MXFP8", "kv_cache_quant_algo": None,
                                    "exclude_modules": ["lm_head", "*.gate"]}}


def ct_args(**changes):
    args = {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 32, "symmetric": True,
            "dynamic": False, "scale_dtype": "torch.uint8", "zp_dtype": "torch.uint8", "observer": "minmax"}
    return {**args, **changes}


def ct_config(group_changes=None, weight_changes=None, **top):
    group = {"targets": ["Linear"], "weights": ct_args(**(weight_changes or {})),
             "input_activations": ct_args(dynamic=True, observer=None), "output_activations": None,
             "format": "mxfp8-quantized", **(group_changes or {})}
    q = {"quant_method": "compressed-tensors", "format": "mxfp8-quantized",
         "quantization_status": "compressed", "config_groups": {"group_0": group},
         "ignore": ["lm_head", "re:.*\\.gate$"], "kv_cache_scheme": None}
    return {"architectures": ["Tiny"], "quantization_config": {**q, **top}}


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 96)
        self.gate = torch.nn.Linear(64, 4, bias=False)  # excluded by both configs above
        self.out = torch.nn.Linear(96, 64, bias=False)
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x):
        gate = torch.sigmoid(self.gate(x)).mean(-1, keepdim=True)
        return self.norm(x + self.out(torch.relu(self.proj(x))) * gate)


class Tiny(torch.nn.Module):
    def __init__(self, vocab=50):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 64)
        self.layers = torch.nn.ModuleList([Layer(), Layer()])
        self.lm_head = torch.nn.Linear(64, vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied, as many language models are

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)


QUANTIZED = ["layers.0.proj", "layers.0.out", "layers.1.proj", "layers.1.out"]


def fresh_gen() -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(fresh_seed())  # also reseeds the global generator modules draw from
    return g


def scrambled(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    return model


def hand_written_tensors(g) -> dict:
    """A Tiny checkpoint built from emulation.py's quantizer, not from mxlinear."""
    model = Tiny()
    tensors = {}
    for key, value in model.state_dict().items():
        if key == "lm_head.weight":
            continue  # tied to embed.weight, stored once
        module = key.rpartition(".")[0]
        if module in QUANTIZED and key.endswith(".weight"):
            data, scales = emulation.quantize(torch.randn(value.shape, generator=g) * 0.1)
            tensors[key] = data.view(torch.float8_e4m3fn)
            tensors[module + ".weight_scale"] = scales
        else:
            dtype = torch.bfloat16 if module in QUANTIZED else value.dtype
            tensors[key] = torch.randn(value.shape, generator=g).to(dtype)
    return tensors


def write_checkpoint(directory, tensors, config, config_name):
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    with open(os.path.join(directory, config_name), "w") as f:
        json.dump(config, f)
    return directory


def assert_loaded(model, tensors, names):
    assert names == QUANTIZED
    for name, module in model.named_modules():
        if name in QUANTIZED:
            assert isinstance(module, MXFP8Linear)
            assert torch.equal(module.weight.view(torch.uint8), tensors[name + ".weight"].view(torch.uint8))
            assert torch.equal(module.weight_scale, tensors[name + ".weight_scale"].view(torch.uint8))
            if name + ".bias" in tensors:  # cast to the model's bias dtype, as load_state_dict would
                assert module.bias.dtype == torch.float32
                assert torch.equal(module.bias, tensors[name + ".bias"].float())
        elif isinstance(module, torch.nn.Linear):
            assert type(module) is torch.nn.Linear
    state = model.state_dict()
    for key, value in tensors.items():
        if key.rpartition(".")[0] not in QUANTIZED:
            assert torch.equal(state[key], value)
    assert model.lm_head.weight is model.embed.weight


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize("layout", ["hf_quant_config", "config_json", "mxfp8_tag", "compressed_tensors"])
def test_load_hand_written_checkpoint(tmp_path, layout):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    tensors["layers.1.proj.weight_scale"] = tensors["layers.1.proj.weight_scale"].view(torch.float8_e8m0fnu)
    config, name = {
        "hf_quant_config": (MODELOPT_CONFIG, "hf_quant_config.json"),
        "config_json": ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "MXFP8",
                                                 "ignore": ["lm_head", "layers.?.gate"]}}, "config.json"),
        "mxfp8_tag": ({"quantization_config": {"quant_method": "mxfp8",
                                               "ignored_layers": ["lm_head", "*gate"]}},
                      "config.json"),
        "compressed_tensors": (ct_config(), "config.json"),
    }[layout]
    write_checkpoint(tmp_path, tensors, config, name)
    model = scrambled(Tiny())
    names = load_mxfp8(model, tmp_path)
    assert_loaded(model, tensors, names)
    ids = torch.randint(0, 50, (2, 7), generator=g)
    assert torch.isfinite(model(ids)).all()


def test_load_from_a_file_or_a_state_dict_with_a_given_config(tmp_path):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    save_file(tensors, tmp_path / "weights.safetensors")
    (tmp_path / "quant.json").write_text(json.dumps(MODELOPT_CONFIG))
    model = scrambled(Tiny())
    names = load_mxfp8(model, tmp_path / "weights.safetensors", tmp_path / "quant.json")
    assert_loaded(model, tensors, names)
    model = scrambled(Tiny())
    assert_loaded(model, tensors, load_mxfp8(model, tensors, ct_config()))
    with pytest.raises(TypeError, match=r"'config' is required"):
        load_mxfp8(Tiny(), tensors)


def test_load_sharded_checkpoint(tmp_path):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for shard, shard_keys in shards.items():
        save_file({k: tensors[k] for k in shard_keys}, tmp_path / shard)
    index = {"metadata": {}, "weight_map": {k: s for s, ks in shards.items() for k in ks}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(MODELOPT_CONFIG))
    model = scrambled(Tiny())
    assert_loaded(model, tensors, load_mxfp8(model, tmp_path))


def stale(tensors: dict) -> dict:
    """Other values under the same names, dtypes and shapes, as an earlier save would have left."""
    return {k: (v.view(torch.uint8) ^ 0x11).view(v.dtype) if v.element_size() == 1 else v + 1
            for k, v in tensors.items()}


def write_shards(directory, tensors, index=True):
    """Two shards (even and odd keys), with their index unless not ``index``."""
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2],
              "model-00002-of-00002.safetensors": keys[1::2]}
    for shard, shard_keys in shards.items():
        save_file({k: tensors[k] for k in shard_keys}, directory / shard)
    weight_map = {k: s for s, ks in shards.items() for k in ks}
    if index:
        (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (directory / "hf_quant_config.json").write_text(json.dumps(MODELOPT_CONFIG))
    return weight_map


def test_the_index_says_which_shard_holds_each_tensor(tmp_path):
    # Stale copies in a listed shard and in a file the index does not list are never read,
    # whichever file comes first or last.
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    weight_map = write_shards(tmp_path, tensors)
    first, second = sorted(set(weight_map.values()))
    in_first = {k: v for k, v in tensors.items() if weight_map[k] == first}
    in_second = {k: v for k, v in tensors.items() if weight_map[k] == second}
    save_file({**in_second, **stale(in_first)}, tmp_path / second)
    save_file(stale(tensors), tmp_path / "model-00000-of-00002.safetensors")
    save_file(stale(tensors), tmp_path / "model-00003-of-00003.safetensors")
    model = scrambled(Tiny())
    assert_loaded(model, tensors, load_mxfp8(model, tmp_path))


def test_an_index_that_does_not_match_its_shards_is_an_error(tmp_path):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    weight_map = write_shards(tmp_path, tensors)
    index = tmp_path / "model.safetensors.index.json"
    first, second = sorted(set(weight_map.values()))
    key = next(k for k in sorted(tensors) if weight_map[k] == first)
    index.write_text(json.dumps({"weight_map": {**weight_map, key: second}}))
    with pytest.raises(CheckpointError, match=rf"^load_mxfp8: '{re.escape(str(index))}' places "
                                              rf"tensor '{key}' in "
                                              rf"'{re.escape(str(tmp_path / second))}', which "
                                              r"does not hold it$"):
        load_mxfp8(Tiny(), tmp_path)
    index.write_text(json.dumps({"weight_map": {k: v for k, v in weight_map.items() if k != key}}))
    with pytest.raises(CheckpointError, match=rf"^load_mxfp8: '{re.escape(str(tmp_path / first))}' "
                                              rf"holds tensor '{key}', which "
                                              rf"'{re.escape(str(index))}' does not place"):
        load_mxfp8(Tiny(), tmp_path)
    index.write_text(json.dumps({"weight_map": {**weight_map, key: "absent.safetensors"}}))
    with pytest.raises(FileNotFoundError, match=r"names the shard 'absent\.safetensors', which is "
                                                r"not a file in"):
        load_mxfp8(Tiny(), tmp_path)


def malformed_indexes(weight_map: dict) -> dict:
    """Index files that are not a weight_map of tensor name to shard file name, each with what the
    error says after the index's name."""
    key = sorted(weight_map)[0]
    shard = weight_map[key]
    maps = rf": weight_map maps '{re.escape(key)}' to "

    def index_of(value) -> bytes:
        return json.dumps({"metadata": {}, "weight_map": value}).encode()

    def cannot_parse(error: str) -> str:
        return rf" cannot be parsed as JSON \({error}: .*\); expected a JSON object "

    expected = (r"; expected a JSON object whose 'weight_map' maps each tensor name to its "
                r"shard's file name$")
    return {
        "empty file": (b"", cannot_parse("JSONDecodeError")),
        "cut short": (index_of(weight_map)[:-7], cannot_parse("JSONDecodeError")),
        "not UTF-8": (b'{"weight_map": {"a": "\xff\xfe"}}', cannot_parse("UnicodeDecodeError")),
        "UTF-16": (index_of(weight_map).decode().encode("utf-16"),
                   cannot_parse("UnicodeDecodeError")),
        "integer past the digit limit": (b'{"weight_map": ' + b"7" * 5000 + b"}",
                                         cannot_parse("ValueError")),
        "nesting past the stack": (b"[" * 200_000 + b"]" * 200_000, cannot_parse("RecursionError")),
        "a list": (b"[1, 2]", r" holds a list" + expected),
        "null": (b"null", r" holds a NoneType" + expected),
        "no weight_map": (b'{"metadata": {}}', r": weight_map is None" + expected),
        "weight_map a list": (index_of(sorted(weight_map)), r": weight_map is \['.*\.\.\." + expected),
        "weight_map a string": (index_of(shard), rf": weight_map is '{re.escape(shard)}'" + expected),
        "weight_map empty": (index_of({}), r": weight_map is empty" + expected),
        "a file name a number": (index_of({**weight_map, key: 3}),
                                 maps + r"3; expected its shard's file name \(a string\)$"),
        "a file name null": (index_of({**weight_map, key: None}), maps + "None; expected"),
        "a file name a list": (index_of({**weight_map, key: [shard]}), maps + r"\['"),
        "a path": (index_of({**weight_map, key: "../" + shard}),
                   rf" names the shard '\.\./{re.escape(shard)}'; expected a file name in the "
                   "directory$"),
        "an empty name": (index_of({**weight_map, key: ""}), r" names the shard ''; expected"),
        "the parent": (index_of({**weight_map, key: ".."}), r" names the shard '\.\.'; expected"),
    }


def same_json(a, b):
    """Whether bytes a parse as the same JSON value as bytes b."""
    try:
        return json.loads(a) == json.loads(b)
    except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
        return False


def test_a_malformed_index_is_named(tmp_path):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    weight_map = write_shards(tmp_path, tensors)
    index = tmp_path / "model.safetensors.index.json"
    model = Tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for what, (contents, message) in malformed_indexes(weight_map).items():
        index.write_bytes(contents)
        with pytest.raises(CheckpointError, match=rf"^load_mxfp8: '{re.escape(str(index))}'{message}"):
            load_mxfp8(model, tmp_path)
    # Random bytes, and random damage to a valid index, end in a CheckpointError (or, where the
    # damage falls in a shard's name, the FileNotFoundError of a shard that does not exist).
    rng = random.Random(fresh_seed())
    valid = json.dumps({"weight_map": weight_map}).encode()
    variants = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) for _ in range(30)]
    for _ in range(60):
        damaged = bytearray(valid)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        variants.append(bytes(damaged))
    for variant in variants:
        if same_json(variant, valid):
            continue  # a byte replaced with itself, or whitespace with whitespace: still valid
        index.write_bytes(variant)
        try:
            load_mxfp8(model, tmp_path)
        except CheckpointError as e:
            assert str(e).startswith("load_mxfp8: ") and "expected" in str(e), str(e)
        except FileNotFoundError as e:
            assert "names the shard" in str(e), str(e)
        else:
            raise AssertionError(f"a damaged index loaded: {variant!r}")
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_without_an_index_a_tensor_in_two_files_is_an_error(tmp_path):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    weight_map = write_shards(tmp_path, tensors, index=False)
    key = sorted(tensors)[0]
    extra = tmp_path / "model-00003-of-00003.safetensors"
    save_file(stale({key: tensors[key]}), extra)
    with pytest.raises(CheckpointError,
                       match=rf"^load_mxfp8: tensor '{key}' is stored twice, in "
                             rf"'{re.escape(str(tmp_path / weight_map[key]))}' and "
                             rf"'{re.escape(str(extra))}', and '{re.escape(str(tmp_path))}' has no "
                             r"model\.safetensors\.index\.json to say which file holds it$"):
        load_mxfp8(Tiny(), tmp_path)
    os.remove(extra)
    model = scrambled(Tiny())
    assert_loaded(model, tensors, load_mxfp8(model, tmp_path))


@pytest.mark.parametrize("fmt", ["modelopt", "compressed-tensors"])
def test_save_then_load_round_trip(tmp_path, fmt):
    g = fresh_gen()
    source = Tiny()
    for layer in source.layers:
        layer.proj.bias.data = layer.proj.bias.data.bfloat16()  # a bias dtype of its own survives
    done = quantize_model(source, exclude=["lm_head", "*.gate"], rule="floor")
    assert done.converted == QUANTIZED
    if fmt == "compressed-tensors":  # an existing config.json keeps its other keys
        (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Tiny"], "hidden_size": 64}))
    save_mxfp8(source, tmp_path, format=fmt)
    config_file = "hf_quant_config.json" if fmt == "modelopt" else "config.json"
    config = json.loads((tmp_path / config_file).read_text())
    assert detect_format(config) == fmt
    if fmt == "compressed-tensors":
        assert config["hidden_size"] == 64
    target = scrambled(Tiny())
    for layer in target.layers:
        layer.proj.bias.data = layer.proj.bias.data.bfloat16()
    assert load_mxfp8(target, tmp_path) == QUANTIZED
    for key, value in source.state_dict().items():
        got = target.state_dict()[key]
        assert got.dtype == value.dtype and torch.equal(got.view(torch.uint8), value.view(torch.uint8))
    ids = torch.randint(0, 50, (3, 5), generator=g)
    assert torch.equal(target(ids), source(ids))


def test_load_into_a_meta_model_with_assign(tmp_path):
    g = fresh_gen()
    source = Tiny()
    quantize_model(source, exclude=["lm_head", "*.gate"])
    save_mxfp8(source, tmp_path)
    with torch.device("meta"):
        target = Tiny()
    load_mxfp8(target, tmp_path, assign=True)
    assert target.lm_head.weight is target.embed.weight  # still tied
    assert all(t.device.type == "cpu" for t in target.state_dict().values())
    ids = torch.randint(0, 50, (2, 4), generator=g)
    assert torch.equal(target(ids), source(ids))


@pytest.mark.parametrize("strict", [True, False])
def test_a_meta_layer_whose_bias_the_checkpoint_lacks_is_named(strict):
    g = fresh_gen()
    tensors = broken(hand_written_tensors(g), lambda t: t.pop("layers.1.proj.bias"))
    with torch.device("meta"):
        model = Tiny()
    # without strict the model's own bias would stay, but a meta bias has no values to keep
    with pytest.raises(CheckpointError, match=r"the checkpoint lacks 'layers\.1\.proj\.bias'"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG, strict=strict, assign=True)
    assert not any(isinstance(m, MXFP8Linear) for m in model.modules())
    assert all(t.is_meta for t in model.state_dict().values())


def test_a_meta_model_needs_assign():
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    with torch.device("meta"):
        model = Tiny()
    with pytest.raises(CheckpointError, match=r"argument 'assign' is False, but the model holds "
                                              r"'embed\.weight', 'layers\.0\.gate\.weight', .* on "
                                              r"the meta device.*expected assign=True"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG)
    assert not any(isinstance(m, MXFP8Linear) for m in model.modules())
    assert all(t.is_meta for t in model.state_dict().values())
    model.layers[1].norm.to_empty(device="cpu")  # one module materialised, the rest still meta
    with pytest.raises(CheckpointError, match=r"argument 'assign' is False.*'embed\.weight'"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG)
    assert_loaded(model, tensors, load_mxfp8(model, tensors, MODELOPT_CONFIG, assign=True))


def test_loading_a_state_dict_copies_it_unless_assign():
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    for name in QUANTIZED:  # the model's bias dtype, so that no conversion copies it by the way
        if name + ".bias" in tensors:
            tensors[name + ".bias"] = tensors[name + ".bias"].float()
    model = Tiny()
    assert_loaded(model, tensors, load_mxfp8(model, tensors, MODELOPT_CONFIG))
    state = model.state_dict()
    for key, value in tensors.items():
        assert state[key].untyped_storage().data_ptr() != value.untyped_storage().data_ptr(), key
    loaded = {k: v.clone() for k, v in state.items()}
    with torch.no_grad():  # the caller goes on using its tensors; the model must not follow
        for value in tensors.values():
            if value.element_size() == 1:
                value.view(torch.uint8).bitwise_xor_(1)
            else:
                value.add_(1)
    assert all(torch.equal(v.view(torch.uint8), model.state_dict()[k].view(torch.uint8))
               for k, v in loaded.items())
    model = Tiny()
    load_mxfp8(model, tensors, MODELOPT_CONFIG, assign=True)  # assign takes the tensors as they are
    for name in QUANTIZED:
        layer = model.get_submodule(name)
        assert layer.weight.data_ptr() == tensors[name + ".weight"].data_ptr()
        assert layer.weight_scale.data_ptr() == tensors[name + ".weight_scale"].data_ptr()


# --------------------------------------------------------------------------- configs


@pytest.mark.parametrize("config, fmt", [
    (MODELOPT_CONFIG, "modelopt"),
    ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "mxfp8"}}, "modelopt"),
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "MXFP8"}}, "modelopt"),
    ({"quant_method": "mxfp8"}, "modelopt"),
    (ct_config(), "compressed-tensors"),
    (ct_config()["quantization_config"], "compressed-tensors"),
    (ct_config(group_changes={"input_activations": None, "format": None}, format="float-quantized"),
     "compressed-tensors"),
    (ct_config(weight_changes={"scale_dtype": "uint8"}), "compressed-tensors"),
])
def test_detect_format(config, fmt):
    assert detect_format(config) == fmt


@pytest.mark.parametrize("config, message", [
    ({"quantization": {"quant_algo": "NVFP4"}}, r"quant_algo is 'NVFP4'; mxlinear loads 'MXFP8'"),
    ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}, r"quant_algo is 'FP8'"),
    ({"quantization": {"quant_algo": "MXFP8", "group_size": 16}}, r"group_size is 16; MXFP8 needs 32"),
    ({"quantization": {"quant_algo": "MXFP8", "exclude_modules": "lm_head"}},
     r"excluded modules are 'lm_head'"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, r"quant_method is 'gptq'"),
    ({"architectures": ["Tiny"]}, r"quant_method is None"),
    ({"quantization_config": []}, r"quantization_config is \[\]"),
    (ct_config(weight_changes={"group_size": 128}),
     r"config_groups\['group_0'\]\.weights\.group_size is 128; MXFP8 needs 32"),
    (ct_config(weight_changes={"type": "int"}), r"weights\.type is 'int'"),
    (ct_config(weight_changes={"num_bits": 4}), r"weights\.num_bits is 4"),
    (ct_config(weight_changes={"scale_dtype": None}), r"weights\.scale_dtype is None; MXFP8 needs 'uint8'"),
    (ct_config(weight_changes={"scale_dtype": "torch.bfloat16"}), r"scale_dtype is 'bfloat16'"),
    (ct_config(weight_changes={"symmetric": False}), r"weights\.symmetric is False"),
    (ct_config(weight_changes={"strategy": "channel"}), r"weights\.strategy is 'channel'"),
    (ct_config(group_changes={"format": "pack-quantized"}), r"format 'pack-quantized'"),
    (ct_config(group_changes={"format": None}, format="dense"), r"format 'dense'"),
    (ct_config(group_changes={"input_activations": ct_args(strategy="token", group_size=None,
                                                           dynamic=True)}),
     r"input_activations\.strategy is 'token'"),
    (ct_config(group_changes={"input_activations": ct_args()}), r"input_activations\.dynamic is False"),
    (ct_config(group_changes={"targets": "Linear"}), r"targets is 'Linear'; expected a list"),
    (ct_config(config_groups={}), r"config_groups is \{\}"),
    (ct_config(ignore="lm_head"), r"ignore is 'lm_head'"),
    (ct_config(ignore=["re:model.(layers"]), r"ignore: 're:model.\(layers' is not a valid regular"),
])
def test_detect_format_rejects(config, message):
    with pytest.raises(CheckpointError, match=message) as raised:
        detect_format(config)
    assert str(raised.value).startswith("detect_format: argument 'config': "), str(raised.value)


def test_detect_format_rejects_non_mappings():
    with pytest.raises(TypeError, match=r"is a list; expected a mapping"):
        detect_format([MODELOPT_CONFIG])
    with pytest.raises(TypeError, match=r"^detect_format: argument 'config' is a list; expected a "
                                        r"mapping \(parsed JSON\)$"):
        detect_format([MODELOPT_CONFIG])


def test_config_files_must_exist_and_parse(tmp_path):
    save_file({"x": torch.zeros(1)}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: no quantization config in"):
        load_mxfp8(Tiny(), tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["Tiny"]}')  # no quantization_config
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: no quantization config in"):
        load_mxfp8(Tiny(), tmp_path)
    (tmp_path / "hf_quant_config.json").write_text('{"quantization": {"quant_algo": "MXFP8",')
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: '.*hf_quant_config\.json' cannot be "
                                              r"parsed as JSON \(JSONDecodeError: "):
        load_mxfp8(Tiny(), tmp_path)
    (tmp_path / "hf_quant_config.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: .* cannot be parsed as JSON "
                                              r"\(UnicodeDecodeError: "):
        load_mxfp8(Tiny(), tmp_path)
    (tmp_path / "hf_quant_config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: .* holds a list; expected a JSON object$"):
        load_mxfp8(Tiny(), tmp_path)
    os.remove(tmp_path / "model.safetensors")
    with pytest.raises(FileNotFoundError, match=r"^load_mxfp8: no \.safetensors files"):
        load_mxfp8(Tiny(), tmp_path)


def test_every_load_error_names_load_mxfp8(tmp_path):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    bad_config = tmp_path / "nvfp4.json"
    bad_config.write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    no_config = tmp_path / "no_config"
    no_config.mkdir()
    save_file({"x": torch.zeros(1)}, no_config / "model.safetensors")
    calls = [
        lambda: load_mxfp8(Tiny(), tensors, {"quantization": {"quant_algo": "NVFP4"}}),
        lambda: load_mxfp8(Tiny(), tensors, ct_config(weight_changes={"group_size": 128})),
        lambda: load_mxfp8(Tiny(), tensors, bad_config),
        lambda: load_mxfp8(Tiny(), no_config),
        lambda: load_mxfp8(Tiny(), tmp_path / "absent.safetensors", MODELOPT_CONFIG),
        lambda: load_mxfp8(Tiny(), broken(tensors, lambda t: t.pop("layers.0.out.weight")),
                           MODELOPT_CONFIG),
        lambda: load_mxfp8(Tiny(), broken(tensors, lambda t: t.update(
            {"layers.0.out.weight": t["layers.0.out.weight"][:32]})), MODELOPT_CONFIG),
        lambda: load_mxfp8(Tiny(), broken(tensors, lambda t: t.update(
            {"layers.0.out.weight": t["layers.0.out.weight"].bfloat16()})), MODELOPT_CONFIG),
        lambda: load_mxfp8(Tiny(), broken(tensors, lambda t: t.update(
            {"layers.1.norm.weight": torch.zeros(65)})), MODELOPT_CONFIG),
        lambda: load_mxfp8(Tiny(), broken(tensors, lambda t: t.update(
            {"layers.0.gate.weight_scale": torch.zeros(4, 2, dtype=torch.uint8)})),
            MODELOPT_CONFIG),
        lambda: load_mxfp8(torch.nn.Sequential(torch.nn.Linear(40, 8)),
                           {"0.weight": torch.zeros(8, 40)}, MODELOPT_CONFIG),
    ]
    messages = []
    for call in calls:
        with pytest.raises((CheckpointError, FileNotFoundError)) as caught:
            call()
        messages.append(str(caught.value))
    assert len(set(messages)) == len(calls), messages
    assert [m for m in messages if not m.startswith("load_mxfp8: ")] == []


# --------------------------------------------------------------------------- bad tensors


def broken(tensors, change):
    tensors = dict(tensors)
    change(tensors)
    return tensors


@pytest.mark.parametrize("config", [MODELOPT_CONFIG, ct_config()],
                         ids=["modelopt", "compressed-tensors"])
@pytest.mark.parametrize("change, message", [
    (lambda t: t.update({"layers.0.out.weight": t["layers.0.out.weight"].bfloat16()}),
     r"tensor 'layers\.0\.out\.weight' has dtype bfloat16; expected float8_e4m3fn"),
    (lambda t: t.update({"layers.1.proj.weight_scale": t["layers.1.proj.weight_scale"].float()}),
     r"tensor 'layers\.1\.proj\.weight_scale' has dtype float32; expected uint8 or float8_e8m0fnu"),
    (lambda t: t.update({"layers.1.proj.weight_scale": t["layers.1.proj.weight_scale"][:, :1]}),
     r"tensor 'layers\.1\.proj\.weight_scale' has shape \[96, 1\]; expected \[96, 2\]"),
    (lambda t: t.update({"layers.0.out.weight": t["layers.0.out.weight"][:32]}),
     r"tensor 'layers\.0\.out\.weight' has shape \[32, 96\]; expected \[64, 96\]"),
    (lambda t: t.pop("layers.0.proj.weight_scale"),
     r"missing tensor 'layers\.0\.proj\.weight_scale': the \S+ config quantizes layer 'layers\.0\.proj'"),
    (lambda t: t.pop("layers.1.out.weight"), r"missing tensor 'layers\.1\.out\.weight'"),
    (lambda t: t.update({"layers.0.proj.bias": t["layers.0.proj.bias"][:5]}),
     r"tensor 'layers\.0\.proj\.bias' has shape \[5\]; expected \[96\]"),
    (lambda t: t.update({"layers.0.gate.weight_scale": torch.zeros(4, 2, dtype=torch.uint8)}),
     r"tensor 'layers\.0\.gate\.weight_scale' is quantized, but the \S+ config leaves layer "
     r"'layers\.0\.gate'"),
    (lambda t: t.update({"layers.1.norm.weight": torch.zeros(65)}),
     r"tensor 'layers\.1\.norm\.weight' has shape \[65\]; expected \[64\]"),
    (lambda t: t.pop("embed.weight"), r"the checkpoint lacks 'embed\.weight', 'lm_head\.weight'"),
    (lambda t: t.update({"embed.weight": t["embed.weight"].to(torch.float8_e4m3fn)}),
     r"tensor 'embed\.weight' has dtype float8_e4m3fn; the model holds it as float32"),
    (lambda t: t.update({"layers.0.proj.bias": t["layers.0.proj.bias"].to(torch.int32)}),
     r"tensor 'layers\.0\.proj\.bias' has dtype int32; expected a float dtype"),
    (lambda t: t.pop("layers.1.proj.bias"), r"the checkpoint lacks 'layers\.1\.proj\.bias'"),
    (lambda t: t.update({"layers.0.proj.input_scale": torch.ones(1), "extra": torch.ones(1)}),
     r"the model has no place for 'extra', 'layers\.0\.proj\.input_scale'"),
])
def test_bad_tensors_are_named_and_leave_the_model_alone(config, change, message):
    g = fresh_gen()
    model = Tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"^load_mxfp8: {message}"):
        load_mxfp8(model, broken(hand_written_tensors(g), change), config)
    assert not any(isinstance(m, MXFP8Linear) for m in model.modules())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_non_strict_load_skips_extra_and_missing_tensors():
    g = fresh_gen()
    tensors = broken(hand_written_tensors(g),
                     lambda t: (t.pop("layers.1.proj.bias"), t.update({"extra": torch.ones(1)})))
    model = Tiny()
    kept_bias = model.layers[1].proj.bias.detach().clone()
    assert load_mxfp8(model, tensors, MODELOPT_CONFIG, strict=False) == QUANTIZED
    assert torch.equal(model.layers[1].proj.bias, kept_bias)  # the model's own bias stays


def test_layer_with_in_features_off_the_block_size_cannot_be_quantized():
    model = torch.nn.Sequential(torch.nn.Linear(40, 8))
    tensors = {"0.weight": torch.zeros(8, 40, dtype=torch.float8_e4m3fn),
               "0.weight_scale": torch.zeros(8, 1, dtype=torch.uint8), "0.bias": torch.zeros(8)}
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: layer '0' has in_features = 40.*multiple of 32"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG)


def test_an_mxfp8_layer_the_config_leaves_unquantized_is_an_error():
    model = torch.nn.Sequential(MXFP8Linear(32, 8))
    tensors = {"0.weight": torch.zeros(8, 32), "0.bias": torch.zeros(8)}
    with pytest.raises(CheckpointError,
                       match=r"^load_mxfp8: layer '0' is an MXFP8Linear, but the modelopt config leaves it"):
        load_mxfp8(model, tensors, {"quantization": {"quant_algo": "MXFP8", "exclude_modules": ["0"]}})


def test_a_quantized_layer_does_not_supply_its_tied_tensor():
    g = fresh_gen()
    model = Tiny()  # lm_head is tied to embed; here the checkpoint quantizes lm_head
    tensors = hand_written_tensors(g)
    data, scales = emulation.quantize(tensors.pop("embed.weight"))
    tensors.update({"lm_head.weight": data.view(torch.float8_e4m3fn), "lm_head.weight_scale": scales})
    config = {"quantization": {"quant_algo": "MXFP8", "exclude_modules": ["*.gate"]}}
    with pytest.raises(CheckpointError, match=r"the checkpoint lacks 'embed\.weight'$"):
        load_mxfp8(model, tensors, config)
    tensors["embed.weight"] = torch.randn(50, 64, generator=g)
    assert load_mxfp8(model, tensors, config) == QUANTIZED + ["lm_head"]
    assert torch.equal(model.embed.weight, tensors["embed.weight"])
    assert torch.equal(model.lm_head.weight.view(torch.uint8), data)


def test_reloading_into_converted_layers_replaces_them():
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    quantize_model(model, exclude=["lm_head", "*.gate"])
    assert_loaded(model, tensors, load_mxfp8(model, tensors, ct_config()))


def test_reloading_keeps_the_layers_options():
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    quantize_model(model, exclude=["lm_head", "*.gate"])
    choices = [("mx", True, torch.bfloat16), ("bf16", False, torch.float32), ("mx", None, None),
               (None, True, torch.float16)]
    random.Random(fresh_seed()).shuffle(choices)
    for name, (activation, batch_invariant, out_dtype) in zip(QUANTIZED, choices):
        layer = model.get_submodule(name)
        layer.activation, layer.batch_invariant, layer.out_dtype = activation, batch_invariant, out_dtype
    assert_loaded(model, tensors, load_mxfp8(model, tensors, ct_config()))
    for name, options in zip(QUANTIZED, choices):
        layer = model.get_submodule(name)
        assert (layer.activation, layer.batch_invariant, layer.out_dtype) == options, name
        assert layer.rule is None  # the checkpoint's weights, quantized with a rule it does not record
    # an out_dtype given to load_mxfp8 is every new layer's; the other options stay
    assert_loaded(model, tensors, load_mxfp8(model, tensors, ct_config(), out_dtype=torch.float16))
    for name, (activation, batch_invariant, _) in zip(QUANTIZED, choices):
        layer = model.get_submodule(name)
        assert (layer.activation, layer.batch_invariant, layer.out_dtype) == (
            activation, batch_invariant, torch.float16)


def test_loading_moves_the_layers_hooks_to_the_replacements():
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    seen = []
    proj, out = model.layers[0].proj, model.layers[1].out
    handles = [
        proj.register_forward_hook(lambda m, args, output: seen.append(("proj", m, output))),
        out.register_forward_pre_hook(lambda m, args: (args[0] * 0,)),  # zeroes the layer's input
    ]
    proj.layer_index = 0
    model.eval()
    assert_loaded(model, tensors, load_mxfp8(model, tensors, MODELOPT_CONFIG))
    new_proj, new_out = model.layers[0].proj, model.layers[1].out
    assert new_proj.layer_index == 0 and not new_proj.training
    ids = torch.randint(0, 50, (2, 5), generator=g)
    with torch.no_grad():
        zeroed = model(ids)
        assert len(seen) == 1 and seen[0][1] is new_proj
        inner = []
        new_out.register_forward_hook(lambda m, args, output: inner.append(output))
        model(ids)
        assert new_out.bias is None and not inner[0].any()  # the pre-hook zeroed its input
        for handle in handles:
            handle.remove()
        seen.clear()
        assert not torch.equal(model(ids), zeroed) and seen == []


def test_reloading_moves_state_dict_hooks_with_the_layer():
    # An MXFP8Linear's state dict keeps its layout on reload, so its state-dict hooks move too,
    # and a load pre-hook registered with its module is called with the replacement.
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    quantize_model(model, exclude=["lm_head", "*.gate"])
    calls = []
    old = model.layers[0].proj
    old.register_load_state_dict_pre_hook(lambda module, *args: calls.append(module))
    old.register_state_dict_post_hook(lambda module, *args: calls.append(module))
    assert_loaded(model, tensors, load_mxfp8(model, tensors, MODELOPT_CONFIG))
    new = model.layers[0].proj
    assert new is not old and calls[-1] is new  # load_mxfp8's own load_state_dict
    calls.clear()
    new.load_state_dict(new.state_dict())
    assert calls == [new, new]


def test_a_quantized_layer_whose_hooks_cannot_move_is_an_error():
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    model.layers[1].proj.register_state_dict_post_hook(lambda *args: None)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"load_mxfp8: the modelopt config quantizes layer "
                                              r"'layers\.1\.proj', but it cannot become an "
                                              r"MXFP8Linear: it has state-dict hooks "
                                              r"\(_state_dict_hooks\)"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG)
    assert not any(isinstance(m, MXFP8Linear) for m in model.modules())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def refuse(module, incompatible_keys):
    raise RuntimeError("refused by a load hook")


@pytest.mark.parametrize("converted", [False, True], ids=["linear", "converted"])
@pytest.mark.parametrize("failure", ["int tensor assigned", "hook after copies", "hook after assigns"])
def test_a_load_that_fails_after_the_swap_leaves_the_model_as_it_was(converted, failure):
    # load_state_dict runs after the quantized layers are swapped in and can still fail: assign
    # cannot make an int tensor a parameter that requires grad, and a load hook may refuse after
    # every tensor is copied or assigned. The model must come back exactly as it was.
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    if converted:
        quantize_model(model, exclude=["lm_head", "*.gate"])
    calls = []
    proj = model.layers[0].proj
    handle = proj.register_forward_hook(lambda m, args, output: calls.append(m))
    if converted:
        proj.register_load_state_dict_pre_hook(lambda module, *args: calls.append(module))
    assign = failure != "hook after copies"
    if failure == "int tensor assigned":
        tensors["layers.1.norm.weight"] = tensors["layers.1.norm.weight"].to(torch.int32)
    else:
        model.register_load_state_dict_post_hook(refuse)
    modules = dict(model.named_modules())
    held = model.state_dict(keep_vars=True)
    values = {k: v.detach().clone() for k, v in held.items()}
    tables = {t: (getattr(proj, t), dict(getattr(proj, t))) for t in vars(proj) if "_hooks" in t}
    ids = torch.randint(0, 50, (2, 5), generator=g)
    with torch.no_grad():
        out = model(ids)
    calls.clear()

    cause = "Only Tensors of floating point" if failure == "int tensor assigned" else "refused by a load hook"
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: model\.load_state_dict failed on the "
                                              r"checkpoint's tensors outside the quantized layers, so "
                                              rf"the model is left as it was: (.|\n)*{cause}"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG, assign=assign)
    assert dict(model.named_modules()) == modules
    assert all(model.get_submodule(n) is m for n, m in modules.items())
    after = model.state_dict(keep_vars=True)
    assert list(after) == list(held)
    for key, value in held.items():
        assert after[key] is value, key
        assert torch.equal(value, values[key]), key
    assert model.lm_head.weight is model.embed.weight
    for table, (hooks, contents) in tables.items():
        assert getattr(proj, table) is hooks and dict(hooks) == contents, table
    calls.clear()
    with torch.no_grad():
        assert torch.equal(model(ids), out)
    assert calls == [proj]  # the forward hook is the layer's again
    if converted:
        proj.load_state_dict(proj.state_dict())
        assert calls[-1] is proj  # the load pre-hook is called with the layer again
    handle.remove()
    calls.clear()
    with torch.no_grad():
        model(ids)
    assert calls == []


class Frozen(torch.nn.Module):
    """A container that refuses to have its second layer replaced."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(64, 32)
        self.second = torch.nn.Linear(64, 32)
        self.frozen = True

    def __setattr__(self, name, value):
        if getattr(self, "frozen", False) and name == "second":
            raise AttributeError("'second' is frozen")
        super().__setattr__(name, value)


def test_a_swap_that_fails_part_way_is_undone():
    g = fresh_gen()
    model = Frozen()
    first = model.first
    hooks = first._forward_pre_hooks
    handle = first.register_forward_pre_hook(lambda m, args: None)
    tensors = {f"{name}.{suffix}": value for name in ("first", "second") for suffix, value in (
        ("weight", torch.zeros(32, 64, dtype=torch.float8_e4m3fn)),
        ("weight_scale", torch.full((32, 2), 127, dtype=torch.uint8)),
        ("bias", torch.randn(32, generator=g)))}
    with pytest.raises(AttributeError, match=r"'second' is frozen"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG)
    assert model.first is first and type(model.second) is torch.nn.Linear
    assert first._forward_pre_hooks is hooks and list(hooks) == [handle.id]


class Scaled(MXFP8Linear):
    """An MXFP8Linear subclass with a forward and an attribute of its own."""

    def __init__(self, *args, factor=1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.factor = factor

    def forward(self, x):
        return self.factor * super().forward(x)


class Named(MXFP8Linear):
    """An MXFP8Linear subclass whose constructor takes other arguments than MXFP8Linear's."""

    def __init__(self, label, in_features, out_features, **kwargs):
        super().__init__(in_features, out_features, **kwargs)
        self.label = label


class Gated(Scaled):
    """An MXFP8Linear subclass with a parameter of its own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = torch.nn.Parameter(torch.ones(1))


def with_subclass(model, name, cls, *args, **kwargs):
    old = model.get_submodule(name)
    layer = cls(*args, old.in_features, old.out_features, bias=old.bias is not None, **kwargs)
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, layer)
    return layer


def test_an_mxfp8linear_subclass_keeps_its_class():
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    quantize_model(model, exclude=["lm_head", "*.gate"])
    with_subclass(model, "layers.0.proj", Scaled, factor=1.0).factor = 3.0
    with_subclass(model, "layers.1.out", Scaled, factor=-2.0, activation="bf16")
    plain = Tiny()
    assert_loaded(plain, tensors, load_mxfp8(plain, tensors, MODELOPT_CONFIG))
    assert_loaded(model, tensors, load_mxfp8(model, tensors, MODELOPT_CONFIG))
    proj, out = model.layers[0].proj, model.layers[1].out
    assert type(proj) is Scaled and type(out) is Scaled
    assert (proj.factor, out.factor, out.activation) == (3.0, -2.0, "bf16")
    x = torch.randn(5, 64, generator=g)
    with torch.no_grad():
        assert torch.equal(proj(x), 3.0 * plain.layers[0].proj(x))


@pytest.mark.parametrize("cls, reason", [
    (Named, r"is a Named, a subclass of MXFP8Linear, and Named\.from_quantized\(weight, "
            r"weight_scale, bias, out_dtype=\.\.\., activation=\.\.\., batch_invariant=\.\.\.\) "
            r"raised TypeError: .*; expected it to build a Named as MXFP8Linear\.from_quantized does"),
    (Gated, r"cannot become a new Gated: it holds the parameter\(s\) 'gate' of its own, which its "
            r"replacement would not carry over$"),
])
def test_an_mxfp8linear_subclass_that_cannot_be_rebuilt_is_an_error(cls, reason):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny()
    quantize_model(model, exclude=["lm_head", "*.gate"])
    with_subclass(model, "layers.1.proj", cls, *(["up"] if cls is Named else []))
    modules = dict(model.named_modules())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"^load_mxfp8: .*layer 'layers\.1\.proj'.*({reason})"):
        load_mxfp8(model, tensors, MODELOPT_CONFIG)
    assert all(model.get_submodule(n) is m for n, m in modules.items())
    assert type(model.layers[1].proj) is cls
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(64, 4, batch_first=True)  # out_proj: a Linear subclass
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.proj(self.attn(x, x, x, need_weights=False)[0])


@pytest.mark.parametrize("config", [MODELOPT_CONFIG, ct_config()], ids=["modelopt", "compressed-tensors"])
def test_linear_subclasses_are_left_alone_as_quantize_model_leaves_them(config):
    g = fresh_gen()
    source = Attention()
    done = quantize_model(source)
    assert done.converted == ["proj"] and list(done.skipped) == ["attn.out_proj"]
    tensors = {k: v.clone() for k, v in source.state_dict().items()}
    model = scrambled(Attention())
    assert load_mxfp8(model, tensors, config) == ["proj"]
    assert type(model.attn.out_proj) is type(source.attn.out_proj)
    x = torch.randn(2, 5, 64, generator=g)
    assert torch.equal(model(x), source(x))
    # a checkpoint that quantizes the subclass cannot be loaded into it
    data, scales = emulation.quantize(tensors["attn.out_proj.weight"])
    tensors.update({"attn.out_proj.weight": data.view(torch.float8_e4m3fn),
                    "attn.out_proj.weight_scale": scales})
    model = Attention()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: tensor 'attn\.out_proj\.weight_scale' is quantized, "
                                              r"but layer 'attn\.out_proj' cannot become an MXFP8Linear: "
                                              r"NonDynamicallyQuantizableLinear is a subclass of nn\.Linear"):
        load_mxfp8(model, tensors, config, strict=False)
    assert not any(isinstance(m, MXFP8Linear) for m in model.modules())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("fmt", ["modelopt", "compressed-tensors"])
def test_save_replaces_its_own_earlier_checkpoint(tmp_path, fmt):
    g = fresh_gen()
    for _ in range(2):  # the second save over the first
        source = Tiny()
        quantize_model(source, exclude=["lm_head", "*.gate"])
        save_mxfp8(source, tmp_path, format=fmt)
    target = Tiny()
    assert load_mxfp8(target, tmp_path) == QUANTIZED
    ids = torch.randint(0, 50, (2, 6), generator=g)
    assert torch.equal(target(ids), source(ids))


def stale_files(directory, fmt, what, tensors):
    """Files of another checkpoint that load_mxfp8 would read beside (or instead of) a new save."""
    keys = sorted(tensors)
    if what in ("index", "shards"):
        shards = {"model-00001-of-00002.safetensors": keys[::2],
                  "model-00002-of-00002.safetensors": keys[1::2]}
        if what == "shards":
            for shard, shard_keys in shards.items():
                save_file({k: tensors[k] for k in shard_keys}, directory / shard)
        index = {"metadata": {}, "weight_map": {k: s for s, ks in shards.items() for k in ks}}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
        (directory / "config.json").write_text(json.dumps({"architectures": ["Tiny"]}))
        return (["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
                if what == "shards" else ["model.safetensors.index.json"])
    if what == "other shard":
        save_file({k: tensors[k] for k in keys[:3]}, directory / "extra.safetensors")
        return ["extra.safetensors"]
    # the other format's config, which the loader would prefer (modelopt) or which would
    # contradict the new one (compressed-tensors)
    if fmt == "modelopt":
        (directory / "config.json").write_text(json.dumps(ct_config()))
        return ["config.json"]
    (directory / "hf_quant_config.json").write_text(json.dumps(MODELOPT_CONFIG))
    return ["hf_quant_config.json"]


@pytest.mark.parametrize("fmt", ["modelopt", "compressed-tensors"])
@pytest.mark.parametrize("what", ["shards", "index", "other shard", "other config"])
def test_save_refuses_a_directory_holding_another_checkpoint(tmp_path, fmt, what):
    g = fresh_gen()
    names = stale_files(tmp_path, fmt, what, hand_written_tensors(g))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    source = Tiny()
    quantize_model(source, exclude=["lm_head", "*.gate"])
    files = ", ".join(repr(n) for n in names)
    with pytest.raises(FileExistsError, match=rf"^save_mxfp8: argument 'directory' is "
                                              rf"'{re.escape(str(tmp_path))}', which holds "
                                              rf"{re.escape(files)}.*expected"):
        save_mxfp8(source, tmp_path, format=fmt)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# --------------------------------------------------------------------------- corrupt files


def valid_file_bytes(tmp_path) -> bytes:
    path = tmp_path / "valid.safetensors"
    save_file({"a.weight": torch.zeros(4, 32, dtype=torch.float8_e4m3fn),
                       "a.weight_scale": torch.full((4, 1), 127, dtype=torch.uint8),
                       "b": torch.ones(3)}, path)
    return path.read_bytes()


def constructed_corruptions(raw: bytes):
    header_len = struct.unpack("<Q", raw[:8])[0]
    return {
        "empty file": b"",
        "short length": raw[:7],
        "cut in the header": raw[: 8 + header_len // 2],
        "cut in the data": raw[:-1],
        "huge header length": struct.pack("<Q", 2**62) + raw[8:],
        "header length past the end": struct.pack("<Q", header_len + 1000) + raw[8:],
        "header not JSON": raw[:8] + b"{" * header_len + raw[8 + header_len:],
        "dtype wider than the data": raw.replace(b'"U8"', b'"F32"'),
        "offsets with a gap": raw.replace(b'"data_offsets":[0,', b'"data_offsets":[9,'),
        "shape off by one": raw.replace(b'"shape":[4,32]', b'"shape":[4,33]'),
        "negative shape": raw.replace(b'"shape":[4,32]', b'"shape":[-4,32]'),
        "overflowing shape": raw.replace(b'"shape":[3]', b'"shape":[18446744073709551615]'),
    }


def random_corruptions(raw: bytes, rng: random.Random):
    header_len = struct.unpack("<Q", raw[:8])[0]
    yield bytes(rng.randrange(256) for _ in range(len(raw)))
    for _ in range(40):  # damage inside the header
        b = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(8, 8 + header_len)] = rng.randrange(256)
        yield bytes(b)


def raw_safetensors(entries: dict) -> bytes:
    """A safetensors file of ``{name: (safetensors dtype, shape, data bytes)}``, written without
    safetensors' writer, which cannot store a dtype torch has no type for."""
    header, data = {}, b""
    for name, (dtype, shape, payload) in entries.items():
        offsets = [len(data), len(data) + len(payload)]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        data += payload
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def test_a_tensor_whose_data_cannot_be_read_is_named(tmp_path):
    # The header parses (a 6-bit float is a safetensors dtype), but torch has no type to read it as.
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    key = "layers.1.norm.bias"
    write_checkpoint(tmp_path, {k: v for k, v in tensors.items() if k != key}, MODELOPT_CONFIG,
                     "hf_quant_config.json")
    bad = tmp_path / "extra.safetensors"
    bad.write_bytes(raw_safetensors({key: ("F6_E2M3", [64], bytes(48))}))
    model = Tiny()
    modules = dict(model.named_modules())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for source in (tmp_path, bad):
        with pytest.raises(CheckpointError,
                           match=rf"^load_mxfp8: '{re.escape(str(bad))}' is not a readable "
                                 rf"safetensors file: its tensor '{re.escape(key)}' cannot be read "
                                 r"\(\w+: .+\); expected data that torch reads as the dtype and shape "
                                 r"the header gives$") as raised:
            load_mxfp8(model, source, MODELOPT_CONFIG)
        assert raised.value.__cause__ is not None
    assert all(model.get_submodule(n) is m for n, m in modules.items())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    # A file cut in its data section is refused when it is opened: safetensors checks that the
    # data covers what the header describes.
    bad.write_bytes(raw_safetensors({key: ("F32", [64], bytes(256))})[:-10])
    with pytest.raises(CheckpointError, match=rf"^load_mxfp8: '{re.escape(str(bad))}' is not a "
                                              r"readable safetensors file: "):
        load_mxfp8(model, tmp_path)


@pytest.mark.parametrize("suffix, expected", [("weight", "float8_e4m3fn"),
                                              ("weight_scale", "uint8 or float8_e8m0fnu")])
def test_an_fp4_tensor_is_read_and_refused_by_its_dtype_in_both_loaders(tmp_path, suffix, expected):
    # safetensors stores float4_e2m1fn_x2 as F4, two values a byte, the header counting values:
    # get_tensor reads it, get_slice cannot. Both loaders read its dtype as get_tensor does and
    # refuse it as a quantized layer's tensor with the same error.
    from mxlinear.distributed import ColumnParallelMXFP8Linear, RowParallelMXFP8Linear

    n, k = 8, 64
    tensors = {"0.weight": torch.zeros(n, k, dtype=torch.float8_e4m3fn),
               "0.weight_scale": torch.full((n, k // 32), 127, dtype=torch.uint8),
               "0.bias": torch.zeros(n)}
    shape = tensors[f"0.{suffix}"].shape
    fp4 = torch.zeros(shape[0], shape[1] // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    path = tmp_path / "model.safetensors"
    save_file({**tensors, f"0.{suffix}": fp4}, path)
    assert read_safetensors(path)[f"0.{suffix}"].dtype == torch.float4_e2m1fn_x2
    message = rf"tensor '0\.{suffix}' has dtype float4_e2m1fn_x2; expected {expected}$"
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: " + message):
        load_mxfp8(torch.nn.Sequential(torch.nn.Linear(k, n)), path, MODELOPT_CONFIG)
    for cls in (ColumnParallelMXFP8Linear, RowParallelMXFP8Linear):
        # refused from the header and the dtype, before the layer needs a process group
        with pytest.raises(CheckpointError, match=rf"^{cls.__name__}\.from_safetensors: " + message):
            cls.from_safetensors(path, "0")


def test_an_fp4_bias_is_refused_by_its_dtype_in_both_loaders(tmp_path):
    # An F4 bias of N values is N/2 bytes to torch: its dtype, not that shape, is what is wrong.
    from mxlinear.distributed import ColumnParallelMXFP8Linear

    n, k = 8, 64
    bias = torch.zeros(n // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    path = tmp_path / "model.safetensors"
    save_file({"0.weight": torch.zeros(n, k, dtype=torch.float8_e4m3fn),
               "0.weight_scale": torch.full((n, k // 32), 127, dtype=torch.uint8),
               "0.bias": bias}, path)
    message = r"tensor '0\.bias' has dtype float4_e2m1fn_x2; expected "
    with pytest.raises(CheckpointError, match=r"^load_mxfp8: " + message + "a float dtype$"):
        load_mxfp8(torch.nn.Sequential(torch.nn.Linear(k, n)), path, MODELOPT_CONFIG)
    with pytest.raises(CheckpointError,
                       match=r"^ColumnParallelMXFP8Linear\.from_safetensors: " + message):
        ColumnParallelMXFP8Linear.from_safetensors(path, "0")


def test_corrupt_files_raise_checkpoint_errors(tmp_path):
    raw = valid_file_bytes(tmp_path)
    path = tmp_path / "bad.safetensors"
    for what, variant in constructed_corruptions(raw).items():
        assert variant != raw, what
        path.write_bytes(variant)
        with pytest.raises(CheckpointError, match=r"bad\.safetensors' is not a readable safetensors file"):
            read_safetensors(path)
    for variant in random_corruptions(raw, random.Random(fresh_seed())):
        path.write_bytes(variant)
        try:
            read_safetensors(path)  # damage inside a tensor name, say, can leave a valid file
        except CheckpointError as e:
            assert "bad.safetensors' is not a readable safetensors file" in str(e)
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(MODELOPT_CONFIG))
    os.remove(tmp_path / "valid.safetensors")
    path.write_bytes(raw[:20])
    with pytest.raises(CheckpointError, match=r"bad\.safetensors' is not a readable safetensors file"):
        load_mxfp8(Tiny(), tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no safetensors file at"):
        read_safetensors(tmp_path / "absent.safetensors")


def test_read_safetensors_names_a_tensor_whose_data_cannot_be_read(tmp_path):
    # read_safetensors reads as load_mxfp8 does: the same error, after each function's name.
    key = "layers.1.norm.bias"
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(raw_safetensors({"a": ("F32", [2], bytes(8)), key: ("F6_E2M3", [64], bytes(48))}))
    with pytest.raises(CheckpointError,
                       match=rf"^read_safetensors: '{re.escape(str(bad))}' is not a readable "
                             rf"safetensors file: its tensor '{re.escape(key)}' cannot be read "
                             r"\(\w+: .+\); expected data that torch reads as the dtype and shape "
                             r"the header gives$") as read:
        read_safetensors(bad)
    assert read.value.__cause__ is not None
    with pytest.raises(CheckpointError) as loaded:
        load_mxfp8(Tiny(), bad, MODELOPT_CONFIG)
    assert str(loaded.value) == "load_mxfp8: " + str(read.value).removeprefix("read_safetensors: ")
    for variant in constructed_corruptions(valid_file_bytes(tmp_path)).values():
        bad.write_bytes(variant)
        with pytest.raises(CheckpointError, match=rf"^read_safetensors: '{re.escape(str(bad))}' is "
                                                  r"not a readable safetensors file: "):
            read_safetensors(bad)


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_load_places_quantized_layers_on_the_device(tmp_path):
    g = fresh_gen()
    tensors = hand_written_tensors(g)
    model = Tiny().cuda()
    names = load_mxfp8(model, tensors, MODELOPT_CONFIG)
    assert names == QUANTIZED
    for name in QUANTIZED:
        layer = model.get_submodule(name)
        assert layer.weight.is_cuda and layer.weight_scale.is_cuda
    cpu_model = Tiny()
    load_mxfp8(cpu_model, tensors, MODELOPT_CONFIG)
    ids = torch.randint(0, 50, (2, 9), generator=g)
    out, ref = model(ids.cuda()).cpu().double(), cpu_model(ids).double()
    assert float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)) <= 1e-4
