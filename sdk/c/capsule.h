/*
 * capsule.h: Capsule plugins in C (and C++), over the `wit-bindgen c` bindings of the
 * `plugin` world (plugin.h). A plugin is four tables and plain handler functions; this header
 * implements every WIT export on top of them, with the memory rules of the canonical ABI
 * (arguments freed, results heap-copied) taken care of.
 *
 *     static void add(capsule_call *call) {
 *         double a = capsule_arg_number(call, "a", 0), b = capsule_arg_number(call, "b", 0);
 *         capsule_structuredf(call, "{\"sum\":%.17g}", a + b);
 *     }
 *     static const capsule_tool TOOLS[] = {{
 *         .name = "add", .description = "Add two numbers",
 *         .input_schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},"
 *                         "\"b\":{\"type\":\"number\"}},\"required\":[\"a\",\"b\"]}",
 *         .output_schema = "{\"type\":\"object\",\"properties\":{\"sum\":{\"type\":\"number\"}}}",
 *         .handler = add,
 *     }};
 *     CAPSULE_PLUGIN(TOOLS, CAPSULE_NONE, CAPSULE_NONE, NULL);
 *
 * Define CAPSULE_IMPLEMENTATION in exactly one .c file before including this header. Files
 * in granted directories are read and written with stdio as usual (fopen on the paths the
 * host mounts); nothing else exists.
 *
 * C++ sources include this header as it is (C linkage) and do not define
 * CAPSULE_IMPLEMENTATION: `capsule-c build` compiles the implementation as C beside them.
 * CAPSULE_PLUGIN then needs C++20 for designated initializers, or positional ones.
 */
#ifndef CAPSULE_H
#define CAPSULE_H

#include <stdbool.h>
#include <stddef.h>

#include "capsule_json.h"
#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One request being served: a tool call, a resource read, a prompt rendering or a
 * completion. Handlers read their arguments from it and put their answer in it. */
typedef struct capsule_call capsule_call;
typedef void (*capsule_handler)(capsule_call *call);

typedef struct {
    const char *name;
    const char *title;
    const char *description;
    const char *input_schema;  /* JSON Schema of the arguments (an object schema) */
    const char *output_schema; /* JSON Schema of the structured output, or NULL */
    capsule_handler handler;
    bool read_only, destructive, idempotent;
} capsule_tool;

/* A resource, or a template when the URI has {variables} (levels 1-2: {var}, {+var},
 * {#var}); the handler reads the variables as string arguments. */
typedef struct {
    const char *uri;
    const char *name;
    const char *description;
    const char *mime_type;
    capsule_handler handler;
} capsule_resource;

typedef struct {
    const char *name;
    const char *description;
    bool required;
} capsule_prompt_argument;

typedef struct {
    const char *name;
    const char *description;
    const capsule_prompt_argument *arguments; /* ends with an entry whose name is NULL */
    capsule_handler handler;
} capsule_prompt;

/* Completion: `kind` is "prompt" or "template", `target` its name or URI template; call
 * capsule_suggest for each value, best first. */
typedef void (*capsule_completer)(capsule_call *call, const char *kind, const char *target, const char *argument,
                                  const char *value);

typedef struct {
    const capsule_tool *tools;
    size_t tool_count;
    const capsule_resource *resources;
    size_t resource_count;
    const capsule_prompt *prompts;
    size_t prompt_count;
    capsule_completer complete;
} capsule_plugin;

/* The plugin's tables, in the file that defines CAPSULE_IMPLEMENTATION:
 *     CAPSULE_PLUGIN(CAPSULE_TABLE(TOOLS), CAPSULE_TABLE(RESOURCES), CAPSULE_NONE, complete);
 * (tools, resources, prompts, then the completion function or NULL). */
#define CAPSULE_NONE NULL, 0
#define CAPSULE_TABLE(t) (t), (sizeof(t) / sizeof((t)[0]))
#define CAPSULE_PLUGIN(...) const capsule_plugin capsule_plugin_definition = {__VA_ARGS__}
/* Declared here so that the definition CAPSULE_PLUGIN makes has external C linkage in C++. */
extern const capsule_plugin capsule_plugin_definition;

/* Arguments: a tool's (checked against its schema by the host), a prompt's, or a template's
 * variables, as a JSON object. */
const capsule_json *capsule_args(capsule_call *call);
const char *capsule_arg_string(capsule_call *call, const char *key, const char *fallback);
double capsule_arg_number(capsule_call *call, const char *key, double fallback);
bool capsule_arg_bool(capsule_call *call, const char *key, bool fallback);
/* The URI being read (resources and templates). */
const char *capsule_uri(capsule_call *call);

/* Answers. Text: a tool result's content, a resource's body, a prompt's user message. */
void capsule_textf(capsule_call *call, const char *format, ...);
void capsule_text(capsule_call *call, const char *text);
/* A prompt message from the model. */
void capsule_assistant(capsule_call *call, const char *text);
/* A resource body of bytes. */
void capsule_blob(capsule_call *call, const void *data, size_t len);
/* A tool's structured output (JSON matching its output schema; also sent as text). */
void capsule_structured(capsule_call *call, const char *json);
void capsule_structuredf(capsule_call *call, const char *format, ...);
/* The request failed: a tool error the model sees, or the error of a read or prompt. */
void capsule_fail(capsule_call *call, const char *format, ...);
/* The named resource or prompt does not exist. */
void capsule_not_found(capsule_call *call, const char *format, ...);
/* A completion value. */
void capsule_suggest(capsule_call *call, const char *value);

