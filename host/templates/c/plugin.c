/* {{name}}: a Capsule plugin. */
#define CAPSULE_IMPLEMENTATION
#define CAPSULE_JSON_IMPLEMENTATION
#include "capsule.h"

#include <ctype.h>

static void stats(capsule_call *call) {
    const char *text = capsule_arg_string(call, "text", "");
    int words = 0, lines = *text ? 1 : 0;
    bool in_word = false;
    for (const char *p = text; *p; p++) {
        if (*p == '\n' && p[1]) lines++;
        bool space = isspace((unsigned char)*p);
        if (!space && !in_word) words++;
        in_word = !space;
    }
    capsule_structuredf(call, "{\"words\":%d,\"lines\":%d}", words, lines);
}

static const capsule_tool TOOLS[] = {{
    .name = "stats",
    .description = "Count the words and lines of a text",
    .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\","
                    "\"description\":\"The text to measure\"}},\"required\":[\"text\"]}",
    .output_schema = "{\"type\":\"object\",\"properties\":{\"words\":{\"type\":\"integer\"},"
                     "\"lines\":{\"type\":\"integer\"}},\"required\":[\"words\",\"lines\"]}",
    .handler = stats,
    .read_only = true,
}};

CAPSULE_PLUGIN(CAPSULE_TABLE(TOOLS), CAPSULE_NONE, CAPSULE_NONE, NULL);
