//! Capsule's Zig example plugin: the same tools, resources, template, prompt and completions as
//! the Python, TypeScript, C and Go examples, written in Zig over the C SDK (sdk/c/capsule.h,
//! imported as `capsule`). Build: sdk/zig/capsule-zig build plugins/zig/plugin.zig -o zig.wasm.
const std = @import("std");
const c = @import("capsule");

const Call = ?*c.capsule_call;

fn arg(call: Call, key: [*:0]const u8) []const u8 {
    return std.mem.span(c.capsule_arg_string(call, key, ""));
}

fn stats(call: Call) callconv(.c) void {
    const text = arg(call, "text");
    var words: c_int = 0;
    var longest: []const u8 = "";
    var it = std.mem.tokenizeAny(u8, text, " \t\r\n");
    while (it.next()) |word| {
        words += 1;
        if (word.len > longest.len) longest = word;
    }
    var lines: c_int = if (text.len > 0) 1 else 0;
    for (text, 0..) |byte, i| {
        if (byte == '\n' and i + 1 < text.len) lines += 1;
    }
    const word = std.heap.c_allocator.dupeSentinel(u8, longest, 0) catch @panic("out of memory");
    defer std.heap.c_allocator.free(word);
    var out = std.mem.zeroes(c.capsule_buf);
    defer c.capsule_buf_free(&out);
    c.capsule_buf_printf(&out, "{\"words\":%d,\"lines\":%d,\"longest\":", words, lines);
    c.capsule_buf_json_string(&out, word.ptr);
    c.capsule_buf_append(&out, "}", 1);
    c.capsule_structured(call, out.data);
}

fn convert(call: Call) callconv(.c) void {
    const value = c.capsule_arg_number(call, "value", 0);
    const km = std.mem.eql(u8, arg(call, "unit"), "km") or arg(call, "unit").len == 0;
    const result: f64 = @round((if (km) value / 1.609344 else value * 1.609344) * 1e6) / 1e6;
    c.capsule_structuredf(call, "{\"result\":%.17g}", result);
}

fn countdown(call: Call) callconv(.c) void {
    const n: c_int = @intFromFloat(c.capsule_arg_number(call, "n", 0));
    var i: c_int = 0;
    while (i < n) : (i += 1) {
        c.capsule_log(call, "info", "%d to go", n - i);
        var step: [32]u8 = undefined;
        const message = std.fmt.bufPrintSentinel(&step, "step {d}", .{i + 1}, 0) catch unreachable;
        c.capsule_progress(call, @floatFromInt(i + 1), @floatFromInt(n), message.ptr);
    }
    c.capsule_text(call, "lift-off");
}

fn shred(call: Call) callconv(.c) void {
    const name = c.capsule_arg_string(call, "name", "");
    var buffer: [512]u8 = undefined;
    const message = std.fmt.bufPrintSentinel(&buffer, "Really shred {s}?", .{std.mem.span(name)}, 0) catch "Really shred it?";
    var answer: c.capsule_elicited = undefined;
    const schema = "{\"type\":\"object\",\"properties\":{\"sure\":{\"type\":\"boolean\"}},\"required\":[\"sure\"]}";
    // Asked: the host calls again from the top with the answer.
    if (!c.capsule_elicit(call, "confirm", message.ptr, schema, &answer)) return;
    const sure = answer.action == c.CAPSULE_ACCEPT and c.capsule_json_bool(c.capsule_json_get(answer.content, "sure"), false);
    const verb: [*:0]const u8 = if (sure) "shredded" else "kept";
    c.capsule_textf(call, "%s %s", verb, name);
}

fn readFile(call: Call) callconv(.c) void {
    const path = c.capsule_arg_string(call, "path", "");
    const file = c.fopen(path, "rb") orelse {
        c.capsule_fail(call, "%s: %s", path, c.strerror(c.errno));
        return;
    };
    defer _ = c.fclose(file);
    var text = std.mem.zeroes(c.capsule_buf);
    defer c.capsule_buf_free(&text);
    var chunk: [4096]u8 = undefined;
    while (true) {
        const n = c.fread(&chunk, 1, chunk.len, file);
        if (n == 0) break;
        c.capsule_buf_append(&text, &chunk, n);
    }
    c.capsule_text(call, if (text.data != null) text.data else "");
}

fn fail(call: Call) callconv(.c) void {
    c.capsule_fail(call, "%s", c.capsule_arg_string(call, "message", ""));
}

