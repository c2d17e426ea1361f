-- Shared by every bench script (loaded with dofile): thread ids, the status check and the
-- machine-readable summary that bench/run.py parses.
--
-- Environment (read when wrk loads the script):
--   BENCH_CHECK_STATUS=1   count every response outside 2xx (wrk itself only counts >= 400, as
--                          errors.status) and keep the first one with the request that caused it
--   BENCH_STOP_AFTER=N     stop each wrk thread after N responses (a fixed request count, for
--                          strace; use one thread) and print BENCH_STOPPED; the -d duration
--                          still bounds the run

BENCH_CHECK = os.getenv("BENCH_CHECK_STATUS") == "1"
BENCH_STOP_AFTER = tonumber(os.getenv("BENCH_STOP_AFTER") or "")

-- Main state: every thread object, so done() can read the per-thread counters.
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("thread_id", next_id)
  next_id = next_id + 1
  threads[#threads + 1] = thread
end

-- Thread state: counters read back by done().
non2xx = 0
first_bad = ""
local seen = 0

-- Call from response(): status of the response to `what` (the request, as text).
function bench_check(status, body, what)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
    if first_bad == "" then
      first_bad = string.format("%s -> HTTP %d %s", what, status, string.sub(body or "", 1, 400))
    end
  end
  if BENCH_STOP_AFTER then
    seen = seen + 1
    if seen == BENCH_STOP_AFTER then
      -- wrk's main thread sleeps for the whole -d duration whatever its threads do: the marker
      -- tells bench/run.py to cut that sleep short with SIGINT (wrk then prints its summary).
      io.write("BENCH_STOPPED\n")
      io.stdout:flush()
      wrk.thread:stop()
    end
  end
end

-- True when a script with a static request needs a response() callback.
function bench_wants_response()
  return BENCH_CHECK or BENCH_STOP_AFTER ~= nil
end

local function json_string(s)
  s = string.gsub(s, '[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    return string.format("\\u%04x", string.byte(c))
  end)
  return '"' .. s .. '"'
end

function done(summary, latency, requests)
  local bad, first = 0, ""
  for _, t in ipairs(threads) do
    local n = t:get("non2xx") or 0
    bad = bad + n
    if n > 0 and first == "" then first = t:get("first_bad") or "" end
  end
  local e = summary.errors
  local out = {
    string.format('"requests":%d', summary.requests),
    string.format('"duration_us":%d', summary.duration),
    string.format('"bytes":%d', summary.bytes),
    string.format('"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}',
                  e.connect, e.read, e.write, e.status, e.timeout),
    string.format('"status_checked":%s', BENCH_CHECK and "true" or "false"),
    string.format('"non2xx":%d', bad),
    '"first_non2xx":' .. json_string(first),
    string.format('"latency_us":{"min":%d,"mean":%.1f,"max":%d,"p50":%d,"p75":%d,"p90":%d,' ..
                  '"p99":%d,"p99_9":%d,"p99_99":%d}',
                  latency.min, latency.mean, latency.max, latency:percentile(50),
                  latency:percentile(75), latency:percentile(90), latency:percentile(99),
                  latency:percentile(99.9), latency:percentile(99.99)),
  }
  io.write("BENCH_RESULT {" .. table.concat(out, ",") .. "}\n")
end
