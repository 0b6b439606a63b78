-- The variant space: which kernels exist for a shape, their names, and the literal values each
-- template is expanded with. Shapes follow runtime/moe/kernels/moe_layout.h.
local variants = {}

local SHARED_MEMORY_LIMIT_BYTES = 48 * 1024  -- static shared memory per CTA
local MMA_X_TILE_LIMIT_BYTES = 32 * 1024
local MAX_EXPERTS = 2048                     -- the route kernel keeps two to nine ints per expert in shared memory
local MAX_DIMENSION = 65536
local ROUTE_THREADS = 256
local ROUTE_ID_CAPACITY_LIMIT = 8192         -- ids the route kernel keeps in shared memory at once
local REDUCE_THREADS = 128
-- The one-launch forward (templates/moe_single.cu): a CTA of SINGLE_THREADS threads per work item,
-- lanes per weight row as the cc tiles the sm_70 tables pick at few tokens.
local SINGLE_THREADS = 256
local SINGLE_GATE_LANES = 32
local SINGLE_DOWN_LANES = 2
local SINGLE_MIN_BLOCKS = 3  -- CTAs an SM must hold: 80 registers a thread at most

-- expert_start, global_experts: expert parallelism (moe_layout.h); global_experts 0 means all experts.
variants.DEFAULT_SHAPE = {
  hidden = 2560, intermediate = 160, num_experts = 512, block_n = 128, block_k = 128, intermediate_offset = 32,
  expert_start = 0, global_experts = 0,
}
variants.SHAPE_FIELDS = { "hidden", "intermediate", "num_experts", "block_n", "block_k", "intermediate_offset",
                          "expert_start", "global_experts" }

