/*
 * capsule_json.h: the JSON a Capsule plugin reads (tool arguments, already checked against
 * the tool's schema by the host) and writes (structured output, schemas), in plain C99.
 *
 * Reading: parse once into a tree, then look values up.
 *
 *     capsule_json *args = capsule_json_parse(text, len);
 *     const char *name = capsule_json_string(capsule_json_get(args, "name"), "world");
 *     double n = capsule_json_number(capsule_json_get(args, "n"), 0);
 *     capsule_json_free(args);
 *
 * Writing: append to a growing buffer; strings are escaped for you.
 *
 *     capsule_buf out = {0};
 *     capsule_buf_printf(&out, "{\"words\":%d,\"longest\":", words);
 *     capsule_buf_json_string(&out, longest);
 *     capsule_buf_append(&out, "}", 1);
 *     ... out.data, out.len ...; capsule_buf_free(&out);
 *
 * Define CAPSULE_JSON_IMPLEMENTATION in exactly one .c file before including this header.
 * C++ includes it as it is (the declarations have C linkage); the implementation is C.
 */
#ifndef CAPSULE_JSON_H
#define CAPSULE_JSON_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CAPSULE_JSON_NULL,
    CAPSULE_JSON_BOOL,
    CAPSULE_JSON_NUMBER,
    CAPSULE_JSON_STRING,
    CAPSULE_JSON_ARRAY,
    CAPSULE_JSON_OBJECT,
} capsule_json_type;

/* A JSON value. Arrays and objects hold `count` children in `items` (objects also `keys`). */
typedef struct capsule_json {
    capsule_json_type type;
    bool boolean;
    double number;
    char *string; /* NUL-terminated UTF-8; may contain NUL escaped as \u0000 (see length) */
    size_t length;
    size_t count;
    char **keys;
    struct capsule_json *items;
} capsule_json;

/* Parse `len` bytes of JSON text; NULL if it is not valid JSON (or memory ran out). */
capsule_json *capsule_json_parse(const char *text, size_t len);
void capsule_json_free(capsule_json *value);

/* The member `key` of an object; NULL if `object` is not an object or has no such member. */
const capsule_json *capsule_json_get(const capsule_json *object, const char *key);
/* Element `index` of an array; NULL if out of range or not an array. */
const capsule_json *capsule_json_at(const capsule_json *array, size_t index);
/* Elements of an array, members of an object, 0 for anything else (or NULL). */
size_t capsule_json_count(const capsule_json *value);

/* The value as a C type, or `fallback` when it is missing (NULL) or of another type. */
const char *capsule_json_string(const capsule_json *value, const char *fallback);
double capsule_json_number(const capsule_json *value, double fallback);
bool capsule_json_bool(const capsule_json *value, bool fallback);

/* A growing byte buffer (zero-initialise it). Appends abort the plugin if memory runs out:
 * the host reports that as the call's failure. */
typedef struct {
    char *data; /* NUL-terminated */
    size_t len;
    size_t cap;
} capsule_buf;

void capsule_buf_append(capsule_buf *buf, const char *bytes, size_t len);
void capsule_buf_printf(capsule_buf *buf, const char *format, ...);
/* Append `text` as a JSON string literal, quotes and escapes included. */
void capsule_buf_json_string(capsule_buf *buf, const char *text);
void capsule_buf_free(capsule_buf *buf);

#ifdef __cplusplus
}
#endif

#ifdef CAPSULE_JSON_IMPLEMENTATION
#ifdef __cplusplus
#error "the capsule_json implementation is C: define CAPSULE_JSON_IMPLEMENTATION in a .c file"
#endif

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *at;
    const char *end;
    int depth;
} capsule_json_reader;

/* Deeper nesting than this is refused rather than recursed into. */
#define CAPSULE_JSON_MAX_DEPTH 128

static void capsule_json_skip(capsule_json_reader *r) {
    while (r->at < r->end && (*r->at == ' ' || *r->at == '\t' || *r->at == '\n' || *r->at == '\r')) r->at++;
}

static bool capsule_json_value(capsule_json_reader *r, capsule_json *out);

