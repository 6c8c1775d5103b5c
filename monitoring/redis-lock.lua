#!lua flags=no-writes
-- redis-lock's INFO lock section (and LOCK.HOT) for redis_exporter's -script option.
--
--   prometheus-redis-exporter -redis.addr redis://127.0.0.1:6379 -script redis-lock.lua
--
-- The exporter runs this with EVAL at every scrape and exports each name/value pair as
-- redis_script_values{key="<name>"} (a gauge: the exporter types every script value so). The
-- scrape config in monitoring/prometheus.yml renames them to proper metrics:
--   <name>              redis_<name>, e.g. redis_lock_waiters
--   <name>;le=<bound>   redis_<name>{le="<bound>"}, the buckets of a histogram
--   <name>;name=<lock>  redis_<name>{lock_name="<lock>"}, the most contended locks
-- Names: counters end in _total; histograms are lock_wait_time_seconds and
-- lock_hold_time_seconds (_bucket, _count); everything else is a gauge. A lock's name is
-- binary: bytes outside printable ASCII, and the backslash, become \xHH.
--
-- The first line declares that the script writes nothing (Redis 7.0+, Valkey): so it runs on
-- replicas and when the server is out of memory (maxmemory), when the numbers matter most.

local out = {}
local function put(name, value)
    out[#out + 1] = name
    out[#out + 1] = tostring(value)
end

-- Fields that are a value now, not a count since start: gauges, peaks, quantiles.
local gauges = {
    version = true, locks = true, waiters = true, watchers = true, exclusive_holds = true,
    shared_holds = true, semaphore_holds = true, watched_names = true,
    foreign_waited_names = true, module_heap_bytes = true, command_filter = true,
}

local info = redis.call('INFO', 'lock')
for field, value in string.gmatch(info, 'lock_([%w_]+):([^\r\n]*)') do
    local number = tonumber(value)
    local hist, us = string.match(field, '^(%a+_time)_le_(%d+)us$')
    if number == nil then
        -- not a number: nothing to export
    elseif hist then
        put('lock_' .. hist .. '_seconds_bucket;le=' .. string.format('%.6f', tonumber(us) / 1e6), number)
    elseif string.match(field, '^%a+_time_count$') then
        local h = string.match(field, '^(%a+_time)_count$')
        put('lock_' .. h .. '_seconds_bucket;le=+Inf', number)
        put('lock_' .. h .. '_seconds_count', number)
    elseif gauges[field] or string.match(field, '_peak$') or string.match(field, '_ms$') then
        put('lock_' .. field, number)
    else
        put('lock_' .. field .. '_total', number)
    end
end

-- The most contended locks (LOCK.HOT; a module without it exports none of these).
local function escape(name)
    return (string.gsub(name, '.', function(c)
        local b = string.byte(c)
        if b < 32 or b > 126 or b == 92 then
            return string.format('\\x%02x', b)
        end
    end))
end
for _, signal in ipairs({'waits', 'expired'}) do
    local ok, rows = pcall(redis.call, 'LOCK.HOT', signal)
    if ok and type(rows) == 'table' then
        for _, row in ipairs(rows) do
            local label = ';name=' .. escape(row[1])
            put('lock_hot_' .. signal .. label, row[2])
            put('lock_hot_' .. signal .. '_error' .. label, row[3])
        end
    end
end

return out