/* Messages to the client. `level` is one of "debug" "info" "notice" "warning" "error"
 * "critical" "alert" "emergency". */
void capsule_log(capsule_call *call, const char *level, const char *format, ...);
void capsule_progress(capsule_call *call, double progress, double total, const char *message);
bool capsule_cancelled(capsule_call *call);

/* CAPSULE_INVALID: the client answered with an error or something unusable (or never
 * answered); asking again would get the same. */
typedef enum { CAPSULE_ACCEPT, CAPSULE_DECLINE, CAPSULE_CANCEL, CAPSULE_INVALID } capsule_action;
typedef struct {
    capsule_action action;
    const capsule_json *content; /* the submitted values when accepted; owned by the call */
} capsule_elicited;

/* Ask the user to fill a form (a flat JSON Schema object). Works by replay: if the answer is
 * here, fills `out` and returns true; otherwise the call now asks the client and returns
 * false, and the handler must return at once. When the client has answered, the host calls
 * the handler again from the top, and this time it returns true. `key` names the question
 * (distinct per question in one handler). Questions may follow one another: the answers of
 * earlier rounds travel in the round's state. */
bool capsule_elicit(capsule_call *call, const char *key, const char *message, const char *schema,
                    capsule_elicited *out);

#ifdef __cplusplus
}
#endif

#ifdef CAPSULE_IMPLEMENTATION
#ifdef __cplusplus
#error "the capsule.h implementation is C: capsule-c build compiles it beside C++ sources"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum capsule_kind { CAPSULE_TOOL, CAPSULE_READ, CAPSULE_PROMPT, CAPSULE_COMPLETE };

struct capsule_call {
    enum capsule_kind kind;
    capsule_json *args;
    const char *uri;
    capsule_plugin_types_request_context_t *context;
    /* The answer being built. */
    capsule_plugin_types_content_t *content;
    capsule_plugin_types_role_t *roles;
    size_t content_len;
    plugin_string_t structured;
    bool has_structured;
    int error; /* -1 none, else a CAPSULE_PLUGIN_TYPES_ERROR_* tag */
    plugin_string_t error_message;
    capsule_plugin_types_keyed_input_request_t *asks;
    size_t ask_len;
    plugin_string_t *suggestions;
    size_t suggestion_len;
    capsule_json **answers; /* elicited content to free at the end */
    size_t answer_len;
    capsule_json *carried; /* the state of earlier rounds: {"capsule-answers": 1, "answers": {key: answer}} */
};

static void *capsule_grow(void *items, size_t len, size_t size) {
    /* Room for one more item; capacity doubles at powers of two. */
    if (len & (len - 1) && len) return items;
    void *grown = realloc(items, (len ? len * 2 : 1) * size);
    if (!grown) abort();
    return grown;
}

static char *capsule_vformat(const char *format, va_list args) {
    va_list copy;
    va_copy(copy, args);
    int n = vsnprintf(NULL, 0, format, copy);
    va_end(copy);
    if (n < 0) abort();
    char *text = malloc((size_t)n + 1);
    if (!text) abort();
    vsnprintf(text, (size_t)n + 1, format, args);
    return text;
}

/* A heap string the canonical ABI frees after the call (post-return). */
static plugin_string_t capsule_owned(const char *text) {
    plugin_string_t s;
    plugin_string_dup(&s, text);
    return s;
}

static plugin_option_string_t capsule_maybe(const char *text) {
    plugin_option_string_t o = {0};
    if (text) {
        o.is_some = true;
        o.val = capsule_owned(text);
    }
    return o;
}

static char *capsule_cstr(const plugin_string_t *s) {
    char *c = malloc(s->len + 1);
    if (!c) abort();
    memcpy(c, s->ptr, s->len);
    c[s->len] = '\0';
    return c;
}

static bool capsule_is(const plugin_string_t *s, const char *text) {
    size_t n = strlen(text);
    return s->len == n && memcmp(s->ptr, text, n) == 0;
}

const capsule_json *capsule_args(capsule_call *call) { return call->args; }
const char *capsule_arg_string(capsule_call *call, const char *key, const char *fallback) {
    return capsule_json_string(capsule_json_get(call->args, key), fallback);
}
double capsule_arg_number(capsule_call *call, const char *key, double fallback) {
    return capsule_json_number(capsule_json_get(call->args, key), fallback);
}
bool capsule_arg_bool(capsule_call *call, const char *key, bool fallback) {
    return capsule_json_bool(capsule_json_get(call->args, key), fallback);
}
const char *capsule_uri(capsule_call *call) { return call->uri; }

static void capsule_push(capsule_call *call, capsule_plugin_types_content_t item, capsule_plugin_types_role_t role) {
    call->content = capsule_grow(call->content, call->content_len, sizeof *call->content);
    call->roles = capsule_grow(call->roles, call->content_len, sizeof *call->roles);
    call->content[call->content_len] = item;
    call->roles[call->content_len++] = role;
}