-- Tile shapes per (op, family); every block_m of the family is crossed with every tile. A cc or hmma
-- tile may set o: the compiler fits o CTAs on an SM, capping registers to match (default 1). tok
-- (down only) fuses the weighted top-k reduce: a CTA walks one token's pairs, each reading its own
-- expert (block_m 1, no route pass).
-- hmma (sm_80 and later only) runs m16n8k16 with the weights as the 16-row operand, so one product
-- serves up to 8 pairs; its tiles may set c: the CTA's block_n columns are walked as c groups. An
-- hmma down tile may set r = 1: the CTA that stores the last of a token's z rows for its columns
-- also forms that token's weighted top-k sum there, so the forward launches no reduce (every r tile
-- has its twin without r, the variant it is checked against bit for bit). An hmma, cc
-- or tok tile may set f = 128 or 256: each weight load brings the aligned f-byte block around it into
-- L2 (the load's prefetch size, sm_80 and later: such variants are listed from sm_80 on).
local FAMILY_BLOCK_M = { cc = { 1, 2, 4 }, mma = { 8, 16, 32 }, tok = { 1 }, hmma = { 1, 2, 4, 8 } }
local FAMILIES = { "cc", "mma", "tok", "hmma" }
local FAMILY_MIN_ARCH = { hmma = 80 }  -- families whose instructions need a newer target than sm_70
local FETCH_MIN_ARCH = 80              -- the loads' L2 prefetch size (f tiles)
local DEFAULT_ARCH = 70
local TOK_PASS_PAIRS_LIMIT = 16
local LAUNCH_ROWS = 65535       -- gridDim.y's limit: the rows of one GEMM launch (VOLT8_LAUNCH_ROWS)
local ARRIVAL_MIN_BLOCK_N = 32  -- the workspace keeps ceil(hidden / 32) arrival counters per token
local TILES = {
  gate_up = {
    cc = {
      { bn = 4, w = 4, sk = 1, l = 32 },
      { bn = 8, w = 4, sk = 1, l = 16 },
      { bn = 8, w = 8, sk = 2, l = 16 },
      { bn = 8, w = 4, sk = 1, l = 16, o = 6 },
      { bn = 8, w = 4, sk = 1, l = 16, o = 8 },
      { bn = 8, w = 4, sk = 1, l = 16, f = 128 },
      { bn = 8, w = 8, sk = 2, l = 16, f = 128 },
      { bn = 8, w = 4, sk = 1, l = 16, o = 6, f = 128 },
    },
    mma = {
      { bn = 16, w = 2, sk = 1 },
      { bn = 32, w = 8, sk = 2 },
    },
    hmma = {
      { bn = 8, w = 4, sk = 4 },
      { bn = 8, w = 8, sk = 8 },
      { bn = 16, w = 4, sk = 4 },
      { bn = 16, w = 8, sk = 4 },
      { bn = 16, w = 4, sk = 4, o = 4 },
      { bn = 32, w = 4, sk = 4 },
      { bn = 32, w = 4, sk = 1 },
      { bn = 8, w = 8, sk = 8, f = 128 },
      { bn = 8, w = 8, sk = 8, f = 256 },
      { bn = 16, w = 4, sk = 4, f = 128 },
      { bn = 16, w = 4, sk = 4, o = 4, f = 128 },
      { bn = 32, w = 4, sk = 1, f = 128 },
      { bn = 32, w = 4, sk = 1, f = 256 },
    },
  },
  down = {
    cc = {
      { bn = 32, w = 4, sk = 1, l = 4 },
      { bn = 64, w = 4, sk = 1, l = 2 },
      { bn = 128, w = 8, sk = 1, l = 2 },
      { bn = 32, w = 4, sk = 1, l = 4, o = 10 },
      { bn = 64, w = 4, sk = 1, l = 2, o = 10 },
    },
    mma = {
      { bn = 32, w = 4, sk = 1 },
      { bn = 32, w = 4, sk = 2 },
    },
    hmma = {
      { bn = 32, w = 2, sk = 1 },
      { bn = 64, w = 4, sk = 1 },
      { bn = 128, w = 8, sk = 1 },
      { bn = 128, w = 4, sk = 1 },
      { bn = 128, w = 4, sk = 1, o = 5 },
      { bn = 256, w = 4, sk = 1, c = 2 },
      { bn = 512, w = 4, sk = 1, c = 4 },
      { bn = 256, w = 2, sk = 1, c = 4 },
      { bn = 512, w = 8, sk = 1, c = 4 },
      { bn = 32, w = 2, sk = 1, r = 1 },
      { bn = 64, w = 4, sk = 1, r = 1 },
      { bn = 128, w = 4, sk = 1, r = 1 },
      { bn = 256, w = 4, sk = 1, c = 2, r = 1 },
      { bn = 64, w = 4, sk = 1, f = 128 },
      { bn = 128, w = 4, sk = 1, f = 128 },
      { bn = 128, w = 4, sk = 1, r = 1, f = 128 },
      { bn = 256, w = 4, sk = 1, c = 2, f = 128 },
      { bn = 512, w = 4, sk = 1, c = 4, f = 256 },
    },
    tok = {
      { bn = 16, w = 4, sk = 1, l = 2 },
      { bn = 16, w = 8, sk = 1, l = 2 },
      { bn = 32, w = 8, sk = 1, l = 2 },
      { bn = 32, w = 4, sk = 1, l = 1 },
      { bn = 16, w = 4, sk = 1, l = 2, f = 128 },
      { bn = 16, w = 8, sk = 1, l = 2, f = 128 },
      { bn = 32, w = 8, sk = 1, l = 2, f = 128 },
    },
  },
}

local function ceil_div(a, b) return (a + b - 1) // b end
local function round_up(a, b) return ceil_div(a, b) * b end

local function shape_error(field, value, requirement)
  error(string.format("invalid shape: %s=%s %s", field, tostring(value), requirement), 0)
end

-- Checks a shape table against moe_layout.h and the generator's limits; returns a normalized copy.
function variants.validate_shape(shape)
  if type(shape) ~= "table" then error("invalid shape: expected a table", 0) end
  local normalized = {}
  for _, field in ipairs(variants.SHAPE_FIELDS) do
    local value = shape[field]
    if value == nil then value = variants.DEFAULT_SHAPE[field] end
    local integer = math.tointeger(value)
    if integer == nil then shape_error(field, value, "is not an integer") end
    normalized[field] = integer
  end
  local s = normalized
  if s.hidden <= 0 or s.hidden % 16 ~= 0 or s.hidden > MAX_DIMENSION then
    shape_error("hidden", s.hidden, "must be a positive multiple of 16, at most " .. MAX_DIMENSION)
  end
  if s.intermediate <= 0 or s.intermediate % 16 ~= 0 or s.intermediate > MAX_DIMENSION then
    shape_error("intermediate", s.intermediate, "must be a positive multiple of 16, at most " .. MAX_DIMENSION)
  end
  if s.num_experts <= 0 or s.num_experts > MAX_EXPERTS then
    shape_error("num_experts", s.num_experts, "must be in [1, " .. MAX_EXPERTS .. "]")
  end
  if s.block_k ~= 128 then shape_error("block_k", s.block_k, "must be 128") end
  if s.block_n ~= 1 and s.block_n ~= 128 then shape_error("block_n", s.block_n, "must be 1 or 128") end
  if s.intermediate_offset < 0 or s.intermediate_offset % 16 ~= 0 then
    shape_error("intermediate_offset", s.intermediate_offset, "must be a non-negative multiple of 16")
  end
  if s.block_n == 128 and s.intermediate_offset >= 128 then
    shape_error("intermediate_offset", s.intermediate_offset, "must be below block_n=128")
  end
  if s.block_n == 1 and s.intermediate_offset ~= 0 then
    shape_error("intermediate_offset", s.intermediate_offset, "must be 0 when block_n=1")
  end
  if s.global_experts == 0 then
    if s.expert_start ~= 0 then shape_error("expert_start", s.expert_start, "must be 0 when global_experts=0") end
  elseif s.expert_start < 0 or s.global_experts < 0 or s.expert_start > s.global_experts - s.num_experts then
    shape_error("global_experts", s.global_experts, string.format("must hold experts [%d, %d)", s.expert_start,
                                                                   s.expert_start + s.num_experts))
  end
  -- All experts of the model, however spelled, are one shape (and the same kernels).
  if s.expert_start == 0 and s.global_experts == s.num_experts then s.global_experts = 0 end
  return normalized
end

-- "H2560_I160_E512_b128x128_o32": the shape part of every entry name. A rank of expert parallelism
-- adds its range: "..._o32_x128of512" holds E experts from global expert 128 of 512.
function variants.shape_key(s)
  local key = string.format("H%d_I%d_E%d_b%dx%d_o%d", s.hidden, s.intermediate, s.num_experts, s.block_n, s.block_k,
                            s.intermediate_offset)
  if s.global_experts ~= 0 then key = key .. string.format("_x%dof%d", s.expert_start, s.global_experts) end
  return key
end

-- The expert range every template gets (moe_expert_range.cu).
local function range_values(s, values)
  values.EXPERT_START = s.expert_start
  values.GLOBAL_EXPERTS = s.global_experts ~= 0 and s.global_experts or s.num_experts
  values.EXPERT_PARALLEL = s.global_experts ~= 0 and 1 or 0
  return values
end

function variants.gemm_name(spec)
  local name = string.format("%s.%s.bm%d.bn%d.w%d.sk%d", spec.op, spec.family, spec.bm, spec.bn, spec.w, spec.sk)
  if spec.family ~= "mma" and spec.family ~= "hmma" then name = name .. string.format(".l%d", spec.l) end
  if spec.c then name = name .. string.format(".c%d", spec.c) end
  if spec.o then name = name .. string.format(".o%d", spec.o) end
  if spec.f then name = name .. string.format(".f%d", spec.f) end
  if spec.r then name = name .. string.format(".r%d", spec.r) end
  return name
end

function variants.parse_name(name)
  if name == "route" or name == "reduce" or name == "single" then return { op = name, family = "support" } end
  local op, family, rest = name:match("^([%a_]+)%.(%a+)%.(.*)$")
  if not op then return nil end
  local spec = { op = op, family = family }
  for key, value in rest:gmatch("(%a+)(%d+)") do spec[key] = tonumber(value) end
  if not (spec.bm and spec.bn and spec.w and spec.sk) then return nil end
  -- Only names that print back identically are accepted.
  if TILES[op] == nil or TILES[op][family] == nil or variants.gemm_name(spec) ~= name then return nil end
  return spec
end

-- Operand geometry of one op: K, N, weight rows per output column and the scale indexing.
local function op_geometry(op, s)
  local k13_blocks = ceil_div(s.hidden, s.block_k)
  local g13 = ceil_div(s.intermediate_offset + s.intermediate, s.block_n)
  local g2 = ceil_div(s.intermediate_offset + s.intermediate, s.block_k)
  local n2_blocks = ceil_div(s.hidden, s.block_n)
  if op == "gate_up" then
    return {
      k = s.hidden, n = s.intermediate, rows = 2, up_row_offset = s.intermediate,
      expert_weight_bytes = 2 * s.intermediate * s.hidden, counter_index = 0,
      scale_row_offset = s.intermediate_offset, scale_k_offset = 0, scale_row_stride = k13_blocks,
      scale_half_stride = g13 * k13_blocks, scale_expert_stride = 2 * g13 * k13_blocks,
    }
  end
  return {
    k = s.intermediate, n = s.hidden, rows = 1, up_row_offset = 0,
    expert_weight_bytes = s.hidden * s.intermediate, counter_index = 1,
    scale_row_offset = 0, scale_k_offset = s.intermediate_offset, scale_row_stride = g2,
    scale_half_stride = 0, scale_expert_stride = n2_blocks * g2,
  }
end

local function common_values(spec, s, geometry)
  local k_blocks = (geometry.scale_k_offset + geometry.k - 1) // s.block_k + 1
  return {
    OP_GATE_UP = spec.op == "gate_up" and 1 or 0,
    BLOCK_M = spec.bm, BLOCK_N = spec.bn, WARPS = spec.w, SPLIT_K = spec.sk, THREADS = 32 * spec.w,
    ROWS = geometry.rows, K_DIM = geometry.k, N_DIM = geometry.n, NUM_EXPERTS = s.num_experts,
    EXPERT_WEIGHT_BYTES = geometry.expert_weight_bytes, UP_ROW_OFFSET = geometry.up_row_offset,
    COUNTER_INDEX = geometry.counter_index, SCALE_BN = s.block_n,
    SCALE_ROW_OFFSET = geometry.scale_row_offset, SCALE_K_OFFSET = geometry.scale_k_offset,
    SCALE_ROW_STRIDE = geometry.scale_row_stride, SCALE_HALF_STRIDE = geometry.scale_half_stride,
    SCALE_EXPERT_STRIDE = geometry.scale_expert_stride, SCALE_K_BLOCKS = k_blocks,
    MIN_BLOCKS = spec.o or 1,
    WEIGHT_FETCH = spec.f or 0,  -- f tiles: the weight loads' L2 prefetch size (templates but mma's)
  }
