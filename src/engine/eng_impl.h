/*
 * eng_impl.h — private to src/engine: declarations shared between the
 * engine's files (never included outside src/engine).  Several files add
 * to it; keep edits additive and grouped by defining file.
 */
#ifndef CFLOW_ENG_IMPL_H
#define CFLOW_ENG_IMPL_H

#include "engine/engine.h"

/* ---- eng_session.c ---- */
/* The mapped model behind a session (for inspection and statistics). */
const fmt_model *eng_model(const eng_session *s);

#endif
