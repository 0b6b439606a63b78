"""An independent float64 reference of the MoE forward in numpy, from the device-layout arrays."""
import numpy as np


def e4m3_table():
    """float64 value of each of the 256 E4M3 codes (NaN for 0x7F and 0xFF)."""
    values = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent, mantissa = (code >> 3) & 0xF, code & 7
        if code & 0x7F == 0x7F:
            values[code] = np.nan
        elif exponent == 0:
            values[code] = sign * mantissa / 8.0 * 2.0 ** -6
        else:
            values[code] = sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    return values


def dequantize(shape, w13, s13, w2, s2):
    """(W13 float64 [E, 2I, H], W2 float64 [E, H, I]) from codes and FP16 scale bits (scale * 2^8)."""
    table = e4m3_table()
    inter, off = shape.intermediate, shape.intermediate_offset
    scale13 = s13.view(np.float16).astype(np.float64) / 256.0
    scale2 = s2.view(np.float16).astype(np.float64) / 256.0
    rows = (off + np.arange(inter)) // shape.block_n
    cols = np.arange(shape.hidden) // shape.block_k
    gate = scale13[:, 0][:, rows][:, :, cols]
    up = scale13[:, 1][:, rows][:, :, cols]
    w13_values = table[w13] * np.concatenate([gate, up], axis=1)
    down_rows = np.arange(shape.hidden) // shape.block_n
    down_cols = (off + np.arange(inter)) // shape.block_k
    w2_values = table[w2] * scale2[:, down_rows][:, :, down_cols]
    return w13_values, w2_values


def moe_forward(shape, w13_values, w2_values, x, topk_ids, topk_weights):
    """float64 [M, H]: h = fp16(silu(gate) * up), out[t] = sum_j w[t, j] * (h . W2^T)."""
    x64 = np.asarray(x, dtype=np.float16).astype(np.float64)
    out = np.zeros((x64.shape[0], shape.hidden))
    inter = shape.intermediate
    for token in range(x64.shape[0]):
        for slot in range(topk_ids.shape[1]):
            expert = int(topk_ids[token, slot])
            if not 0 <= expert < shape.num_experts:
                continue
            y = w13_values[expert] @ x64[token]
            gate, up = y[:inter], y[inter:]
            h = (gate / (1.0 + np.exp(-gate)) * up).astype(np.float16).astype(np.float64)
            out[token] += float(topk_weights[token, slot]) * (w2_values[expert] @ h)
    return out


def relative_l2(reference, result):
    reference = np.asarray(reference, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(result, dtype=np.float64) - reference) / np.linalg.norm(reference))
