-- Seconds one statement takes, measured inside the server.
CREATE FUNCTION time_of(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  EXECUTE q;
  RETURN extract(epoch FROM clock_timestamp() - t0);
END $$;

-- time(a) and time(b) for `pairs` pairs run back to back in one session, the
-- order swapped every pair; `prep`, if given, runs untimed before each
-- statement. A pair spans about a second, while this machine's speed drifts
-- over seconds: adjacent pairs cancel the drift that rounds of every
-- contender (tens of seconds apart) keep.
CREATE FUNCTION paired(a text, b text, pairs int, prep text DEFAULT NULL, OUT ta float8, OUT tb float8)
RETURNS SETOF record LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..pairs LOOP
    IF i % 2 = 1 THEN
      IF prep IS NOT NULL THEN EXECUTE prep; END IF;
      ta := time_of(a);
      IF prep IS NOT NULL THEN EXECUTE prep; END IF;
      tb := time_of(b);
    ELSE
      IF prep IS NOT NULL THEN EXECUTE prep; END IF;
      tb := time_of(b);
      IF prep IS NOT NULL THEN EXECUTE prep; END IF;
      ta := time_of(a);
    END IF;
    RETURN NEXT;
  END LOOP;
END $$;
