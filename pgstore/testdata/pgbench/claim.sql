WITH m AS (SELECT 1 FROM t WHERE key = decode('0000','hex') AND state = 'm' AND until <= now()),
cur AS (SELECT 1 FROM t WHERE key = '\x000e63746f6b656e3a7265706c61793a74616b656e'::bytea AND until > now()),
ins AS (
  INSERT INTO t (key, state, token, until)
  SELECT '\x000e63746f6b656e3a7265706c61793a74616b656e'::bytea, 'c', '', (now() + interval '1 hour') FROM m
  WHERE NOT EXISTS (SELECT 1 FROM cur) AND (now() + interval '1 hour') > now()
    AND NOT EXISTS (SELECT 1 FROM t WHERE key = '\x63746f6b656e3a7265706c61793a74616b656e'::bytea AND until > now())
  ON CONFLICT (key) DO NOTHING
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins), EXISTS (SELECT 1 FROM m), EXISTS (SELECT 1 FROM cur), (now() + interval '1 hour') > now();
