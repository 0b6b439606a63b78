"""What the vLLM plugin is asked to do, read from the environment, and which layers it serves.
Imports neither vLLM nor torch.

    VOLT8_VLLM          unset, "" or 0: off (the plugin changes nothing); 1: on for GPUs below SM89
                        (those without FP8 hardware: V100, T4, A100, A10...); force: on for any GPU
    VOLT8_VLLM_ONLINE   fp8: unquantized (BF16/FP16) MTP experts are quantized to E4M3 at load, with
                        scale blocks of VOLT8_VLLM_ONLINE_BLOCK rows (128, the default, or 1);
                        unset or "": such experts are left to vLLM
    VOLT8_VLLM_LAYERS   mtp (the default, also unset or ""): the MTP layers' routed experts; all: also
                        every routed-experts layer of the target whose experts are 128x128 block FP8
    VOLT8_VLLM_MAX_TOKENS  the most tokens one volt8 forward takes (1..2^30); unset or "": vLLM's
                        largest CUDA graph capture size

Each value is taken exactly as written, case and all: any other text (ON, " 1 ", "force\n", fp8 in
capitals, a number with a sign or in other digits) is refused with a ValueError naming the variable,
which stops vLLM at start-up, as docs/vllm.md says.
"""
import dataclasses
import os
import re

from .._environment import integer as _environment_integer
from .._integers import digits, is_integer

ENABLE = "VOLT8_VLLM"
ONLINE = "VOLT8_VLLM_ONLINE"
ONLINE_BLOCK = "VOLT8_VLLM_ONLINE_BLOCK"
LAYERS = "VOLT8_VLLM_LAYERS"
LAYER_SETS = ("mtp", "all")
MAX_TOKENS = "VOLT8_VLLM_MAX_TOKENS"
FP8_CAPABILITY = 89  # the first compute capability with FP8 tensor cores (Ada)
MAX_ROUTED_PAIRS = 1 << 30  # the kernels' limit on one forward's routed pairs (volt8.experts.MAX_ROUTED_PAIRS)
MAX_LAYER = 10**6  # MTP layer indices and layer numbers past this are no layer vLLM names

# The values docs/vllm.md lists, exactly ("" is unset).
_OFF = ("", "0")
_ON = ("1",)
_FORCE = ("force",)
_ONLINE_VALUES = ("", "fp8")
_BLOCK_VALUES = {"": 128, "1": 1, "128": 128}


@dataclasses.dataclass(frozen=True)
class Settings:
    """enabled: the plugin serves MoE experts at all; force: also on GPUs with FP8 hardware;
    online_block_n: 0 (unquantized experts left to vLLM), or 1 or 128 (quantized at load), MTP layers
    only; layers: "mtp" (the MTP layers' routed experts) or "all" (also the target's block-FP8 ones)."""

    enabled: bool = False
    force: bool = False
    online_block_n: int = 0
    layers: str = "mtp"

    def serves_capability(self, capability):
        """True when the plugin runs on a GPU of compute capability `capability` (major * 10 + minor)."""
        return self.enabled and (self.force or capability < FP8_CAPABILITY)


def read(environ=None):
    """Settings from the environment; ValueError naming the variable and its value for anything else."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENABLE, "")
    if value not in _OFF + _ON + _FORCE:
        raise ValueError(f"{ENABLE}={value!r} is not one of 0 (off), 1 (GPUs below SM89) or force (any GPU), "
                         f"written so (or leave it unset)")
    online = environ.get(ONLINE, "")
    if online not in _ONLINE_VALUES:
        raise ValueError(f"{ONLINE}={online!r}: the only online quantization is fp8, written so (or leave it unset)")
    block_text = environ.get(ONLINE_BLOCK, "")
    if block_text not in _BLOCK_VALUES:
        raise ValueError(f"{ONLINE_BLOCK}={block_text!r}: scale blocks of 1 or 128 rows (or leave it unset: 128)")
    if block_text and not online:
        raise ValueError(f"{ONLINE_BLOCK}={block_text} is set but {ONLINE} is not (set {ONLINE}=fp8)")
    layers = environ.get(LAYERS, "")
    if layers not in ("",) + LAYER_SETS:
        raise ValueError(f"{LAYERS}={layers!r} is not mtp (the MTP layers' routed experts, the default) or all "
                         f"(also the target's block-FP8 routed experts)")
    if layers and value in _OFF:
        raise ValueError(f"{LAYERS}={layers} is set but {ENABLE} is not (set {ENABLE}=1 or force)")
    return Settings(enabled=value not in _OFF, force=value in _FORCE,
                    online_block_n=_BLOCK_VALUES[block_text] if online else 0, layers=layers or "mtp")


def max_tokens_override(environ=None):
    """VOLT8_VLLM_MAX_TOKENS as a positive int (1..2^30), or None when it is unset or empty; ValueError
    naming the variable for any other text."""
    return _environment_integer(MAX_TOKENS, 1, MAX_ROUTED_PAIRS, "a positive number of tokens", environ)


# The routed experts of an MTP layer, as vLLM names the layer (the prefix a quantization config is
# asked about): Qwen3-Next's MTP model puts its layers under mtp.layers.<i>; DeepSeek-V3's and
# GLM-4.5's number them after the target's layers, model.layers.<num_hidden_layers + i>.
_MTP_SPELLED = re.compile(r"(?:^|\.)mtp\.layers\.([0-9]+)\.mlp\.experts\Z")
_NUMBERED = re.compile(r"(?:^|\.)layers\.([0-9]+)\.mlp\.experts\Z")


def mtp_layer(prefix, num_hidden_layers):
    """The MTP layer index i whose routed experts `prefix` names, or None for any other layer.
    num_hidden_layers: the target's (layers at or past it are MTP layers); None when unknown. A layer
    number is ASCII digits without a leading zero (but 0), of at most 7 digits, and the name ends
    there: "mtp.layers.\u0663...", "layers.007..." or a name with a newline after it is no layer."""
    if not isinstance(prefix, str):
        return None
    match = _MTP_SPELLED.search(prefix)
    if match:
        return digits(match.group(1), 0, MAX_LAYER)
    match = _NUMBERED.search(prefix)
    if not match or not is_integer(num_hidden_layers) or isinstance(num_hidden_layers, bool):
        return None
    number = digits(match.group(1), 0, MAX_LAYER)
    layers = int(num_hidden_layers)
    if number is None or number < layers:
        return None
    return number - layers
