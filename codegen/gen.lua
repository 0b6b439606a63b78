-- Writes the variant space as C (the build's generated/variant_space.c, which the kind files of
-- runtime/moe/kernels/ link against):
--
--   lua5.4 codegen/gen.lua SPACE.lua OUT.c [NAME]
--
-- SPACE.lua returns the space (codegen/variant_space.lua is the shipped one; `require("space")` gives
-- its helpers and `require("variant_space")` the shipped space, to change); NAME is what the output's
-- first line calls it. Every family the C knows must be there, each tile once, every field a whole
-- number: anything else stops the build, naming the family, op and tile.
local codegen = (arg[0]:match("^(.*)/[^/]*$") or ".")
package.path = codegen .. "/?.lua;" .. package.path
local space = require("space")

if _VERSION ~= "Lua 5.4" then
  io.stderr:write("codegen/gen.lua: needs Lua 5.4 (Debian's lua5.4), not " .. _VERSION .. "\n")
  os.exit(2)
end
local space_path, out_path, display_name = arg[1], arg[2], arg[3]
if not space_path or not out_path then
  io.stderr:write("usage: lua5.4 codegen/gen.lua SPACE.lua OUT.c [NAME]\n")
  os.exit(2)
end
display_name = display_name or space_path

-- The families in the order the output lists them; each is the space of one C kind
-- (volt8_space_<family> in runtime/moe/kernels/variant_space.h).
local FAMILIES = { "cc", "mma", "hmma", "tile", "raw", "tok" }
local OPS = { "gate_up", "down" }
local REQUIRED = { block_n = true, warps = true, split_k = true }
local VALUE_LIMIT = 1 << 20  -- the largest field a variant's name reads back (runtime/moe/kernels/catalogue.c)

local function fail(message)
  io.stderr:write("codegen/gen.lua: " .. display_name .. ": " .. message .. "\n")
  os.exit(1)
end

local function describe(tile)
  local parts = {}
  for _, field in ipairs(space.FIELDS) do
    if tile[field] ~= nil then parts[#parts + 1] = field .. "=" .. tostring(tile[field]) end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- The tile with every field a whole number (0 where unset, split_k 1), or a failure naming it.
local function normalized(tile, where)
  local out = {}
  for field in pairs(tile) do
    local known = false
    for _, name in ipairs(space.FIELDS) do known = known or name == field end
    if not known then fail(string.format("%s: tile %s: '%s' is not a tile field", where, describe(tile), tostring(field))) end
  end
  for _, field in ipairs(space.FIELDS) do
    local value = tile[field]
    if value == nil then value = field == "split_k" and 1 or 0 end
    local integer = math.tointeger(value)
    if integer == nil or integer < 0 or integer > VALUE_LIMIT or (REQUIRED[field] and integer == 0) then
      fail(string.format("%s: tile %s: %s must be a whole number in %d..%d", where, describe(tile), field,
                         REQUIRED[field] and 1 or 0, VALUE_LIMIT))
    end
    out[field] = integer
  end
  return out
end

local function key(tile)
  local parts = {}
  for _, field in ipairs(space.FIELDS) do parts[#parts + 1] = tostring(tile[field]) end
  return table.concat(parts, ",")
end

local chunk, load_error = loadfile(space_path)
if not chunk then fail(load_error) end
local ok, loaded = pcall(chunk)
if not ok then fail(tostring(loaded)) end
if type(loaded) ~= "table" then fail("returns " .. type(loaded) .. ", not a table of families") end

local known_family = {}
for _, family in ipairs(FAMILIES) do known_family[family] = true end
for family in pairs(loaded) do
  if not known_family[family] then
    fail(string.format("'%s' is not a family the kind files know (%s)", tostring(family), table.concat(FAMILIES, ", ")))
  end
end

local families = {}
for _, family in ipairs(FAMILIES) do
  local given = loaded[family]
  if type(given) ~= "table" then fail(string.format("family %s is missing", family)) end
  local entry = { name = family, block_ms = {}, tiles = {} }
  if type(given.block_m) ~= "table" or #given.block_m == 0 then fail(family .. ": block_m is not a list of values") end
  local seen_block_m = {}
  for _, value in ipairs(given.block_m) do
    local block_m = math.tointeger(value)
    if block_m == nil or block_m < 1 or block_m > VALUE_LIMIT then
      fail(string.format("%s: block_m %s is not a whole number in 1..%d", family, tostring(value), VALUE_LIMIT))
    end
    if seen_block_m[block_m] then fail(string.format("%s: block_m %d is listed twice", family, block_m)) end
    seen_block_m[block_m] = true
    entry.block_ms[#entry.block_ms + 1] = block_m
  end
  for field in pairs(given) do
    if field ~= "block_m" and field ~= "gate_up" and field ~= "down" then
      fail(string.format("%s: '%s' is not block_m, gate_up or down", family, tostring(field)))
    end
  end
  for _, op in ipairs(OPS) do
    local where = family .. " " .. op
    local list = given[op] or {}
    if type(list) ~= "table" then fail(where .. ": not a list of tiles") end
    local seen = {}
    entry.tiles[op] = {}
    for _, tile in ipairs(list) do
      if type(tile) ~= "table" then fail(where .. ": " .. tostring(tile) .. " is not a tile") end
      local normal = normalized(tile, where)
      if seen[key(normal)] then fail(string.format("%s: tile %s is listed twice", where, describe(normal))) end
      seen[key(normal)] = true
      entry.tiles[op][#entry.tiles[op] + 1] = normal
    end
  end
  families[#families + 1] = entry
end

local lines = {
  "/* generated by codegen/gen.lua from " .. display_name .. ", do not edit: the kernels' variant space",
  " * (runtime/moe/kernels/variant_space.h). */",
  '#include "moe/kernels/variant_space.h"',
  "",
}
local function tile_text(tile)
  local parts = {}
  for _, field in ipairs(space.FIELDS) do
    if tile[field] ~= 0 then parts[#parts + 1] = "." .. field .. " = " .. tile[field] end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
for _, family in ipairs(families) do
  local upper = family.name:upper()
  lines[#lines + 1] = string.format("static const int32_t %s_BLOCK_MS[] = {%s};", upper, table.concat(family.block_ms, ", "))
  local arrays, counts = {}, {}
  for _, op in ipairs(OPS) do
    local tiles = family.tiles[op]
    counts[#counts + 1] = tostring(#tiles)
    if #tiles == 0 then
      arrays[#arrays + 1] = "NULL"
    else
      local array = upper .. "_" .. op:upper()
      arrays[#arrays + 1] = array
      lines[#lines + 1] = string.format("static const volt8_tile %s[] = {", array)
      for _, tile in ipairs(tiles) do lines[#lines + 1] = "    " .. tile_text(tile) .. "," end
      lines[#lines + 1] = "};"
    end
  end
  lines[#lines + 1] = string.format("const volt8_variant_space volt8_space_%s = {%s_BLOCK_MS, %d, {%s}, {%s}};",
                                    family.name, upper, #family.block_ms, table.concat(arrays, ", "),
                                    table.concat(counts, ", "))
  lines[#lines + 1] = ""
end

local text = table.concat(lines, "\n")
local temporary = out_path .. ".tmp"
local file, open_error = io.open(temporary, "wb")
if not file then fail("cannot write " .. tostring(open_error)) end
file:write(text)
file:close()
local renamed, rename_error = os.rename(temporary, out_path)
if not renamed then fail("cannot write " .. out_path .. ": " .. tostring(rename_error)) end
