/* The rejection sampler on the host: Philox known answers, argument checks, the edge cases of the
 * sampler's contract, and chi-square goodness of fit: the token emitted at each position follows
 * the target p and the acceptance counts follow [1-a0, a0(1-a1), ...], while a mutant sampler that
 * emits the drafts unconditionally fails the same test. All seeds are fixed; messages carry them. */
#include <criterion/criterion.h>

#include "test_support.h"
#include <criterion/parameterized.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/philox.h"
#include "sampler/sampler.h"
#include "volt8.h"

/* A fit passes when every chi-square p-value is at least this: with 32 fits in the suite a correct
 * sampler fails one by chance with probability about 3e-5 (and, the seeds being fixed, the outcome
 * never changes); the mutant's chi-square statistics are in the tens of thousands (p-value 0). */
#define FIT_ALPHA 1e-6
#define FIT_TRIALS 200000
#define FIT_VOCAB 48
#define FIT_BATCH 4000
#define MIN_EXPECTED 5.0

TestSuite(sampler, .timeout = 120);

/* ---- test data ---- */

static uint64_t splitmix_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform01(uint64_t *state) { return (double)(splitmix_next(state) >> 11) * 0x1.0p-53; }

/* Index drawn from the float distribution `probs` (inverse CDF in double). */
static int32_t draw_from(const float *probs, int32_t vocab, uint64_t *state) {
  double total = 0.0;
  for (int32_t j = 0; j < vocab; j++) total += probs[j];
  double point = uniform01(state) * total, prefix = 0.0;
  int32_t last_positive = 0;
  for (int32_t j = 0; j < vocab; j++) {
    if (probs[j] <= 0.0f) continue;
    last_positive = j;
    prefix += probs[j];
    if (prefix > point) return j;
  }
  return last_positive;
}

static void normalize(const double *weights, int32_t vocab, float *out) {
  double total = 0.0;
  for (int32_t j = 0; j < vocab; j++) total += weights[j];
  for (int32_t j = 0; j < vocab; j++) out[j] = (float)(weights[j] / total);
}

/* A target row: tokens j with j % 6 == zero_class have p = 0, the others at least ~0.007, and one
 * dominant token (about a third of the mass). */
static void make_target(float *out, int32_t vocab, int zero_class, uint64_t *state) {
  double *weights = malloc(sizeof(double) * (size_t)vocab), total = 0.0;
  for (int32_t j = 0; j < vocab; j++) {
    weights[j] = j % 6 == zero_class ? 0.0 : 0.5 + uniform01(state);
    total += weights[j];
  }
  int32_t dominant = (int32_t)(splitmix_next(state) % (uint64_t)vocab);
  if (dominant % 6 == zero_class) dominant = (dominant + 1) % vocab;
  weights[dominant] += total / 2.0;
  normalize(weights, vocab, out);
  free(weights);
}

/* Random rows for large vocabularies: about a tenth of the tokens have p = 0. */
static void make_random_row(float *out, int32_t vocab, uint64_t *state) {
  double *weights = malloc(sizeof(double) * (size_t)vocab);
  for (int32_t j = 0; j < vocab; j++) {
    double u = uniform01(state);
    weights[j] = u < 0.1 ? 0.0 : u * u * u;
  }
  weights[splitmix_next(state) % (uint64_t)vocab] += 1.0;
  normalize(weights, vocab, out);
  free(weights);
}

typedef struct problem {
  volt8_rejection_args args;
  int32_t *num_draft, *draft_ids, *out_ids, *num_accepted;
  float *draft_probs, *target_probs;
  uint8_t *greedy;
} problem;

static void problem_init(problem *p, int32_t batch, int32_t max_draft, int32_t vocab, int with_draft_probs) {
  memset(p, 0, sizeof *p);
  size_t rows = (size_t)max_draft + 1;
  p->num_draft = calloc((size_t)batch, sizeof(int32_t));
  p->draft_ids = calloc((size_t)batch * (size_t)max_draft + 1, sizeof(int32_t));
  p->out_ids = calloc((size_t)batch * rows, sizeof(int32_t));
  p->num_accepted = calloc((size_t)batch, sizeof(int32_t));
  p->target_probs = calloc((size_t)batch * rows * (size_t)vocab, sizeof(float));
  p->draft_probs = with_draft_probs ? calloc((size_t)batch * (size_t)max_draft * (size_t)vocab + 1, sizeof(float)) : NULL;
  p->greedy = calloc((size_t)batch, 1);
  cr_assert(p->num_draft && p->draft_ids && p->out_ids && p->num_accepted && p->target_probs && p->greedy &&
                (!with_draft_probs || p->draft_probs),
            "test allocation failed");
  volt8_rejection_args init = VOLT8_REJECTION_ARGS_INIT;
  p->args = init;
  p->args.batch = batch;
  p->args.max_draft = max_draft;
  p->args.vocab = vocab;
  p->args.num_draft = p->num_draft;
  p->args.draft_ids = p->draft_ids;
  p->args.draft_probs = p->draft_probs;
  p->args.target_probs = p->target_probs;
  p->args.out_ids = p->out_ids;
  p->args.num_accepted = p->num_accepted;
  for (int32_t b = 0; b < batch; b++) p->num_draft[b] = max_draft;
}

static void problem_free(problem *p) {
  free(p->num_draft);
  free(p->draft_ids);
  free(p->out_ids);
  free(p->num_accepted);
  free(p->target_probs);
  free(p->draft_probs);
  free(p->greedy);
}

