/*
 * Capsule's C example plugin: the same tools, resources, template, prompt and completions as
 * the Python and TypeScript examples, written with sdk/c/capsule.h. plugins/build-examples.sh
 * builds it (clang for wasm32-wasi, then `wasm-tools component new` with the reactor adapter).
 */
#define CAPSULE_IMPLEMENTATION
#define CAPSULE_JSON_IMPLEMENTATION
#include "capsule.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void stats(capsule_call *call) {
    const char *text = capsule_arg_string(call, "text", "");
    int words = 0, lines = *text ? 1 : 0;
    const char *longest = "", *word = NULL;
    size_t longest_len = 0;
    for (const char *p = text;; p++) {
        if (*p == '\n' && p[1]) lines++;
        bool space = !*p || isspace((unsigned char)*p);
        if (!space && !word) word = p;
        if (space && word) {
            words++;
            if ((size_t)(p - word) > longest_len) longest = word, longest_len = (size_t)(p - word);
            word = NULL;
        }
        if (!*p) break;
    }
    char *copy = malloc(longest_len + 1);
    if (!copy) abort();
    memcpy(copy, longest, longest_len);
    copy[longest_len] = '\0';
    capsule_buf out = {0};
    capsule_buf_printf(&out, "{\"words\":%d,\"lines\":%d,\"longest\":", words, lines);
    capsule_buf_json_string(&out, copy);
    capsule_buf_append(&out, "}", 1);
    capsule_structured(call, out.data);
    capsule_buf_free(&out);
    free(copy);
}

static void convert(capsule_call *call) {
    double value = capsule_arg_number(call, "value", 0);
    bool km = strcmp(capsule_arg_string(call, "unit", "km"), "km") == 0;
    double result = round((km ? value / 1.609344 : value * 1.609344) * 1e6) / 1e6;
    capsule_structuredf(call, "{\"result\":%.17g}", result);
}

static void countdown(capsule_call *call) {
    int n = (int)capsule_arg_number(call, "n", 0);
    for (int i = 0; i < n; i++) {
        capsule_log(call, "info", "%d to go", n - i);
        char step[32];
        snprintf(step, sizeof step, "step %d", i + 1);
        capsule_progress(call, i + 1, n, step);
    }
    capsule_text(call, "lift-off");
}

static void shred(capsule_call *call) {
    const char *name = capsule_arg_string(call, "name", "");
    char message[512];
    snprintf(message, sizeof message, "Really shred %s?", name);
    capsule_elicited answer;
    if (!capsule_elicit(call, "confirm", message,
                        "{\"type\":\"object\",\"properties\":{\"sure\":{\"type\":\"boolean\"}},\"required\":[\"sure\"]}",
                        &answer))
        return; /* asked; called again with the answer */
    bool sure = answer.action == CAPSULE_ACCEPT && capsule_json_bool(capsule_json_get(answer.content, "sure"), false);
    if (!sure) {
        capsule_textf(call, "kept %s", name);
        return;
    }
    /* A second question: the first one's answer is still known when this one is answered. */
    snprintf(message, sizeof message, "Shred the backups of %s too?", name);
    capsule_elicited backups;
    if (!capsule_elicit(call, "backups", message,
                        "{\"type\":\"object\",\"properties\":{\"backups\":{\"type\":\"boolean\"}},\"required\":[\"backups\"]}",
                        &backups))
        return;
    bool too = backups.action == CAPSULE_ACCEPT && capsule_json_bool(capsule_json_get(backups.content, "backups"), false);
    capsule_textf(call, "shredded %s%s", name, too ? " and its backups" : "");
}

static void read_file(capsule_call *call) {
    const char *path = capsule_arg_string(call, "path", "");
    FILE *file = fopen(path, "rb");
    if (!file) {
        capsule_fail(call, "%s: %s", path, strerror(errno));
        return;
    }
    capsule_buf text = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, file)) > 0) capsule_buf_append(&text, chunk, n);
    fclose(file);
    capsule_text(call, text.data ? text.data : "");
    capsule_buf_free(&text);
}

static void fail(capsule_call *call) { capsule_fail(call, "%s", capsule_arg_string(call, "message", "")); }

