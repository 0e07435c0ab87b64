// Package export_capsule_plugin_tools is {{name}}'s tools: List describes them, Call runs one.
package export_capsule_plugin_tools

import (
	"encoding/json"
	"strings"

	wit "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/capsule_plugin_tools"
	types "wit_component/capsule_plugin_types"
)

func List() []Tool {
	return []Tool{{
		Name:         "stats",
		Title:        wit.None[string](),
		Description:  "Count the words and lines of a text",
		InputSchema:  `{"type":"object","properties":{"text":{"type":"string","description":"The text to measure"}},"required":["text"]}`,
		OutputSchema: wit.Some(`{"type":"object","properties":{"words":{"type":"integer"},"lines":{"type":"integer"}},"required":["words","lines"]}`),
		Annotations:  wit.None[ToolAnnotations](),
	}}
}

// Call runs a tool; the host has checked the arguments against its input schema.
func Call(name string, arguments string, context types.RequestContext) wit.Result[CallOutcome, types.Error] {
	if name != "stats" {
		return wit.Err[CallOutcome](types.MakeErrorNotFound("no tool " + name))
	}
	var args struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return wit.Err[CallOutcome](types.MakeErrorInvalidParams(err.Error()))
	}
	lines := 0
	if args.Text != "" {
		lines = len(strings.Split(strings.TrimSuffix(args.Text, "\n"), "\n"))
	}
	out, _ := json.Marshal(map[string]int{"words": len(strings.Fields(args.Text)), "lines": lines})
	return wit.Ok[CallOutcome, types.Error](MakeCallOutcomeComplete(ToolResult{
		Content: []types.Content{types.MakeContentText(string(out))}, StructuredContent: wit.Some(string(out))}))
}