static float *target_row(problem *p, int32_t b, int32_t position) {
  return p->target_probs + ((size_t)b * ((size_t)p->args.max_draft + 1) + (size_t)position) * (size_t)p->args.vocab;
}
static float *draft_row(problem *p, int32_t b, int32_t position) {
  return p->draft_probs + ((size_t)b * (size_t)p->args.max_draft + (size_t)position) * (size_t)p->args.vocab;
}
static int32_t *out_row(problem *p, int32_t b) { return p->out_ids + (size_t)b * ((size_t)p->args.max_draft + 1); }
static int32_t *drafts_of(problem *p, int32_t b) { return p->draft_ids + (size_t)b * (size_t)p->args.max_draft; }

/* Random target and draft rows for every request, drafts drawn from q (or from p without draft_probs). */
static void fill_random(problem *p, uint64_t seed) {
  uint64_t state = seed;
  for (int32_t b = 0; b < p->args.batch; b++) {
    for (int32_t i = 0; i <= p->args.max_draft; i++) make_random_row(target_row(p, b, i), p->args.vocab, &state);
    for (int32_t i = 0; i < p->args.max_draft; i++) {
      const float *proposal = target_row(p, b, i);
      if (p->draft_probs) {
        make_random_row(draft_row(p, b, i), p->args.vocab, &state);
        proposal = draft_row(p, b, i);
      }
      drafts_of(p, b)[i] = draw_from(proposal, p->args.vocab, &state);
    }
  }
}

/* The shape every result must have: accepted drafts, one token in [0, V), then -1. */
static void assert_well_formed(problem *p, const char *what) {
  for (int32_t b = 0; b < p->args.batch; b++) {
    int32_t accepted = p->num_accepted[b], *row = out_row(p, b);
    cr_assert(accepted >= 0 && accepted <= p->num_draft[b], "%s: request %d: num_accepted %d outside 0..%d", what, b,
              accepted, p->num_draft[b]);
    for (int32_t i = 0; i < accepted; i++)
      cr_assert_eq(row[i], drafts_of(p, b)[i], "%s: request %d position %d: %d is not the accepted draft %d", what, b, i,
                   row[i], drafts_of(p, b)[i]);
    cr_assert(row[accepted] >= 0 && row[accepted] < p->args.vocab, "%s: request %d: token %d outside [0, %d)", what, b,
              row[accepted], p->args.vocab);
    for (int32_t i = accepted + 1; i <= p->args.max_draft; i++)
      cr_assert_eq(row[i], -1, "%s: request %d position %d: %d after the emitted token, expected -1", what, b, i, row[i]);
  }
}

static void sample_ok(problem *p, const char *what) {
  volt8_status status = volt8_rejection_sample_host(&p->args);
  cr_assert_eq(status, VOLT8_OK, "%s: %s: %s", what, volt8_status_string(status), volt8_last_error(NULL));
  assert_well_formed(p, what);
}

/* ---- the random number generator ---- */

Test(sampler, philox_known_answers) {
  /* Philox4x32-10 test vectors published with the algorithm (Random123's kat_vectors). */
  const struct {
    volt8_u32 counter[4], key[2], expected[4];
  } vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
    volt8_philox_block counter;
    memcpy(counter.word, vectors[v].counter, sizeof counter.word);
    volt8_philox_block out = volt8_philox4x32_10(counter, vectors[v].key[0], vectors[v].key[1]);
    for (int w = 0; w < 4; w++)
      cr_assert_eq(out.word[w], vectors[v].expected[w], "vector %zu word %d: 0x%08x, expected 0x%08x", v, w, out.word[w],
                   vectors[v].expected[w]);
  }
}

Test(sampler, random_below_is_the_high_product) {
  uint64_t state = 11;
  for (int trial = 0; trial < 100000; trial++) {
    uint64_t random = splitmix_next(&state), bound = splitmix_next(&state) >> (trial % 64);
    if (trial % 7 == 0) random = ~0ull;
    uint64_t expected = (uint64_t)(((unsigned __int128)random * bound) >> 64);
    cr_assert_eq(volt8_random_below(random, bound), expected, "random 0x%016llx bound 0x%016llx",
                 (unsigned long long)random, (unsigned long long)bound);
  }
}

/* ---- arguments ---- */

Test(sampler, malformed_arguments_are_rejected_before_writing) {
  problem p;
  problem_init(&p, 2, 2, 16, 1);
  fill_random(&p, 1);
  for (size_t i = 0; i < 2 * 3; i++) p.out_ids[i] = 777;
  cr_assert_eq(volt8_rejection_sample_host(NULL), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "args is NULL"), "message: %s", volt8_last_error(NULL));
  volt8_rejection_args saved = p.args;
  const size_t sizes[] = {0, sizeof(size_t), sizeof(volt8_rejection_args) - 4, sizeof(volt8_rejection_args) + 8};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    p.args.size = sizes[i];
    cr_assert_eq(volt8_rejection_sample_host(&p.args), VOLT8_ERR_INVALID_ARGUMENT, "size %zu accepted", sizes[i]);
    cr_assert(strstr(volt8_last_error(NULL), "VOLT8_REJECTION_ARGS_INIT"), "message: %s", volt8_last_error(NULL));
  }
  p.args = saved;
  p.args.batch = -1;
  cr_assert_eq(volt8_rejection_sample_host(&p.args), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "batch"), "message: %s", volt8_last_error(NULL));
  p.args = saved;
  p.args.max_draft = -1;
  cr_assert_eq(volt8_rejection_sample_host(&p.args), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(volt8_last_error(NULL), "max_draft"), "message: %s", volt8_last_error(NULL));
  const int32_t vocabs[] = {0, -3, (1 << 24) + 1};
  for (size_t i = 0; i < 3; i++) {
    p.args = saved;
    p.args.vocab = vocabs[i];
    cr_assert_eq(volt8_rejection_sample_host(&p.args), VOLT8_ERR_INVALID_ARGUMENT, "vocab %d accepted", vocabs[i]);
    cr_assert(strstr(volt8_last_error(NULL), "vocab"), "message: %s", volt8_last_error(NULL));
  }
  const char *names[] = {"num_draft", "draft_ids", "target_probs", "out_ids", "num_accepted"};
  for (int i = 0; i < 5; i++) {
    p.args = saved;
    const void **fields[] = {(const void **)&p.args.num_draft, (const void **)&p.args.draft_ids,
                             (const void **)&p.args.target_probs, (const void **)&p.args.out_ids,
                             (const void **)&p.args.num_accepted};
    *fields[i] = NULL;
    cr_assert_eq(volt8_rejection_sample_host(&p.args), VOLT8_ERR_INVALID_ARGUMENT, "NULL %s accepted", names[i]);
    cr_assert(strstr(volt8_last_error(NULL), names[i]), "NULL %s: message: %s", names[i], volt8_last_error(NULL));
  }
  for (size_t i = 0; i < 2 * 3; i++) cr_assert_eq(p.out_ids[i], 777, "out_ids[%zu] written by a rejected call", i);
  problem_free(&p);
}