void capsule_text(capsule_call *call, const char *text) {
    capsule_plugin_types_content_t item = {.tag = CAPSULE_PLUGIN_TYPES_CONTENT_TEXT};
    item.val.text = capsule_owned(text);
    capsule_push(call, item, CAPSULE_PLUGIN_TYPES_ROLE_USER);
}

void capsule_textf(capsule_call *call, const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *text = capsule_vformat(format, args);
    va_end(args);
    capsule_text(call, text);
    free(text);
}

void capsule_assistant(capsule_call *call, const char *text) {
    capsule_text(call, text);
    call->roles[call->content_len - 1] = CAPSULE_PLUGIN_TYPES_ROLE_ASSISTANT;
}

void capsule_blob(capsule_call *call, const void *data, size_t len) {
    /* Carried as an image item internally; only a read turns it into a blob body. */
    capsule_plugin_types_content_t item = {.tag = CAPSULE_PLUGIN_TYPES_CONTENT_IMAGE};
    item.val.image.data.ptr = malloc(len ? len : 1);
    if (!item.val.image.data.ptr) abort();
    memcpy(item.val.image.data.ptr, data, len);
    item.val.image.data.len = len;
    item.val.image.mime_type = capsule_owned("application/octet-stream");
    capsule_push(call, item, CAPSULE_PLUGIN_TYPES_ROLE_USER);
}

void capsule_structured(capsule_call *call, const char *json) {
    if (call->has_structured) plugin_string_free(&call->structured);
    call->structured = capsule_owned(json);
    call->has_structured = true;
    capsule_text(call, json);
}

void capsule_structuredf(capsule_call *call, const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *json = capsule_vformat(format, args);
    va_end(args);
    capsule_structured(call, json);
    free(json);
}

static void capsule_error(capsule_call *call, int tag, const char *format, va_list args) {
    if (call->error >= 0) plugin_string_free(&call->error_message);
    char *text = capsule_vformat(format, args);
    call->error = tag;
    call->error_message = capsule_owned(text);
    free(text);
}

void capsule_fail(capsule_call *call, const char *format, ...) {
    va_list args;
    va_start(args, format);
    capsule_error(call, CAPSULE_PLUGIN_TYPES_ERROR_FAILED, format, args);
    va_end(args);
}

void capsule_not_found(capsule_call *call, const char *format, ...) {
    va_list args;
    va_start(args, format);
    capsule_error(call, CAPSULE_PLUGIN_TYPES_ERROR_NOT_FOUND, format, args);
    va_end(args);
}

void capsule_suggest(capsule_call *call, const char *value) {
    call->suggestions = capsule_grow(call->suggestions, call->suggestion_len, sizeof *call->suggestions);
    call->suggestions[call->suggestion_len++] = capsule_owned(value);
}