static int capsule_json_hex(capsule_json_reader *r) {
    if (r->end - r->at < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *r->at++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

static void capsule_json_utf8(capsule_buf *b, unsigned long cp) {
    char out[4];
    size_t n;
    if (cp < 0x80) { out[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    capsule_buf_append(b, out, n);
}

/* A string literal (the reader is at its opening quote) into a fresh NUL-terminated copy. */
static bool capsule_json_string_literal(capsule_json_reader *r, char **out, size_t *len) {
    capsule_buf b = {0};
    r->at++;
    while (r->at < r->end && *r->at != '"') {
        unsigned char c = (unsigned char)*r->at;
        if (c < 0x20) goto fail;
        if (c != '\\') {
            const char *run = r->at;
            while (r->at < r->end && *r->at != '"' && *r->at != '\\' && (unsigned char)*r->at >= 0x20) r->at++;
            capsule_buf_append(&b, run, (size_t)(r->at - run));
            continue;
        }
        r->at++;
        if (r->at >= r->end) goto fail;
        char e = *r->at++;
        switch (e) {
        case '"': capsule_buf_append(&b, "\"", 1); break;
        case '\\': capsule_buf_append(&b, "\\", 1); break;
        case '/': capsule_buf_append(&b, "/", 1); break;
        case 'b': capsule_buf_append(&b, "\b", 1); break;
        case 'f': capsule_buf_append(&b, "\f", 1); break;
        case 'n': capsule_buf_append(&b, "\n", 1); break;
        case 'r': capsule_buf_append(&b, "\r", 1); break;
        case 't': capsule_buf_append(&b, "\t", 1); break;
        case 'u': {
            int hi = capsule_json_hex(r);
            if (hi < 0) goto fail;
            unsigned long cp = (unsigned long)hi;
            if (hi >= 0xD800 && hi <= 0xDBFF) {
                if (r->end - r->at < 6 || r->at[0] != '\\' || r->at[1] != 'u') goto fail;
                r->at += 2;
                int lo = capsule_json_hex(r);
                if (lo < 0xDC00 || lo > 0xDFFF) goto fail;
                cp = 0x10000 + (((unsigned long)hi - 0xD800) << 10) + ((unsigned long)lo - 0xDC00);
            } else if (hi >= 0xDC00 && hi <= 0xDFFF) {
                goto fail;
            }
            capsule_json_utf8(&b, cp);
            break;
        }
        default: goto fail;
        }
    }
    if (r->at >= r->end) goto fail;
    r->at++;
    if (!b.data) capsule_buf_append(&b, "", 0);
    *out = b.data;
    *len = b.len;
    return true;
fail:
    capsule_buf_free(&b);
    return false;
}

static bool capsule_json_push(capsule_json *container, capsule_json *item, char *key) {
    if ((container->count & (container->count - 1)) == 0) { /* grow at powers of two */
        size_t cap = container->count ? container->count * 2 : 4;
        capsule_json *items = realloc(container->items, cap * sizeof *items);
        if (!items) return false;
        container->items = items;
        if (container->type == CAPSULE_JSON_OBJECT) {
            char **keys = realloc(container->keys, cap * sizeof *keys);
            if (!keys) return false;
            container->keys = keys;
        }
    }
    container->items[container->count] = *item;
    if (container->type == CAPSULE_JSON_OBJECT) container->keys[container->count] = key;
    container->count++;
    return true;
}

static void capsule_json_release(capsule_json *v) {
    for (size_t i = 0; i < v->count; i++) {
        capsule_json_release(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
}

static bool capsule_json_literal(capsule_json_reader *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->at) < n || memcmp(r->at, word, n) != 0) return false;
    r->at += n;
    return true;
}

static bool capsule_json_value(capsule_json_reader *r, capsule_json *out) {
    memset(out, 0, sizeof *out);
    capsule_json_skip(r);
    if (r->at >= r->end) return false;
    char c = *r->at;
    if (c == '{' || c == '[') {
        if (++r->depth > CAPSULE_JSON_MAX_DEPTH) return false;
        out->type = c == '{' ? CAPSULE_JSON_OBJECT : CAPSULE_JSON_ARRAY;
        char close = c == '{' ? '}' : ']';
        r->at++;
        capsule_json_skip(r);
        if (r->at < r->end && *r->at == close) { r->at++; r->depth--; return true; }
        for (;;) {
            char *key = NULL;
            size_t key_len;
            capsule_json_skip(r);
            if (out->type == CAPSULE_JSON_OBJECT) {
                if (r->at >= r->end || *r->at != '"' || !capsule_json_string_literal(r, &key, &key_len)) goto fail;
                capsule_json_skip(r);
                if (r->at >= r->end || *r->at != ':') { free(key); goto fail; }
                r->at++;
            }
            capsule_json item;
            if (!capsule_json_value(r, &item)) { capsule_json_release(&item); free(key); goto fail; }
            if (!capsule_json_push(out, &item, key)) { capsule_json_release(&item); free(key); goto fail; }
            capsule_json_skip(r);
            if (r->at < r->end && *r->at == ',') { r->at++; continue; }
            if (r->at < r->end && *r->at == close) { r->at++; r->depth--; return true; }
            goto fail;
        }
    fail:
        capsule_json_release(out);
        memset(out, 0, sizeof *out);
        return false;
    }
    if (c == '"') {
        out->type = CAPSULE_JSON_STRING;
        return capsule_json_string_literal(r, &out->string, &out->length);
    }
    if (capsule_json_literal(r, "true")) { out->type = CAPSULE_JSON_BOOL; out->boolean = true; return true; }
    if (capsule_json_literal(r, "false")) { out->type = CAPSULE_JSON_BOOL; return true; }
    if (capsule_json_literal(r, "null")) { out->type = CAPSULE_JSON_NULL; return true; }
    /* A number: check the JSON grammar, then let strtod convert the checked text. */
    const char *start = r->at;
    if (r->at < r->end && *r->at == '-') r->at++;
    if (r->at >= r->end || *r->at < '0' || *r->at > '9') return false;
    if (*r->at == '0') r->at++;
    else while (r->at < r->end && *r->at >= '0' && *r->at <= '9') r->at++;
    if (r->at < r->end && *r->at == '.') {
        r->at++;
        if (r->at >= r->end || *r->at < '0' || *r->at > '9') return false;
        while (r->at < r->end && *r->at >= '0' && *r->at <= '9') r->at++;
    }
    if (r->at < r->end && (*r->at == 'e' || *r->at == 'E')) {
        r->at++;
        if (r->at < r->end && (*r->at == '+' || *r->at == '-')) r->at++;
        if (r->at >= r->end || *r->at < '0' || *r->at > '9') return false;
        while (r->at < r->end && *r->at >= '0' && *r->at <= '9') r->at++;
    }
    /* strtod needs a terminated copy; a literal longer than the stack's room (JSON sets no
     * limit on digits) gets one on the heap. */
    char digits[64], *text = digits;
    size_t n = (size_t)(r->at - start);
    if (n >= sizeof digits && !(text = malloc(n + 1))) return false;
    memcpy(text, start, n);
    text[n] = '\0';
    out->type = CAPSULE_JSON_NUMBER;
    out->number = strtod(text, NULL);
    if (text != digits) free(text);
    return true;
}

capsule_json *capsule_json_parse(const char *text, size_t len) {
    capsule_json_reader r = {text, text + len, 0};
    capsule_json *value = malloc(sizeof *value);
    if (!value) return NULL;
    if (!capsule_json_value(&r, value)) { free(value); return NULL; }
    capsule_json_skip(&r);
    if (r.at != r.end) { capsule_json_free(value); return NULL; }
    return value;
}

void capsule_json_free(capsule_json *value) {
    if (!value) return;
    capsule_json_release(value);
    free(value);
}

const capsule_json *capsule_json_get(const capsule_json *object, const char *key) {
    if (!object || object->type != CAPSULE_JSON_OBJECT) return NULL;
    for (size_t i = object->count; i-- > 0;) /* the last duplicate wins, as in most parsers */
        if (strcmp(object->keys[i], key) == 0) return &object->items[i];
    return NULL;
}

const capsule_json *capsule_json_at(const capsule_json *array, size_t index) {
    if (!array || array->type != CAPSULE_JSON_ARRAY || index >= array->count) return NULL;
    return &array->items[index];
}

size_t capsule_json_count(const capsule_json *value) {
    return value && (value->type == CAPSULE_JSON_ARRAY || value->type == CAPSULE_JSON_OBJECT) ? value->count : 0;
}

const char *capsule_json_string(const capsule_json *value, const char *fallback) {
    return value && value->type == CAPSULE_JSON_STRING ? value->string : fallback;
}

double capsule_json_number(const capsule_json *value, double fallback) {
    return value && value->type == CAPSULE_JSON_NUMBER ? value->number : fallback;
}

bool capsule_json_bool(const capsule_json *value, bool fallback) {
    return value && value->type == CAPSULE_JSON_BOOL ? value->boolean : fallback;
}

/* Room for `extra` more bytes and the terminating NUL. */
static void capsule_buf_reserve(capsule_buf *buf, size_t extra) {
    if (buf->len + extra + 1 <= buf->cap) return;
    size_t cap = buf->cap ? buf->cap : 64;
    while (cap < buf->len + extra + 1) cap *= 2;
    char *data = realloc(buf->data, cap);
    if (!data) abort();
    buf->data = data;
    buf->cap = cap;
}

void capsule_buf_append(capsule_buf *buf, const char *bytes, size_t len) {
    capsule_buf_reserve(buf, len);
    if (len) memcpy(buf->data + buf->len, bytes, len);
    buf->len += len;
    buf->data[buf->len] = '\0';
}

void capsule_buf_printf(capsule_buf *buf, const char *format, ...) {
    va_list args;
    va_start(args, format);
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, format, args);
    va_end(args);
    if (n < 0) abort();
    capsule_buf_reserve(buf, (size_t)n);
    vsnprintf(buf->data + buf->len, (size_t)n + 1, format, again);
    va_end(again);
    buf->len += (size_t)n;
}

void capsule_buf_json_string(capsule_buf *buf, const char *text) {
    static const char hex[] = "0123456789abcdef";
    capsule_buf_append(buf, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        const unsigned char *run = p;
        while (*p && *p != '"' && *p != '\\' && *p >= 0x20) p++;
        capsule_buf_append(buf, (const char *)run, (size_t)(p - run));
        if (!*p) break;
        char esc[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
        if (*p == '"') capsule_buf_append(buf, "\\\"", 2);
        else if (*p == '\\') capsule_buf_append(buf, "\\\\", 2);
        else if (*p == '\n') capsule_buf_append(buf, "\\n", 2);
        else if (*p == '\t') capsule_buf_append(buf, "\\t", 2);
        else capsule_buf_append(buf, esc, 6);
    }
    capsule_buf_append(buf, "\"", 1);
}

void capsule_buf_free(capsule_buf *buf) {
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

#endif /* CAPSULE_JSON_IMPLEMENTATION */
#endif /* CAPSULE_JSON_H */
