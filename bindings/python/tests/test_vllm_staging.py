"""volt8.vllm's parts that need no vLLM: the settings read from the environment, the MTP-layer names it
serves, and ExpertStaging, which gathers an engine's checkpoint tensors one by one into a rank's experts
with the same bytes as volt8.load_host_checkpoint, at every TP size, with expert parallelism, native
and quantized at load. (make test-vllm feeds the same through vLLM itself.)"""
import json
import os
import re
import struct

import numpy as np
import pytest

import volt8
from volt8.vllm import settings
from volt8.vllm.staging import ExpertStaging

ml_dtypes = pytest.importorskip("ml_dtypes")
ST_DTYPES = {"F8_E4M3": ml_dtypes.float8_e4m3fn, "BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32}


def read_safetensors(folder):
    """name -> numpy array (ml_dtypes for BF16 and E4M3) of every *.safetensors file in `folder`."""
    tensors = {}
    for file_name in sorted(os.listdir(folder)):
        if not file_name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, file_name), "rb") as stream:
            blob = stream.read()
        (length,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + length])
        header.pop("__metadata__", None)
        for name, entry in header.items():
            dtype = ST_DTYPES.get(entry["dtype"])
            if dtype is None:  # not an expert tensor
                continue
            begin, end = entry["data_offsets"]
            data = np.frombuffer(blob, dtype, (end - begin) // np.dtype(dtype).itemsize, 8 + length + begin)
            tensors[name] = data.reshape(entry["shape"])
    return tensors


def feed(staging, tensors, prefix, order_seed=0):
    """Hands the checkpoint's tensors of the rank's experts to `staging`, in a shuffled order, as an engine's
    loader might: per-expert tensors, or fused [E, 2I, H] / [E, H, I] ones split per expert."""
    items = []
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.(gate|up|down)_proj\.(weight(?:_scale_inv|_scale)?)$")
    for name, array in tensors.items():
        match = pattern.match(name)
        if match:
            kind = "weight" if match.group(3) == "weight" else "scale"
            items.append((int(match.group(1)), match.group(2), kind, array, name))
        elif name == prefix + "gate_up_proj":
            half = array.shape[1] // 2
            for expert in range(array.shape[0]):
                items.append((expert, "gate", "weight", array[expert, :half], name))
                items.append((expert, "up", "weight", array[expert, half:], name))
        elif name == prefix + "down_proj":
            items += [(expert, "down", "weight", array[expert], name) for expert in range(array.shape[0])]
    np.random.default_rng(order_seed).shuffle(items)
    for expert, projection, kind, array, name in items:
        if staging.holds(expert):
            staging.add(expert, projection, kind, array, name)


CASES = [("modelopt_mixed_indexed", 0), ("fp8_runtime_names", 0), ("modelopt_4d_hf_quant_config", 0),
         ("bf16_fused", 128), ("bf16_fused", 1), ("f16_per_expert_opt_in_config", 128)]


@pytest.mark.parametrize("case, block_n", CASES, ids=[f"{case}-{block}" for case, block in CASES])
def test_staging_gives_the_host_loads_bytes(checkpoints, case, block_n):
    folder, manifest = checkpoints
    entry = manifest["valid"][case]
    path = os.path.join(folder, entry["dir"])
    tensors = read_safetensors(path)
    experts, hidden, intermediate = entry["experts"], entry["hidden"], entry["intermediate"]
    online = {"mtp_expert_quantization": "fp8", "online_block_n": block_n} if block_n else {}
    for tp in entry["tps"][str(block_n or 128)]:
        for rank in range(tp):
            # expert parallelism (EP 2 rank 1, EP 3 rank 0) at the first and last TP rank
            for ep_size, ep_rank in ((1, 0), (2, 1), (3, 0)) if rank in (0, tp - 1) else ((1, 0),):
                start, count = volt8.expert_range(experts, ep_size, ep_rank) if ep_size <= experts else (0, experts)
                staging = ExpertStaging(hidden, intermediate, experts, tp, rank, start, count if ep_size > 1 else 0,
                                        online_block_n=block_n)
                feed(staging, tensors, entry["prefix"], order_seed=tp * 10 + rank)
                shape, w13, s13, w2, s2 = staging.arrays()
                host = volt8.load_host_checkpoint(path, tp_size=tp, tp_rank=rank, expert_start=start,
                                                  expert_count=count if ep_size > 1 else 0, **online)
                where = f"{case} tp {tp} rank {rank} ep {ep_rank}/{ep_size}"
                assert shape == host.shape, where
                for got, want, name in ((w13, host.w13, "w13"), (s13, host.s13, "s13"), (w2, host.w2, "w2"),
                                        (s2, host.s2, "s2")):
                    assert got.tobytes() == np.asarray(want).tobytes(), f"{where}: {name} differs"


def staging_with_one_expert_missing_a_tensor(checkpoints):
    folder, manifest = checkpoints
    entry = manifest["valid"]["fp8_runtime_names"]
    tensors = read_safetensors(os.path.join(folder, entry["dir"]))
    staging = ExpertStaging(entry["hidden"], entry["intermediate"], entry["experts"], 4, 1)
    dropped = entry["prefix"] + "2.up_proj.weight_scale_inv"
    feed(staging, {name: array for name, array in tensors.items() if name != dropped}, entry["prefix"])
    return staging, tensors, entry


def test_staging_names_what_is_missing_and_refuses_bad_tensors(checkpoints):
    staging, tensors, entry = staging_with_one_expert_missing_a_tensor(checkpoints)
    prefix = entry["prefix"]
    assert staging.missing() == [(2, [("up", "scale")])] and not staging.complete
    with pytest.raises(volt8.InvalidArgumentError, match=r"1 of the rank's 4 experts are incomplete; expert 2 lacks "
                                                         r"up scale"):
        staging.arrays()
    gate = tensors[prefix + "0.gate_proj.weight"]
    with pytest.raises(volt8.InvalidArgumentError, match=r"given twice"):
        staging.add(0, "gate", "weight", gate, "again")
    fresh = ExpertStaging(256, 640, 4, 4, 1)
    with pytest.raises(volt8.InvalidArgumentError, match=r"w: shape \[640, 128\], expected \[640, 256\]"):
        fresh.add(2, "up", "weight", gate[:, :128], "w")
    with pytest.raises(volt8.InvalidArgumentError, match=r"s: scale dtype F8_E4M3"):
        fresh.add(2, "up", "scale", gate[:5, :2], "s")
    with pytest.raises(volt8.InvalidArgumentError, match=r"g: shape \[4, 2\], expected \[5, 2\] \(128x128 block"):
        fresh.add(2, "gate", "scale", np.ones((4, 2), np.float32), "g")
    with pytest.raises(volt8.InvalidArgumentError, match=r"b: dtype BF16; native experts are F8_E4M3"):
        ExpertStaging(256, 640, 4).add(0, "gate", "weight", np.zeros((640, 256), ml_dtypes.bfloat16), "b")
    with pytest.raises(volt8.InvalidArgumentError, match=r"i: dtype int8 is not one volt8 reads"):
        ExpertStaging(256, 640, 4).add(0, "gate", "weight", np.zeros((640, 256), np.int8), "i")
    with pytest.raises(volt8.InvalidArgumentError, match=r"expert 3 is not among this rank's \[0, 2\)"):
        ExpertStaging(256, 640, 4, expert_start=0, expert_count=2).add(3, "gate", "weight", gate, "x")
    with pytest.raises(volt8.InvalidArgumentError, match=r"a scale for experts that are quantized at load"):
        ExpertStaging(256, 640, 4, online_block_n=128).add(0, "gate", "scale", gate, "s")
    with pytest.raises(volt8.InvalidArgumentError, match=r"does not divide into 3 tensor-parallel ranks"):
        ExpertStaging(256, 640, 4, tp_size=3)
    with pytest.raises(volt8.InvalidArgumentError, match=r"online_block_n: 64 is not 0 \(native experts\), or 1 or 128"):
        ExpertStaging(256, 640, 4, online_block_n=64)


def test_staging_refuses_a_nan_code_naming_the_tensor(checkpoints):
    staging, tensors, entry = staging_with_one_expert_missing_a_tensor(checkpoints)
    up = tensors[entry["prefix"] + "1.up_proj.weight"]
    codes = up.view(np.uint8).copy()
    codes[200, 5] = 0x7F  # row 200 is rank 1's (rows 160..319)
    fresh = ExpertStaging(entry["hidden"], entry["intermediate"], entry["experts"], 4, 1)
    for projection in ("gate", "down"):
        for kind, suffix in (("weight", "weight"), ("scale", "weight_scale_inv")):
            fresh.add(1, projection, kind, tensors[f"{entry['prefix']}1.{projection}_proj.{suffix}"])
    fresh.add(1, "up", "scale", tensors[entry["prefix"] + "1.up_proj.weight_scale_inv"])
    with pytest.raises(volt8.FormatError, match=r"experts\.1\.up\.weight.*NaN"):
        fresh.add(1, "up", "weight", codes.view(ml_dtypes.float8_e4m3fn), "model.layers.4.mlp.experts.1.up.weight")


def test_settings_are_read_from_the_environment():
    assert settings.read({}) == settings.Settings()
    assert settings.read({"VOLT8_VLLM": "1"}) == settings.Settings(enabled=True)
    on = settings.read({"VOLT8_VLLM": "force", "VOLT8_VLLM_ONLINE": "fp8", "VOLT8_VLLM_ONLINE_BLOCK": "1"})
    assert on == settings.Settings(enabled=True, force=True, online_block_n=1)
    assert settings.read({"VOLT8_VLLM": "1", "VOLT8_VLLM_ONLINE": "fp8"}).online_block_n == 128
    assert settings.read({"VOLT8_VLLM": "0"}).enabled is False
    assert settings.read({"VOLT8_VLLM": "", "VOLT8_VLLM_ONLINE": "", "VOLT8_VLLM_ONLINE_BLOCK": ""}) == settings.Settings()
    for environ, message in (({"VOLT8_VLLM": "yes"}, "VOLT8_VLLM='yes' is not one of"),
                             ({"VOLT8_VLLM_ONLINE": "int8"}, "VOLT8_VLLM_ONLINE='int8'"),
                             ({"VOLT8_VLLM_ONLINE": "fp8", "VOLT8_VLLM_ONLINE_BLOCK": "64"}, "VOLT8_VLLM_ONLINE_BLOCK='64'"),
                             ({"VOLT8_VLLM_ONLINE_BLOCK": "1"}, "VOLT8_VLLM_ONLINE is not")):
        with pytest.raises(ValueError, match=re.escape(message)):
            settings.read(environ)
    default = settings.read({"VOLT8_VLLM": "1"})
    assert default.serves_capability(70) and default.serves_capability(80) and not default.serves_capability(89)
    assert on.serves_capability(90) and not settings.Settings().serves_capability(70)


@pytest.mark.parametrize("prefix, layers, expected", [
    ("model.layers.61.mlp.experts", 61, 0),          # DeepSeek-V3 (DeepSeekMTP)
    ("model.layers.62.mlp.experts", 61, 1),
    ("model.layers.92.mlp.experts", 92, 0),          # GLM-4.5 (Glm4MoeMTP)
    ("model.layers.46.mlp.experts", 46, 0),          # GLM-4.5-Air
    ("mtp.layers.0.mlp.experts", 48, 0),             # Qwen3-Next (Qwen3NextMTP)
    ("model.layers.60.mlp.experts", 61, None),       # the target's last layer
    ("model.layers.61.mlp.shared_experts", 61, None),
    ("model.layers.61.mlp.experts.w13", 61, None),
    ("model.layers.61.self_attn.o_proj", 61, None),
    ("model.layers.61.mlp.experts", None, None),     # num_hidden_layers unknown: only mtp.layers names count
    ("mtp.layers.0.mlp.shared_expert", 48, None),
])
def test_mtp_layer_names(prefix, layers, expected):
    assert settings.mtp_layer(prefix, layers) == expected


def test_the_layer_set_is_read_from_the_environment():
    assert settings.read({"VOLT8_VLLM": "1"}).layers == "mtp"
    assert settings.read({"VOLT8_VLLM": "1", "VOLT8_VLLM_LAYERS": "mtp"}).layers == "mtp"
    assert settings.read({"VOLT8_VLLM": "force", "VOLT8_VLLM_LAYERS": "all"}).layers == "all"
    for environ, message in (({"VOLT8_VLLM": "1", "VOLT8_VLLM_LAYERS": "every"}, "VOLT8_VLLM_LAYERS='every' is not"),
                             ({"VOLT8_VLLM": "1", "VOLT8_VLLM_LAYERS": "ALL"}, "VOLT8_VLLM_LAYERS='ALL' is not"),
                             ({"VOLT8_VLLM_LAYERS": "all"}, "VOLT8_VLLM_LAYERS=all is set but VOLT8_VLLM is not")):
        with pytest.raises(ValueError, match=re.escape(message)):
            settings.read(environ)


def test_the_wheel_declares_no_vllm_dependency():
    """Installed into an engine's environment (vLLM or a fork of it such as 1Cat-vLLM), the wheel must never
    pull upstream vLLM over it: no requirement of the project's, optional ones included, names vllm."""
    import tomllib
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as stream:
        project = tomllib.load(stream)["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    assert requirements and not [line for line in requirements if re.match(r"\s*vllm\b", line, re.I)], requirements


# docs/vllm.md's values are the only ones: case, spaces and other spellings stop vLLM, naming the variable.
@pytest.mark.parametrize("variable, value", [
    ("VOLT8_VLLM", "on"), ("VOLT8_VLLM", "ON"), ("VOLT8_VLLM", "FORCE"), ("VOLT8_VLLM", "Force"),
    ("VOLT8_VLLM", " 1 "), ("VOLT8_VLLM", "1\n"), ("VOLT8_VLLM", "off"), ("VOLT8_VLLM", "true"),
    ("VOLT8_VLLM", "\u0661"), ("VOLT8_VLLM_ONLINE", "FP8"), ("VOLT8_VLLM_ONLINE", " fp8"),
    ("VOLT8_VLLM_ONLINE_BLOCK", " 128"), ("VOLT8_VLLM_ONLINE_BLOCK", "0128"), ("VOLT8_VLLM_ONLINE_BLOCK", "\u0661"),
])
def test_settings_take_exactly_the_documented_values(variable, value):
    environ = {"VOLT8_VLLM": "1", "VOLT8_VLLM_ONLINE": "fp8", variable: value}
    with pytest.raises(ValueError, match=re.escape(f"{variable}={value!r}")):
        settings.read(environ)


def test_the_documented_values_are_docs_vllm_mds():
    """The VOLT8_VLLM row of docs/vllm.md lists the values read() takes, and no other."""
    docs = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "vllm.md"), encoding="utf-8").read()
    row = next(line for line in docs.splitlines() if line.startswith("| `VOLT8_VLLM` |"))
    listed = set(re.findall(r"`([^`]*)`", row.split("|")[2]))
    assert listed == {"0", "1", "force"}, row
    for value in listed | {""}:
        settings.read({"VOLT8_VLLM": value})


