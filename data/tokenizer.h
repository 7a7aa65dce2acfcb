// GPT-2 byte-level BPE tokenizer: encode and decode, reading OpenAI's original files
// encoder.json (token string -> id) and vocab.bpe (the 50,000 merges, best first).
//
// Encoding equals OpenAI's GPT-2 encoder (openai/gpt-2 src/encoder.py, and tiktoken's
// "gpt2" encoding) token for token on valid UTF-8 (up to Unicode-version differences in
// what counts as a letter or number; data/README.md says how this is tested):
//  1. pre-split the text with the GPT-2 pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     where \s is Unicode White_Space (as in Python's `regex` module and Rust's regex);
//  2. run BPE on the bytes of each piece: repeatedly merge the adjacent pair with the
//     best (lowest) rank in vocab.bpe until no pair has a rank.
// Step 1 needs PCRE2 (Debian libpcre2-dev); a build without it can decode, and
// encoder_new() dies saying that PCRE2 is needed.
//
// Invalid UTF-8: every maximal run of bytes that are not part of a well-formed UTF-8
// sequence is a piece of its own. Equivalently, for valid UTF-8 strings A and B and such
// a run X:  encode(A X B) = encode(A) + bpe(X) + encode(B). So decode(encode(x)) == x
// for every byte string x, and valid text is untouched by the rule.
//
// The special token <|endoftext|> (id 50256) comes out of encoding only when the caller
// passes TOKENIZER_ALLOW_EOT; by default the text "<|endoftext|>" is encoded as plain
// text, like tiktoken's encode_ordinary.
//
// Threads: a Tokenizer is read-only once loaded and may be shared; every thread encodes
// with its own Encoder (which holds the regex match state and a cache of up to 2^20
// pieces, at most ~70 MB).
#ifndef HYBRID_TOKENIZER_H
#define HYBRID_TOKENIZER_H

#include <stddef.h>

#define TOKENIZER_EOT 50256               // <|endoftext|> in GPT-2's vocabulary
#define TOKENIZER_DEFAULT_DIR "out/vocab"  // where `make data` puts the two files

typedef struct Tokenizer Tokenizer;
typedef struct Encoder Encoder;

// Loads and checks the two files; dies with a message naming the file (and the line
// or byte) when one is missing or corrupt.
Tokenizer *tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path);
// dir/encoder.json and dir/vocab.bpe
Tokenizer *tokenizer_load_dir(const char *dir);
void tokenizer_free(Tokenizer *t);
int tokenizer_vocab_size(const Tokenizer *t);  // 50257 for GPT-2
int tokenizer_eot(const Tokenizer *t);         // id of <|endoftext|>

// ---- decoding (always available) ----
// The bytes of one token (not NUL-terminated), or NULL if id is out of range.
const char *tokenizer_token_bytes(const Tokenizer *t, int id, size_t *len);
// Writes the bytes of ids[0..n) into out (at most cap bytes, no NUL added) and returns
// the full length, like snprintf: call with cap = 0 to size a buffer. A token may end
// in the middle of a UTF-8 character; the next token completes it. Dies on an id
// outside the vocabulary.
size_t tokenizer_decode_to(const Tokenizer *t, const int *ids, size_t n, char *out, size_t cap);
// The same into a new NUL-terminated buffer (free it); *len gets the length.
char *tokenizer_decode(const Tokenizer *t, const int *ids, size_t n, size_t *len);

// ---- encoding (needs PCRE2) ----
enum { TOKENIZER_ALLOW_EOT = 1 };  // text "<|endoftext|>" becomes the special token

typedef struct {
    int *ids;
    size_t n, cap;
} TokenVec;
void tokenvec_push(TokenVec *v, int id);
void tokenvec_append(TokenVec *v, const int *ids, size_t n);
void tokenvec_free(TokenVec *v);

int tokenizer_can_encode(void);  // 1 if this build has PCRE2
Encoder *encoder_new(const Tokenizer *t);
void encoder_free(Encoder *e);
// Appends the ids of bytes[0..len) to out; returns how many were appended.
size_t encoder_encode(Encoder *e, const char *bytes, size_t len, int flags, TokenVec *out);
// One-off convenience: a new array of *n ids (free it). Builds a temporary Encoder,
// so use encoder_encode in loops.
int *tokenizer_encode(const Tokenizer *t, const char *bytes, size_t len, int flags, size_t *n);

// A position p in (0, len) where the text can be cut without changing its encoding,
// encode(x) == encode(x[0..p)) + encode(x[p..len)), searching forward from `from`:
// just after a printable ASCII character followed by '\n'. Returns len if none. Used
// to tokenize one long document on several threads.
size_t tokenizer_split_point(const char *bytes, size_t len, size_t from);

#endif
