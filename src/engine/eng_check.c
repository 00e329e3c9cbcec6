/*
 * eng_check.c — the checks around a token: whether it may be fed (its id,
 * a free position, a whole model file), the error of a model file that
 * shrank under the mapping, and the NaN probe's test at a layer's end.
 *
 * The state they read and set is the session's checks room (eng_impl.h,
 * eng_checks): broken and fault_off, set by the guard around a pass
 * (eng_guarded_run, eng_forward.c) when a read of the mapping faulted;
 * probe and bad_layer, set while eng_check_finite (eng_forward.c) runs a
 * token whose logits were not finite again, each layer's end reporting
 * here (eng_probe_layer, from the schedules' layer end, eng_sched.c).
 * Nothing here runs a token: the files that do call down into this one.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"

int eng_finite(const float *x, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

void eng_probe_layer(eng_session *s, unsigned i, const float *x, const float *a)
{
    const uint32_t dim = s->hp->dim;
    if (s->chk.probe && s->chk.bad_layer < 0 &&
        (!eng_finite(x, dim) || (a && !eng_finite(a, dim))))
        s->chk.bad_layer = (int)i;
}

int eng_model_fault(eng_session *s, char *err, size_t errlen)
{
    struct stat st;
    const char *path = fmt_model_path(s->model);
    if (stat(path, &st) == 0)
        return eng_fail(err, errlen, ENG_EIO,
                    "%s: the model file changed while in use: reading byte %llu "
                    "failed (the file is now %lld bytes, %llu when opened)",
                    path, (unsigned long long)s->chk.fault_off, (long long)st.st_size,
                    (unsigned long long)fmt_model_file_size(s->model));
    return eng_fail(err, errlen, ENG_EIO,
                "%s: the model file changed while in use: reading byte %llu "
                "failed (%s)", path, (unsigned long long)s->chk.fault_off, strerror(errno));
}

int eng_check_token(eng_session *s, const eng_seq *seq, int32_t token, char *err,
                    size_t errlen)
{
    if (s->chk.broken)
        return eng_model_fault(s, err, errlen);
    if (token < 0 || (uint32_t)token >= s->hp->vocab_size)
        return eng_fail(err, errlen, ENG_EARG, "token id %d is outside the %u-token vocabulary",
                    token, s->hp->vocab_size);
    if (seq->n_past >= seq->n_ctx)
        return eng_fail(err, errlen, ENG_ECTX,
                    "context full: all %u positions are used", seq->n_ctx);
    return 0;
}