@pytest.mark.parametrize("text", ["\u00b2", "\u0661\u0662", " 12", "12 ", "12\n", "+12", "-1", "0", "012", "1e3",
                                  "12.0", "0x10", "1073741825", "5" * 5000, "\uff11\uff12"])
def test_max_tokens_is_ascii_digits_alone_and_named_when_refused(text):
    with pytest.raises(ValueError, match=r"^VOLT8_VLLM_MAX_TOKENS=.* is not a positive number of tokens in "
                                         r"1\.\.1073741824 \(a whole number written in ASCII digits"):
        settings.max_tokens_override({"VOLT8_VLLM_MAX_TOKENS": text})


def test_max_tokens_override_values():
    assert settings.max_tokens_override({}) is None
    assert settings.max_tokens_override({"VOLT8_VLLM_MAX_TOKENS": ""}) is None
    assert settings.max_tokens_override({"VOLT8_VLLM_MAX_TOKENS": "12"}) == 12
    assert settings.max_tokens_override({"VOLT8_VLLM_MAX_TOKENS": "1073741824"}) == 1 << 30


@pytest.mark.parametrize("prefix, layers", [
    ("mtp.layers." + "7" * 5000 + ".mlp.experts", 48),  # no int() of 5000 digits (Python's digit limit)
    ("model.layers." + "9" * 5000 + ".mlp.experts", 61),
    ("mtp.layers.\u0663.mlp.experts", 48),              # ARABIC-INDIC DIGIT THREE is no layer number
    ("model.layers.\u0666\u0661.mlp.experts", 61),
    ("mtp.layers.0.mlp.experts\n", 48),                 # the name ends at "experts"
    ("model.layers.61.mlp.experts\n", 61),
    ("mtp.layers.00.mlp.experts", 48),                   # no leading zeros
    ("model.layers.061.mlp.experts", 61),
    ("mtp.layers.12345678.mlp.experts", 48),             # past any layer count
    ("model.layers.61.mlp.experts", True),               # a bool is no layer count
    (b"mtp.layers.0.mlp.experts", 48),
])
def test_mtp_layer_names_that_are_no_layer(prefix, layers):
    assert settings.mtp_layer(prefix, layers) is None


