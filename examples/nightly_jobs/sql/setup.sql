-- the extension, with zklock; then wait for zklock's worker
CREATE EXTENSION nightly_jobs CASCADE;
\i sql/wait_connected.psql
