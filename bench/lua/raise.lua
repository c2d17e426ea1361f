-- Raises: every request carries the previous token + 1, so for fencing-proxy every request is a
-- raise (append + fdatasync before it is forwarded). wrk sends a connection's next request only
-- after the response, so each connection's counter is the order on the wire.
--   wrk -t1 -c1 ... -s raise.lua URL -- FIRST_TOKEN PATH   serial raises on the fence of PATH
--   wrk -tN -cN ... -s raise.lua URL -- FIRST_TOKEN        thread n (one connection each) raises
--                                                          its own fence, PUT /f<n>/x: N raises
--                                                          at once (group commit)
-- FIRST_TOKEN must be above every token the fences have seen (bench/run.py gives each run its own
-- range). Responses are always checked: a non-2xx is reported with its token. wrk calls
-- request() once before the run to check it, so the first token on the wire is FIRST_TOKEN + 1.
dofile(string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "report.lua")
BENCH_CHECK = true   -- response() below checks every status

local token, path = 0, "/f0/x"
local headers = { ["Content-Type"] = "application/octet-stream" }
local body = string.rep("r", 128)

function init(args)
  token = (tonumber(args[1]) or 1e9) - 1
  path = args[2] or string.format("/f%d/x", thread_id or 0)
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
