// `hybrid prepare`: documents -> GPT-2 tokens -> llm.c shards.
//
// Documents are read in order in batches of about BATCH_BYTES. Each document is cut
// into pieces of about CHUNK_BYTES at points that do not change its encoding
// (tokenizer_split_point), the pieces are encoded in parallel (one Encoder per
// thread), and the tokens are appended in document order: [EOT] + document, to the
// train or the val shards. The cut points depend only on the text, so the output is
// the same for any number of threads.
#include "prepare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "data/docs.h"
#include "data/manifest.h"
#include "data/prepare_options.h"
#include "data/progress.h"
#include "data/shardseq.h"
#include "data/shardset.h"
#include "data/tokenizer.h"
#include "base/util.h"

#define BATCH_BYTES (64u << 20)
#define CHUNK_BYTES (1u << 20)

typedef struct {
    size_t doc;            // index into the batch
    size_t start, end;     // byte range of the document's text
    uint64_t credit;       // input bytes it stands for, for the progress bar
    TokenVec tokens;
} Piece;

typedef struct {
    Doc *docs;
    size_t ndocs, doc_cap;
    Piece *pieces;
    size_t npieces, piece_cap;
} Batch;

// Validation documents: N of D spread evenly (see --help).
static int is_val(uint64_t i, uint64_t n_val, uint64_t n_docs) {
    return (i + 1) * n_val / n_docs > i * n_val / n_docs;
}

static uint64_t val_count(const PrepareOptions *o, uint64_t n_docs) {
    uint64_t n = o->val_docs;
    if (!o->val_by_count) {
        n = (uint64_t)llround(o->val_frac * (double)n_docs);
        if (o->val_frac > 0 && n == 0 && n_docs >= 2) n = 1;
    }
    if (n > 0 && n >= n_docs)
        die("prepare: %llu validation documents would leave none of the %llu for training", (unsigned long long)n,
            (unsigned long long)n_docs);
    if (n > 0 && n_docs > UINT64_MAX / n) die("prepare: too many documents");
    return n;
}

// Reads documents until the batch holds about BATCH_BYTES; returns 0 if none was left.
static int fill_batch(Batch *b, DocReader *r, uint64_t *bytes_read) {
    size_t text_bytes = 0;
    b->ndocs = 0;
    while (text_bytes < BATCH_BYTES) {
        if (b->ndocs == b->doc_cap) {
            size_t cap = b->doc_cap ? 2 * b->doc_cap : 256;
            b->docs = xrealloc(b->docs, cap * sizeof(Doc));
            memset(b->docs + b->doc_cap, 0, (cap - b->doc_cap) * sizeof(Doc));
            b->doc_cap = cap;
        }
        Doc *d = &b->docs[b->ndocs];
        if (!docs_next(r, d)) break;
        text_bytes += d->text.len;
        b->ndocs++;
    }
    // cut the documents into pieces; each piece gets its share of the input bytes
    b->npieces = 0;
    for (size_t k = 0; k < b->ndocs; k++) {
        const Doc *d = &b->docs[k];
        uint64_t input = d->bytes - *bytes_read, credited = 0;
        *bytes_read = d->bytes;
        for (size_t start = 0; start < d->text.len;) {
            size_t end = start + CHUNK_BYTES < d->text.len
                             ? tokenizer_split_point(d->text.data, d->text.len, start + CHUNK_BYTES)
                             : d->text.len;
            if (b->npieces == b->piece_cap) {
                size_t cap = b->piece_cap ? 2 * b->piece_cap : 256;
                b->pieces = xrealloc(b->pieces, cap * sizeof(Piece));
                memset(b->pieces + b->piece_cap, 0, (cap - b->piece_cap) * sizeof(Piece));
                b->piece_cap = cap;
            }
            Piece *p = &b->pieces[b->npieces++];
            p->doc = k, p->start = start, p->end = end;
            p->credit = end == d->text.len ? input - credited : (uint64_t)((double)input * (end - start) / d->text.len);
            credited += p->credit;
            start = end;
        }
    }
    return b->ndocs > 0;
}

static void encode_batch(Batch *b, Encoder **enc, int threads, int flags, Progress *prog, uint64_t *done) {
    long n = (long)b->npieces;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (long j = 0; j < n; j++) {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#endif
        Piece *p = &b->pieces[j];
        p->tokens.n = 0;
        encoder_encode(enc[t], b->docs[p->doc].text.data + p->start, p->end - p->start, flags, &p->tokens);
        uint64_t now;
#pragma omp atomic capture
        now = *done += p->credit;
        if (t == 0) progress_update(prog, now);
    }
    (void)threads;
}

static const char *plural(uint64_t n) { return n == 1 ? "" : "s"; }

// "  train: 475 documents, 1237074 tokens in 1 shard: out/data/brown_train_000000.bin"; finishes s
static void report_split(ShardSeq *s, const char *out_dir, uint64_t docs) {
    int shards = s->nshards;
    char *first = shardseq_name(s, 0), *last = shardseq_name(s, shards - 1);
    char label[16];
    snprintf(label, sizeof(label), "%s:", s->split);
    printf("  %-6s %llu document%s, %llu tokens in %d shard%s%s%s%s%s%s%s\n", label, (unsigned long long)docs,
           plural(docs), (unsigned long long)s->total, shards, plural((uint64_t)shards), shards ? ": " : "",
           shards ? out_dir : "", shards ? "/" : "", shards ? first : "", shards > 1 ? " .. " : "",
           shards > 1 ? last : "");
    free(first), free(last);
    shardseq_finish(s);
}

