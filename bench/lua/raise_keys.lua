-- Raises spread over many keys of one keyed fence: for fencing-proxy every request is a raise of
-- one key (append + fdatasync before it is forwarded), and the raises of different keys share
-- the group commit.
--   wrk -tN -cN ... -s raise_keys.lua URL -- FIRST_TOKEN KEYS PREFIX
-- Thread n (one connection each; N threads in all) sends PUT PREFIX/<key i> for i = n, n+N,
-- n+2N, ... < KEYS, then starts over at n. Its token goes up by 1 on every request, and no other
-- thread uses its keys, so every request on a key carries a higher token than the last one on
-- that key: every request raises. A key is 16 bytes (key-000000000042). FIRST_TOKEN must be
-- above every token these keys have seen (bench/run.py gives each run its own range). Responses
-- are always checked: a non-2xx is reported with its key and token. wrk calls request() once
-- before the run to check it, so the first request on the wire is the thread's second key.
dofile(string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "report.lua")
BENCH_CHECK = true   -- response() below checks every status

local token, keys, prefix, stride, index, path = 0, 10000, "/rkeys", 1, 0, ""
local headers = { ["Content-Type"] = "application/octet-stream" }
local body = string.rep("r", 128)

function init(args)
  token = (tonumber(args[1]) or 1e9) - 1
  keys = tonumber(args[2]) or keys
  prefix = args[3] or prefix
  stride = tonumber(args[4]) or 1     -- the number of threads: bench/run.py passes -t
  index = (thread_id or 0) - stride   -- request() adds the stride first
  if (thread_id or 0) >= keys then
    error(string.format("thread %d has no key: KEYS (%d) must be at least the threads", thread_id, keys))
  end
end

function request()
  token = token + 1
  index = index + stride
  if index >= keys then
    index = thread_id or 0
  end
  path = string.format("%s/key-%012d", prefix, index)
  headers["X-Fencing-Token"] = string.format("%.0f", token)
  return wrk.format("PUT", path, headers, body)
end

function response(status, hdrs, resp_body)
  bench_check(status, resp_body,
              string.format("PUT %s X-Fencing-Token: %.0f (128-byte body)", path, token))
end