Test(sampler, empty_batch_is_a_no_op) {
  volt8_rejection_args args = VOLT8_REJECTION_ARGS_INIT;
  args.vocab = 10;
  cr_assert_eq(volt8_rejection_sample_host(&args), VOLT8_OK, "%s", volt8_last_error(NULL));
}

/* ---- invalid probabilities: an error, the request's row -1, the other requests untouched ---- */

typedef enum corruption {
  NAN_TARGET,
  NEGATIVE_DRAFT,
  INFINITE_TARGET,
  DRAFT_ID_TOO_LARGE,
  DRAFT_ID_NEGATIVE,
  NUM_DRAFT_TOO_LARGE,
  NUM_DRAFT_NEGATIVE,
  ZERO_TARGET_ROW,
  NAN_BONUS_ROW,
} corruption;

static const char *corrupt(problem *p, int32_t b, corruption kind) {
  switch (kind) {
  case NAN_TARGET: target_row(p, b, 1)[5] = NAN; return "target_probs[2][1][5] = nan";
  case NEGATIVE_DRAFT: draft_row(p, b, 0)[7] = -0.25f; return "draft_probs[2][0][7] = -0.25";
  case INFINITE_TARGET: target_row(p, b, 2)[0] = INFINITY; return "target_probs[2][2][0] = inf";
  case DRAFT_ID_TOO_LARGE: drafts_of(p, b)[1] = p->args.vocab; return "draft_ids[2][1] = 32 outside [0, 32)";
  case DRAFT_ID_NEGATIVE: drafts_of(p, b)[2] = -1; return "draft_ids[2][2] = -1";
  case NUM_DRAFT_TOO_LARGE: p->num_draft[b] = p->args.max_draft + 1; return "num_draft[2] = 4 outside 0..3";
  case NUM_DRAFT_NEGATIVE: p->num_draft[b] = -1; return "num_draft[2] = -1";
  case ZERO_TARGET_ROW: memset(target_row(p, b, 2), 0, sizeof(float) * (size_t)p->args.vocab); return "target_probs[2][2] has no positive entry";
  case NAN_BONUS_ROW: target_row(p, b, 3)[31] = NAN; return "target_probs[2][3][31] = nan";
  }
  return "";
}

ParameterizedTestParameters(sampler, invalid_request) {
  static corruption kinds[] = {NAN_TARGET,          NEGATIVE_DRAFT,     INFINITE_TARGET, DRAFT_ID_TOO_LARGE, DRAFT_ID_NEGATIVE,
                               NUM_DRAFT_TOO_LARGE, NUM_DRAFT_NEGATIVE, ZERO_TARGET_ROW, NAN_BONUS_ROW};
  return cr_make_param_array(corruption, kinds, sizeof kinds / sizeof kinds[0]);
}

ParameterizedTest(corruption *kind, sampler, invalid_request) {
  problem clean, bad;
  problem_init(&clean, 4, 3, 32, 1);
  problem_init(&bad, 4, 3, 32, 1);
  fill_random(&clean, 5);
  fill_random(&bad, 5);
  sample_ok(&clean, "clean input");
  const char *expected = corrupt(&bad, 2, *kind);
  volt8_status status = volt8_rejection_sample_host(&bad.args);
  cr_assert_eq(status, VOLT8_ERR_INVALID_ARGUMENT, "corruption %d: status %s", *kind, volt8_status_string(status));
  cr_assert(strstr(volt8_last_error(NULL), expected), "corruption %d: message \"%s\" does not say \"%s\"", *kind,
            volt8_last_error(NULL), expected);
  for (int32_t i = 0; i <= 3; i++)
    cr_assert_eq(out_row(&bad, 2)[i], -1, "corruption %d: invalid request's out_ids[%d] = %d", *kind, i, out_row(&bad, 2)[i]);
  cr_assert_eq(bad.num_accepted[2], 0, "corruption %d: num_accepted %d", *kind, bad.num_accepted[2]);
  for (int32_t b = 0; b < 4; b++) {
    if (b == 2) continue;
    cr_assert_eq(bad.num_accepted[b], clean.num_accepted[b], "corruption %d changed request %d", *kind, b);
    cr_assert_arr_eq(out_row(&bad, b), out_row(&clean, b), sizeof(int32_t) * 4, "corruption %d changed request %d", *kind, b);
  }
  problem_free(&clean);
  problem_free(&bad);
}

Test(sampler, rows_past_num_draft_are_not_read) {
  problem p;
  problem_init(&p, 3, 3, 32, 1);
  fill_random(&p, 9);
  p.num_draft[1] = 1;
  target_row(&p, 1, 2)[0] = NAN;  /* target rows 2..3 and draft rows 1..2 are padding */
  target_row(&p, 1, 3)[4] = -1.0f;
  draft_row(&p, 1, 1)[3] = NAN;
  drafts_of(&p, 1)[2] = -7;
  sample_ok(&p, "NaN in padding rows");
  problem_free(&p);
}

