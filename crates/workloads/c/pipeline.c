/*
 * pipeline — hash, deduplicate, compress and write a stream of blocks
 * (ars Table 1: pipeline, medium; the dedup / ferret / x264 class).
 *
 * A stream of PL_BLOCK-byte synthetic blocks (dictionary phrases, runs,
 * numbers and noise; about one block in eight repeats an earlier one) is
 * processed in batches of PL_BATCH blocks, each batch through four stages:
 *
 *   1. produce (parallel): generate each block and hash it;
 *   2. dedup (in order): look each hash up in the table of blocks seen;
 *   3. compress (parallel): LZ77-compress each new block with the
 *      compressor below, hash its output, and check that every fourth
 *      block decompresses to its input;
 *   4. write (in order): append the compressed blocks (or references for
 *      duplicates) to an archive ring buffer and fold them into the answer.
 *
 * Two parallel regions of a few milliseconds per batch, one block per
 * chunk, blocks of uneven cost (duplicates cost nothing to compress).
 *
 * The compressor (written for this kernel): a greedy LZ77 with a
 * 4096-entry hash table of 4-byte sequences. Output tokens:
 *   0lllllll            a run of l + 1 literal bytes follows (1..128);
 *   1lllllll lo hi      copy l + 4 bytes (4..131) from `lo | hi << 8`
 *                       bytes back in the output.
 */
#include "par.h"
#include "wl.h"

#include <stdlib.h>
#ifdef WL_TRACE
#include <stdio.h>
#endif

#define PL_BLOCK 16384L                /* bytes per block */
#define PL_BATCH 64L                   /* blocks per batch */
#define PL_BOUND (PL_BLOCK + PL_BLOCK / 128 + 16) /* worst compressed size */
#define PL_PHRASES 256                 /* dictionary phrases */
#define PL_PHRASE_LEN 48
#define PL_DUP_WINDOW 512              /* how far back a duplicate reaches */
#define PL_CHECK_EVERY 4               /* round-trip check of every 4th block */
#define PL_ARCHIVE (8L << 20)          /* archive ring buffer, bytes */
#define PL_BATCHES_PER_SCALE 1050.0    /* batches at scale 1 (calibrated) */

#define LZ_HASH_BITS 12
#define LZ_HASH_SIZE (1 << LZ_HASH_BITS)
#define LZ_MIN_MATCH 4
#define LZ_MAX_MATCH (127 + LZ_MIN_MATCH)
#define LZ_MAX_LITERALS 128

/* ---- the compressor ---- */

static uint32_t read32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static long put_literals(uint8_t *out, long op, const uint8_t *lit, long count)
{
    while (count > 0) {
        long k = count < LZ_MAX_LITERALS ? count : LZ_MAX_LITERALS;
        out[op++] = (uint8_t)(k - 1);
        memcpy(out + op, lit, (size_t)k);
        op += k;
        lit += k;
        count -= k;
    }
    return op;
}

/* Compresses in[0..n) (n <= 65535) into out (at least PL_BOUND bytes);
 * returns the compressed length. `table` is LZ_HASH_SIZE scratch entries. */
static long lz_compress(const uint8_t *in, long n, uint8_t *out, uint16_t *table)
{
    memset(table, 0, LZ_HASH_SIZE * sizeof *table);
    long ip = 0, op = 0, lit = 0;
    while (ip + LZ_MIN_MATCH <= n) {
        uint32_t seq = read32(in + ip);
        uint32_t slot = (seq * UINT32_C(2654435761)) >> (32 - LZ_HASH_BITS);
        long cand = (long)table[slot] - 1; /* entries hold position + 1 */
        table[slot] = (uint16_t)(ip + 1);
        if (cand < 0 || read32(in + cand) != seq) {
            ip++;
            continue;
        }
        long len = LZ_MIN_MATCH;
        while (ip + len < n && len < LZ_MAX_MATCH && in[cand + len] == in[ip + len])
            len++;
        op = put_literals(out, op, in + lit, ip - lit);
        long off = ip - cand;
        out[op++] = (uint8_t)(0x80 | (len - LZ_MIN_MATCH));
        out[op++] = (uint8_t)(off & 0xff);
        out[op++] = (uint8_t)(off >> 8);
        ip += len;
        lit = ip;
    }
    return put_literals(out, op, in + lit, n - lit);
}

/* Decompresses in[0..len) into out (capacity cap); returns the output
 * length, or -1 if the input is malformed. */
