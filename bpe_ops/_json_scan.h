/*
 * Strict JSON scanning over UTF-8 bytes, for reading a tokenizer.json's
 * merges without a Python object per merge (bpe_ops/json_merges.py is the specification).
 *
 * Strict: what Python's json.loads reads with strict=True, less NaN, Infinity and -Infinity, which
 * these refuse (the caller then lets json.loads read the whole file). Whitespace is space, tab, LF, CR.
 *   json_space(s, n, at)          the offset after any whitespace at `at`
 *   json_string_end(s, n, at)     `at` on a '"': the offset after the closing '"', or -1 (a raw
 *                                 control character, a bad escape, no end)
 *   json_string_chars(s, n, at, out, &len)
 *                                 the same string's code points into `out` (room for the raw
 *                                 length), -1 also for invalid UTF-8 or an escaped lone surrogate
 *   json_value_end(s, n, at)      the offset after the value at `at` (any JSON value, nested up to
 *                                 JSON_MAX_DEPTH), or -1
 */
#ifndef JSON_SCAN_H
#define JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define JSON_MAX_DEPTH 512

static inline size_t json_space(const uint8_t *s, size_t n, size_t at)
{
    while (at < n && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t'))
        at++;
    return at;
}

static inline int json_next(const uint8_t *s, size_t n, size_t *at, uint8_t close)
{
    /* After a member or an element ending at *at: 1 with *at on the next one (past the ',' and the
     * space after it), 0 with *at on the container's `close`, -1 when neither follows. */
    size_t i = json_space(s, n, *at);
    if (i < n && s[i] == ',') {
        *at = json_space(s, n, i + 1);
        return 1;
    }
    *at = i;
    return i < n && s[i] == close ? 0 : -1;
}

static inline int json_hex(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static inline int json_short_escape(uint8_t e)
{
    /* The character the escape backslash-e stands for when e is one of JSON's one-letter escapes
     * (" \\ / b f n r t), else -1 (\u is not one). */
    switch (e) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return -1;
    }
}

static long json_hex4(const uint8_t *s, size_t n, size_t at)
{
    /* The four hex digits at `at` as a number, or -1. */
    long v = 0;
    size_t i;
    if (n - at < 4 || at > n)
        return -1;
    for (i = 0; i < 4; i++) {
        int d = json_hex(s[at + i]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static ptrdiff_t json_string_end(const uint8_t *s, size_t n, size_t at)
{
    if (at >= n || s[at] != '"')
        return -1;
    for (at++; at < n; at++) {
        uint8_t c = s[at];
        if (c == '"')
            return (ptrdiff_t)(at + 1);
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            if (++at >= n)
                return -1;
            c = s[at];
            if (c == 'u') {
                if (json_hex4(s, n, at + 1) < 0)
                    return -1;
                at += 4;
            } else if (json_short_escape(c) < 0) {
                return -1;
            }
        }
    }
    return -1;
}

static ptrdiff_t json_string_chars(const uint8_t *s, size_t n, size_t at, uint32_t *out, size_t *len)
{
    /* The string's code points into `out` (room for the string's raw bytes: never more code points
     * than bytes), its raw bytes decoded as strict UTF-8 (no overlong form, surrogate or code point
     * past 0x10FFFF); -1 also for invalid UTF-8 and for an escaped lone surrogate. */
    size_t w = 0;
    if (at >= n || s[at] != '"')
        return -1;
    for (at++; at < n; ) {
        uint32_t c = s[at];
        int e;
        if (c == '"') {
            *len = w;
            return (ptrdiff_t)(at + 1);
        }
        if (c < 0x20)
            return -1;
        if (c < 0x80 && c != '\\') {
            out[w++] = c;
            at++;
        } else if (c >= 0x80) {
            int more = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
            int i;
            if (more < 0 || n - at <= (size_t)more)
                return -1;
            c &= more == 1 ? 0x1F : more == 2 ? 0x0F : 0x07;
            for (i = 1; i <= more; i++) {
                if ((s[at + i] & 0xC0) != 0x80)
                    return -1;
                c = (c << 6) | (s[at + i] & 0x3F);
            }
            if ((more == 2 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) || (more == 3 && (c < 0x10000 || c > 0x10FFFF)))
                return -1;
            out[w++] = c;
            at += (size_t)more + 1;
        } else {                                             /* an escape */
            if (++at >= n)
                return -1;
            switch (s[at]) {
            case 'u': {
                long u = json_hex4(s, n, at + 1), low;
                if (u < 0)
                    return -1;
                at += 4;
                if (u >= 0xDC00 && u <= 0xDFFF)
                    return -1;                               /* a lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (n - at < 7 || s[at + 1] != '\\' || s[at + 2] != 'u')
                        return -1;                           /* a lone high surrogate */
                    low = json_hex4(s, n, at + 3);
                    if (low < 0xDC00 || low > 0xDFFF)
                        return -1;
                    u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
                    at += 6;
                }
                c = (uint32_t)u;
                break;
            }
            default:
                if ((e = json_short_escape(s[at])) < 0)
                    return -1;
                c = (uint32_t)e;
            }
            out[w++] = c;
            at++;
        }
    }
    return -1;
}

static ptrdiff_t json_number_end(const uint8_t *s, size_t n, size_t at)
{
    /* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
    size_t start;
    if (at < n && s[at] == '-')
        at++;
    if (at >= n || s[at] < '0' || s[at] > '9')
        return -1;
    if (s[at] == '0')
        at++;
    else
        while (at < n && s[at] >= '0' && s[at] <= '9')
            at++;
    if (at < n && s[at] == '.') {
        start = ++at;
        while (at < n && s[at] >= '0' && s[at] <= '9')
            at++;
        if (at == start)
            return -1;
    }
    if (at < n && (s[at] == 'e' || s[at] == 'E')) {
        at++;
        if (at < n && (s[at] == '+' || s[at] == '-'))
            at++;
        start = at;
        while (at < n && s[at] >= '0' && s[at] <= '9')
            at++;
        if (at == start)
            return -1;
    }
    return (ptrdiff_t)at;
}

static ptrdiff_t json_value_end(const uint8_t *s, size_t n, size_t at)
{
    /* An explicit stack of the open containers ('{' or '['): no recursion on deep input. After a
     * value inside a container comes ',' (then another member) or the container's end. */
    char open[JSON_MAX_DEPTH];
    int depth = 0;
    ptrdiff_t end;
    for (;;) {
        at = json_space(s, n, at);
        if (at >= n)
            return -1;
        switch (s[at]) {
        case '{':
        case '[':
            if (depth == JSON_MAX_DEPTH)
                return -1;
            open[depth++] = (char)s[at];
            at = json_space(s, n, at + 1);
            if (at < n && s[at] == (open[depth - 1] == '{' ? '}' : ']')) {
                depth--;
                at++;
                goto after_value;
            }
            if (open[depth - 1] == '{')
                goto member;
            continue;
        case '"':
            end = json_string_end(s, n, at);
            break;
        case 't':
            end = n - at >= 4 && memcmp(s + at, "true", 4) == 0 ? (ptrdiff_t)(at + 4) : -1;
            break;
        case 'f':
            end = n - at >= 5 && memcmp(s + at, "false", 5) == 0 ? (ptrdiff_t)(at + 5) : -1;
            break;
        case 'n':
            end = n - at >= 4 && memcmp(s + at, "null", 4) == 0 ? (ptrdiff_t)(at + 4) : -1;
            break;
        default:
            end = json_number_end(s, n, at);
        }
        if (end < 0)
            return -1;
        at = (size_t)end;
    after_value:
        for (;;) {
            if (depth == 0)
                return (ptrdiff_t)at;
            at = json_space(s, n, at);
            if (at >= n)
                return -1;
            if (s[at] == ',') {
                at++;
                if (open[depth - 1] == '{') {
                    at = json_space(s, n, at);
                    goto member;
                }
                break;                                       /* the next element */
            }
            if (s[at] != (open[depth - 1] == '{' ? '}' : ']'))
                return -1;
            depth--;
            at++;
        }
        continue;
    member:                                                  /* "key" : then the value */
        end = json_string_end(s, n, at);
        if (end < 0)
            return -1;
        at = json_space(s, n, (size_t)end);
        if (at >= n || s[at] != ':')
            return -1;
        at++;
    }
}

#endif
