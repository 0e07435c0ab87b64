//! {{name}}: a Capsule plugin in Zig, over the C SDK (`capsule.h`, imported as `capsule`).
const std = @import("std");
const c = @import("capsule");

fn stats(call: ?*c.capsule_call) callconv(.c) void {
    const text = std.mem.span(c.capsule_arg_string(call, "text", ""));
    var words: c_int = 0;
    var it = std.mem.tokenizeAny(u8, text, " \t\r\n");
    while (it.next()) |_| words += 1;
    var lines: c_int = if (text.len > 0) 1 else 0;
    for (text, 0..) |byte, i| {
        if (byte == '\n' and i + 1 < text.len) lines += 1;
    }
    c.capsule_structuredf(call, "{\"words\":%d,\"lines\":%d}", words, lines);
}

const tools = [_]c.capsule_tool{.{
    .name = "stats",
    .description = "Count the words and lines of a text",
    .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\",\"description\":\"The text to measure\"}},\"required\":[\"text\"]}",
    .output_schema = "{\"type\":\"object\",\"properties\":{\"words\":{\"type\":\"integer\"},\"lines\":{\"type\":\"integer\"}},\"required\":[\"words\",\"lines\"]}",
    .handler = stats,
    .read_only = true,
}};

export const capsule_plugin_definition = c.capsule_plugin{ .tools = &tools, .tool_count = tools.len };
