-- Concurrent raises on many fences: thread N (one connection each: run with -tN -cN) raises its
-- own fence, PUT /f<N>/x, each request with the previous token + 1. fencing-proxy shares one
-- fdatasync among the raises queued at once (group commit).
-- wrk -t32 -c32 ... -s raise_fences.lua URL -- FIRST_TOKEN
dofile(string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "report.lua")
BENCH_CHECK = true   -- response() below checks every status

local token, path = 0, "/f0/x"
local headers = { ["Content-Type"] = "application/octet-stream" }
local body = string.rep("f", 128)

function init(args)
  token = (tonumber(args[1]) or 1e9) - 1
  path = string.format("/f%d/x", thread_id or 0)
end

function request()
  token = token + 1
  headers["X-Fencing-Token"] = string.format("%.0f", token)
  return wrk.format("PUT", path, headers, body)
end

function response(status, hdrs, resp_body)
  bench_check(status, resp_body,
              string.format("PUT %s X-Fencing-Token: %.0f (128-byte body)", path, token))
end