static long lz_decompress(const uint8_t *in, long len, uint8_t *out, long cap)
{
    long ip = 0, op = 0;
    while (ip < len) {
        uint8_t t = in[ip++];
        if (t & 0x80) {
            if (ip + 2 > len)
                return -1;
            long n = (t & 0x7f) + LZ_MIN_MATCH;
            long off = in[ip] | (long)in[ip + 1] << 8;
            ip += 2;
            if (off == 0 || off > op || op + n > cap)
                return -1;
            for (long k = 0; k < n; k++, op++)
                out[op] = out[op - off]; /* may overlap: byte by byte */
        } else {
            long n = (long)t + 1;
            if (ip + n > len || op + n > cap)
                return -1;
            memcpy(out + op, in + ip, (size_t)n);
            ip += n;
            op += n;
        }
    }
    return op;
}

/* ---- the block stream ---- */

struct stream {
    uint8_t *phrases;    /* [PL_PHRASES][PL_PHRASE_LEN] */
    long batch;          /* current batch number */
    uint8_t *in;         /* [PL_BATCH][PL_BLOCK] */
    uint8_t *out;        /* [PL_BATCH][PL_BOUND] */
    uint8_t *check;      /* [PL_BATCH][PL_BLOCK] round-trip scratch */
    uint16_t *tables;    /* [PL_BATCH][LZ_HASH_SIZE] */
    uint64_t *hash;      /* [PL_BATCH] block hashes */
    uint64_t *out_hash;  /* [PL_BATCH] compressed-output hashes */
    long *out_len;       /* [PL_BATCH] */
    unsigned char *dup;  /* [PL_BATCH] */
    unsigned char *bad;  /* [PL_BATCH] round trip failed */
};

/* Whether block i repeats an earlier block, and which (its own source). */
static long source_of(long i)
{
    for (;;) {
        uint64_t s = wl_stream(WL_SEED, 3, (uint64_t)i);
        if (i == 0 || wl_below(&s, 8) != 0)
            return i;
        long back = i < PL_DUP_WINDOW ? i : PL_DUP_WINDOW;
        i = i - 1 - (long)wl_below(&s, (uint64_t)back);
    }
}

/* Fills b with the content of source block src. */
static void generate(const struct stream *st, long src, uint8_t *b)
{
    uint64_t s = wl_stream(WL_SEED, 4, (uint64_t)src);
    long n = 0;
    unsigned long record = (unsigned long)src * 1000;
    while (n < PL_BLOCK) {
        uint8_t seg[64];
        long len;
        uint64_t kind = wl_below(&s, 100);
        if (kind < 45) { /* a phrase, favouring the first ones */
            uint64_t k = wl_below(&s, wl_below(&s, PL_PHRASES) + 1);
            len = PL_PHRASE_LEN;
            memcpy(seg, st->phrases + k * PL_PHRASE_LEN, PL_PHRASE_LEN);
        } else if (kind < 65) { /* a run */
            len = 4 + (long)wl_below(&s, 60);
            memset(seg, (int)wl_below(&s, 256), (size_t)len);
        } else if (kind < 85) { /* noise */
            len = 8 + (long)wl_below(&s, 32);
            for (long k = 0; k < len; k++)
                seg[k] = (uint8_t)wl_next(&s);
        } else { /* a numbered record: "#<digits>;" */
            unsigned long v = record++;
            uint8_t digits[24];
            long d = 0;
            do {
                digits[d++] = (uint8_t)('0' + v % 10);
                v /= 10;
            } while (v);
            len = 0;
            seg[len++] = '#';
            while (d)
                seg[len++] = digits[--d];
            seg[len++] = ';';
        }
        if (len > PL_BLOCK - n)
            len = PL_BLOCK - n;
        memcpy(b + n, seg, (size_t)len);
        n += len;
    }
}

static uint64_t hash_bytes(const uint8_t *p, long n)
{
    uint64_t h = (uint64_t)n;
    long k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t w;
        memcpy(&w, p + k, 8);
        h = (h ^ wl_mix(w)) * UINT64_C(0x100000001b3) + 1;
    }
    for (; k < n; k++)
        h = (h ^ p[k]) * UINT64_C(0x100000001b3);
    return wl_mix(h);
}

static void produce(long lo, long hi, void *ctx)
{
    struct stream *st = ctx;
    for (long k = lo; k < hi; k++) {
        uint8_t *b = st->in + k * PL_BLOCK;
        generate(st, source_of(st->batch * PL_BATCH + k), b);
        st->hash[k] = hash_bytes(b, PL_BLOCK);
    }
}

static void compress(long lo, long hi, void *ctx)
{
    struct stream *st = ctx;
    for (long k = lo; k < hi; k++) {
        if (st->dup[k])
            continue;
        const uint8_t *b = st->in + k * PL_BLOCK;
        uint8_t *o = st->out + k * PL_BOUND;
        long n = lz_compress(b, PL_BLOCK, o, st->tables + k * LZ_HASH_SIZE);
        st->out_len[k] = n;
        st->out_hash[k] = hash_bytes(o, n);
        st->bad[k] = 0;
        if ((st->batch * PL_BATCH + k) % PL_CHECK_EVERY == 0) {
            uint8_t *c = st->check + k * PL_BLOCK;
            long m = lz_decompress(o, n, c, PL_BLOCK);
            st->bad[k] = m != PL_BLOCK || memcmp(c, b, PL_BLOCK) != 0;
        }
    }
}