const object = "{\"type\":\"object\",\"properties\":";
const tools = [_]c.capsule_tool{
    .{
        .name = "stats",
        .description = "Count the words and lines of a text and find its longest word.",
        .input_schema = object ++ "{\"text\":{\"type\":\"string\",\"description\":\"The text to measure\"}},\"required\":[\"text\"]}",
        .output_schema = object ++ "{\"words\":{\"type\":\"integer\"},\"lines\":{\"type\":\"integer\"},\"longest\":{\"type\":\"string\"}},\"required\":[\"words\",\"lines\",\"longest\"]}",
        .handler = stats,
        .read_only = true,
    },
    .{
        .name = "convert",
        .description = "Convert a distance to the other unit (km to miles or miles to km).",
        .input_schema = object ++ "{\"value\":{\"type\":\"number\"},\"unit\":{\"enum\":[\"km\",\"mi\"],\"default\":\"km\"}},\"required\":[\"value\"]}",
        .output_schema = object ++ "{\"result\":{\"type\":\"number\"}},\"required\":[\"result\"]}",
        .handler = convert,
    },
    .{
        .name = "countdown",
        .description = "Count down from n, logging and reporting progress at each step.",
        .input_schema = object ++ "{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}",
        .handler = countdown,
    },
    .{
        .name = "shred",
        .description = "Pretend to shred a document, after asking the user to confirm.",
        .input_schema = object ++ "{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}",
        .handler = shred,
        .destructive = true,
    },
    .{
        .name = "read_file",
        .description = "Read a text file inside a directory the host granted (nothing else exists).",
        .input_schema = object ++ "{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}",
        .handler = readFile,
        .read_only = true,
    },
    .{
        .name = "fail",
        .description = "Fail with the given message (shows how errors reach the model).",
        .input_schema = object ++ "{\"message\":{\"type\":\"string\"}},\"required\":[\"message\"]}",
        .handler = fail,
    },
};

const note_names = [_][*:0]const u8{ "limits", "welcome" };
const note_texts = [_][*:0]const u8{
    "Each call has a CPU deadline and a memory cap.",
    "Capsule runs this Zig plugin in a fresh sandbox for every call.",
};

fn indexNotes(call: Call) callconv(.c) void {
    c.capsule_text(call, "limits\nwelcome");
}

fn note(call: Call) callconv(.c) void {
    const name = arg(call, "name");
    for (note_names, note_texts) |known, text| {
        if (std.mem.eql(u8, std.mem.span(known), name)) return c.capsule_text(call, text);
    }
    c.capsule_not_found(call, "no note %s", c.capsule_arg_string(call, "name", ""));
}

const resources = [_]c.capsule_resource{
    .{ .uri = "notes://index", .name = "index", .description = "The names of all notes.", .mime_type = "text/plain", .handler = indexNotes },
    .{ .uri = "notes://{name}", .name = "note", .description = "One note, by name.", .mime_type = "text/plain", .handler = note },
};

fn review(call: Call) callconv(.c) void {
    const language = c.capsule_arg_string(call, "language", "python");
    c.capsule_textf(call, "Please review this %s code:\n\n%s", language, c.capsule_arg_string(call, "code", ""));
    c.capsule_assistant(call, "I will look for bugs first, then style.");
}

const review_arguments = [_]c.capsule_prompt_argument{
    .{ .name = "code", .description = "The code to review", .required = true },
    .{ .name = "language", .description = "Its language (default python)" },
    .{}, // the end of the list
};

const prompts = [_]c.capsule_prompt{
    .{ .name = "review", .description = "Ask for a careful code review.", .arguments = &review_arguments, .handler = review },
};

fn complete(call: Call, kind: [*c]const u8, target: [*c]const u8, argument: [*c]const u8, value: [*c]const u8) callconv(.c) void {
    const languages = [_][*:0]const u8{ "c", "javascript", "python", "rust", "typescript", "zig" };
    const is = struct {
        fn eq(a: [*c]const u8, b: []const u8) bool {
            return std.mem.eql(u8, std.mem.span(a), b);
        }
    }.eq;
    const options: []const [*:0]const u8 =
        if (is(kind, "template") and is(target, "notes://{name}") and is(argument, "name")) &note_names else if (is(kind, "prompt") and is(target, "review") and is(argument, "language")) &languages else &.{};
    for (options) |option| {
        if (std.mem.startsWith(u8, std.mem.span(option), std.mem.span(value))) c.capsule_suggest(call, option);
    }
}

export const capsule_plugin_definition = c.capsule_plugin{
    .tools = &tools,
    .tool_count = tools.len,
    .resources = &resources,
    .resource_count = resources.len,
    .prompts = &prompts,
    .prompt_count = prompts.len,
    .complete = complete,
};