end

-- Template values of a CUDA-core variant, or nil and the reason it does not fit the shape.
local function cc_values(spec, s)
  local geometry = op_geometry(spec.op, s)
  local values = common_values(spec, s, geometry)
  local chunks = geometry.k // 16
  if spec.w % spec.sk ~= 0 then return nil, "split_k does not divide warps" end
  if 32 % spec.l ~= 0 then return nil, "lanes per row do not divide a warp" end
  local groups_per_slice = (spec.w // spec.sk) * (32 // spec.l)
  if spec.bn ~= groups_per_slice then return nil, "block_n must equal the lane groups of a k slice" end
  if spec.bn > geometry.n then return nil, "block_n exceeds the output width" end
  if chunks < spec.sk then return nil, "fewer 16-wide k chunks than split_k slices" end
  local chunks_per_lane = ceil_div(ceil_div(chunks, spec.sk), spec.l)
  values.LANES = spec.l
  values.UNROLL = math.min(chunks_per_lane, geometry.rows == 2 and 4 or 8)
  local shared_bytes = spec.bm * geometry.k * 4 + geometry.rows * spec.bn * values.SCALE_K_BLOCKS * 4 +
                       spec.sk * spec.bn * spec.bm * geometry.rows * 4 + spec.bm * 4
  if shared_bytes > SHARED_MEMORY_LIMIT_BYTES then
    return nil, string.format("needs %d bytes of shared memory", shared_bytes)
  end
  return values
end

-- Template values of a tensor-core variant, or nil and the reason it does not fit the shape.
local function mma_values(spec, s)
  local geometry = op_geometry(spec.op, s)
  local values = common_values(spec, s, geometry)
  if spec.w % spec.sk ~= 0 then return nil, "split_k does not divide warps" end
  local warps_n = spec.w // spec.sk
  if spec.bn % (8 * warps_n) ~= 0 then return nil, "block_n is not a multiple of 8 columns per warp" end
  local n_tiles = spec.bn // (8 * warps_n)
  local m_tiles = spec.bm // 8
  local accumulators = m_tiles * n_tiles * geometry.rows * 8
  if accumulators > 64 then return nil, "too many accumulators per thread" end
  if spec.bn > round_up(geometry.n, 8 * warps_n) then return nil, "block_n exceeds the output width" end
  local scale_bytes = geometry.rows * values.SCALE_K_BLOCKS * spec.bn * 4
  local x_budget = math.min(MMA_X_TILE_LIMIT_BYTES, SHARED_MEMORY_LIMIT_BYTES - scale_bytes - spec.bm * 4)
  local max_tile_k = ((x_budget // (2 * spec.bm) - 16) // 64) * 64
  if max_tile_k < 64 then return nil, "no x tile fits in shared memory" end
  local padded_k = round_up(geometry.k, 64)
  local num_tiles = ceil_div(padded_k, max_tile_k)
  local tile_k = round_up(ceil_div(padded_k, num_tiles), 64)
  local tile_steps = tile_k // 64
  if tile_steps < spec.sk then return nil, "fewer 64-wide k steps than split_k slices" end
  local x_bytes = spec.bm * (2 * tile_k + 32)
  local split_bytes = (spec.sk - 1) * warps_n * 8 * accumulators * 4
  local buffer_bytes = math.max(x_bytes, split_bytes)
  if buffer_bytes + scale_bytes + spec.bm * 4 > SHARED_MEMORY_LIMIT_BYTES then
    return nil, "needs more than 48 KiB of shared memory"
  end
  values.TILE_K = tile_k
  values.SMEM_BYTES = buffer_bytes
  -- Loads per batch, halved when the accumulators already take a quarter of the registers.
  local loads_per_batch = accumulators >= 64 and 4 or 8
  values.UNROLL = math.max(1, math.min(ceil_div(tile_steps, spec.sk), loads_per_batch // (n_tiles * geometry.rows)))
  return values
end

-- Template values of an sm_80+ tensor-core variant, or nil and the reason it does not fit the shape.
local function hmma_values(spec, s, arch)
  local geometry = op_geometry(spec.op, s)
  local values = common_values(spec, s, geometry)
  if spec.w % spec.sk ~= 0 then return nil, "split_k does not divide warps" end
  local warps_n = spec.w // spec.sk
  -- c column groups of block_n / c columns are walked one after the other (split_k 1 only).
  local groups = spec.c or 1
  if spec.bn % groups ~= 0 then return nil, "column groups do not divide block_n" end
  if groups > 1 and spec.sk ~= 1 then return nil, "column groups need split_k 1" end
  local group_columns = spec.bn // groups
  -- A 16-row tile is 16 output columns of down, or the gate and up rows of 8 columns of gate_up.
  local tile_columns = 16 // geometry.rows
  if group_columns % (tile_columns * warps_n) ~= 0 then
    return nil, string.format("a column group is not a multiple of %d columns per warp", tile_columns)
  end
  local n_tiles = group_columns // (tile_columns * warps_n)
  if spec.bn > round_up(geometry.n, tile_columns * warps_n) then return nil, "block_n exceeds the output width" end
  -- 64-code windows aligned to the scale grid: the first starts pad codes before k = 0.
  local pad = geometry.scale_k_offset % 64
  local windows = ceil_div(pad + geometry.k, 64)
  if windows < spec.sk then return nil, "fewer 64-wide k windows than split_k slices" end
  local accumulators = n_tiles * 4
  local x_bytes = spec.bm * (windows * 64 + 8) * 2
  local partial_bytes = (spec.sk - 1) * warps_n * 32 * accumulators * 4
  local scale_bytes = geometry.rows * spec.bn * values.SCALE_K_BLOCKS * 4
  if math.max(x_bytes, partial_bytes) + scale_bytes + spec.bm * 4 > SHARED_MEMORY_LIMIT_BYTES then
    return nil, "needs more than 48 KiB of shared memory"
  end
  if spec.r then
    if spec.op ~= "down" then return nil, "only down fuses the reduce" end
    if spec.sk ~= 1 then return nil, "the fused reduce needs split_k 1" end
    if spec.bn < ARRIVAL_MIN_BLOCK_N then
      return nil, string.format("the fused reduce needs block_n >= %d", ARRIVAL_MIN_BLOCK_N)
    end
  end
  values.FUSED_REDUCE = spec.r and 1 or 0
  -- sm_89 and later convert E4M3 with one instruction per two codes.
  values.FP8_CVT = arch >= 89 and 1 or 0
  values.K_PAD = pad
  values.WINDOWS = windows
  values.COLUMN_GROUPS = groups
  -- Windows in flight: 16 chunk registers of four words each at most, 8 when o caps the registers.
  local chunks_per_window = n_tiles * 2
  local chunk_registers = (spec.o or 1) >= 4 and 8 or 16
  values.UNROLL = math.max(1, math.min(groups * ceil_div(windows, spec.sk), chunk_registers // chunks_per_window))
  return values
end

-- Template values of a token-fused down variant, or nil and the reason it does not fit the shape.
local function tok_values(spec, s)
  if spec.op ~= "down" then return nil, "only down fuses the reduce" end
  local geometry = op_geometry(spec.op, s)
  local values = common_values(spec, s, geometry)
  local chunks = geometry.k // 16
  if 32 % spec.l ~= 0 then return nil, "lanes per row do not divide a warp" end
  local groups = spec.w * 32 // spec.l
  if groups % spec.bn ~= 0 then return nil, "block_n does not divide the lane groups" end
  if spec.bn > geometry.n then return nil, "block_n exceeds the output width" end
  local slots = groups // spec.bn
  -- Pairs staged per pass: as many as shared memory holds, a multiple of the slots, at most 16.
  local per_pair = geometry.k * 4 + spec.bn * 4 + 8
  local pass_pairs = math.min(TOK_PASS_PAIRS_LIMIT, SHARED_MEMORY_LIMIT_BYTES // per_pair) // slots * slots
  if pass_pairs < slots then return nil, "no pass of one pair per slot fits in shared memory" end
  local items = (pass_pairs // slots) * ceil_div(chunks, spec.l)
  values.LANES = spec.l
  values.PASS_PAIRS = pass_pairs
  values.UNROLL = math.min(items, 12)
  return values
end

-- The route kernel's shared memory: a cursor per expert, one more per expert for each placing warp,
-- and ids. Placing warps: as many as leave room for 1024 ids (at most 8, at least 1); id capacity:
-- what is left, in whole 1024-id steps.
local ROUTE_FIXED_BYTES = 512  -- the scan's warp sums and the bad-id count
local function route_place_warps(num_experts)
  local room = SHARED_MEMORY_LIMIT_BYTES - ROUTE_FIXED_BYTES - 4 * num_experts - 4 * 1024
  return math.max(1, math.min(ROUTE_THREADS // 32, room // (4 * num_experts)))
end

local function route_id_capacity(num_experts)
  local table_bytes = (1 + route_place_warps(num_experts)) * 4 * num_experts + ROUTE_FIXED_BYTES
  local capacity = (SHARED_MEMORY_LIMIT_BYTES - table_bytes) // 4 // 1024 * 1024
  return math.min(ROUTE_ID_CAPACITY_LIMIT, capacity)
end

local TEMPLATES = {
  cc = "templates/moe_gemm_cc.cu", mma = "templates/moe_gemm_mma.cu", hmma = "templates/moe_gemm_hmma.cu",
  tok = "templates/moe_down_tok.cu", route = "templates/moe_route.cu", reduce = "templates/moe_reduce.cu",
  single = "templates/moe_single.cu",
}

-- The one-launch forward of a shape: gate_up, down and the reduce of block_m 1 work items (the
-- runtime uses it where no early launch exists), or nil and why it does not fit.
local function single_description(s)
  local gate = op_geometry("gate_up", s)
  local down = op_geometry("down", s)
  local k_blocks = ceil_div(s.hidden, s.block_k)
  local down_k_blocks = (s.intermediate_offset + s.intermediate - 1) // s.block_k + 1
  local scale_bytes = 4 * math.max(2 * (SINGLE_THREADS // SINGLE_GATE_LANES) * k_blocks,
                                   (SINGLE_THREADS // SINGLE_DOWN_LANES) * down_k_blocks)
  local tile_bytes = 4 * math.max(s.hidden, s.intermediate) + scale_bytes + 8
  if tile_bytes > SHARED_MEMORY_LIMIT_BYTES then
    return nil, string.format("the one-launch forward needs %d bytes of shared memory", tile_bytes)
  end
  local entry = "volt8_single__" .. variants.shape_key(s)
  local values = {
    ENTRY = entry, THREADS = SINGLE_THREADS, HIDDEN = s.hidden, INTERMEDIATE = s.intermediate,
    NUM_EXPERTS = s.num_experts, SCALE_BN = s.block_n, MIN_BLOCKS = SINGLE_MIN_BLOCKS,
    GATE_LANES = SINGLE_GATE_LANES,
    GATE_UNROLL = math.min(ceil_div(gate.k // 16, SINGLE_GATE_LANES), 5),
    GATE_K_BLOCKS = (gate.scale_k_offset + gate.k - 1) // s.block_k + 1,
    GATE_SCALE_ROW_OFFSET = gate.scale_row_offset, GATE_SCALE_ROW_STRIDE = gate.scale_row_stride,
    GATE_SCALE_HALF_STRIDE = gate.scale_half_stride, GATE_SCALE_EXPERT_STRIDE = gate.scale_expert_stride,
    DOWN_LANES = SINGLE_DOWN_LANES,
    DOWN_UNROLL = math.min(ceil_div(down.k // 16, SINGLE_DOWN_LANES), 8),
    DOWN_K_BLOCKS = (down.scale_k_offset + down.k - 1) // s.block_k + 1,
    DOWN_SCALE_K_OFFSET = down.scale_k_offset, DOWN_SCALE_ROW_STRIDE = down.scale_row_stride,
    DOWN_SCALE_EXPERT_STRIDE = down.scale_expert_stride,
  }
  local parameters = { variant = "single", shape = variants.shape_key(s) }
  for value_name, value in pairs(values) do
    if value_name ~= "ENTRY" then parameters[value_name:lower()] = value end
  end
  return {
    op = "single", family = "support", block_m = 1, block_n = 0, threads = SINGLE_THREADS, split_k = 1,
    warps = SINGLE_THREADS // 32, entry = entry, template = TEMPLATES.single, values = values, parameters = parameters,
  }
end

-- The target arch (70 for sm_70) a description or list is for: default sm_70.
local function target_arch(arch)
  if arch == nil then return DEFAULT_ARCH end
  local integer = math.tointeger(arch)
  if integer == nil or integer < 10 then error("invalid arch: " .. tostring(arch) .. " is not of the form 70, 80, 90", 0) end
  return integer
end

-- Everything needed to emit `name` for the validated shape `s` and target arch (default 70), or
-- nil and a reason.
function variants.describe(name, s, arch)
  arch = target_arch(arch)
  local spec = variants.parse_name(name)
  if not spec then return nil, string.format("unknown variant '%s'", name) end
  local key = variants.shape_key(s)
  if spec.op == "single" then
    local description, reason = single_description(s)
    if not description then return nil, string.format("variant '%s' does not fit shape %s: %s", name, key, reason) end
    return description
  end
  if spec.op == "route" or spec.op == "reduce" then
    local threads = spec.op == "route" and ROUTE_THREADS or REDUCE_THREADS
    local entry = "volt8_" .. spec.op .. "__" .. key
    return {
      op = spec.op, family = "support", block_m = 0, block_n = spec.op == "reduce" and 4 * threads or 0,
      threads = threads, split_k = 1, warps = threads // 32, entry = entry, template = TEMPLATES[spec.op],
      values = range_values(s, { ENTRY = entry, THREADS = threads, NUM_EXPERTS = s.num_experts, HIDDEN = s.hidden,
                 ID_CAPACITY = route_id_capacity(s.num_experts), PLACE_WARPS = route_place_warps(s.num_experts),
                 LAUNCH_ROWS = LAUNCH_ROWS,
                 GATE_UP_EXPERT_BYTES = op_geometry("gate_up", s).expert_weight_bytes }),
      parameters = { variant = name, shape = key, threads = threads },
    }
  end
  local known = false
  for _, bm in ipairs(FAMILY_BLOCK_M[spec.family]) do known = known or bm == spec.bm end
  local tile_known = false
  for _, tile in ipairs(TILES[spec.op][spec.family]) do
    tile_known = tile_known or (tile.bn == spec.bn and tile.w == spec.w and tile.sk == spec.sk and tile.l == spec.l and
                                tile.o == spec.o and tile.c == spec.c and tile.r == spec.r and tile.f == spec.f)
  end
  if not (known and tile_known) then return nil, string.format("unknown variant '%s'", name) end
  local min_arch = FAMILY_MIN_ARCH[spec.family]
  if spec.f then min_arch = math.max(min_arch or 0, FETCH_MIN_ARCH) end
  if min_arch and arch < min_arch then
    return nil, string.format("unsupported arch: variant '%s' needs sm_%d or newer, the target is sm_%d", name, min_arch, arch)
  end
  local values, reason
  local family_values = { cc = cc_values, mma = mma_values, tok = tok_values, hmma = hmma_values }
  values, reason = family_values[spec.family](spec, s, arch)
  if not values then return nil, string.format("variant '%s' does not fit shape %s: %s", name, key, reason) end
  local entry = "volt8_" .. name:gsub("%.", "_") .. "__" .. key
  values.ENTRY = entry
  range_values(s, values)
  local parameters = { variant = name, shape = key }
  for value_name, value in pairs(values) do
    if value_name ~= "ENTRY" then parameters[value_name:lower()] = value end
  end
  return {
    op = spec.op, family = spec.family, block_m = spec.bm, block_n = spec.bn, threads = 32 * spec.w,
    split_k = spec.sk, warps = spec.w, entry = entry, template = TEMPLATES[spec.family], values = values,
    parameters = parameters, fused_reduce = spec.r == 1,
  }
end

-- Sorted names of every variant that fits the validated shape `s` and target arch (default 70),
-- route and reduce included.
function variants.list(s, arch)
  arch = target_arch(arch)
  local names = { "route", "reduce" }
  if single_description(s) then names[#names + 1] = "single" end
  for _, op in ipairs({ "gate_up", "down" }) do
    for _, family in ipairs(FAMILIES) do
      for _, bm in ipairs(FAMILY_BLOCK_M[family]) do
        for _, tile in ipairs(TILES[op][family] or {}) do
          local name = variants.gemm_name({ op = op, family = family, bm = bm, bn = tile.bn, w = tile.w, sk = tile.sk,
                                            l = tile.l, o = tile.o, c = tile.c, r = tile.r, f = tile.f })
          if variants.describe(name, s, arch) then names[#names + 1] = name end
        end
      end
    end
  end
  table.sort(names)
  return names
end

return variants