/* ---- edge cases ---- */

Test(sampler, all_accepted_then_bonus) {
  problem p;
  problem_init(&p, 64, 4, 100, 1);
  fill_random(&p, 21);
  for (int32_t b = 0; b < 64; b++) {
    for (int32_t i = 0; i < 4; i++) {
      int32_t draft = drafts_of(&p, b)[i];
      memset(target_row(&p, b, i), 0, sizeof(float) * 100);
      target_row(&p, b, i)[draft] = 1.0f;
      if (draft_row(&p, b, i)[draft] == 0.0f) draft_row(&p, b, i)[draft] = 0.5f;
    }
    memset(target_row(&p, b, 4), 0, sizeof(float) * 100);
    target_row(&p, b, 4)[b + 1] = 1.0f;
  }
  sample_ok(&p, "all accepted");
  for (int32_t b = 0; b < 64; b++) {
    cr_assert_eq(p.num_accepted[b], 4, "request %d accepted %d of 4 drafts with p(x) = 1", b, p.num_accepted[b]);
    cr_assert_eq(out_row(&p, b)[4], b + 1, "request %d: bonus %d, expected %d", b, out_row(&p, b)[4], b + 1);
  }
  problem_free(&p);
}

Test(sampler, first_draft_rejected_when_target_gives_it_zero) {
  problem p;
  problem_init(&p, 256, 3, 100, 1);
  fill_random(&p, 22);
  for (int32_t b = 0; b < 256; b++) target_row(&p, b, 0)[drafts_of(&p, b)[0]] = 0.0f;
  sample_ok(&p, "first rejected");
  for (int32_t b = 0; b < 256; b++) {
    int32_t token = out_row(&p, b)[0];
    cr_assert_eq(p.num_accepted[b], 0, "request %d accepted a draft with p(x) = 0", b);
    cr_assert(target_row(&p, b, 0)[token] > draft_row(&p, b, 0)[token],
              "request %d: recovered token %d has no residual mass (p %g, q %g)", b, token, target_row(&p, b, 0)[token],
              draft_row(&p, b, 0)[token]);
  }
  problem_free(&p);
}

Test(sampler, no_drafts_emits_a_token_from_the_target) {
  problem p;
  problem_init(&p, 128, 3, 100, 1);
  fill_random(&p, 23);
  for (int32_t b = 0; b < 128; b++) {
    p.num_draft[b] = 0;
    for (int32_t i = 0; i < 3; i++) drafts_of(&p, b)[i] = -9; /* not read */
  }
  sample_ok(&p, "num_draft 0");
  for (int32_t b = 0; b < 128; b++)
    cr_assert(target_row(&p, b, 0)[out_row(&p, b)[0]] > 0.0f, "request %d: token %d has p = 0", b, out_row(&p, b)[0]);
  problem_free(&p);
}

Test(sampler, mixed_draft_lengths) {
  problem p;
  problem_init(&p, 200, 5, 64, 1);
  fill_random(&p, 24);
  for (int32_t b = 0; b < 200; b++) p.num_draft[b] = b % 6;
  sample_ok(&p, "mixed lengths");
  for (int32_t b = 0; b < 200; b++) {
    int32_t accepted = p.num_accepted[b];
    cr_assert(target_row(&p, b, accepted)[out_row(&p, b)[accepted]] > 0.0f, "request %d: token with p = 0", b);
  }
  problem_free(&p);
}

Test(sampler, draft_equal_to_target_accepts_everything) {
  problem p;
  problem_init(&p, 256, 3, 100, 1);
  fill_random(&p, 25);
  for (int32_t b = 0; b < 256; b++)
    for (int32_t i = 0; i < 3; i++) {
      memcpy(draft_row(&p, b, i), target_row(&p, b, i), sizeof(float) * 100);
      drafts_of(&p, b)[i] = draw_from(target_row(&p, b, i), 100, &(uint64_t){(uint64_t)b * 7 + (uint64_t)i});
    }
  sample_ok(&p, "q == p");
  for (int32_t b = 0; b < 256; b++) cr_assert_eq(p.num_accepted[b], 3, "request %d rejected a draft with q == p", b);
  problem_free(&p);
}

Test(sampler, rejection_with_all_zero_residual_draws_from_target) {
  /* p = q / 2 everywhere: half the drafts are rejected and max(0, p - q) is all zero there. */
  problem p;
  problem_init(&p, 512, 2, 50, 1);
  fill_random(&p, 26);
  for (int32_t b = 0; b < 512; b++)
    for (int32_t i = 0; i < 2; i++)
      for (int32_t j = 0; j < 50; j++) target_row(&p, b, i)[j] = draft_row(&p, b, i)[j] * 0.5f;
  sample_ok(&p, "all-zero residual");
  int rejected = 0;
  for (int32_t b = 0; b < 512; b++) {
    int32_t accepted = p.num_accepted[b];
    if (accepted == 2) continue;
    rejected++;
    cr_assert(target_row(&p, b, accepted)[out_row(&p, b)[accepted]] > 0.0f, "request %d: token with p = 0", b);
  }
  cr_assert(rejected > 300, "only %d of 512 requests saw a rejection with acceptance 1/2 per draft", rejected);
  problem_free(&p);
}

Test(sampler, draft_prob_zero_is_always_accepted) {
  problem p;
  problem_init(&p, 256, 3, 100, 1);
  fill_random(&p, 27);
  uint64_t state = 28;
  for (int32_t b = 0; b < 256; b++)
    for (int32_t i = 0; i < 3; i++) {
      int32_t draft = draw_from(target_row(&p, b, i), 100, &state);
      drafts_of(&p, b)[i] = draft;
      draft_row(&p, b, i)[draft] = 0.0f;
    }
  sample_ok(&p, "q(x) = 0 < p(x)");
  for (int32_t b = 0; b < 256; b++) cr_assert_eq(p.num_accepted[b], 3, "request %d rejected a draft with q(x) = 0", b);
  problem_free(&p);
}

