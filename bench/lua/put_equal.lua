-- PUT with an equal token (the fast path): every request carries the fence's current max_token,
-- so fencing-proxy admits it without touching the disk. bench/run.py raises the fence to TOKEN
-- once before the first run. A static request: wrk formats it once per thread.
-- wrk ... -s put_equal.lua URL -- [TOKEN] [PATH] [DELAY_MS]
-- DELAY_MS > 0 paces each connection (a pause before every request: a light, steady load whose
-- latency is the point, not its throughput).
dofile(string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "report.lua")

local token, path, pause = "1000", "/eq/1", 0

function init(args)
  token = args[1] or token
  path = args[2] or path
  pause = tonumber(args[3] or "0") or 0
  wrk.method = "PUT"
  wrk.path = path
  wrk.headers["X-Fencing-Token"] = token
  wrk.headers["Content-Type"] = "application/octet-stream"
  wrk.body = string.rep("e", 128)
  if pause > 0 then
    -- Defined only when pacing: wrk checks for delay() after init, and a delay() costs a timer
    -- per request even when it returns 0.
    function delay()
      return pause
    end
  end
end

if bench_wants_response() then
  function response(status, headers, body)
    bench_check(status, body, "PUT " .. path .. " X-Fencing-Token: " .. token .. " (128-byte body)")
  end
end
