-- GET pass-through: a static GET of a path under a fenced route (GET is not fenced).
-- wrk ... -s get.lua URL -- [PATH]
dofile(string.match(debug.getinfo(1, "S").source, "^@(.*/)") .. "report.lua")

local path = "/eq/1"

function init(args)
  path = args[1] or path
  wrk.method = "GET"
  wrk.path = path
end

if bench_wants_response() then
  function response(status, headers, body)
    bench_check(status, body, "GET " .. path)
  end
end
