-- Loads KEYS new keys into one keyed fence, each key once: PUT PREFIX/<key> with token 1 (above
-- the floor 0 of a fresh fence), so every request is the first raise of a new key. Keys are 16
-- bytes, k000000000000042, numbered from FIRST.
--   wrk -tT -cC ... -s load_keys.lua URL -- KEYS PREFIX THREADS [FIRST]
-- Thread n sends keys FIRST + n, FIRST + n + T, ... on all of its connections. When its keys are
-- handed out, its connections idle (one equal-token PUT of its last key per second each, which
-- never touches the disk) until bench/keys.py, which watches fencing_proxy_fence_keys, stops
-- wrk. Every response is checked.
dofile(string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "report.lua")
BENCH_CHECK = true

local keys, prefix, stride, first, next_index, last_path, checking = 0, "/keys", 1, 0, 0, nil, false
local headers = { ["Content-Type"] = "application/octet-stream", ["X-Fencing-Token"] = "1" }
local body = "k"
exhausted = false

function init(args)
  keys = tonumber(args[1]) or error("load_keys.lua: KEYS missing")
  prefix = args[2] or prefix
  stride = tonumber(args[3]) or 1
  first = tonumber(args[4]) or 0
  next_index = thread_id or 0
  -- wrk calls request() of thread 0 once before the run, to check it, and never sends that
  -- request: thread 0 answers that call with a GET (which would be harmless if it were sent),
  -- so that no key is skipped.
  checking = (thread_id or 0) == 0
end

function delay()
  return exhausted and 1000 or 0
end

function request()
  if checking then
    checking = false
    return wrk.format("GET", prefix .. "/check", {}, nil)
  end
  if next_index < keys then
    last_path = string.format("%s/k%015d", prefix, first + next_index)
    next_index = next_index + stride
  else
    exhausted = true
  end
  return wrk.format("PUT", last_path, headers, body)
end

function response(status, hdrs, resp_body)
  bench_check(status, resp_body, "PUT " .. (last_path or "?") .. " X-Fencing-Token: 1")
end
