/* The kernel families the GPU accuracy suite measures (tests/gpu/test_accuracy.c), each as one pinned
 * pair of variants of the suite's problem shape (ACCURACY_SHAPE), and the first arch that lists it.
 * tok is a down only: it runs after a block_m 1 cc gate_up. tests/test_accuracy_figures.c checks that
 * the committed figures file names each of them. */
#ifndef VOLT8_ACCURACY_FAMILIES_H
#define VOLT8_ACCURACY_FAMILIES_H

/* The reference model's TP8 rank 3 with 32 experts: down's K (80 codes at offset 112 of the scale
 * grid) starts 16 codes into a 32-code step and crosses a scale block; gate_up's K is 20 blocks. */
#define ACCURACY_SHAPE "hidden=2560,intermediate=80,intermediate_offset=112,num_experts=32"
#define ACCURACY_TOKENS 64
#define ACCURACY_TOP_K 10

typedef struct accuracy_family {
  const char *name, *gate_up, *down;
  int min_arch;
} accuracy_family;

static const accuracy_family ACCURACY_FAMILIES[] = {
    {"cc", "gate_up.cc.bm4.bn8.w8.sk2.l16", "down.cc.bm4.bn128.w8.sk1.l2", 70},
    {"tok", "gate_up.cc.bm1.bn8.w8.sk2.l16", "down.tok.bm1.bn16.w8.sk1.l2", 70},
    {"mma", "gate_up.mma.bm16.bn16.w2.sk1", "down.mma.bm16.bn32.w4.sk1", 70},
    {"hmma", "gate_up.hmma.bm8.bn32.w4.sk1.f256", "down.hmma.bm8.bn128.w4.sk1", 80},
    {"tile", "gate_up.tile.bm64.bn64.w8.sk1.o2", "down.tile.bm64.bn128.w8.sk1.o2", 70},
    {"raw", "gate_up.raw.bm64.bn64.w4.sk1.o4.f256", "down.raw.bm64.bn128.w4.sk1.o4.f256", 80},
};
#define ACCURACY_FAMILY_COUNT ((int)(sizeof ACCURACY_FAMILIES / sizeof ACCURACY_FAMILIES[0]))

#endif
