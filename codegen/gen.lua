-- Code generator entry point: a module (list, emit) for the embedded Lua state of the runtime,
-- and a command line:  lua5.4 codegen/gen.lua --list [--shape k=v,...]
--                      lua5.4 codegen/gen.lua --emit NAME [--shape k=v,...]
-- Files are read through VOLT8_READ(path) when the host defines it (the library embeds them),
-- otherwise from the source tree this script lives in.

local function source_root()
  local source = debug.getinfo(1, "S").source
  local script = source:sub(1, 1) == "@" and source:sub(2) or "codegen/gen.lua"
  local dir = script:match("^(.*)[/\\]") or "."
  if dir == "codegen" then return "." end
  local parent = dir:match("^(.*)[/\\]codegen$")
  if parent then return parent == "" and "/" or parent end
  return dir .. "/.."
end

-- Text of `path` (relative to the source root), or nil.
local read_file
if type(VOLT8_READ) == "function" then
  read_file = VOLT8_READ
else
  local root = source_root()
  read_file = function(path)
    local handle = io.open(root .. "/" .. path, "rb")
    if not handle then return nil end
    local text = handle:read("a")
    handle:close()
    return text
  end
end

-- require("emit") and require("variants") resolve to codegen/<name>.lua through read_file.
local function codegen_searcher(name)
  local path = "codegen/" .. name .. ".lua"
  local text = read_file(path)
  if not text then return "\n\tno codegen file '" .. path .. "'" end
  local chunk, message = load(text, "@" .. path, "t")
  if not chunk then error(message, 0) end
  return chunk, path
end
table.insert(package.searchers, 2, codegen_searcher)

local emit = require("emit")
local variants = require("variants")

local gen = {}

gen.DEFAULT_SHAPE = variants.DEFAULT_SHAPE

-- arch: the target arch as an integer (70 for sm_70); nil means 70.
function gen.list(shape, arch)
  return variants.list(variants.validate_shape(shape), arch)
end

local function describe_or_fail(name, shape, arch)
  if type(name) ~= "string" then error("variant name must be a string", 0) end
  local s = variants.validate_shape(shape)
  local description, reason = variants.describe(name, s, arch)
  if not description then error(reason, 0) end
  return description
end

-- Generated source of variant `name` for `shape` and what the launcher needs to know about it.
function gen.emit(name, shape, arch)
  local d = describe_or_fail(name, shape, arch)
  local text = read_file(d.template)
  if not text then error("cannot read template '" .. d.template .. "'", 0) end
  return {
    source = emit.source(d.template, text, d.values, d.parameters, read_file),
    entry = d.entry, template = d.template, op = d.op, family = d.family, block_m = d.block_m,
    block_n = d.block_n, threads = d.threads, split_k = d.split_k, warps = d.warps,
    fused_reduce = d.fused_reduce and 1 or 0,
  }
end

-- Expands the embedded template at `template_path` with `values` (name -> string or integer),
-- for kernels outside the GEMM variant space (e.g. the rejection sampler).
-- `text`, when given, is the template's text (a template the library does not embed).
function gen.expand_template(template_path, values, text)
  if type(template_path) ~= "string" or type(values) ~= "table" then
    error("expand_template needs a template path and a table of values", 0)
  end
  text = text or read_file(template_path)
  if not text then error("cannot read template '" .. template_path .. "'", 0) end
  return emit.source(template_path, text, values, values, read_file)
end

-- The volt8 command's reading of a shape (runtime/tools/arguments.c): key=digits items, comma-separated,
-- each key known and given once; the ranges are validate_shape's.
local function parse_shape_argument(text)
  local shape = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    local field, digits = item:match("^([%w_]+)=(%d+)$")
    if not field then error("shape item '" .. item .. "' is not key=digits", 0) end
    local known = false
    for _, name in ipairs(variants.SHAPE_FIELDS) do known = known or name == field end
    if not known then error("unknown shape field '" .. field .. "'", 0) end
    if shape[field] then error("shape field '" .. field .. "' is given twice", 0) end
    shape[field] = math.tointeger(tonumber(digits)) or digits
  end
  return shape
end

local function main(args)
  local mode, name, shape, arch = nil, nil, {}, nil
  local i = 1
  while i <= #args do
    local argument = args[i]
    if argument == "--list" then
      mode = "list"
    elseif argument == "--emit" then
      mode, name, i = "emit", args[i + 1], i + 1
    elseif argument == "--arch" then
      local digits = (args[i + 1] or ""):match("^sm_(%d+)$")
      if not digits then error("--arch needs sm_XX, e.g. sm_90", 0) end
      arch, i = tonumber(digits), i + 1
    elseif argument == "--shape" then
      shape, i = parse_shape_argument(args[i + 1] or ""), i + 1
    else
      error("unknown argument '" .. argument .. "'", 0)
    end
    i = i + 1
  end
  if mode == "list" then
    for _, variant in ipairs(gen.list(shape, arch)) do io.write(variant, "\n") end
  elseif mode == "emit" and name then
    io.write(gen.emit(name, shape, arch).source)
  else
    error("usage: lua5.4 codegen/gen.lua --list | --emit NAME [--arch sm_70] [--shape hidden=2560,intermediate=160,"
          .. "num_experts=512,block_n=128,block_k=128,intermediate_offset=32]", 0)
  end
end

local invoked_as_script = type(arg) == "table" and type(arg[0]) == "string"
    and debug.getinfo(1, "S").source == "@" .. arg[0]
if invoked_as_script then
  local ok, message = pcall(main, arg)
  if not ok then
    io.stderr:write("gen.lua: ", tostring(message), "\n")
    os.exit(1)
  end
end

return gen
