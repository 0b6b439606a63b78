#!/usr/bin/env python3
"""Writes the fuzz seed corpora, tests/fuzz/seeds/<target>/, from the checkpoint fixtures
(tests/fixtures/make_checkpoints.py), the shipped tuning tables, the cache entry format and
`volt8 list --choice` texts.

Usage: .venv/bin/python3 tests/fuzz/make_seeds.py [--seed N]
Each seed is small (safetensors data is cut to a few KiB); the corpora are committed, and this
script only needs to run again when the fixtures or the formats change.
"""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
from safetensors.numpy import save

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")
SEPARATOR = b"\n----\n"
DATA_KEEP = 2048
# fuzz_config.c's checkpoint: the sizes a config must state to be consistent with it.
HARNESS_SIZES = {"hidden_size": 16, "moe_intermediate_size": 32, "num_experts": 2, "n_routed_experts": 2,
                 "num_local_experts": 2}


def write(target, name, data):
    folder = os.path.join(SEEDS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as stream:
        stream.write(data)


def read_header(path):
    with open(path, "rb") as stream:
        data = stream.read()
    if len(data) < 8:
        return data, None
    length = struct.unpack("<Q", data[:8])[0]
    try:
        header = json.loads(data[8:8 + length])
    except (ValueError, UnicodeDecodeError):
        header = None
    return data, header


def safetensors_seeds(fixtures):
    for path in sorted(glob.glob(os.path.join(fixtures, "*", "*.safetensors")) +
                       glob.glob(os.path.join(fixtures, "*", "*", "*.safetensors"))):
        if "/expected/" in path:
            continue
        data, _ = read_header(path)
        name = os.path.relpath(path, fixtures).replace("/", "_")
        if len(data) <= 4 * DATA_KEEP:
            write("safetensors", name, data)
            continue
        length = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else 0
        keep = 8 + length + DATA_KEEP if 8 + length <= len(data) else 2 * DATA_KEEP
        write("safetensors", name + ".cut", data[:keep])
    arrays = {
        "f16": np.arange(6, dtype=np.float16).reshape(2, 3),
        "bf16": np.ones((3,), dtype=ml_dtypes.bfloat16),
        "f32": np.array([1.5, -2.0], dtype=np.float32),
        "f64": np.array(3.0, dtype=np.float64),
        "e4m3": np.arange(8, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(2, 4),
        "i64": np.arange(2, dtype=np.int64),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "flag": np.array([True, False]),
    }
    write("safetensors", "valid_dtypes", save(arrays, metadata={"format": "pt"}))
    write("safetensors", "valid_one", save({"w": np.zeros((1,), dtype=np.uint8)}))
    write("safetensors", "valid_none", save({}))


def index_seeds(fixtures):
    for path in sorted(glob.glob(os.path.join(fixtures, "*", "model.safetensors.index.json"))):
        with open(path, "rb") as stream:
            write("index", os.path.basename(os.path.dirname(path)), stream.read())
    weight_map = {}
    for expert in range(2):
        for projection in ("gate_proj", "up_proj", "down_proj"):
            stem = f"mtp.layers.0.mlp.experts.{expert}.{projection}."
            weight_map[stem + "weight"] = "model-00001-of-00002.safetensors"
            weight_map[stem + "weight_scale_inv"] = "model-00002-of-00002.safetensors"
    write("index", "harness_valid", json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode())
    weight_map["mtp.layers.0.mlp.experts.0.gate_proj.weight"] = "sub/./../../model-00001-of-00002.safetensors"
    write("index", "harness_escape", json.dumps({"weight_map": weight_map}).encode())


def resize_config(config):
    for place in (config, config.get("text_config")):
        if isinstance(place, dict):
            for key, value in HARNESS_SIZES.items():
                if key in place:
                    place[key] = value
    return config


def expert_layout(folder):
    """(tensor name root, flags) of the fixture's MTP experts, as fuzz_config.c spells them."""
    headers = []
    for path in glob.glob(os.path.join(folder, "**", "*.safetensors"), recursive=True):
        _, header = read_header(path)
        if isinstance(header, dict):
            headers.append(header)
    names = {name: entry for header in headers for name, entry in header.items() if name != "__metadata__"}
    # the MTP layer's own spelling first: a separate draft's target has experts of its own
    for name, entry in sorted(names.items(), key=lambda item: ("mtp." not in item[0], item[0])):
        if not isinstance(entry, dict) or "dtype" not in entry or "shape" not in entry:
            continue
        at = name.find("mlp.experts.")
        if at < 0 or not name.endswith(("weight", "gate_up_proj")):
            continue
        root, flags = name[:at], ""
        if name.endswith("gate_up_proj"):
            flags += "f"
        elif entry["dtype"] != "F8_E4M3":
            flags += "b"
        scale = next((n for n in names if n.startswith(root) and "_scale" in n and isinstance(names[n], dict)), None)
        if scale and not scale.endswith("_inv"):
            flags += "4" if len(names[scale]["shape"]) == 4 else "s"
        if scale and names[scale]["dtype"] in ("F32", "F16"):
            flags += "F" if names[scale]["dtype"] == "F32" else "h"
        return root, flags
    return "mtp.layers.0.", ""


def config_seeds(fixtures):
    for folder in sorted(glob.glob(os.path.join(fixtures, "*"))):
        case = os.path.basename(folder)
        if case == "expected" or not os.path.isdir(folder):
            continue
        config_path = os.path.join(folder, "config.json")
        if case == "separate_draft":
            config_path = os.path.join(folder, "target", "config.json")
        if not os.path.exists(config_path):
            continue
        with open(config_path) as stream:
            config = resize_config(json.load(stream))
        quant = os.path.join(folder, "hf_quant_config.json")
        root, flags = expert_layout(folder)
        if case == "separate_draft":
            flags += "d"
        if "online" in case or "opt_in" in case:
            flags += "o"
        parts = [json.dumps(config, indent=1).encode()]
        parts.append(open(quant, "rb").read() if os.path.exists(quant) else b"")
        parts += [root.encode(), flags.encode()]
        write("config", case, SEPARATOR.join(parts))
    fp8 = {"num_hidden_layers": 4, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}
    write("config", "harness_fp8_tp2", SEPARATOR.join([json.dumps(fp8).encode(), b"", b"mtp.layers.0.", b"tr"]))
    write("config", "harness_runtime_index", SEPARATOR.join([json.dumps(fp8).encode(), b"", b"model.layers.4.", b""]))
    write("config", "harness_online_rows", SEPARATOR.join([b'{"num_hidden_layers": 4}', b"", b"mtp.layers.0.", b"bo1t"]))
    write("config", "harness_no_files", b"")


def tuning_seeds():
    for path in sorted(glob.glob(os.path.join(ROOT, "tuning", "tables", "*.json"))):
        name = os.path.basename(path)
        op = 1 if name.startswith("op=down") else 0
        with open(path, "rb") as stream:
            text = stream.read()
        for top_k in (0, 8):
            write("tuning_table", f"{name[:-5]}.k{top_k}".replace(",", "_").replace("=", "-"), bytes([op | top_k << 1]) + text)
    write("tuning_table", "bare_names", b"\x00" + json.dumps(
        {"__metadata__": {"schema_version": 1, "top_k": 4, "measured": False}, "1": "gate_up.cc.bm1.bn4.w4.sk1",
         "16": {"variant": "gate_up.mma.bm16.bn64.w4.sk1"}}).encode())
    # every entry a variant of fuzz_tuning_table.c's shape: as its table of another device, this one must serve
    for op, names in ((0, ("gate_up.cc.bm1.bn4.w4.sk1.l32", "gate_up.mma.bm8.bn16.w2.sk1")),
                      (1, ("down.cc.bm1.bn128.w8.sk1.l2", "down.cc.bm2.bn64.w4.sk1.l2.o10"))):
        write("tuning_table", "nearest_all_offered_" + ("down" if op else "gate_up"), bytes([op | 8 << 1]) + json.dumps(
            {"__metadata__": {"schema_version": 1, "top_k": 8}, "1": names[0], "64": {"variant": names[1]}}).encode())


def choice_seeds():
    """Two bytes of max_m - 1 (mod the routed-pair bound), then a --choice text."""
    def prefix(max_m):
        return struct.pack(">H", max_m - 1)
    for max_m, name, text in ((65535, "powers_of_two", "1,2,4,8,16,32,64,128"), (6553, "top10_largest", "1,6553"),
                              (6553, "top10_past_the_bound", "6554"), (1, "only_one", "1"), (64, "empty_item", "1,,8"),
                              (64, "trailing_comma", "1,8,"), (64, "leading_zero", "08"), (64, "sign", "+8"),
                              (64, "space", " 8"), (64, "huge", "99999999999999999999999"), (64, "nothing", ""),
                              (4095, "long_list", ",".join(str(1 + i % 4095) for i in range(120)))):
        write("choice", name, prefix(max_m) + text.encode())


def cache_entry(kind, name, payload, version=b"12.9", payload_bytes=None):
    header = bytearray(144)
    header[0:8] = b"VOLT8KCE"
    struct.pack_into("<IIII", header, 8, 1, kind, 70, len(name))
    struct.pack_into("<Q", header, 24, len(payload) if payload_bytes is None else payload_bytes)
    header[96:96 + len(version)] = version
    return bytes(header) + name + payload


def cache_seeds():
    ptx = b".version 7.0\n.target sm_70\n.address_size 64\n\0"
    for mode in (0, 1):
        for any_version in (0, 1):
            first = mode << 2 | any_version << 1
            write("cache_entry", f"mode{mode}_ptx_any{any_version}", bytes([first]) + cache_entry(0, b"k", ptx))
            write("cache_entry", f"mode{mode}_cubin_any{any_version}", bytes([first | 1]) + cache_entry(1, b"k", b"\x7fELF" + bytes(60)))
    write("cache_entry", "mode1_wrong_name", bytes([4]) + cache_entry(0, b"j", ptx))
    write("cache_entry", "mode1_long_payload_field", bytes([4]) + cache_entry(0, b"k", ptx, payload_bytes=1 << 40))
    write("cache_entry", "mode1_version_13", bytes([4]) + cache_entry(0, b"k", ptx, version=b"13.0"))
    write("cache_entry", "mode0_short", bytes([0]) + b"VOLT8KCE")
    for flip, mask in ((0, 0), (5, 1), (100, 0x80), (150, 0x20), (1000, 0)):
        body = bytes([4]) + b"12.9" + struct.pack("<I", flip) + bytes([mask]) + ptx
        write("cache_entry", f"mode2_flip{flip}_mask{mask}", bytes([8]) + body)
        write("cache_entry", f"mode2_flip{flip}_mask{mask}_cubin_any", bytes([8 | 2 | 1]) + body)


def shape_seeds():
    """--shape texts (byte 0 picks the shape read onto: 0 the default, 1 block_n=1, 2 an expert-parallel
    rank), good and bad, and number lists."""
    texts = {
        "reference_tp4": (0, "hidden=2560,intermediate=160,num_experts=512,block_n=128,block_k=128,intermediate_offset=32"),
        "one_key": (0, "hidden=1024"),
        "online_rows": (1, "intermediate=80"),
        "expert_range": (2, "num_experts=8,expert_start=24,global_experts=32"),
        "limits": (0, "hidden=65536,intermediate=65536,num_experts=2048,intermediate_offset=112"),
        "repeated_key": (0, "hidden=1024,hidden=2560"),
        "signed": (0, "hidden=+2560"),
        "spaced": (0, "hidden= 2560"),
        "empty_item": (0, "hidden=2560,,num_experts=8"),
        "offset_past_block": (1, "intermediate_offset=32"),
        "start_without_range": (0, "expert_start=4"),
        "number_list": (0, "1,8,64"),
        "long_number": (0, "99999999999999999999999"),
    }
    for name, (base, text) in texts.items():
        write("shape", name, bytes([base]) + text.encode())


def forward_describe_seeds():
    """fuzz_forward_describe.c's byte stream: the shape's size (byte - 8, mod 41), its eight fields and
    the token count and top-k (a byte below 224 picks a listed value, else four raw bytes follow), the
    arch (mod 3) and the output's size (an index)."""
    def raw(value):
        return bytes([255]) + struct.pack("<i", value)
    seeds = {
        "reference_m8": bytes([32, 7, 3, 4, 0, 0, 1, 0, 0, 3, 3, 0, 7]),    # the default shape, M = 8, top-k 10
        "reference_m1_sm90": bytes([32, 7, 3, 4, 0, 0, 1, 0, 0, 0, 0, 2, 7]),
        "old_size_32": bytes([24, 7, 3, 4, 0, 0, 1, 0, 0, 3, 3, 0, 7]),       # 0.2's shape
        "online_rows": bytes([32, 4, 5, 1, 1, 0, 0, 0, 0, 5, 2, 1, 3]),
        "expert_range": bytes([32, 7, 3, 1, 0, 0, 1, 1, 1, 4, 3, 0, 7]),
        "large_m": bytes([32, 6, 4, 3, 0, 0, 0, 0, 0, 8, 4, 0, 7]),
        "pairs_past_limit": bytes([32, 7, 3, 4, 0, 0, 1, 0, 0, 10, 6, 0, 7]),
        "raw_fields": bytes([32]) + raw(2560) + raw(160) + raw(512) + raw(128) + raw(128) + raw(32) + raw(0)
                      + raw(0) + raw(8) + raw(10) + bytes([0, 7]),
        "short_output": bytes([32, 7, 3, 4, 0, 0, 1, 0, 0, 3, 3, 0, 1]),
    }
    for name, data in seeds.items():
        write("forward_describe", name, data)


def expert_shard_seeds():
    """fuzz_expert_shard.c: hidden, intermediate, TP size, rank + 1, route, weight and scale dtypes (each
    an index), the struct sizes' bits, the expert number / 9, scales fuzzed (bit 0), then the bytes that
    fill the weights."""
    codes = bytes(range(0, 0x7E, 3)) + bytes(range(0x80, 0xFE, 5))
    seeds = {
        "native_tp1": bytes([2, 2, 0, 1, 0, 0, 0, 0, 3, 0]) + codes,
        "native_tp4_rank1": bytes([4, 5, 2, 2, 0, 0, 1, 0, 5, 0]) + codes,
        "native_nan": bytes([2, 2, 0, 1, 0, 0, 2, 0, 1, 0]) + bytes([0x38, 0x7F, 0x30]),
        "native_old_struct": bytes([2, 2, 0, 1, 0, 0, 0, 2, 3, 0, 0x7F]),
        "native_fuzzed_scales": bytes([2, 4, 1, 1, 0, 0, 0, 0, 0, 1]) + codes,
        "online_bf16_rows": bytes([3, 3, 1, 2, 2, 2, 0, 0, 7, 0]) + struct.pack("<8e", 0.5, -1, 2, 0, 3.25, -7, 1e-3, 9),
        "online_f32_block": bytes([2, 2, 0, 1, 3, 4, 0, 0, 0, 0]) + struct.pack("<4f", 0.25, -3.5, 1e6, 7),
        "online_nan": bytes([2, 2, 0, 1, 3, 4, 0, 0, 0, 0]) + struct.pack("<2f", float("nan"), 1),
        "bad_rank": bytes([2, 2, 2, 9, 0, 0, 0, 0, 0, 0]) + codes,
        "bad_dtype": bytes([2, 2, 0, 1, 0, 2, 0, 0, 0, 0]) + codes,
    }
    for name, data in seeds.items():
        write("expert_shard", name, data)


def environment_seeds():
    """fuzz_environment.c: a byte of which variables are set, then their values in order, split at the
    separator (L2 bytes, one-launch CTAs, cache off, cache folder, XDG_CACHE_HOME, HOME, tuning folder,
    NVRTC folders)."""
    def values(mask, *texts):
        return bytes([mask]) + SEPARATOR.join(text.encode() for text in texts)
    seeds = {
        "numbers_good": values(0b11, "12582912", "3"),
        "numbers_spaced": values(0b11, " 12", "3 "),
        "numbers_signed": values(0b11, "+12", "-0"),
        "numbers_leading_zero": values(0b10, "03"),
        "numbers_arabic": values(0b01, "\u0663"),
        "numbers_too_many": values(0b11, "99999999999999999999", "33"),
        "cache_order": values(0b111100, "", "", "/tmp/xdg", "/tmp/home"),
        "cache_off": values(0b1100, "1", "/tmp/volt8-cache"),
        "cache_off_not_one": values(0b1100, "true", "/tmp/volt8-cache"),
        "tuning_missing": values(0b1000000, "/nonexistent/volt8-tables"),
        "tuning_file": values(0b1000000, "/etc/hostname"),
        "nvrtc_dirs": values(0b10000000, "/nonexistent/a::/nonexistent/b:"),
        "nvrtc_dirs_colons": values(0b10000000, ":::"),
    }
    for name, data in seeds.items():
        write("environment", name, data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for target in ("safetensors", "index", "config", "tuning_table", "cache_entry", "shape", "choice", "forward_describe",
                   "expert_shard", "environment"):
        shutil.rmtree(os.path.join(SEEDS, target), ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="volt8-seeds-") as fixtures:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "fixtures", "make_checkpoints.py"), fixtures,
                        "--seed", str(args.seed)], check=True, stdout=subprocess.DEVNULL)
        safetensors_seeds(fixtures)
        index_seeds(fixtures)
        config_seeds(fixtures)
    tuning_seeds()
    cache_seeds()
    shape_seeds()
    choice_seeds()
    forward_describe_seeds()
    expert_shard_seeds()
    environment_seeds()
    for target in sorted(os.listdir(SEEDS)):
        files = os.listdir(os.path.join(SEEDS, target))
        size = sum(os.path.getsize(os.path.join(SEEDS, target, name)) for name in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
