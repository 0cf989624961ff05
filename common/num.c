/* num.c - kvp_num_parse_u64 (see num.h): digits by hand, so that a sign, an overflow or an octal
 * zero cannot slip through the way they do with strtoull; kvp_list_item_next, the comma lists. */
#include "kvpack/num.h"

#include <stddef.h>
#include <string.h>

static int digit(char c, unsigned base)
{
    int d = (c >= '0' && c <= '9') ? c - '0'
          : (c >= 'a' && c <= 'f') ? c - 'a' + 10
          : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : 99;

    return d < (int)base ? d : -1;
}

int kvp_num_parse_u64(const char *s, uint64_t *out)
{
    unsigned base  = 10;
    unsigned shift = 0;
    uint64_t v     = 0;
    size_t   n     = 0;

    if (s == NULL) {
        return -1;
    }
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    for (int d; (d = digit(*s, base)) >= 0; s++, n++) {
        if (v > (UINT64_MAX - (uint64_t)d) / base) {
            return -1;
        }
        v = v * base + (uint64_t)d;
    }
    if (n == 0) {
        return -1;
    }
    switch (*s) {
    case 'k': case 'K': shift = 10; s++; break;
    case 'm': case 'M': shift = 20; s++; break;
    case 'g': case 'G': shift = 30; s++; break;
    default: break;
    }
    if (shift != 0 && s[0] == 'i' && s[1] == 'B') {
        s += 2;
    } else if (s[0] == 'B') { /* after hex digits a B was taken as a digit above (num.h) */
        s++;
    }
    if (*s != '\0' || v > (UINT64_MAX >> shift)) {
        return -1;
    }
    *out = v << shift;
    return 0;
}

char *kvp_list_item_next(char **p_io)
{
    char *p = *p_io, *comma;

    if (p == NULL) {
        return NULL;
    }
    comma = strchr(p, ',');
    if (comma != NULL) {
        *comma = '\0';
    }
    *p_io = comma != NULL ? comma + 1 : NULL;
    p += strspn(p, " \t");
    for (size_t l = strlen(p); l > 0 && (p[l - 1] == ' ' || p[l - 1] == '\t'); l--) {
        p[l - 1] = '\0';
    }
    return p;
}

int kvp_hex16_parse(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    for (int i = 0; i < 16; i++) {
        char c = s[i];

        if (c >= '0' && c <= '9') {
            v = v << 4 | (uint64_t)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            v = v << 4 | (uint64_t)(c - 'a' + 10);
        } else {
            return -1;
        }
    }
    *out = v;
    return 0;
}
