// {{name}}: a Capsule plugin in C++ (C++20, no exceptions), over capsule.h.
#include "capsule.h"

#include <cctype>
#include <string>
#include <string_view>

static void stats(capsule_call *call) {
    std::string_view text = capsule_arg_string(call, "text", "");
    int words = 0, lines = text.empty() ? 0 : 1;
    bool in_word = false;
    std::string longest, word;
    for (size_t i = 0; i <= text.size(); i++) {
        bool space = i == text.size() || std::isspace(static_cast<unsigned char>(text[i]));
        if (i < text.size() && text[i] == '\n' && i + 1 < text.size()) lines++;
        if (!space) word += text[i];
        if (space && in_word) {
            words++;
            if (word.size() > longest.size()) longest = word;
            word.clear();
        }
        in_word = !space;
    }
    capsule_buf out = {};
    capsule_buf_printf(&out, "{\"words\":%d,\"lines\":%d,\"longest\":", words, lines);
    capsule_buf_json_string(&out, longest.c_str());
    capsule_buf_append(&out, "}", 1);
    capsule_structured(call, out.data);
    capsule_buf_free(&out);
}

static const capsule_tool TOOLS[] = {{
    .name = "stats",
    .description = "Count the words and lines of a text, and find its longest word",
    .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\","
                    "\"description\":\"The text to measure\"}},\"required\":[\"text\"]}",
    .output_schema = "{\"type\":\"object\",\"properties\":{\"words\":{\"type\":\"integer\"},"
                     "\"lines\":{\"type\":\"integer\"},\"longest\":{\"type\":\"string\"}},"
                     "\"required\":[\"words\",\"lines\",\"longest\"]}",
    .handler = stats,
    .read_only = true,
}};

CAPSULE_PLUGIN(CAPSULE_TABLE(TOOLS), CAPSULE_NONE, CAPSULE_NONE, nullptr);