int prepare_main(int argc, char **argv) {
    double start = now_seconds();
    PrepareOptions o;
    if (!prepare_parse_options(&o, argc, argv)) return 0;
    DocReader reader;
    docs_open(&reader, o.inputs, o.ninputs, o.format);
    Tokenizer *tok = tokenizer_load_dir(o.vocab_dir);
    if (tokenizer_vocab_size(tok) > 65536)
        die("prepare: a vocabulary of %d tokens does not fit uint16 shards", tokenizer_vocab_size(tok));
    Encoder **enc = xmalloc((size_t)o.threads * sizeof(Encoder *));
    for (int t = 0; t < o.threads; t++) enc[t] = encoder_new(tok);

    Batch batch = {0};
    if (!o.quiet)
        fprintf(stderr, "prepare: %zu input file%s, %.1f MB (format %s); counting documents ...\n", reader.nfiles,
                plural(reader.nfiles), reader.total_bytes / 1e6, docs_format_name(o.format));
    uint64_t n_docs = docs_count(&reader);
    if (n_docs == 0)
        die("prepare: the inputs hold no text (%zu file%s, %llu bytes, no non-empty document)", reader.nfiles,
            plural(reader.nfiles), (unsigned long long)reader.total_bytes);
    uint64_t n_val = val_count(&o, n_docs);
    if (!o.quiet)
        fprintf(stderr, "prepare: %llu document%s: %llu train, %llu validation; %d thread%s\n",
                (unsigned long long)n_docs, plural(n_docs), (unsigned long long)(n_docs - n_val),
                (unsigned long long)n_val, o.threads, plural((uint64_t)o.threads));
    if (n_val == 0) fprintf(stderr, "prepare: warning: no validation documents\n");

    char *tmp = shardset_begin(o.out_dir, o.name, o.quiet);  // the new set is written here, then published
    Manifest manifest;
    manifest_init(&manifest, o.name, tokenizer_vocab_size(tok), tokenizer_eot(tok));
    ShardSeq train, val;
    shardseq_init(&train, tmp, o.name, "train", o.shard_tokens, &manifest);
    shardseq_init(&val, tmp, o.name, "val", o.shard_tokens, &manifest);

    Progress prog;
    progress_start(&prog, "prepare", reader.total_bytes, o.quiet);
    int flags = o.allow_special ? TOKENIZER_ALLOW_EOT : 0, eot = tokenizer_eot(tok);
    uint64_t doc_index = 0, bytes_read = 0, done = 0, text_bytes = 0;
    double encode_secs = 0;  // wall time inside the parallel tokenizer
    while (fill_batch(&batch, &reader, &bytes_read)) {
        double t0 = now_seconds();
        encode_batch(&batch, enc, o.threads, flags, &prog, &done);
        encode_secs += now_seconds() - t0;
        for (size_t k = 0, j = 0; k < batch.ndocs; k++, doc_index++) {
            ShardSeq *s = is_val(doc_index, n_val, n_docs) ? &val : &train;
            shardseq_push(s, &eot, 1);
            for (; j < batch.npieces && batch.pieces[j].doc == k; j++)
                shardseq_push(s, batch.pieces[j].tokens.ids, batch.pieces[j].tokens.n);
            text_bytes += batch.docs[k].text.len;
        }
        progress_update(&prog, done);
    }
    progress_finish(&prog, reader.total_bytes);
    if (doc_index != n_docs) die("prepare: the inputs changed while reading them (%llu documents, then %llu)",
                                 (unsigned long long)n_docs, (unsigned long long)doc_index);

    shardseq_flush(&train);
    shardseq_flush(&val);
    shardset_commit(o.out_dir, o.name, &manifest);

    double secs = now_seconds() - start;
    printf("prepare: %llu document%s, %.1f MB of text, %.2f s in all; tokenizing took %.2f s: %.1f MB/s on %d "
           "thread%s\n",
           (unsigned long long)n_docs, plural(n_docs), text_bytes / 1e6, secs, encode_secs,
           text_bytes / 1e6 / (encode_secs > 0 ? encode_secs : 1e-9), o.threads, plural((uint64_t)o.threads));
    report_split(&train, o.out_dir, n_docs - n_val);
    report_split(&val, o.out_dir, n_val);
    char *mpath = manifest_path(o.out_dir, o.name);
    printf("  manifest: %s (what the loader checks the set against)\n", mpath);
    free(mpath);
    manifest_free(&manifest);
    free(tmp);
    for (size_t k = 0; k < batch.doc_cap; k++) buf_free(&batch.docs[k].text);
    for (size_t j = 0; j < batch.piece_cap; j++) tokenvec_free(&batch.pieces[j].tokens);
    free(batch.docs), free(batch.pieces);
    for (int t = 0; t < o.threads; t++) encoder_free(enc[t]);
    free(enc);
    tokenizer_free(tok);
    docs_close(&reader);
    free(o.inputs);
    return 0;
}