void capsule_log(capsule_call *call, const char *level, const char *format, ...) {
    static const char *levels[] = {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"};
    capsule_plugin_host_log_level_t found = CAPSULE_PLUGIN_HOST_LOG_LEVEL_INFO;
    for (size_t i = 0; i < sizeof levels / sizeof *levels; i++)
        if (strcmp(levels[i], level) == 0) found = (capsule_plugin_host_log_level_t)i;
    va_list args;
    va_start(args, format);
    char *text = capsule_vformat(format, args);
    va_end(args);
    plugin_string_t message;
    plugin_string_set(&message, text);
    capsule_plugin_host_log(found, NULL, &message);
    free(text);
    (void)call;
}

void capsule_progress(capsule_call *call, double progress, double total, const char *message) {
    plugin_string_t text;
    if (message) plugin_string_set(&text, message);
    capsule_plugin_host_progress(progress, &total, message ? &text : NULL);
    (void)call;
}

bool capsule_cancelled(capsule_call *call) {
    (void)call;
    return capsule_plugin_host_cancelled();
}

/* The answer to `key` in this round's responses: an elicitation's or an unusable one. */
static const capsule_plugin_types_input_response_t *capsule_response(capsule_call *call, const char *key) {
    capsule_plugin_types_list_keyed_input_response_t *responses = &call->context->responses;
    for (size_t i = 0; i < responses->len; i++) {
        capsule_plugin_types_keyed_input_response_t *r = &responses->ptr[i];
        if (!capsule_is(&r->key, key)) continue;
        if (r->response.tag == CAPSULE_PLUGIN_TYPES_INPUT_RESPONSE_ELICITATION ||
            r->response.tag == CAPSULE_PLUGIN_TYPES_INPUT_RESPONSE_INVALID)
            return &r->response;
    }
    return NULL;
}

/* `out` from an action and the submitted values' JSON text (NULL when none). */
static void capsule_elicited_from(capsule_call *call, capsule_action action, const char *text, size_t len,
                                  capsule_elicited *out) {
    out->action = action;
    out->content = NULL;
    if (action == CAPSULE_ACCEPT && text) {
        capsule_json *content = capsule_json_parse(text, len);
        call->answers = capsule_grow(call->answers, call->answer_len, sizeof *call->answers);
        call->answers[call->answer_len++] = content;
        out->content = content;
    }
}

bool capsule_elicit(capsule_call *call, const char *key, const char *message, const char *schema,
                    capsule_elicited *out) {
    if (!call->context) return false; /* a completion cannot ask */
    const capsule_plugin_types_input_response_t *r = capsule_response(call, key);
    if (r && r->tag == CAPSULE_PLUGIN_TYPES_INPUT_RESPONSE_INVALID) {
        capsule_elicited_from(call, CAPSULE_INVALID, NULL, 0, out);
        return true;
    }
    if (r) {
        const capsule_plugin_types_elicit_response_t *e = &r->val.elicitation;
        bool has = e->content.is_some;
        capsule_elicited_from(call, (capsule_action)e->action, has ? (const char *)e->content.val.ptr : NULL,
                              has ? e->content.val.len : 0, out);
        return true;
    }
    const capsule_json *earlier = capsule_json_get(capsule_json_get(call->carried, "answers"), key);
    if (earlier) {
        const capsule_json *content = capsule_json_get(earlier, "content");
        const char *text = capsule_json_string(content, NULL);
        double action = capsule_json_number(capsule_json_get(earlier, "action"), CAPSULE_INVALID);
        capsule_action a = action >= CAPSULE_ACCEPT && action <= CAPSULE_INVALID ? (capsule_action)action : CAPSULE_INVALID;
        capsule_elicited_from(call, a, text, text ? content->length : 0, out);
        return true;
    }
    capsule_plugin_types_keyed_input_request_t ask = {0};
    ask.key = capsule_owned(key);
    ask.request.tag = CAPSULE_PLUGIN_TYPES_INPUT_REQUEST_ELICIT_FORM;
    ask.request.val.elicit_form.message = capsule_owned(message);
    ask.request.val.elicit_form.requested_schema = capsule_owned(schema);
    call->asks = capsule_grow(call->asks, call->ask_len, sizeof *call->asks);
    call->asks[call->ask_len++] = ask;
    return false;
}

/* Run `handler` on a fresh call; the caller turns the call into the export's result. */
static void capsule_run(capsule_call *call, enum capsule_kind kind, capsule_json *args,
                        capsule_plugin_types_request_context_t *context, capsule_handler handler, const char *uri) {
    memset(call, 0, sizeof *call);
    call->kind = kind;
    call->uri = uri;
    call->args = args;
    call->context = context;
    call->error = -1;
    if (!call->args) call->args = capsule_json_parse("{}", 2);
    if (context && context->state.is_some) {
        capsule_json *state = capsule_json_parse((const char *)context->state.val.ptr, context->state.val.len);
        if (capsule_json_number(capsule_json_get(state, "capsule-answers"), 0) == 1) {
            const capsule_json *answers = capsule_json_get(state, "answers");
            if (answers && answers->type == CAPSULE_JSON_OBJECT) call->carried = state;
        }
        if (call->carried != state) capsule_json_free(state);
    }
    handler(call);
}

/* Release what the result did not take over. */
static void capsule_done(capsule_call *call, bool keep_content) {
    if (!keep_content) {
        for (size_t i = 0; i < call->content_len; i++) capsule_plugin_types_content_free(&call->content[i]);
        free(call->content);
        if (call->has_structured) plugin_string_free(&call->structured);
    }
    free(call->roles);
    if (call->error >= 0) plugin_string_free(&call->error_message);
    for (size_t i = 0; i < call->answer_len; i++) capsule_json_free(call->answers[i]);
    free(call->answers);
    capsule_json_free(call->carried);
    capsule_json_free(call->args);
}

/* One answer into the state being written: `"key":{"action":N,"content":"<JSON text>"}`. */
static void capsule_carry(capsule_buf *b, const char *key, int action, const char *content) {
    if (b->len > 0) capsule_buf_append(b, ",", 1);
    capsule_buf_json_string(b, key);
    capsule_buf_printf(b, ":{\"action\":%d,\"content\":", action);
    if (content)
        capsule_buf_json_string(b, content);
    else
        capsule_buf_append(b, "null", 4);
    capsule_buf_append(b, "}", 1);
}

/* The answers so far, this round's and the earlier ones, as the next round's state. */
static plugin_option_list_u8_t capsule_state(capsule_call *call) {
    capsule_buf answers = {0};
    capsule_plugin_types_list_keyed_input_response_t *responses = &call->context->responses;
    for (size_t i = 0; i < responses->len; i++) {
        capsule_plugin_types_keyed_input_response_t *r = &responses->ptr[i];
        char *key = capsule_cstr(&r->key);
        if (r->response.tag == CAPSULE_PLUGIN_TYPES_INPUT_RESPONSE_ELICITATION) {
            capsule_plugin_types_elicit_response_t *e = &r->response.val.elicitation;
            char *content = e->content.is_some ? capsule_cstr(&e->content.val) : NULL;
            capsule_carry(&answers, key, e->action, content);
            free(content);
        } else if (r->response.tag == CAPSULE_PLUGIN_TYPES_INPUT_RESPONSE_INVALID) {
            capsule_carry(&answers, key, CAPSULE_INVALID, NULL);
        }
        free(key);
    }
    const capsule_json *earlier = capsule_json_get(call->carried, "answers");
    for (size_t i = 0; i < capsule_json_count(earlier); i++) {
        if (capsule_response(call, earlier->keys[i])) continue; /* answered again this round */
        const capsule_json *a = &earlier->items[i];
        int action = (int)capsule_json_number(capsule_json_get(a, "action"), CAPSULE_INVALID);
        capsule_carry(&answers, earlier->keys[i], action, capsule_json_string(capsule_json_get(a, "content"), NULL));
    }
    plugin_option_list_u8_t state = {0};
    if (answers.len > 0) {
        capsule_buf b = {0};
        capsule_buf_printf(&b, "{\"capsule-answers\":1,\"answers\":{");
        capsule_buf_append(&b, answers.data, answers.len);
        capsule_buf_append(&b, "}}", 2);
        state.is_some = true;
        state.val.ptr = (uint8_t *)b.data; /* the canonical ABI frees it after the call */
        state.val.len = b.len;
    }
    capsule_buf_free(&answers);
    return state;
}

static capsule_plugin_types_input_required_t capsule_input_required(capsule_call *call) {
    capsule_plugin_types_input_required_t ir = {0};
    ir.requests.ptr = call->asks;
    ir.requests.len = call->ask_len;
    ir.state = capsule_state(call);
    return ir;
}

static capsule_json *capsule_parse_owned(plugin_string_t *s) {
    capsule_json *parsed = capsule_json_parse((const char *)s->ptr, s->len);
    plugin_string_free(s);
    return parsed;
}

/* Tuples of strings as a JSON object of strings. */
static capsule_json *capsule_tuples(plugin_list_tuple2_string_string_t *pairs) {
    capsule_buf b = {0};
    capsule_buf_append(&b, "{", 1);
    for (size_t i = 0; i < pairs->len; i++) {
        char *k = capsule_cstr(&pairs->ptr[i].f0), *v = capsule_cstr(&pairs->ptr[i].f1);
        if (i) capsule_buf_append(&b, ",", 1);
        capsule_buf_json_string(&b, k);
        capsule_buf_append(&b, ":", 1);
        capsule_buf_json_string(&b, v);
        free(k);
        free(v);
    }
    capsule_buf_append(&b, "}", 1);
    capsule_json *object = capsule_json_parse(b.data, b.len);
    capsule_buf_free(&b);
    plugin_list_tuple2_string_string_free(pairs);
    return object;
}

/* Tools. */

void exports_capsule_plugin_tools_list(exports_capsule_plugin_tools_list_tool_t *ret) {
    const capsule_plugin *p = &capsule_plugin_definition;
    ret->len = p->tool_count;
    ret->ptr = calloc(p->tool_count ? p->tool_count : 1, sizeof *ret->ptr);
    if (!ret->ptr) abort();
    for (size_t i = 0; i < p->tool_count; i++) {
        const capsule_tool *t = &p->tools[i];
        exports_capsule_plugin_tools_tool_t *out = &ret->ptr[i];
        out->name = capsule_owned(t->name);
        out->title = capsule_maybe(t->title);
        out->description = capsule_owned(t->description ? t->description : "");
        out->input_schema = capsule_owned(t->input_schema ? t->input_schema : "{\"type\":\"object\"}");
        out->output_schema.is_some = t->output_schema != NULL;
        if (t->output_schema) out->output_schema.val = capsule_owned(t->output_schema);
        if (t->read_only || t->destructive || t->idempotent) {
            out->annotations.is_some = true;
            out->annotations.val.read_only_hint = (plugin_option_bool_t){t->read_only, true};
            out->annotations.val.destructive_hint = (plugin_option_bool_t){t->destructive, true};
            out->annotations.val.idempotent_hint = (plugin_option_bool_t){t->idempotent, true};
        }
    }
}

bool exports_capsule_plugin_tools_call(plugin_string_t *name, exports_capsule_plugin_tools_json_t *arguments,
                                       exports_capsule_plugin_tools_request_context_t *context,
                                       exports_capsule_plugin_tools_call_outcome_t *ret,
                                       exports_capsule_plugin_tools_error_t *err) {
    const capsule_plugin *p = &capsule_plugin_definition;
    const capsule_tool *tool = NULL;
    for (size_t i = 0; i < p->tool_count && !tool; i++)
        if (capsule_is(name, p->tools[i].name)) tool = &p->tools[i];
    if (!tool) {
        char *n = capsule_cstr(name);
        capsule_buf message = {0};
        capsule_buf_printf(&message, "no tool %s", n);
        err->tag = CAPSULE_PLUGIN_TYPES_ERROR_NOT_FOUND;
        err->val.not_found = capsule_owned(message.data);
        capsule_buf_free(&message);
        free(n);
        plugin_string_free(name);
        exports_capsule_plugin_tools_json_free(arguments);
        exports_capsule_plugin_tools_request_context_free(context);
        return false;
    }
    plugin_string_free(name);
    capsule_call call;
    capsule_run(&call, CAPSULE_TOOL, capsule_parse_owned(arguments), context, tool->handler, NULL);
    if (call.ask_len) {
        ret->tag = EXPORTS_CAPSULE_PLUGIN_TOOLS_CALL_OUTCOME_INPUT_REQUIRED;
        ret->val.input_required = capsule_input_required(&call);
        capsule_done(&call, false);
    } else if (call.error >= 0) {
        ret->tag = EXPORTS_CAPSULE_PLUGIN_TOOLS_CALL_OUTCOME_COMPLETE;
        exports_capsule_plugin_tools_tool_result_t *r = &ret->val.complete;
        r->content.ptr = calloc(1, sizeof *r->content.ptr);
        if (!r->content.ptr) abort();
        r->content.len = 1;
        r->content.ptr[0].tag = CAPSULE_PLUGIN_TYPES_CONTENT_TEXT;
        r->content.ptr[0].val.text = call.error_message;
        call.error = -1;
        r->is_error = true;
        capsule_done(&call, false);
    } else {
        ret->tag = EXPORTS_CAPSULE_PLUGIN_TOOLS_CALL_OUTCOME_COMPLETE;
        exports_capsule_plugin_tools_tool_result_t *r = &ret->val.complete;
        r->content.ptr = call.content;
        r->content.len = call.content_len;
        r->structured_content.is_some = call.has_structured;
        r->structured_content.val = call.structured;
        capsule_done(&call, true);
    }
    exports_capsule_plugin_tools_request_context_free(context);
    return true;
}

/* Resources. A template's variables, found as the host and the Rust SDK find them: literal
 * parts match exactly; {var} takes no '/', '?' or '#', {+var} takes anything, {#var} is '#'
 * and anything; each variable, from left to right, takes the shortest non-empty value that
 * lets the rest match. Backtracks: templates are short and the host has already routed the
 * URI here. */

/* Append one code point as UTF-8. */
static void capsule_utf8(capsule_buf *out, unsigned long c) {
    char b[4];
    size_t n = 0;
    if (c < 0x80) b[n++] = (char)c;
    else if (c < 0x800) { b[n++] = (char)(0xC0 | (c >> 6)); b[n++] = (char)(0x80 | (c & 0x3F)); }
    else if (c < 0x10000) {
        b[n++] = (char)(0xE0 | (c >> 12)); b[n++] = (char)(0x80 | ((c >> 6) & 0x3F)); b[n++] = (char)(0x80 | (c & 0x3F));
    } else {
        b[n++] = (char)(0xF0 | (c >> 18)); b[n++] = (char)(0x80 | ((c >> 12) & 0x3F));
        b[n++] = (char)(0x80 | ((c >> 6) & 0x3F)); b[n++] = (char)(0x80 | (c & 0x3F));
    }
    capsule_buf_append(out, b, n);
}

static int capsule_hex(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* `len` bytes of a URI with %XX decoded, as UTF-8 text: a byte sequence that is not UTF-8,
 * and NUL (which would end the C string early, naming another resource), become U+FFFD. */
static void capsule_percent_decode(const char *from, size_t len, capsule_buf *out) {
    capsule_buf bytes = {0};
    for (size_t i = 0; i < len; i++) {
        char c = from[i];
        if (c == '%' && i + 2 < len && capsule_hex(from[i + 1]) >= 0 &&
            capsule_hex(from[i + 2]) >= 0) {
            c = (char)(capsule_hex(from[i + 1]) * 16 + capsule_hex(from[i + 2]));
            i += 2;
        }
        capsule_buf_append(&bytes, &c, 1);
    }
    const unsigned char *p = (const unsigned char *)bytes.data, *end = p + bytes.len;
    while (p < end) {
        unsigned long c = *p;
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && (size_t)(end - p) >= n;
        if (n > 1) c &= 0x3F >> (n - 1);
        for (size_t k = 1; ok && k < n; k++) {
            ok = (p[k] & 0xC0) == 0x80;
            c = (c << 6) | (p[k] & 0x3F);
        }
        /* Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either. */
        static const unsigned long least[] = {0, 0, 0x80, 0x800, 0x10000};
        ok = ok && c >= least[n] && !(c >= 0xD800 && c <= 0xDFFF) && c <= 0x10FFFF && c != 0;
        capsule_utf8(out, ok ? c : 0xFFFD);
        p += ok ? n : 1;
    }
    capsule_buf_free(&bytes);
}

static bool capsule_match(const char *t, const char *u, capsule_buf *vars) {
    if (!*t) return !*u;
    if (*t != '{') return *t == *u && capsule_match(t + 1, u + 1, vars);
    const char *close = strchr(t, '}');
    if (!close) return false;
    char op = (t[1] == '+' || t[1] == '#') ? t[1] : 0;
    const char *name = t + 1 + (op != 0);
    size_t name_len = (size_t)(close - name);
    const char *from = u;
    if (op == '#') {
        if (*u != '#') return false;
        from = ++u;
    }
    size_t max = op ? strlen(from) : strcspn(from, "/?#");
    for (size_t n = 1; n <= max; n++) {
        if (!capsule_match(close + 1, from + n, vars)) continue;
        capsule_buf value = {0};
        capsule_percent_decode(from, n, &value);
        char *key = malloc(name_len + 1);
        if (!key) abort();
        memcpy(key, name, name_len);
        key[name_len] = '\0';
        capsule_buf_append(vars, vars->len > 1 ? "," : "", vars->len > 1);
        capsule_buf_json_string(vars, key);
        capsule_buf_append(vars, ":", 1);
        capsule_buf_json_string(vars, value.data ? value.data : "");
        free(key);
        capsule_buf_free(&value);
        return true;
    }
    return false;
}

void exports_capsule_plugin_resources_list(exports_capsule_plugin_resources_list_resource_t *ret) {
    const capsule_plugin *p = &capsule_plugin_definition;
    ret->ptr = calloc(p->resource_count ? p->resource_count : 1, sizeof *ret->ptr);
    if (!ret->ptr) abort();
    ret->len = 0;
    for (size_t i = 0; i < p->resource_count; i++) {
        const capsule_resource *r = &p->resources[i];
        if (strchr(r->uri, '{')) continue;
        exports_capsule_plugin_resources_resource_t *out = &ret->ptr[ret->len++];
        out->uri = capsule_owned(r->uri);
        out->name = capsule_owned(r->name ? r->name : r->uri);
        out->description = capsule_maybe(r->description);
        out->mime_type = capsule_maybe(r->mime_type);
    }
}

void exports_capsule_plugin_resources_templates(exports_capsule_plugin_resources_list_resource_template_t *ret) {
    const capsule_plugin *p = &capsule_plugin_definition;
    ret->ptr = calloc(p->resource_count ? p->resource_count : 1, sizeof *ret->ptr);
    if (!ret->ptr) abort();
    ret->len = 0;
    for (size_t i = 0; i < p->resource_count; i++) {
        const capsule_resource *r = &p->resources[i];
        if (!strchr(r->uri, '{')) continue;
        exports_capsule_plugin_resources_resource_template_t *out = &ret->ptr[ret->len++];
        out->uri_template = capsule_owned(r->uri);
        out->name = capsule_owned(r->name ? r->name : r->uri);
        out->description = capsule_maybe(r->description);
        out->mime_type = capsule_maybe(r->mime_type);
    }
}

bool exports_capsule_plugin_resources_read(plugin_string_t *uri,
                                           exports_capsule_plugin_resources_request_context_t *context,
                                           exports_capsule_plugin_resources_read_outcome_t *ret,
                                           exports_capsule_plugin_resources_error_t *err) {
    const capsule_plugin *p = &capsule_plugin_definition;
    char *u = capsule_cstr(uri);
    plugin_string_free(uri);
    const capsule_resource *found = NULL;
    capsule_json *vars = NULL;
    for (size_t i = 0; i < p->resource_count && !found; i++)
        if (strcmp(p->resources[i].uri, u) == 0) found = &p->resources[i];
    for (size_t i = 0; i < p->resource_count && !found; i++) {
        if (!strchr(p->resources[i].uri, '{')) continue;
        capsule_buf b = {0};
        capsule_buf_append(&b, "{", 1);
        if (capsule_match(p->resources[i].uri, u, &b)) {
            capsule_buf_append(&b, "}", 1);
            vars = capsule_json_parse(b.data, b.len);
            found = &p->resources[i];
        }
        capsule_buf_free(&b);
    }
    bool ok = true;
    if (!found) {
        err->tag = CAPSULE_PLUGIN_TYPES_ERROR_NOT_FOUND;
        err->val.not_found = capsule_owned(u);
        ok = false;
    } else {
        capsule_call call;
        capsule_run(&call, CAPSULE_READ, vars, context, found->handler, u);
        if (call.ask_len) {
            ret->tag = EXPORTS_CAPSULE_PLUGIN_RESOURCES_READ_OUTCOME_INPUT_REQUIRED;
            ret->val.input_required = capsule_input_required(&call);
            capsule_done(&call, false);
        } else if (call.error >= 0 || call.content_len == 0) {
            err->tag = call.error >= 0 ? (uint8_t)call.error : CAPSULE_PLUGIN_TYPES_ERROR_FAILED;
            err->val.failed = call.error >= 0 ? call.error_message : capsule_owned("the resource has no body");
            call.error = -1;
            capsule_done(&call, false);
            ok = false;
        } else {
            ret->tag = EXPORTS_CAPSULE_PLUGIN_RESOURCES_READ_OUTCOME_COMPLETE;
            capsule_plugin_types_resource_contents_t *c = calloc(1, sizeof *c);
            if (!c) abort();
            c->uri = capsule_owned(u);
            c->mime_type = capsule_maybe(found->mime_type);
            capsule_plugin_types_content_t *first = &call.content[0];
            if (first->tag == CAPSULE_PLUGIN_TYPES_CONTENT_TEXT) {
                c->body.tag = CAPSULE_PLUGIN_TYPES_RESOURCE_BODY_TEXT;
                c->body.val.text = first->val.text;
            } else {
                c->body.tag = CAPSULE_PLUGIN_TYPES_RESOURCE_BODY_BLOB;
                c->body.val.blob = first->val.image.data;
                plugin_string_free(&first->val.image.mime_type);
            }
            for (size_t i = 1; i < call.content_len; i++) capsule_plugin_types_content_free(&call.content[i]);
            free(call.content);
            ret->val.complete.ptr = c;
            ret->val.complete.len = 1;
            capsule_done(&call, true);
        }
    }
    free(u);
    exports_capsule_plugin_resources_request_context_free(context);
    return ok;
}

/* Prompts. */

void exports_capsule_plugin_prompts_list(exports_capsule_plugin_prompts_list_prompt_t *ret) {
    const capsule_plugin *p = &capsule_plugin_definition;
    ret->len = p->prompt_count;
    ret->ptr = calloc(p->prompt_count ? p->prompt_count : 1, sizeof *ret->ptr);
    if (!ret->ptr) abort();
    for (size_t i = 0; i < p->prompt_count; i++) {
        const capsule_prompt *src = &p->prompts[i];
        exports_capsule_plugin_prompts_prompt_t *out = &ret->ptr[i];
        out->name = capsule_owned(src->name);
        out->description = capsule_owned(src->description ? src->description : "");
        size_t n = 0;
        while (src->arguments && src->arguments[n].name) n++;
        out->arguments.ptr = calloc(n ? n : 1, sizeof *out->arguments.ptr);
        if (!out->arguments.ptr) abort();
        out->arguments.len = n;
        for (size_t a = 0; a < n; a++) {
            out->arguments.ptr[a].name = capsule_owned(src->arguments[a].name);
            out->arguments.ptr[a].description = capsule_maybe(src->arguments[a].description);
            out->arguments.ptr[a].required = src->arguments[a].required;
        }
    }
}

bool exports_capsule_plugin_prompts_get(plugin_string_t *name, plugin_list_tuple2_string_string_t *arguments,
                                        exports_capsule_plugin_prompts_request_context_t *context,
                                        exports_capsule_plugin_prompts_get_outcome_t *ret,
                                        exports_capsule_plugin_prompts_error_t *err) {
    const capsule_plugin *p = &capsule_plugin_definition;
    const capsule_prompt *prompt = NULL;
    for (size_t i = 0; i < p->prompt_count && !prompt; i++)
        if (capsule_is(name, p->prompts[i].name)) prompt = &p->prompts[i];
    plugin_string_free(name);
    capsule_json *args = capsule_tuples(arguments);
    bool ok = true;
    if (!prompt) {
        capsule_json_free(args);
        err->tag = CAPSULE_PLUGIN_TYPES_ERROR_NOT_FOUND;
        err->val.not_found = capsule_owned("no such prompt");
        ok = false;
    } else {
        capsule_call call;
        capsule_run(&call, CAPSULE_PROMPT, args, context, prompt->handler, NULL);
        if (call.ask_len) {
            ret->tag = EXPORTS_CAPSULE_PLUGIN_PROMPTS_GET_OUTCOME_INPUT_REQUIRED;
            ret->val.input_required = capsule_input_required(&call);
            capsule_done(&call, false);
        } else if (call.error >= 0) {
            err->tag = (uint8_t)call.error;
            err->val.failed = call.error_message;
            call.error = -1;
            capsule_done(&call, false);
            ok = false;
        } else {
            ret->tag = EXPORTS_CAPSULE_PLUGIN_PROMPTS_GET_OUTCOME_COMPLETE;
            exports_capsule_plugin_prompts_prompt_result_t *r = &ret->val.complete;
            r->messages.len = call.content_len;
            r->messages.ptr = calloc(call.content_len ? call.content_len : 1, sizeof *r->messages.ptr);
            if (!r->messages.ptr) abort();
            for (size_t i = 0; i < call.content_len; i++) {
                r->messages.ptr[i].role = call.roles[i];
                r->messages.ptr[i].content = call.content[i];
            }
            free(call.content);
            capsule_done(&call, true);
        }
    }
    exports_capsule_plugin_prompts_request_context_free(context);
    return ok;
}

/* Completion. */

bool exports_capsule_plugin_completion_complete(exports_capsule_plugin_completion_reference_t *reference,
                                                plugin_string_t *argument, plugin_string_t *value,
                                                plugin_list_tuple2_string_string_t *context,
                                                exports_capsule_plugin_completion_suggestions_t *ret,
                                                exports_capsule_plugin_completion_error_t *err) {
    (void)err;
    bool prompt = reference->tag == EXPORTS_CAPSULE_PLUGIN_COMPLETION_REFERENCE_PROMPT;
    char *target = capsule_cstr(prompt ? &reference->val.prompt : &reference->val.resource_template);
    char *arg = capsule_cstr(argument), *val = capsule_cstr(value);
    capsule_call call;
    memset(&call, 0, sizeof call);
    call.kind = CAPSULE_COMPLETE;
    call.error = -1;
    call.args = capsule_tuples(context);
    if (capsule_plugin_definition.complete)
        capsule_plugin_definition.complete(&call, prompt ? "prompt" : "template", target, arg, val);
    size_t n = call.suggestion_len < 100 ? call.suggestion_len : 100;
    for (size_t i = n; i < call.suggestion_len; i++) plugin_string_free(&call.suggestions[i]);
    ret->values.ptr = call.suggestions;
    ret->values.len = n;
    ret->total = (plugin_option_u32_t){true, (uint32_t)call.suggestion_len};
    ret->has_more = call.suggestion_len > n;
    capsule_done(&call, false);
    free(target);
    free(arg);
    free(val);
    exports_capsule_plugin_completion_reference_free(reference);
    plugin_string_free(argument);
    plugin_string_free(value);
    return true;
}

#endif /* CAPSULE_IMPLEMENTATION */
#endif /* CAPSULE_H */
