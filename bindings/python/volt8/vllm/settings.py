"""What the vLLM plugin is asked to do, read from the environment, and which layers it serves.
Imports neither vLLM nor torch.

    VOLT8_VLLM          unset, "" or 0: off (the plugin changes nothing); 1: on for GPUs below SM89
                        (those without FP8 hardware: V100, T4, A100, A10...); force: on for any GPU
    VOLT8_VLLM_ONLINE   fp8: unquantized (BF16/FP16) MTP experts are quantized to E4M3 at load, with
                        scale blocks of VOLT8_VLLM_ONLINE_BLOCK rows (128, the default, or 1);
                        unset: such experts are left to vLLM
    VOLT8_VLLM_LAYERS   mtp (the default): the MTP layers' routed experts; all: also every routed-experts
                        layer of the target whose experts are 128x128 block FP8
"""
import dataclasses
import os
import re

ENABLE = "VOLT8_VLLM"
ONLINE = "VOLT8_VLLM_ONLINE"
ONLINE_BLOCK = "VOLT8_VLLM_ONLINE_BLOCK"
LAYERS = "VOLT8_VLLM_LAYERS"
LAYER_SETS = ("mtp", "all")
FP8_CAPABILITY = 89  # the first compute capability with FP8 tensor cores (Ada)

_OFF = ("", "0", "off")
_ON = ("1", "on")
_FORCE = ("force",)


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
    value = environ.get(ENABLE, "").strip().lower()
    if value not in _OFF + _ON + _FORCE:
        raise ValueError(f"{ENABLE}={environ.get(ENABLE)!r} is not one of 0 (off), 1 (GPUs below SM89) or force "
                         f"(any GPU)")
    online = environ.get(ONLINE, "").strip().lower()
    if online not in ("", "fp8"):
        raise ValueError(f"{ONLINE}={environ.get(ONLINE)!r}: the only online quantization is fp8 (or leave it unset)")
    block_text = environ.get(ONLINE_BLOCK, "").strip()
    if block_text not in ("", "1", "128"):
        raise ValueError(f"{ONLINE_BLOCK}={environ.get(ONLINE_BLOCK)!r}: scale blocks of 1 or 128 rows")
    if block_text and not online:
        raise ValueError(f"{ONLINE_BLOCK}={block_text} is set but {ONLINE} is not (set {ONLINE}=fp8)")
    layers = environ.get(LAYERS, "")
    if layers not in ("",) + LAYER_SETS:
        raise ValueError(f"{LAYERS}={layers!r} is not mtp (the MTP layers' routed experts, the default) or all "
                         f"(also the target's block-FP8 routed experts)")
    if layers and value in _OFF:
        raise ValueError(f"{LAYERS}={layers} is set but {ENABLE} is not (set {ENABLE}=1 or force)")
    return Settings(enabled=value not in _OFF, force=value in _FORCE,
                    online_block_n=(int(block_text or 128) if online else 0), layers=layers or "mtp")


# The routed experts of an MTP layer, as vLLM names the layer (the prefix a quantization config is
# asked about): Qwen3-Next's MTP model puts its layers under mtp.layers.<i>; DeepSeek-V3's and
# GLM-4.5's number them after the target's layers, model.layers.<num_hidden_layers + i>.
_MTP_SPELLED = re.compile(r"(?:^|\.)mtp\.layers\.(\d+)\.mlp\.experts$")
_NUMBERED = re.compile(r"(?:^|\.)layers\.(\d+)\.mlp\.experts$")


def mtp_layer(prefix, num_hidden_layers):
    """The MTP layer index i whose routed experts `prefix` names, or None for any other layer.
    num_hidden_layers: the target's (layers at or past it are MTP layers); None when unknown."""
    match = _MTP_SPELLED.search(prefix)
    if match:
        return int(match.group(1))
    match = _NUMBERED.search(prefix)
    if match and num_hidden_layers is not None and int(match.group(1)) >= num_hidden_layers:
        return int(match.group(1)) - num_hidden_layers
    return None
