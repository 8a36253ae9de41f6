-- The store's table (pgstore.Schema) with its marker, 20 000 live claims and
-- the one the scripts replay ("ctoken:replay:taken" under key layout 2).
CREATE TABLE t (key bytea PRIMARY KEY, state text NOT NULL CHECK (state IN ('m','c','l','d')), token text NOT NULL, until timestamptz NOT NULL, fingerprint bytea, result bytea) WITH (fillfactor=90, autovacuum_vacuum_scale_factor=0.05);
CREATE INDEX t_until ON t (until);
INSERT INTO t (key,state,token,until) VALUES (decode('0000','hex'),'m','','-infinity');
INSERT INTO t (key,state,token,until) SELECT decode('000e','hex') || convert_to('ctoken:replay:id'||g,'UTF8'),'c','',now()+interval '1 day' FROM generate_series(1,20000) g;
INSERT INTO t (key,state,token,until) VALUES (decode('000e','hex') || convert_to('ctoken:replay:taken','UTF8'),'c','',now()+interval '1 day');
ANALYZE t;