/* Open-addressing set of block hashes (0 marks an empty slot). */
struct seen {
    uint64_t *slot;
    uint64_t mask;
};

/* Inserts h; returns whether it was there already. */
static int seen_insert(struct seen *t, uint64_t h)
{
    if (h == 0)
        h = 1;
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        if (t->slot[i] == h)
            return 1;
        if (t->slot[i] == 0) {
            t->slot[i] = h;
            return 0;
        }
    }
}

int wl_pipeline(double scale, uint64_t *answer)
{
    long batches = wl_count(scale, PL_BATCHES_PER_SCALE);
    if (batches == 0)
        return WL_EINVAL;
    uint64_t cap = 1024;
    while (cap < 2 * (uint64_t)(batches * PL_BATCH))
        cap <<= 1;
    struct stream st = {0};
    struct seen seen = {calloc(cap, sizeof(uint64_t)), cap - 1};
    st.phrases = malloc(PL_PHRASES * PL_PHRASE_LEN);
    st.in = malloc(PL_BATCH * PL_BLOCK);
    st.out = malloc(PL_BATCH * PL_BOUND);
    st.check = malloc(PL_BATCH * PL_BLOCK);
    st.tables = malloc(PL_BATCH * LZ_HASH_SIZE * sizeof(uint16_t));
    st.hash = malloc(PL_BATCH * sizeof(uint64_t));
    st.out_hash = malloc(PL_BATCH * sizeof(uint64_t));
    st.out_len = malloc(PL_BATCH * sizeof(long));
    st.dup = malloc(PL_BATCH);
    st.bad = malloc(PL_BATCH);
    uint8_t *archive = calloc(PL_ARCHIVE, 1);
    int rc = WL_ENOMEM;
    if (!seen.slot || !st.phrases || !st.in || !st.out || !st.check || !st.tables || !st.hash ||
        !st.out_hash || !st.out_len || !st.dup || !st.bad || !archive)
        goto out;

    for (long k = 0; k < PL_PHRASES; k++) {
        uint64_t s = wl_stream(WL_SEED, 5, (uint64_t)k);
        for (long c = 0; c < PL_PHRASE_LEN; c++) {
            uint64_t r = wl_below(&s, 32);
            st.phrases[k * PL_PHRASE_LEN + c] = (uint8_t)(r < 26 ? 'a' + r : ' ');
        }
    }
    uint64_t h = wl_fold(0, (uint64_t)batches);
    long written = 0, at = 0;
    for (st.batch = 0; st.batch < batches; st.batch++) {
        par_for(PL_BATCH, 1, produce, &st);
        for (long k = 0; k < PL_BATCH; k++)
            st.dup[k] = (unsigned char)seen_insert(&seen, st.hash[k]);
        par_for(PL_BATCH, 1, compress, &st);
        for (long k = 0; k < PL_BATCH; k++) {
            if (!st.dup[k] && st.bad[k]) {
                rc = WL_ECHECK;
                goto out;
            }
            /* A duplicate is written as a 9-byte reference to its hash. */
            uint8_t ref[9] = {0xff};
            const uint8_t *rec = ref;
            long n = 9;
            if (st.dup[k]) {
                memcpy(ref + 1, &st.hash[k], 8);
                h = wl_fold(h, st.hash[k]);
            } else {
                rec = st.out + k * PL_BOUND;
                n = st.out_len[k];
                h = wl_fold(h, st.out_hash[k] ^ (uint64_t)n);
            }
            while (n > 0) {
                long room = PL_ARCHIVE - at, m = n < room ? n : room;
                memcpy(archive + at, rec, (size_t)m);
                at = (at + m) % PL_ARCHIVE;
                rec += m;
                n -= m;
                written += m;
            }
        }
    }
    h = wl_fold(h, (uint64_t)written);
#ifdef WL_TRACE
    fprintf(stderr, "pipeline: %ld blocks, %ld bytes in, %ld bytes written\n", batches * PL_BATCH,
            batches * PL_BATCH * PL_BLOCK, written);
#endif
    h = wl_fold(h, hash_bytes(archive, PL_ARCHIVE));
    *answer = h;
    rc = WL_OK;
out:
    free(seen.slot);
    free(st.phrases);
    free(st.in);
    free(st.out);
    free(st.check);
    free(st.tables);
    free(st.hash);
    free(st.out_hash);
    free(st.out_len);
    free(st.dup);
    free(st.bad);
    free(archive);
    return rc;
}
