// The scalar rules of speculative-decoding rejection sampling, shared word for word by the host
// sampler (runtime/sampler/sampler.c) and the kernels (templates/rejection_sample.cu). The two differ only
// in the order of their reductions, and every reduction over these values is exact (maxima and
// integer sums), so both emit the same tokens. Plain C99 and CUDA C++; needs philox.cu first.
#ifndef VOLT8_REJECTION_RULES_CU
#define VOLT8_REJECTION_RULES_CU

// What the row pass learns of one [V] row, in one int (it travels in out_ids between the passes):
//   VOLT8_ROW_INVALID for a bad row; for a greedy request, the argmax of p (lowest such token);
//   otherwise the scale exponent of p in bits 0-7 and of the residual max(0, p - q) in bits 8-15
//   (0 there: the residual is all zero).
#define VOLT8_ROW_INVALID (-2)
// Acceptance compares u * q < p with u on this many bits: exact in double (29 + 24 <= 53 bits).
#define VOLT8_ACCEPT_RANDOM_BITS 29
// The largest weight of a row becomes an integer in [2^38, 2^39), so 2^24 of them sum below 2^63.
#define VOLT8_WEIGHT_FRACTION_BITS 15
#define VOLT8_MAX_VOCAB (1 << 24)

#ifdef __CUDACC__
VOLT8_HD volt8_u32 volt8_float_bits(float value) { return __float_as_uint(value); }
#else
VOLT8_HD volt8_u32 volt8_float_bits(float value) {
  union {
    float value;
    volt8_u32 bits;
  } pun;
  pun.value = value;
  return pun.bits;
}
#endif

// A probability is finite and not negative (-0 counts as 0).
VOLT8_HD int volt8_probability_ok(float value) { return value >= 0.0f && value <= 3.40282346638528859812e+38f; }

// The bits of a weight, ordered like the values; 0 for zero, negatives and NaN.
VOLT8_HD volt8_u32 volt8_weight_bits(float weight) { return weight > 0.0f ? volt8_float_bits(weight) : 0u; }

// q of a deterministic draft (no draft_probs): one-hot at the drafted token.
VOLT8_HD float volt8_one_hot(int token, int draft_id) { return token == draft_id ? 1.0f : 0.0f; }

// q of `token` on a row: the draft row's, else one-hot at draft_id (-1 on the bonus row: all zero).
VOLT8_HD float volt8_draft_value(const float *draft_row, int draft_id, int token) {
  return draft_row ? draft_row[token] : volt8_one_hot(token, draft_id);
}

VOLT8_HD float volt8_residual(float target, float draft) {
  const float difference = target - draft;
  return difference > 0.0f ? difference : 0.0f;
}

typedef struct volt8_row_scan {
  int invalid;
  int argmax; // lowest token holding target_max_bits; -1 while that is 0
  volt8_u32 target_max_bits;
  volt8_u32 residual_max_bits;
} volt8_row_scan;

VOLT8_HD void volt8_row_scan_init(volt8_row_scan *scan, int invalid) {
  scan->invalid = invalid;
  scan->argmax = -1;
  scan->target_max_bits = 0;
  scan->residual_max_bits = 0;
}

// Token `token` with target probability p and draft probability q (0 on the bonus row).
VOLT8_HD void volt8_row_scan_add(volt8_row_scan *scan, int token, float target, float draft) {
  if (!volt8_probability_ok(target) || !volt8_probability_ok(draft)) scan->invalid = 1;
  const volt8_u32 target_bits = volt8_weight_bits(target);
  if (target_bits > scan->target_max_bits || (target_bits != 0 && target_bits == scan->target_max_bits && token < scan->argmax)) {
    scan->target_max_bits = target_bits;
    scan->argmax = token;
  }
  const volt8_u32 residual_bits = volt8_weight_bits(volt8_residual(target, draft));
  if (residual_bits > scan->residual_max_bits) scan->residual_max_bits = residual_bits;
}

VOLT8_HD void volt8_row_scan_merge(volt8_row_scan *into, const volt8_row_scan *other) {
  into->invalid |= other->invalid;
  if (other->target_max_bits > into->target_max_bits ||
      (other->target_max_bits != 0 && other->target_max_bits == into->target_max_bits && other->argmax < into->argmax)) {
    into->target_max_bits = other->target_max_bits;
    into->argmax = other->argmax;
  }
  if (other->residual_max_bits > into->residual_max_bits) into->residual_max_bits = other->residual_max_bits;
}

// Exponent field of a row's largest weight (subnormals count as 1): the scale of its integer weights.
VOLT8_HD int volt8_scale_exponent(volt8_u32 max_bits) {
  const int field = (int)(max_bits >> 23);
  return field > 0 ? field : 1;
}

// A row with no positive p cannot be sampled from: invalid like NaN or a negative value.
VOLT8_HD int volt8_row_info(const volt8_row_scan *scan, int greedy) {
  if (scan->invalid || scan->target_max_bits == 0) return VOLT8_ROW_INVALID;
  if (greedy) return scan->argmax;
  const int residual_exponent = scan->residual_max_bits ? volt8_scale_exponent(scan->residual_max_bits) : 0;
  return volt8_scale_exponent(scan->target_max_bits) | residual_exponent << 8;
}

