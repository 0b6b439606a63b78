"""The GPU half of the vLLM plugin, which imports no vLLM: a rank's staged MTP experts uploaded into
volt8, and their forward as the operator an engine's MoE layer calls.

    torch.ops.volt8.mtp_moe(x, topk_ids, topk_weights, experts_key) -> out

takes an engine's tensors as its router gives them: x bfloat16 or float16 [M, hidden], topk_ids int32
or int64 [M, top_k], topk_weights float32, bfloat16 or float16 [M, top_k]; each is converted once,
inside the operator, to what the kernels read (FP16, int32, float32), and out comes back in x's dtype.
M beyond the experts' max_tokens runs as several forwards. It launches on torch's current stream,
never synchronises, and has a fake implementation for torch.compile; nothing compiles inside a CUDA
graph capture, so MtpExperts.prepare() the token counts the graphs use first.
"""
import torch

import volt8.torch as volt8_torch

from ..errors import CaptureError
from ..experts import MAX_ROUTED_PAIRS, Experts

def _prepare_hint(tokens):
    return f"MtpExperts.prepare([{tokens}]) before the capture"


def _mtp_moe_cuda(x, topk_ids, topk_weights, experts_key):
    experts = volt8_torch.lookup(experts_key, Experts)
    return volt8_torch.forward_converted(experts, x, topk_ids, topk_weights, "volt8::mtp_moe", _prepare_hint)


# the general operator's conversion and fake implementation (volt8.torch), under its own name
mtp_moe = volt8_torch._define_moe_operator("mtp_moe", _mtp_moe_cuda)


def forward_token_limit(max_top_k):
    """The most tokens one forward takes at max_top_k (the kernels' limit on routed pairs)."""
    return max(1, MAX_ROUTED_PAIRS // max_top_k)


class MtpExperts:
    """One rank's MTP experts resident in volt8, made from a complete ExpertStaging: uploaded expert by
    expert (the device holds the resident allocation and the workspace, never a second copy), then
    the staging is released. max_tokens: the most tokens a forward takes (larger M runs in pieces of
    that many; capped by the library's 2^30 routed pairs); max_top_k: the router's top-k."""

    def __init__(self, ctx, staging, *, max_tokens, max_top_k):
        self.max_top_k = max_top_k
        max_tokens = min(max_tokens, forward_token_limit(max_top_k))
        self.experts = Experts.from_host(ctx, staging.arrays(), max_tokens=max_tokens, max_top_k=max_top_k)
        staging.release()
        self.key = volt8_torch.register(self.experts)

    @property
    def shape(self):
        return self.experts.shape

    def prepare(self, token_counts):
        """Compiles (or reads from the cache) the kernels of these token counts, each capped at the experts'
        max_tokens: call it before a CUDA graph capture, with every count the graphs use."""
        if torch.cuda.is_current_stream_capturing():
            raise CaptureError("MtpExperts.prepare: the current stream is capturing a CUDA graph; prepare before "
                               "the capture begins")
        limit = self.experts.max_tokens
        counts = sorted({min(int(count), limit) for count in token_counts if int(count) > 0})
        if counts:
            self.experts.prepare(counts)

    def apply(self, x, topk_ids, topk_weights):
        """The routed experts' output (this rank's share: sum over ranks) in x's dtype."""
        return mtp_moe(x, topk_ids, topk_weights, self.key)

    def memory(self):
        return self.experts.memory()

    def close(self):
        self.experts.close()
