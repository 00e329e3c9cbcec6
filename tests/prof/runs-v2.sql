-- runs-v2.sql: a run log as cflow's second schema (user_version 2) wrote
-- it: one `cflow run` of a 4-layer MoE model, with tokens, per-layer
-- times and counters (dumped from the schema-2 cflow, paths and host
-- neutralised).  tests/prof opens it with the current cflow, which must
-- migrate it to the current schema and keep every row.
-- Do not edit: it stands for files already on users' disks.
PRAGMA user_version = 2;
BEGIN TRANSACTION;
CREATE TABLE machine(id INTEGER PRIMARY KEY, hostname TEXT NOT NULL, cpu_model TEXT NOT NULL, isa TEXT NOT NULL, cores INTEGER NOT NULL, read_bw_gbs REAL);
INSERT INTO machine VALUES(1,'v2host','Old CPU 4000','avx512-vnni',2,10.0);
CREATE TABLE model(id INTEGER PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL, hash TEXT NOT NULL, arch TEXT, quant TEXT, n_layers INTEGER, dim INTEGER, ffn_dim INTEGER, n_heads INTEGER, n_kv_heads INTEGER, vocab_size INTEGER, n_experts INTEGER, top_k INTEGER, dense_delay INTEGER, expert_delay INTEGER);
INSERT INTO model VALUES(1,'/models/old-moe.cflow',238270,'97fd14c4921c486e','arch2_4_combined','q4_0',4,64,128,4,2,512,4,2,1,2);
CREATE TABLE session(id INTEGER PRIMARY KEY, machine_id INTEGER NOT NULL REFERENCES machine(id), model_id INTEGER NOT NULL REFERENCES model(id), program TEXT, started TEXT NOT NULL, pid INTEGER);
INSERT INTO session VALUES(1,1,1,'cflow run','2026-12-01T04:41:08.266Z',1);
CREATE TABLE run(id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL REFERENCES session(id), started TEXT NOT NULL, ended TEXT, threads INTEGER, temp REAL, top_k INTEGER, top_p REAL, seed INTEGER, n_prompt INTEGER, n_gen INTEGER, prefill_s REAL, decode_s REAL, status TEXT NOT NULL DEFAULT 'done', prefetch TEXT NOT NULL DEFAULT 'off', expert_io TEXT NOT NULL DEFAULT 'none', n_ctx INTEGER, min_p REAL, rep_penalty REAL, rep_last_n INTEGER, bytes_per_token INTEGER, prefill_tok_s REAL, decode_tok_s REAL, gb_s REAL, bw_share REAL);
INSERT INTO run VALUES(1,1,'2026-12-01T04:41:08.266Z','2026-12-01T04:41:08.269Z',2,0.0,40,0.94999999999999995559,0,1,2,6.4666000980651006102e-05,4.2382995161460712552e-05,'done','off','none',2048,0.050000000000000002775,1.0,64,157568,15464.076714736300345,47188.736718131243834,7.4354348672025043498,0.74354348672025039057);
CREATE TABLE token(run_id INTEGER NOT NULL, idx INTEGER NOT NULL, phase INTEGER NOT NULL, t REAL, dt REAL, attn_s REAL, ffn_s REAL, experts_s REAL, io_wait_s REAL, c_cycles INTEGER, c_instructions INTEGER, c_l1d_read_misses INTEGER, c_llc_read_misses INTEGER, c_dtlb_read_misses INTEGER, c_task_clock INTEGER, c_page_faults INTEGER, c_major_faults INTEGER, c_minor_faults INTEGER, c_context_switches INTEGER, c_cpu_migrations INTEGER, PRIMARY KEY(run_id, idx)) WITHOUT ROWID;
INSERT INTO token VALUES(1,0,0,0.0010875379994104150682,6.4666000980651006102e-05,3.5011998988920822739e-05,9.0229987108614295721e-06,1.7226000636583194136e-05,0.0,NULL,NULL,NULL,NULL,NULL,69153,6,0,6,0,0);
INSERT INTO token VALUES(1,1,1,0.0011618880016612820327,2.1952997485641390085e-05,6.0599995777010917663e-06,5.5870004871394485235e-06,8.7230000644922256469e-06,0.0,NULL,NULL,NULL,NULL,NULL,24096,0,0,0,0,0);
INSERT INTO token VALUES(1,2,1,0.001188278001791331917,2.0429997675819322466e-05,5.7579964050091803073e-06,5.3479998314287513494e-06,7.932005246402695775e-06,0.0,NULL,NULL,NULL,NULL,NULL,22264,0,0,0,0,0);
CREATE TABLE layer_stat(run_id INTEGER NOT NULL REFERENCES run(id), layer INTEGER NOT NULL, attn_s REAL, ffn_s REAL, experts_s REAL, io_wait_s REAL, n_tokens INTEGER, PRIMARY KEY(run_id, layer)) WITHOUT ROWID;
INSERT INTO layer_stat VALUES(1,0,1.7705000000000000739e-05,1.6900000000000001774e-07,9.9840000000000013102e-06,0.0,3);
INSERT INTO layer_stat VALUES(1,1,1.0493999999999999814e-05,6.6660000000000002129e-06,8.4620000000000013132e-06,0.0,3);
INSERT INTO layer_stat VALUES(1,2,9.222000000000000813e-06,6.5290000000000005084e-06,7.8919999999999999942e-06,0.0,3);
INSERT INTO layer_stat VALUES(1,3,9.401000000000000285e-06,6.5870000000000006302e-06,7.5400000000000006539e-06,0.0,3);
CREATE TABLE counter(run_id INTEGER NOT NULL REFERENCES run(id), event TEXT NOT NULL, value INTEGER, reason TEXT, PRIMARY KEY(run_id, event)) WITHOUT ROWID;
INSERT INTO counter VALUES(1,'context-switches',0,NULL);
INSERT INTO counter VALUES(1,'cpu-migrations',0,NULL);
INSERT INTO counter VALUES(1,'cycles',NULL,'perf_event_open: No such file or directory; perf_event_paranoid=2');
INSERT INTO counter VALUES(1,'dtlb-read-misses',NULL,'perf_event_open: No such file or directory; perf_event_paranoid=2');
INSERT INTO counter VALUES(1,'instructions',NULL,'perf_event_open: No such file or directory; perf_event_paranoid=2');
INSERT INTO counter VALUES(1,'l1d-read-misses',NULL,'perf_event_open: No such file or directory; perf_event_paranoid=2');
INSERT INTO counter VALUES(1,'llc-read-misses',NULL,'perf_event_open: No such file or directory; perf_event_paranoid=2');
INSERT INTO counter VALUES(1,'major-faults',0,NULL);
INSERT INTO counter VALUES(1,'minor-faults',6,NULL);
INSERT INTO counter VALUES(1,'page-faults',6,NULL);
INSERT INTO counter VALUES(1,'task-clock',115513,NULL);
CREATE INDEX run_session ON run(session_id);
CREATE INDEX session_model ON session(model_id);
COMMIT;
