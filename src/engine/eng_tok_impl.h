/*
 * eng_tok_impl.h — private to the tokenizer's files: the vocabulary every
 * one of them reads.
 *
 *   eng_tok.c         the vocabulary's lookups, accessors and count bounds
 *   eng_tok_load.c    building it from GGUF-style keys (eng_tok_load)
 *   eng_tok_enc.c     text -> ids (special-token partition, SentencePiece,
 *                     byte-level BPE)
 *   eng_tok_detok.c   ids -> text, streamed
 *   eng_tok_pre.c     the regex pre-tokenizer of byte-level BPE
 *
 * The vocabulary (struct eng_tok)
 *   text/toff/tlen  every token's text, copied (the kv may point into a
 *                   mapping that goes away), NUL-terminated, n entries
 *   piece/poff/plen every token's bytes as eng_tok_piece returns them,
 *                   computed once at load
 *   score[n]        SentencePiece scores (float; 0 when absent)
 *   attr[n]         TA_* flags from tokenizer.ggml.token_type, plus the
 *                   promotions llama.cpp applies by token text (end-of-
 *                   generation and FIM tokens become control tokens)
 *   hash            open addressing, text -> id (slot holds id + 1)
 *   mkey/mrank/mres merges, open addressing on (left id << 32 | right id)
 *                   -> rank and the id of the merged token (-1 if absent)
 *   special         ids that partition text, longest text first
 *   max_text        bytes of the longest token text: no token stands for
 *                   more bytes of input, so a text of len bytes is at least
 *                   len / max_text tokens (eng_tok_count_min)
 */
#ifndef CFLOW_ENG_TOK_IMPL_H
#define CFLOW_ENG_TOK_IMPL_H

#include "engine/eng_impl.h"

/* token attributes (llama.cpp's llama_token_attr, the subset we use) */
enum {
    TA_NORMAL = 1u << 0, TA_UNKNOWN = 1u << 1, TA_CONTROL = 1u << 2,
    TA_USER = 1u << 3, TA_UNUSED = 1u << 4, TA_BYTE = 1u << 5,
    TA_LSTRIP = 1u << 6, TA_RSTRIP = 1u << 7
};

struct eng_tok {
    int       spm;            /* 1: "llama", 0: "gpt2" */
    uint32_t  n;
    char     *text;           /* n NUL-terminated texts */
    uint32_t *toff, *tlen;
    char     *piece;          /* n pieces, back to back */
    uint32_t *poff, *plen;
    float    *score;
    uint8_t  *attr;
    uint32_t *hash;           /* id + 1, 0 = empty */
    uint32_t  hmask;
    uint64_t *mkey;           /* (l << 32 | r) + 1, 0 = empty */
    uint32_t *mrank;
    int32_t  *mres;
    uint32_t  mmask;
    int32_t   bos, eos, eot, unk;
    int       add_bos, add_eos, add_space_prefix, ignore_merges;
    int32_t   byte_tok[256];  /* SPM: token for byte b (<0xNN>), -1 */
    int32_t   bl_tok[256];    /* BPE: token of byte b's code point, -1 */
    uint16_t  bl_cp[256];     /* BPE: byte -> code point */
    int16_t   cp_bl[512];     /* BPE: code point -> byte, -1 */
    int32_t  *special;
    uint32_t  n_special;
    eng_pretok *pre;
    size_t    max_piece;
    size_t    max_text;       /* longest token text, bytes */
    int       all_bytes;      /* every byte has a token: no text encodes to nothing */
};

/* The id of the token whose text is s[0..n), or -1. */
int32_t  eng_tok_find(const eng_tok *t, const char *s, size_t n);
/* Rank of merging tokens l and r (result id in *res), or -1. */
int64_t  eng_tok_merge_find(const eng_tok *t, int32_t l, int32_t r, int32_t *res);
uint64_t eng_tok_hash_bytes(const char *s, size_t n);
uint64_t eng_tok_hash_u64(uint64_t x);
/* llama.cpp's unicode_len_utf8: the length the lead byte announces. */
size_t   eng_tok_lead_len(unsigned char c);

#endif