Test(sampler, tokens_the_target_gives_zero_are_never_emitted) {
  problem p;
  problem_init(&p, 2000, 2, 40, 1);
  uint64_t state = 29;
  for (int32_t b = 0; b < 2000; b++) {
    for (int32_t i = 0; i < 3; i++) make_target(target_row(&p, b, i), 40, i % 6, &state);
    for (int32_t i = 0; i < 2; i++) {
      for (int32_t j = 0; j < 40; j++) draft_row(&p, b, i)[j] = 1.0f / 40.0f; /* mass on p = 0 tokens too */
      drafts_of(&p, b)[i] = (int32_t)(splitmix_next(&state) % 40);
    }
  }
  sample_ok(&p, "p = 0 < q");
  for (int32_t b = 0; b < 2000; b++)
    for (int32_t i = 0; i <= p.num_accepted[b]; i++)
      cr_assert(target_row(&p, b, i)[out_row(&p, b)[i]] > 0.0f, "request %d position %d: token %d has p = 0", b, i,
                out_row(&p, b)[i]);
  problem_free(&p);
}

/* Where the outcome is certain: request b's drafts are accepted while each is wanted[position], and
 * the token emitted after them is wanted at the first that is not. */
static void expect_drafts_accepted_while_wanted(problem *p, int32_t b, const int32_t *wanted, const char *label) {
  int32_t expected = 0;
  while (expected < p->args.max_draft && drafts_of(p, b)[expected] == wanted[expected]) expected++;
  cr_assert_eq(p->num_accepted[b], expected, "%s: accepted %d, expected %d", label, p->num_accepted[b], expected);
  cr_assert_eq(out_row(p, b)[expected], wanted[expected], "%s: emitted %d, expected %d", label, out_row(p, b)[expected],
               wanted[expected]);
}

/* One-hot targets make the result deterministic, for sampling and greedy requests alike. */
Test(sampler, one_hot_targets) {
  problem p;
  problem_init(&p, 600, 3, 8, 1);
  fill_random(&p, 30);
  uint64_t state = 31;
  int32_t hot[600][4];
  for (int32_t b = 0; b < 600; b++) {
    p.greedy[b] = b % 2;
    for (int32_t i = 0; i < 4; i++) {
      hot[b][i] = (int32_t)(splitmix_next(&state) % 8);
      memset(target_row(&p, b, i), 0, sizeof(float) * 8);
      target_row(&p, b, i)[hot[b][i]] = 1.0f;
    }
    for (int32_t i = 0; i < 3; i++)
      if (splitmix_next(&state) % 3 != 0) drafts_of(&p, b)[i] = hot[b][i];
  }
  p.args.greedy = p.greedy;
  sample_ok(&p, "one-hot targets");
  for (int32_t b = 0; b < 600; b++) {
    char label[64];
    snprintf(label, sizeof label, "request %d (greedy %d)", b, p.greedy[b]);
    expect_drafts_accepted_while_wanted(&p, b, hot[b], label);
  }
  problem_free(&p);
}

Test(sampler, greedy_accepts_while_draft_is_argmax) {
  problem p;
  problem_init(&p, 500, 4, 16, 1);
  fill_random(&p, 32);
  uint64_t state = 33;
  int32_t argmax[500][5];
  for (int32_t b = 0; b < 500; b++) {
    p.greedy[b] = b % 3 != 0;
    for (int32_t i = 0; i < 5; i++) {
      float *row = target_row(&p, b, i);
      if (b % 5 == 0) row[11] = row[3] = 2.0f; /* a tie: the lower token is the argmax */
      argmax[b][i] = 0;
      for (int32_t j = 1; j < 16; j++)
        if (row[j] > row[argmax[b][i]]) argmax[b][i] = j;
    }
    for (int32_t i = 0; i < 4; i++)
      drafts_of(&p, b)[i] = splitmix_next(&state) % 4 != 0 ? argmax[b][i] : (int32_t)(splitmix_next(&state) % 16);
  }
  p.args.greedy = p.greedy;
  sample_ok(&p, "greedy");
  for (int32_t b = 0; b < 500; b++) {
    if (!p.greedy[b]) continue;
    char label[64];
    snprintf(label, sizeof label, "greedy request %d", b);
    expect_drafts_accepted_while_wanted(&p, b, argmax[b], label);
  }
  problem_free(&p);
}

Test(sampler, same_seed_and_offset_same_tokens) {
  problem p;
  problem_init(&p, 256, 3, 100, 1);
  fill_random(&p, 34);
  p.args.seed = 0x123456789abcdefull;
  p.args.offset = 42;
  sample_ok(&p, "first run");
  size_t count = 256 * 4;
  int32_t *first = malloc(count * sizeof(int32_t));
  memcpy(first, p.out_ids, count * sizeof(int32_t));
  sample_ok(&p, "second run");
  cr_assert_arr_eq(p.out_ids, first, count * sizeof(int32_t), "same seed and offset gave different tokens");
  p.args.offset = 43;
  sample_ok(&p, "next offset");
  cr_assert(memcmp(p.out_ids, first, count * sizeof(int32_t)) != 0, "offset 43 gave the tokens of offset 42");
  p.args.offset = 42;
  p.args.seed ^= 1;
  sample_ok(&p, "other seed");
  cr_assert(memcmp(p.out_ids, first, count * sizeof(int32_t)) != 0, "another seed gave the same tokens");
  free(first);
  problem_free(&p);
}

typedef struct vocab_case {
  int32_t vocab;
  int with_draft_probs;
} vocab_case;

