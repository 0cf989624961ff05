/* num.h - the one parser of the whole numbers people type (command-line options of kvpack and
 * kvpackd): decimal, or hexadecimal after "0x"; optionally a binary size suffix k/K, m/M or g/G
 * (x 2^10, 2^20, 2^30), which may be followed by "iB" or "B" ("64M", "64MiB", "64MB", "0x40M").
 * A decimal number may also end in a bare "B" ("5B" is 5), but in hex B is a digit: "0x1000B" is
 * 0x1000B (65547), not 0x1000 bytes (write "0x1000", or "0x4KB" for 4 KiB). No sign,
 * no leading space, no octal ("010" is ten), nothing after the number, and no value past 2^64 - 1
 * (before or after the suffix): "-5", "1e3", "99999999999999999999" and "17179869184G" are
 * refused rather than wrapped. Also the one splitter of the comma lists people type (peer lists,
 * etcd endpoints, also= nodes). */
#ifndef KVPACK_NUM_H
#define KVPACK_NUM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 with *out set, or -1 (out untouched) when s is not such a number. */
int kvp_num_parse_u64(const char *s, uint64_t *out);
/* 0 with *out set, or -1: the 16 characters at s are exactly 16 lowercase hex digits (a
 * namespace in a key the store wrote with "%016llx"; no sign, space or "0x", nothing read past
 * the 16th character, so s needs no terminator). */
int kvp_hex16_parse(const char *s, uint64_t *out);
/* The next item of a comma list at *p_io, cut out in place with the spaces and tabs around it
 * dropped ("a:1, b:2" is "a:1,b:2"); *p_io moves past it. NULL once the list is used up. */
char *kvp_list_item_next(char **p_io);

#ifdef __cplusplus
}
#endif
#endif
