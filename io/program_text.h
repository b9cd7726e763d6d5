/* The program text format (docs/PROGRAM_FORMAT.md): its versions, the limits
 * its reader enforces, the reader, and the exact form of its numbers.
 * io/program_text.c writes it, io/program_parse.c reads it. */
#ifndef LOOM_IO_PROGRAM_TEXT_H
#define LOOM_IO_PROGRAM_TEXT_H

#include "loom.h"

/* ------------------------------------------------------------ text form */
/* docs/PROGRAM_FORMAT.md describes it. The first line is the magic word and
 * the version; this loom writes and reads versions LM_PROGRAM_VERSION,
 * LM_PROGRAM_VERSION_SYMBOLS, LM_PROGRAM_VERSION_FROM_END and
 * LM_PROGRAM_VERSION_FOLLOWS. */
#define LM_PROGRAM_MAGIC "loom-program"
#define LM_PROGRAM_VERSION 1
/* Version 2: version 1 and the symbol lines of a symbolic program (written
 * only for those). */
#define LM_PROGRAM_VERSION_SYMBOLS 2
/* Version 3: version 2 and the bounds from the end of a symbolic program's
 * slices and pads (`from_end=`, `lo_from_end=`; written only where one is). */
#define LM_PROGRAM_VERSION_FROM_END 3
/* Version 4: version 3 and which dims of a symbolic program's input-free
 * leaves (const, iota, rand) follow the sizes their consumers give them
 * (`follows=`; written only where one does): the others are sizes the program
 * wrote, which stay fixed (lm_node.fixed_dims). */
#define LM_PROGRAM_VERSION_FOLLOWS 4
/* Limits a reader enforces before allocating for them. */
#define LM_PROGRAM_MAX_TEXT ((size_t)1 << 28) /* bytes of a program file */
#define LM_PROGRAM_MAX_ITEMS (1 << 20)        /* positions, inputs, outputs (each) */
#define LM_PROGRAM_MAX_NAME 64                /* characters of an input or weight name */
#define LM_PROGRAM_MAX_SYMBOL_LINES 64        /* symbol lines (symbolic input dims) */

/* Parses a program's text form and compiles it. `weights` holds the tensors
 * its weight lines name (realized, same dtypes and shapes, no others); NULL
 * when it has none. A malformed text, or one whose nodes fail lm_node_verify,
 * is refused with LOOM_ERR_CORRUPT and a message "<text>:<line>: ..." saying
 * what was expected. Nothing is kept on failure. (A fuzzer can drive this.) */
loom_status lm_program_parse(const char *text, size_t len, const loom_params *weights,
                             loom_program **out);

/* v exactly, in C99 hex-float form, whatever the locale: "0x1.8p+1", "-0x0p+0",
 * "0x0.0000000000001p-1022", "inf", "-inf", "nan", "-nan" (a NaN's payload is
 * not kept). The reader accepts exactly this form. */
#define LM_HEX_DOUBLE_LEN 32
const char *lm_hex_double(double v, char buf[LM_HEX_DOUBLE_LEN]);

#endif