ParameterizedTestParameters(sampler, vocab_sizes) {
  static vocab_case cases[] = {{100, 1}, {8193, 1}, {32000, 1}, {151936, 1}, {100, 0}, {8193, 0}, {151936, 0}};
  return cr_make_param_array(vocab_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(vocab_case *c, sampler, vocab_sizes) {
  problem p;
  problem_init(&p, 6, 3, c->vocab, c->with_draft_probs);
  fill_random(&p, (uint64_t)c->vocab);
  for (int32_t b = 0; b < 6; b++) p.num_draft[b] = b % 4;
  p.greedy[5] = 1;
  p.args.greedy = p.greedy;
  p.args.seed = 77;
  sample_ok(&p, "large vocabulary");
  for (int32_t b = 0; b < 6; b++) {
    int32_t accepted = p.num_accepted[b], token = out_row(&p, b)[accepted];
    cr_assert(target_row(&p, b, accepted)[token] > 0.0f, "V %d request %d: token %d has p = 0", c->vocab, b, token);
  }
  int32_t first[6 * 4];
  memcpy(first, p.out_ids, sizeof first);
  sample_ok(&p, "large vocabulary, again");
  cr_assert_arr_eq(p.out_ids, first, sizeof first, "V %d: not reproducible", c->vocab);
  problem_free(&p);
}

/* ---- the output distribution: chi-square goodness of fit ---- */

/* Q(a, x), the regularized upper incomplete gamma function: the chi-square p-value is Q(df/2, x/2).
 * Series for x < a + 1, continued fraction (modified Lentz) above. */
static double upper_regularized_gamma(double a, double x) {
  if (x <= 0.0) return 1.0;
  double log_prefix = -x + a * log(x) - lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 100000 && term > sum * 1e-17; n++) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * exp(log_prefix);
  }
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, fraction = d;
  for (int n = 1; n < 100000; n++) {
    double numerator = -n * (n - a);
    b += 2.0;
    d = numerator * d + b;
    if (fabs(d) < tiny) d = tiny;
    c = b + numerator / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    double step = d * c;
    fraction *= step;
    if (fabs(step - 1.0) < 1e-16) break;
  }
  return exp(log_prefix) * fraction;
}

static double chi_square_p_value(double statistic, int degrees_of_freedom) {
  return degrees_of_freedom < 1 ? 1.0 : upper_regularized_gamma(degrees_of_freedom / 2.0, statistic / 2.0);
}

Test(sampler, chi_square_p_values) {
  /* Closed forms for even degrees of freedom: df 2: e^{-x/2}; df 4: e^{-x/2} (1 + x/2). */
  const double xs[] = {0.5, 2.0, 7.0, 40.0, 300.0};
  for (int i = 0; i < 5; i++) {
    double x = xs[i];
    cr_assert_float_eq(chi_square_p_value(x, 2), exp(-x / 2), 1e-12 * exp(-x / 2) + 1e-300, "df 2, x %g", x);
    double df4 = exp(-x / 2) * (1 + x / 2);
    cr_assert_float_eq(chi_square_p_value(x, 4), df4, 1e-12 * df4 + 1e-300, "df 4, x %g", x);
  }
  cr_assert_float_eq(chi_square_p_value(3.841458820694124, 1), 0.05, 1e-9, "df 1 at its 95%% quantile");
}

typedef enum draft_kind { DRAFT_ZERO_MASS, DRAFT_SHARPER, DRAFT_FLATTER, DRAFT_DETERMINISTIC } draft_kind;
static const char *const draft_kind_names[] = {"mass where p = 0", "sharper than p", "flatter than p",
                                               "deterministic (no draft_probs)"};

/* Adversarial drafts: 40% of the mass on tokens p gives zero; p^3 (sharper); 0.3 p + 0.7 uniform
 * (flatter, and mass where p = 0). */
static void make_draft(float *out, const float *target, int32_t vocab, draft_kind kind) {
  double weights[FIT_VOCAB];
  int zeros = 0;
  for (int32_t j = 0; j < vocab; j++) zeros += target[j] == 0.0f;
  for (int32_t j = 0; j < vocab; j++) {
    double p = target[j];
    weights[j] = kind == DRAFT_ZERO_MASS ? 0.6 * p + (p == 0.0 ? 0.4 / zeros : 0.0)
                 : kind == DRAFT_SHARPER ? p * p * p
                                         : 0.3 * p + 0.7 / vocab;
  }
  normalize(weights, vocab, out);
}

typedef volt8_status (*sampler_fn)(const volt8_rejection_args *args);

/* A wrong sampler the fit must catch: every draft accepted, the bonus drawn from p. */
static volt8_status emit_drafts_unconditionally(const volt8_rejection_args *args) {
  uint64_t state = args->seed ^ (args->offset * 0x9E3779B97F4A7C15ull);
  size_t rows = (size_t)args->max_draft + 1;
  for (int32_t b = 0; b < args->batch; b++) {
    int32_t drafts = args->num_draft[b], *row = args->out_ids + (size_t)b * rows;
    for (int32_t i = 0; i < drafts; i++) row[i] = args->draft_ids[(size_t)b * (size_t)args->max_draft + (size_t)i];
    row[drafts] = draw_from(args->target_probs + ((size_t)b * rows + (size_t)drafts) * (size_t)args->vocab, args->vocab, &state);
    for (size_t i = (size_t)drafts + 1; i < rows; i++) row[i] = -1;
    args->num_accepted[b] = drafts;
  }
  return VOLT8_OK;
}

typedef struct fit_result {
  double worst_p_value;
  char worst[160];
  int64_t zero_emissions; /* tokens emitted where p = 0 */
} fit_result;

