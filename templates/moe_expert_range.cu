// Which experts a kernel serves (moe_layout.h): global experts [kExpertStart, kExpertStart + the
// template's kNumExperts) of kGlobalExperts. Without expert parallelism that is all of them (start 0).
// Every MoE template includes it after moe_common.cu. Enumerators, not constexpr variables: NVRTC
// writes those into the PTX, and a kernel without expert parallelism keeps the PTX it had before.
enum : int { kExpertStart = @{EXPERT_START}, kGlobalExperts = @{GLOBAL_EXPERTS} };
#define VOLT8_EXPERT_PARALLEL @{EXPERT_PARALLEL}

// The kernel's own index of the expert of a global id: in [0, kNumExperts) when the kernel holds it.
static __device__ __forceinline__ int local_expert(int id) { return id - kExpertStart; }