static const capsule_tool TOOLS[] = {
    {.name = "stats",
     .description = "Count the words and lines of a text and find its longest word.",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\","
                     "\"description\":\"The text to measure\"}},\"required\":[\"text\"]}",
     .output_schema = "{\"type\":\"object\",\"properties\":{\"words\":{\"type\":\"integer\"},"
                      "\"lines\":{\"type\":\"integer\"},\"longest\":{\"type\":\"string\"}},"
                      "\"required\":[\"words\",\"lines\",\"longest\"]}",
     .handler = stats,
     .read_only = true},
    {.name = "convert",
     .description = "Convert a distance to the other unit (km to miles or miles to km).",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"number\"},"
                     "\"unit\":{\"enum\":[\"km\",\"mi\"],\"default\":\"km\"}},\"required\":[\"value\"]}",
     .output_schema = "{\"type\":\"object\",\"properties\":{\"result\":{\"type\":\"number\"}},\"required\":[\"result\"]}",
     .handler = convert},
    {.name = "countdown",
     .description = "Count down from n, logging and reporting progress at each step.",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}",
     .handler = countdown},
    {.name = "shred",
     .description = "Pretend to shred a document, after asking the user to confirm.",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}",
     .handler = shred,
     .destructive = true},
    {.name = "read_file",
     .description = "Read a text file inside a directory the host granted (nothing else exists).",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}",
     .handler = read_file,
     .read_only = true},
    {.name = "fail",
     .description = "Fail with the given message (shows how errors reach the model).",
     .input_schema = "{\"type\":\"object\",\"properties\":{\"message\":{\"type\":\"string\"}},\"required\":[\"message\"]}",
     .handler = fail},
};

static const char *const NOTE_NAMES[] = {"limits", "welcome"};
static const char *const NOTE_TEXTS[] = {
    "Each call has a CPU deadline and a memory cap.",
    "Capsule runs this C plugin in a fresh sandbox for every call.",
};

static void index_notes(capsule_call *call) { capsule_text(call, "limits\nwelcome"); }

static void note(capsule_call *call) {
    const char *name = capsule_arg_string(call, "name", "");
    for (size_t i = 0; i < 2; i++) {
        if (strcmp(name, NOTE_NAMES[i]) == 0) {
            capsule_text(call, NOTE_TEXTS[i]);
            return;
        }
    }
    capsule_not_found(call, "no note %s", name);
}

static const capsule_resource RESOURCES[] = {
    {.uri = "notes://index", .name = "index", .description = "The names of all notes.", .mime_type = "text/plain",
     .handler = index_notes},
    {.uri = "notes://{name}", .name = "note", .description = "One note, by name.", .mime_type = "text/plain",
     .handler = note},
};

static void review(capsule_call *call) {
    capsule_textf(call, "Please review this %s code:\n\n%s", capsule_arg_string(call, "language", "python"),
                  capsule_arg_string(call, "code", ""));
    capsule_assistant(call, "I will look for bugs first, then style.");
}

static const capsule_prompt_argument REVIEW_ARGUMENTS[] = {
    {.name = "code", .description = "The code to review", .required = true},
    {.name = "language", .description = "Its language (default python)"},
    {0},
};

static const capsule_prompt PROMPTS[] = {
    {.name = "review", .description = "Ask for a careful code review.", .arguments = REVIEW_ARGUMENTS, .handler = review},
};

static void complete(capsule_call *call, const char *kind, const char *target, const char *argument, const char *value) {
    static const char *const LANGUAGES[] = {"c", "javascript", "python", "rust", "typescript"};
    const char *const *options = NULL;
    size_t count = 0;
    if (strcmp(kind, "template") == 0 && strcmp(target, "notes://{name}") == 0 && strcmp(argument, "name") == 0)
        options = NOTE_NAMES, count = 2;
    if (strcmp(kind, "prompt") == 0 && strcmp(target, "review") == 0 && strcmp(argument, "language") == 0)
        options = LANGUAGES, count = 5;
    for (size_t i = 0; i < count; i++)
        if (strncmp(options[i], value, strlen(value)) == 0) capsule_suggest(call, options[i]);
}

CAPSULE_PLUGIN(CAPSULE_TABLE(TOOLS), CAPSULE_TABLE(RESOURCES), CAPSULE_TABLE(PROMPTS), complete);