/* Pearson's statistic over categories, pooling those expected below MIN_EXPECTED into one. */
static void record_fit(fit_result *result, const int64_t *observed, const double *expected, int categories,
                       const char *what) {
  double statistic = 0.0, pooled_observed = 0.0, pooled_expected = 0.0;
  int bins = 0;
  for (int c = 0; c < categories; c++) {
    if (expected[c] < MIN_EXPECTED) {
      pooled_observed += (double)observed[c];
      pooled_expected += expected[c];
      continue;
    }
    statistic += ((double)observed[c] - expected[c]) * ((double)observed[c] - expected[c]) / expected[c];
    bins++;
  }
  if (pooled_expected > 0.0) {
    statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    bins++;
  }
  double p_value = chi_square_p_value(statistic, bins - 1);
  if (p_value < result->worst_p_value) {
    result->worst_p_value = p_value;
    snprintf(result->worst, sizeof result->worst, "%s: chi-square %.1f with %d degrees of freedom", what, statistic, bins - 1);
  }
}

/* FIT_TRIALS requests with the same rows: drafts drawn from q (fixed for deterministic drafts),
 * tokens tallied per position, then fitted against p and the acceptance counts against their law. */
static fit_result run_fit(sampler_fn sampler, int32_t max_draft, draft_kind kind, uint64_t seed) {
  const int32_t vocab = FIT_VOCAB, rows = max_draft + 1;
  uint64_t state = seed;
  float target[6][FIT_VOCAB], draft[5][FIT_VOCAB];
  int32_t fixed_draft[5];
  double acceptance[5];
  for (int32_t i = 0; i < rows; i++) make_target(target[i], vocab, i % 6, &state);
  for (int32_t i = 0; i < max_draft; i++) {
    fixed_draft[i] = 0;
    for (int32_t j = 1; j < vocab; j++)
      if (target[i][j] > target[i][fixed_draft[i]]) fixed_draft[i] = j;
    if (kind == DRAFT_DETERMINISTIC) {
      acceptance[i] = target[i][fixed_draft[i]];
      continue;
    }
    make_draft(draft[i], target[i], vocab, kind);
    acceptance[i] = 0.0;
    for (int32_t j = 0; j < vocab; j++) acceptance[i] += fmin(target[i][j], draft[i][j]);
  }
  problem p;
  problem_init(&p, FIT_BATCH, max_draft, vocab, kind != DRAFT_DETERMINISTIC);
  for (int32_t b = 0; b < FIT_BATCH; b++) {
    for (int32_t i = 0; i < rows; i++) memcpy(target_row(&p, b, i), target[i], sizeof target[i]);
    for (int32_t i = 0; i < max_draft && p.draft_probs; i++) memcpy(draft_row(&p, b, i), draft[i], sizeof draft[i]);
  }
  p.args.seed = seed;
  static int64_t counts[6][FIT_VOCAB];
  int64_t accepted_counts[6] = {0};
  memset(counts, 0, sizeof counts);
  for (int32_t batch = 0; batch < FIT_TRIALS / FIT_BATCH; batch++) {
    for (int32_t b = 0; b < FIT_BATCH; b++)
      for (int32_t i = 0; i < max_draft; i++)
        drafts_of(&p, b)[i] = kind == DRAFT_DETERMINISTIC ? fixed_draft[i] : draw_from(draft[i], vocab, &state);
    p.args.offset = (uint64_t)batch;
    volt8_status status = sampler(&p.args);
    cr_assert_eq(status, VOLT8_OK, "seed %llu batch %d: %s", (unsigned long long)seed, batch, volt8_last_error(NULL));
    for (int32_t b = 0; b < FIT_BATCH; b++) {
      accepted_counts[p.num_accepted[b]]++;
      for (int32_t i = 0; i <= p.num_accepted[b]; i++) counts[i][out_row(&p, b)[i]]++;
    }
  }
  problem_free(&p);

  fit_result result = {.worst_p_value = 1.0, .worst = "", .zero_emissions = 0};
  int64_t reached = FIT_TRIALS;
  for (int32_t i = 0; i < rows; i++) {
    double total = 0.0, expected[FIT_VOCAB];
    for (int32_t j = 0; j < vocab; j++) total += target[i][j];
    for (int32_t j = 0; j < vocab; j++) {
      expected[j] = (double)reached * target[i][j] / total;
      if (target[i][j] == 0.0f) result.zero_emissions += counts[i][j];
    }
    char what[64];
    snprintf(what, sizeof what, "tokens at position %d (%lld trials)", i, (long long)reached);
    record_fit(&result, counts[i], expected, vocab, what);
    reached -= accepted_counts[i];
  }
  double law[6], reach_probability = 1.0;
  for (int32_t k = 0; k <= max_draft; k++) {
    law[k] = (double)FIT_TRIALS * reach_probability * (k < max_draft ? 1.0 - acceptance[k] : 1.0);
    if (k < max_draft) reach_probability *= acceptance[k];
  }
  record_fit(&result, accepted_counts, law, rows, "acceptance counts");
  return result;
}

typedef struct fit_case {
  int32_t max_draft;
  draft_kind kind;
} fit_case;

static fit_case fit_cases[] = {
    {1, DRAFT_ZERO_MASS}, {1, DRAFT_SHARPER}, {1, DRAFT_FLATTER}, {1, DRAFT_DETERMINISTIC},
    {3, DRAFT_ZERO_MASS}, {3, DRAFT_SHARPER}, {3, DRAFT_FLATTER}, {3, DRAFT_DETERMINISTIC},
};

ParameterizedTestParameters(sampler, output_follows_target) {
  return cr_make_param_array(fit_case, fit_cases, sizeof fit_cases / sizeof fit_cases[0]);
}