// weight * 2^(WEIGHT_FRACTION_BITS + 150 - scale_exponent), truncated: an exact integer, so sums
// do not depend on their order. Weights under about 2^-38 of the row's largest become 0.
VOLT8_HD volt8_u64 volt8_scaled_weight(float weight, int scale_exponent) {
  const volt8_u32 bits = volt8_weight_bits(weight);
  if (bits == 0) return 0;
  const int field = (int)(bits >> 23);
  const volt8_u64 significand = (bits & 0x7FFFFFu) | (field > 0 ? 0x800000u : 0u);
  const int shift = (field > 0 ? field : 1) - scale_exponent + VOLT8_WEIGHT_FRACTION_BITS;
  if (shift >= 0) return significand << shift;
  return shift > -24 ? significand >> -shift : 0;
}

// Philox counter (request, position, offset) under key seed. Block `position` < num_draft decides
// the draft there (word 0) and, when it is rejected, draws the recovered token (words 2-3); block
// num_draft draws the bonus token.
VOLT8_HD volt8_philox_block volt8_sampler_random(volt8_u64 seed, volt8_u64 offset, int request, int position) {
  volt8_philox_block counter;
  counter.word[0] = (volt8_u32)request;
  counter.word[1] = (volt8_u32)position;
  counter.word[2] = (volt8_u32)offset;
  counter.word[3] = (volt8_u32)(offset >> 32);
  return volt8_philox4x32_10(counter, (volt8_u32)seed, (volt8_u32)(seed >> 32));
}

VOLT8_HD volt8_u64 volt8_draw_bits(volt8_philox_block block) {
  return (volt8_u64)block.word[2] << 32 | (volt8_u64)block.word[3];
}

// Accepts with probability min(1, p/q) to within 2^-29: u * q < p for u uniform on 29 bits.
// q = 0 accepts whenever p > 0; p = 0 never accepts.
VOLT8_HD int volt8_accept_draft(volt8_u32 random_word, float target, float draft) {
  const double uniform_numerator = (double)(random_word >> (32 - VOLT8_ACCEPT_RANDOM_BITS));
  return uniform_numerator * (double)draft < (double)target * (double)(1u << VOLT8_ACCEPT_RANDOM_BITS);
}

typedef struct volt8_rejection_stop {
  int accepted;       // drafts accepted: the position of the emitted token
  int token;          // greedy: the emitted token; -1: draw it from the weights below
  int use_residual;   // 1: weights max(0, p - q) at `accepted`; 0: p there
  int scale_exponent; // of those weights
  volt8_u64 random;   // 64 bits for the draw
} volt8_rejection_stop;

// The stop of one request as the GPU's walk pass hands it to the draw pass (valid 0: bad input).
typedef struct volt8_stop_record {
  volt8_rejection_stop stop;
  int valid;
} volt8_stop_record;

VOLT8_HD volt8_u64 volt8_stop_weight(const volt8_rejection_stop *stop, float target, float draft) {
  return volt8_scaled_weight(stop->use_residual ? volt8_residual(target, draft) : target, stop->scale_exponent);
}

// Whether the draft at `position` (< num_draft) is accepted; row_info, draft_ids, target and draft
// as in volt8_rejection_walk. Greedy: the draft is the argmax. Else: u * q < p with Philox word 0.
VOLT8_HD int volt8_draft_accepted(const int *row_info, const int *draft_ids, const float *target, const float *draft,
                                  long long vocab, int greedy, volt8_u64 seed, volt8_u64 offset, int request,
                                  int position) {
  const long long token = draft_ids[position];
  if (greedy) return token == row_info[position];
  const volt8_philox_block block = volt8_sampler_random(seed, offset, request, position);
  const float draft_prob = draft ? draft[position * vocab + token] : 1.0f;
  return volt8_accept_draft(block.word[0], target[position * vocab + token], draft_prob);
}

// The stop of a request whose first rejected draft is at `position` (num_draft: all accepted).
VOLT8_HD void volt8_rejection_stop_at(const int *row_info, int num_draft, int greedy, volt8_u64 seed, volt8_u64 offset,
                                      int request, int position, volt8_rejection_stop *stop) {
  stop->accepted = position;
  stop->token = -1;
  stop->use_residual = 0;
  stop->random = 0;
  if (greedy) {
    stop->token = row_info[position];
    stop->scale_exponent = 0;
    return;
  }
  const volt8_philox_block block = volt8_sampler_random(seed, offset, request, position);
  const int residual_exponent = position < num_draft ? (row_info[position] >> 8) & 0xFF : 0;
  stop->use_residual = residual_exponent != 0;
  stop->scale_exponent = residual_exponent != 0 ? residual_exponent : row_info[position] & 0xFF;
  stop->random = volt8_draw_bits(block);
}

// Walks one request's drafts. row_info[0..num_draft] come from the row pass; target and draft
// point at the request's [K+1][V] and [K][V] rows (draft NULL: one-hot drafts). Returns 0 when a
// row is invalid. A rejection whose residual is all zero (p <= q everywhere) draws from p. The GPU
// decides the positions in parallel and takes the first rejection: the same stop.
VOLT8_HD int volt8_rejection_walk(const int *row_info, int num_draft, const int *draft_ids, const float *target,
                                  const float *draft, long long vocab, int greedy, volt8_u64 seed, volt8_u64 offset,
                                  int request, volt8_rejection_stop *stop) {
  for (int position = 0; position <= num_draft; ++position)
    if (row_info[position] < 0) return 0;
  int position = 0;
  while (position < num_draft &&
         volt8_draft_accepted(row_info, draft_ids, target, draft, vocab, greedy, seed, offset, request, position))
    ++position;
  volt8_rejection_stop_at(row_info, num_draft, greedy, seed, offset, request, position, stop);
  return 1;
}

#endif