def native_expert(hidden, intermediate, nan_in=None):
    """One native expert's tensors (E4M3 codes of 1.0 and F32 scales of 1), with a NaN code in `nan_in`."""
    tensors = {}
    for projection in ("gate", "up", "down"):
        rows, cols = (hidden, intermediate) if projection == "down" else (intermediate, hidden)
        codes = np.full((rows, cols), 0x38, np.uint8)
        if projection == nan_in:
            codes[3, 4] = 0x7F
        tensors[(projection, "weight")] = codes.view(ml_dtypes.float8_e4m3fn)
        tensors[(projection, "scale")] = np.ones((-(-rows // 128), -(-cols // 128)), np.float32)
    return tensors


def test_a_failed_expert_is_named_by_its_number_and_can_be_given_again():
    staging = ExpertStaging(128, 256, 8, tp_size=2, tp_rank=0, expert_start=2, expert_count=4)
    bad = native_expert(128, 256, nan_in="up")
    order = [key for key in bad if key != ("down", "scale")] + [("down", "scale")]
    for key in order[:-1]:
        staging.add(3, *key, bad[key])
    with pytest.raises(volt8.FormatError, match=r"experts\.3\.up_proj\.weight \(expert 3\).*NaN.*expert 3's tensors "
                                                r"were dropped: give them all again"):
        staging.add(3, *order[-1], bad[order[-1]])
    assert dict(staging.missing())[3] == staging._needed(), "the failed expert left tensors pending"
    good = native_expert(128, 256)
    for expert in range(2, 6):
        for key, tensor in good.items():
            staging.add(expert, *key, tensor)  # expert 3 again: not "given twice"
    shape, w13, s13, w2, s2 = staging.arrays()
    assert shape.num_experts == 4 and w13.shape[0] == 4


def test_an_incomplete_expert_is_named_with_what_it_lacks():
    staging = ExpertStaging(128, 128, 4)
    good = native_expert(128, 128)
    for key, tensor in good.items():
        if key != ("gate", "weight"):
            staging.add(3, *key, tensor)
    with pytest.raises(volt8.InvalidArgumentError, match=r"expert 0 lacks gate weight, gate scale"):
        staging.arrays()
    assert staging.missing()[-1] == (3, [("gate", "weight")])


def test_staging_takes_any_integer_type_and_names_what_is_not_one():
    shape = ExpertStaging(np.int64(128), np.int32(256), np.uint16(8), tp_size=np.int64(2), tp_rank=np.int8(1),
                          online_block_n=np.int64(128)).shape
    assert (shape.intermediate, shape.block_n) == (128, 128)
    for value in (1.0, None, True, "128", 64, -1, np.float64(1.0), np.bool_(True)):
        with pytest.raises(volt8.InvalidArgumentError, match=r"^online_block_n: "):
            ExpertStaging(128, 128, 4, online_block_n=value)
    for name in ("hidden", "num_experts", "tp_size", "expert_start"):
        for value in (True, 2.0, None, "8"):
            arguments = dict(hidden=128, intermediate=128, num_experts=4)
            arguments[name] = value
            with pytest.raises(volt8.InvalidArgumentError, match=rf"^{name}: "):
                ExpertStaging(**arguments)
    staging = ExpertStaging(128, 128, 4)
    tensor = native_expert(128, 128)[("gate", "weight")]
    for expert in (1.5, True, np.bool_(False), None, "1"):
        with pytest.raises(volt8.InvalidArgumentError, match=r"^expert: "):
            staging.add(expert, "gate", "weight", tensor)
    staging.add(np.int64(1), "gate", "weight", tensor)
    assert staging.holds(np.int64(1)) and not staging.holds(4)
    staging.release()
    with pytest.raises(volt8.InvalidArgumentError, match=r"the staging was released"):
        staging.add(2, "gate", "weight", tensor)