ParameterizedTest(fit_case *c, sampler, output_follows_target) {
  uint64_t seed = 1000 + (uint64_t)c->max_draft * 10 + (uint64_t)c->kind;
  fit_result result = run_fit(volt8_rejection_sample_host, c->max_draft, c->kind, seed);
  cr_log_info("K %d, draft %s: worst p-value %.3g (%s)", c->max_draft, draft_kind_names[c->kind], result.worst_p_value,
              result.worst);
  cr_assert_eq(result.zero_emissions, 0, "K %d, draft %s, seed %llu: %lld tokens emitted where p = 0", c->max_draft,
               draft_kind_names[c->kind], (unsigned long long)seed, (long long)result.zero_emissions);
  cr_assert(result.worst_p_value >= FIT_ALPHA, "K %d, draft %s, seed %llu: p-value %.3g < %g for %s", c->max_draft,
            draft_kind_names[c->kind], (unsigned long long)seed, result.worst_p_value, FIT_ALPHA, result.worst);
}

ParameterizedTestParameters(sampler, mutant_fails_the_fit) {
  return cr_make_param_array(fit_case, fit_cases, sizeof fit_cases / sizeof fit_cases[0]);
}

ParameterizedTest(fit_case *c, sampler, mutant_fails_the_fit) {
  uint64_t seed = 1000 + (uint64_t)c->max_draft * 10 + (uint64_t)c->kind;
  fit_result result = run_fit(emit_drafts_unconditionally, c->max_draft, c->kind, seed);
  cr_log_info("mutant, K %d, draft %s: worst p-value %.3g (%s), %lld tokens where p = 0", c->max_draft,
              draft_kind_names[c->kind], result.worst_p_value, result.worst, (long long)result.zero_emissions);
  cr_assert(result.worst_p_value < FIT_ALPHA || result.zero_emissions > 0,
            "K %d, draft %s, seed %llu: the mutant passed (worst p-value %.3g for %s)", c->max_draft,
            draft_kind_names[c->kind], (unsigned long long)seed, result.worst_p_value, result.worst);
}

/* ---- the GPU entry points on a machine without one ---- */

Test(sampler, gpu_call_without_device_says_so) {
  volt8_ctx *ctx = test_cpu_ctx(NULL);
  problem p;
  problem_init(&p, 2, 1, 8, 1);
  cr_assert_eq(volt8_rejection_sample(ctx, &p.args, NULL), VOLT8_ERR_NO_DEVICE);
  cr_assert(strstr(volt8_last_error(ctx), "no GPU"), "message: %s", volt8_last_error(ctx));
  cr_assert_eq(volt8_rejection_sample(NULL, &p.args, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_rejection_sample(ctx, NULL, NULL), VOLT8_ERR_INVALID_ARGUMENT);
  cr_assert_eq(volt8_rejection_prepare(NULL), VOLT8_ERR_INVALID_ARGUMENT);
  problem_free(&p);
  volt8_ctx_destroy(ctx);
}

/* Without a device, prepare compiles only: the template must build for compute_70 (NVRTC 12)
 * with nothing newer than SM70 in it, and for a current arch. */
typedef struct arch_case {
  char name[8]; /* by value: parameters are copied into the test's process */
} arch_case;

ParameterizedTestParameters(sampler, kernels_compile) {
  static arch_case arches[] = {{"sm_70"}, {"sm_90"}};
  return cr_make_param_array(arch_case, arches, sizeof arches / sizeof arches[0]);
}

ParameterizedTest(arch_case *arch, sampler, kernels_compile, .timeout = 300) {
  volt8_ctx *ctx = test_cpu_ctx(arch->name);
  volt8_status status = volt8_rejection_prepare(ctx);
  cr_assert_eq(status, VOLT8_OK, "%s: %s: %s", arch->name, volt8_status_string(status), volt8_last_error(ctx));
  volt8_ctx_destroy(ctx);
}

/* How the GPU path cuts rows: chunks cover [0, V) exactly, none empty, none under the minimum
 * (unless the row is one chunk), aligned, and enough of them to fill the GPU when rows are few. */
Test(sampler, row_cuts_cover_the_vocabulary) {
  const int32_t vocabs[] = {1, 100, 2047, 2048, 4095, 8193, 32000, 151936, 1 << 24};
  const int64_t units[] = {1, 2, 6, 64, 528, 100000};
  for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
      const int32_t vocab = vocabs[v];
      volt8_sampler_cut cut;
      volt8_sampler_split(units[u], vocab, 528, &cut);
      cr_assert_geq(cut.splits, 1);
      cr_assert_geq((int64_t)cut.splits * cut.chunk, vocab, "V %d units %lld: %d x %d", vocab, (long long)units[u],
                    cut.splits, cut.chunk);
      cr_assert_lt((int64_t)(cut.splits - 1) * cut.chunk, vocab, "V %d: last chunk empty", vocab);
      if (cut.splits > 1) {
        cr_assert_eq(cut.chunk % SPLIT_CHUNK_ALIGN, 0);
        cr_assert_geq(cut.chunk, SPLIT_MIN_CHUNK);
      } else {
        cr_assert_eq(cut.chunk, vocab);
      }
      if (units[u] >= 528) cr_assert_eq(cut.splits, 1, "V %d units %lld", vocab, (long long)units[u]);
      /* Few rows: about 528 chunks in all, or as many as the minimum chunk allows. */
      const int32_t most = vocab / SPLIT_MIN_CHUNK > 1 ? vocab / SPLIT_MIN_CHUNK : 1;
      if (units[u] * cut.splits < 528 / 2)
        cr_assert_geq(cut.splits, most - 1, "V %d units %lld: %d chunks", vocab, (long long)units[u], cut.splits);
    }
  }
  volt8_sampler_cut cut;
  volt8_sampler_split(2, 151936, 528, &cut);
  cr_assert_gt(cut.splits, 50, "B 1 K 1 at V 151936: %d chunks of %d", cut.splits, cut.chunk);
}
