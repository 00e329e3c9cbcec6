-- runs-v1.sql: a run log as cflow's first schema (user_version 1) wrote it,
-- with two sessions and three runs.  tests/prof opens it with the current
-- cflow, which must migrate it to the current schema and keep every row.
-- Do not edit: it stands for files already on users' disks.
PRAGMA user_version = 1;
CREATE TABLE machine(id INTEGER PRIMARY KEY, hostname TEXT NOT NULL,
  cpu_model TEXT NOT NULL, isa TEXT NOT NULL, cores INTEGER NOT NULL);
CREATE TABLE model(id INTEGER PRIMARY KEY, path TEXT NOT NULL,
  size INTEGER NOT NULL, hash TEXT NOT NULL);
CREATE TABLE session(id INTEGER PRIMARY KEY,
  machine_id INTEGER NOT NULL REFERENCES machine(id),
  model_id INTEGER NOT NULL REFERENCES model(id),
  program TEXT, started TEXT NOT NULL);
CREATE TABLE run(id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES session(id),
  started TEXT NOT NULL, ended TEXT, threads INTEGER, temp REAL,
  top_k INTEGER, top_p REAL, seed INTEGER, n_prompt INTEGER,
  n_gen INTEGER, prefill_s REAL, decode_s REAL);
CREATE TABLE token(run_id INTEGER NOT NULL, idx INTEGER NOT NULL,
  phase INTEGER NOT NULL, t REAL, dt REAL,
  PRIMARY KEY(run_id, idx)) WITHOUT ROWID;
INSERT INTO machine VALUES(1, 'oldhost', 'Old CPU 3000', 'avx2', 8);
INSERT INTO model VALUES(1, '/models/old-stories.cflow', 1048576, '0123456789abcdef');
INSERT INTO session VALUES(1, 1, 1, 'cflow run', '2025-06-01T10:00:00.000Z');
INSERT INTO session VALUES(2, 1, 1, 'cflow run', '2025-06-02T10:00:00.000Z');
INSERT INTO run VALUES(1, 1, '2025-06-01T10:00:00.100Z', '2025-06-01T10:00:01.100Z',
  4, 0.0, 40, 0.95, 7, 5, 100, 0.5, 2.0);
INSERT INTO run VALUES(2, 2, '2025-06-02T10:00:00.100Z', '2025-06-02T10:00:02.100Z',
  8, 0.8, 40, 0.95, 8, 3, 50, 0.25, 0.5);
INSERT INTO run VALUES(3, 2, '2025-06-02T10:05:00.000Z', NULL,
  8, 0.8, 40, 0.95, 9, 3, 10, 0.25, 0.1);
INSERT INTO token VALUES(1, 0, 0, 0.0, 0.1);
INSERT INTO token VALUES(1, 1, 0, 0.1, 0.1);
INSERT INTO token VALUES(1, 2, 1, 0.2, 0.02);
INSERT INTO token VALUES(2, 0, 1, 0.0, 0.01);
