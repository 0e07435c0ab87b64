/* The JSON reader and writer of capsule_json.h, natively: `cc -std=c99 -Wall -Werror`. */
#define CAPSULE_JSON_IMPLEMENTATION
#include "../capsule_json.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static capsule_json *parse(const char *text) { return capsule_json_parse(text, strlen(text)); }

int main(void) {
    capsule_json *v = parse(" {\"a\": [1, -2.5e1, true, null], \"s\": \"x\\n\\u00e9\\ud83d\\ude00\\\"\", \"a\": {}} ");
    assert(v && v->type == CAPSULE_JSON_OBJECT && capsule_json_count(v) == 3);
    const capsule_json *a = capsule_json_get(v, "a");
    assert(a && a->type == CAPSULE_JSON_OBJECT); /* the last duplicate wins */
    assert(strcmp(capsule_json_string(capsule_json_get(v, "s"), ""), "x\n\xc3\xa9\xf0\x9f\x98\x80\"") == 0);
    assert(capsule_json_get(v, "missing") == NULL && capsule_json_number(NULL, 7) == 7);
    capsule_json_free(v);

    v = parse("[1, -2.5e1, true, null, \"\"]");
    assert(capsule_json_number(capsule_json_at(v, 1), 0) == -25 && capsule_json_bool(capsule_json_at(v, 2), false));
    assert(capsule_json_at(v, 3)->type == CAPSULE_JSON_NULL && capsule_json_at(v, 5) == NULL);
    assert(strcmp(capsule_json_string(capsule_json_at(v, 4), "?"), "") == 0);
    capsule_json_free(v);

    /* JSON sets no limit on a number's digits: a long literal is a number, not a failure. */
    v = parse("{\"pi\":3.14159265358979323846264338327950288419716939937510582097494459230781640628,\"b\":1}");
    assert(v && capsule_json_number(capsule_json_get(v, "pi"), 0) > 3.14159 &&
           capsule_json_number(capsule_json_get(v, "b"), 0) == 1);
    capsule_json_free(v);

    const char *bad[] = {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\\x\"", "\"\\ud800\"", "tru", "1 2",
                         "\"a\tb\"", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                         "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) assert(parse(bad[i]) == NULL);

    capsule_buf out = {0};
    capsule_buf_printf(&out, "{\"n\":%d,\"s\":", 42);
    capsule_buf_json_string(&out, "q\"\\\n\x01");
    capsule_buf_append(&out, "}", 1);
    assert(strcmp(out.data, "{\"n\":42,\"s\":\"q\\\"\\\\\\n\\u0001\"}") == 0);
    v = capsule_json_parse(out.data, out.len);
    assert(v && strcmp(capsule_json_string(capsule_json_get(v, "s"), ""), "q\"\\\n\x01") == 0);
    capsule_json_free(v);
    capsule_buf_free(&out);
    puts("capsule_json: all checks passed");
    return 0;
}
