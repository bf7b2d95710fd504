-- The Redis store's one script (redis.py): admit, settle and renew, each one atomic call on Redis's clock.
-- The same semantics as memory.py's MemoryStore, line for line; limits are the fleet's, unscaled.
--
--   admit   KEYS: reservation, tombstone, one key per check        ARGV: 'admit', ticket, record, then per
--                                                                    check: algorithm, limit, period_us, cost
--   settle  KEYS: per ticket, its reservation and tombstone        ARGV: 'settle', then per ticket: ticket,
--                                                                    actual?, in, out (each as if alone)
--   renew   KEYS: registry, a reservation per ticket               ARGV: 'renew', process, life_us, tickets...
--
-- A record (JSON, made by redis.py) is what settle reconciles: {"k": [check keys], "c": [[algorithm
-- ('r' rate, 'q' quota, 's' slots), limit, period_us, reserved, per_request, per_input, per_output]...]}.
-- Admission reads its checks from ARGV, not from the record: cjson.decode costs more than the rest of a
-- check (18 µs of 91 for a request's 5 checks, measured). Every key written here gets a TTL. Numbers go to Redis through string.format: Lua's own conversion
-- keeps 14 digits, and a time in microseconds has 16.
--
-- A quota's counter holds what is spent and what reservations not yet settled hold; beside it, under
-- its key and ':held', a sorted set of those reservations ('<reserved>:<ticket>' -> when the reservation
-- expires, µs) tells them apart when a request is refused: only a spent budget refuses for good. It is
-- read only then (memory.py keeps a sum instead; its reservations expire only when swept).

local TOMBSTONE_US = 600000000  -- memory.py's TOMBSTONE_US: settling twice refunds once
local IN_FLIGHT_US = 1000000  -- plan.py's IN_FLIGHT_US: a budget held by reservations in flight, not spent
local ADMITTED, REFUSED, CANCELLED = 1, 0, 2

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function int(x) return string.format('%d', x) end

local function ms(us) return int(math.max(math.ceil(us / 1000), 1)) end

-- A rate's or a quota's value, read once per call: what this call wrote since is what it reads again.
local values = {}

local function stored(key)  -- the value, or false when there is none
  local v = values[key]
  if v == nil then
    v = tonumber(redis.call('GET', key)) or false
    values[key] = v
  end
  return v
end

local function number(key) return stored(key) or 0 end

local function at_least(key, ttl_ms)  -- a key's TTL, extended (never shortened) to ttl_ms
  if redis.call('PTTL', key) < tonumber(ttl_ms) then redis.call('PEXPIRE', key, ttl_ms) end
end

-- rate: GCRA, the theoretical arrival time (float µs) kept until it is past
local function set_tat(key, tat, now)
  if tat > now then
    redis.call('SET', key, string.format('%.17g', tat), 'PX', ms(tat - now))
    values[key] = tat
  else
    redis.call('DEL', key)  -- a full bucket: the same as no key (max(tat, now) reads now)
    values[key] = false
  end
end

-- quota: an integer counter that lives until its period ends (its TTL is set once, when made)
local function add_quota(key, amount, period)
  local used = stored(key)
  if used then
    values[key] = math.max(used + amount, 0)
    redis.call('SET', key, int(values[key]), 'KEEPTTL')
  else
    values[key] = math.max(amount, 0)
    redis.call('SET', key, int(values[key]), 'PX', ms(period))
  end
end

-- what reservations in flight hold of a quota: each one's member lives as long as its reservation
local function held_key(key) return key .. ':held' end

local function held_member(reserved, ticket) return int(reserved) .. ':' .. ticket end

local function hold(key, ticket, reserved, now, life)  -- made, or renewed: until its reservation expires
  redis.call('ZADD', held_key(key), int(now + life), held_member(reserved, ticket))
  at_least(held_key(key), ms(life))
end

local function in_flight(key, now)
  local set = held_key(key)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', int(now))  -- reservations that expired stay charged, as spent
  local sum = 0
  for _, member in ipairs(redis.call('ZRANGE', set, 0, -1)) do
    sum = sum + tonumber(string.match(member, '^(%d+):'))
  end
  return sum
end

-- slots: a sorted set of ticket -> lease expiry (µs); expired leases are removed and counted. The set
-- outlives its leases by one more lease life, so that the next admission finds the dead ones to count.
local function held(key, now)
  local expired = redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  return redis.call('ZCARD', key), expired
end

local function lease(key, ticket, now, period)
  redis.call('ZADD', key, int(now + period), ticket)
  at_least(key, ms(2 * period))
end

local function apply(key, c, amount, now, ticket, release)
  local algorithm, limit, period = c[1], c[2], c[3]
  if algorithm == 'r' then
    set_tat(key, math.max(number(key), now) + amount * (period / limit), now)
  elseif algorithm == 'q' then
    add_quota(key, amount, period)
  elseif release then
    redis.call('ZREM', key, ticket)
  else
    lease(key, ticket, now, period)
  end
end

local function states(checks, now, out)  -- every rate check's remaining and reset, for the headers
  for i, c in ipairs(checks) do
    if c[1] == 'r' then
      local limit, period = c[2], c[3]
      local interval = period / limit
      local ahead = math.max(number(KEYS[i + 2]) - now, 0)
      local remaining = math.min(math.floor((period - ahead) / interval), math.floor(limit))
      out[#out + 1] = math.max(remaining, 0)
      out[#out + 1] = math.ceil(ahead)
    end
  end
  return out
end

local function admit(ticket, record)
  if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then
    return {CANCELLED, 0, 0, 0, 0}  -- settled (or cancelled) before it arrived, or admitted already
  end
  local now = now_us()
  local checks = {}
  for i = 1, #KEYS - 2 do
    local at = 4 * i
    checks[i] = {ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])}
  end
  -- the refusal told: the first check that can never pass, else the one that frees last
  local never_at, never_wait, wait_at, wait, expired = 0, 0, 0, -1, 0
  for i, c in ipairs(checks) do
    local key, algorithm, limit, period, cost = KEYS[i + 2], c[1], c[2], c[3], c[4]
    local refused, never, w = false, false, 0
    if algorithm == 'r' then
      local interval = period / limit
      local tat = math.max(number(key), now) + cost * interval
      if cost * interval > period then
        refused, never = true, true
      elseif tat - now > period then
        refused, w = true, math.ceil(tat - now - period)
      end
    elseif algorithm == 'q' then
      local used = number(key)
      if cost > limit or used + cost > limit then
        refused = true
        if cost > limit or used - in_flight(key, now) + cost > limit then
          never, w = true, period  -- spent: until the period renews
        else
          w = IN_FLIGHT_US  -- what is spent leaves room, and reservations in flight hold it
        end
      end
    else
      local n, gone = held(key, now)
      expired = expired + gone
      if n + 1 > limit then
        refused, w = true, 1000000
      end
    end
    if never and never_at == 0 then never_at, never_wait = i, w end
    if refused and not never and w > wait then wait, wait_at = w, i end
  end
  if never_at > 0 then
    return states(checks, now, {REFUSED, never_at, never_wait, 1, expired})
  end
  if wait_at > 0 then
    return states(checks, now, {REFUSED, wait_at, wait, 0, expired})
  end
  local life = 0
  for _, c in ipairs(checks) do
    if c[1] == 's' then life = math.max(life, c[3]) end
  end
  if life == 0 then life = TOMBSTONE_US end
  for i, c in ipairs(checks) do
    apply(KEYS[i + 2], c, c[4], now, ticket, false)
    if c[1] == 'q' then hold(KEYS[i + 2], ticket, c[4], now, life) end
  end
  redis.call('SET', KEYS[1], record, 'PX', ms(life))
  return states(checks, now, {ADMITTED, 0, 0, 0, expired})
end

local function settle(reservation, tombstone, ticket, actual, input, output, now)
  local record = redis.call('GET', reservation)
  redis.call('SET', tombstone, '1', 'PX', ms(TOMBSTONE_US), 'NX')
  if not record then
    return 0  -- settled before (in this batch too), never admitted, or its lease ran out (then it stays charged)
  end
  redis.call('DEL', reservation)
  local r = cjson.decode(record)
  for i, c in ipairs(r.c) do
    local used = 0
    if actual then used = c[5] + c[6] * input + c[7] * output end
    apply(r.k[i], c, used - c[4], now, ticket, true)
    if c[1] == 'q' then redis.call('ZREM', held_key(r.k[i]), held_member(c[4], ticket)) end
  end
  return 1
end

local function settle_all()  -- the tickets in the order given; how many of them settled a reservation
  local now, settled = now_us(), 0
  for i = 1, #KEYS / 2 do
    local at = 4 * i - 2
    settled = settled + settle(KEYS[2 * i - 1], KEYS[2 * i], ARGV[at], ARGV[at + 1] == '1',
                               tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), now)
  end
  return settled
end

local function renew(process, life)
  local now = now_us()
  for i = 2, #KEYS do
    local record = redis.call('GET', KEYS[i])
    if record then
      local r, ticket = cjson.decode(record), ARGV[i + 2]
      at_least(KEYS[i], ms(TOMBSTONE_US))  -- a request in progress is reconciled however long it runs
      for j, c in ipairs(r.c) do
        if c[1] == 's' then lease(r.k[j], ticket, now, c[3]) end
        if c[1] == 'q' then hold(r.k[j], ticket, c[4], now, TOMBSTONE_US) end
      end
    end
  end
  -- the live processes sharing these limits: what the local fallback divides them by
  redis.call('ZADD', KEYS[1], int(now + life), process)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now))
  at_least(KEYS[1], ms(life))
  return redis.call('ZCARD', KEYS[1])
end

local op = ARGV[1]
if op == 'admit' then
  return admit(ARGV[2], ARGV[3])  -- ticket, record; the checks from ARGV[4]
elseif op == 'settle' then
  return settle_all()
elseif op == 'renew' then
  return renew(ARGV[2], tonumber(ARGV[3]))
end
return redis.error_reply('unknown operation')
