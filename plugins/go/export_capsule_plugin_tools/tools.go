// Package export_capsule_plugin_tools is the Go example's tools: the same ones as the Python,
// TypeScript and C examples, written straight against the bindings `wit-bindgen go` makes of
// Capsule's WIT. Build: sdk/go/capsule-go build plugins/go -o go.wasm.
package export_capsule_plugin_tools

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"

	wit "go.bytecodealliance.org/pkg/wit/types"
	host "wit_component/capsule_plugin_host"
	. "wit_component/capsule_plugin_tools"
	types "wit_component/capsule_plugin_types"
)

type result = wit.Result[CallOutcome, types.Error]

func tool(name, description, input string, output wit.Option[string], hints wit.Option[ToolAnnotations]) Tool {
	return Tool{Name: name, Title: wit.None[string](), Description: description, InputSchema: input,
		OutputSchema: output, Annotations: hints}
}

func hint(readOnly, destructive bool) wit.Option[ToolAnnotations] {
	flag := func(on bool) wit.Option[bool] {
		if on {
			return wit.Some(true)
		}
		return wit.None[bool]()
	}
	return wit.Some(ToolAnnotations{Title: wit.None[string](), ReadOnlyHint: flag(readOnly),
		DestructiveHint: flag(destructive), IdempotentHint: wit.None[bool](), OpenWorldHint: wit.None[bool]()})
}

// List is called once, when the plugin loads.
func List() []Tool {
	none := wit.None[string]()
	plain := wit.None[ToolAnnotations]()
	return []Tool{
		tool("stats", "Count the words and lines of a text and find its longest word.",
			`{"type":"object","properties":{"text":{"type":"string","description":"The text to measure"}},"required":["text"]}`,
			wit.Some(`{"type":"object","properties":{"words":{"type":"integer"},"lines":{"type":"integer"},"longest":{"type":"string"}},"required":["words","lines","longest"]}`),
			hint(true, false)),
		tool("convert", "Convert a distance to the other unit (km to miles or miles to km).",
			`{"type":"object","properties":{"value":{"type":"number"},"unit":{"enum":["km","mi"],"default":"km"}},"required":["value"]}`,
			wit.Some(`{"type":"object","properties":{"result":{"type":"number"}},"required":["result"]}`), plain),
		tool("countdown", "Count down from n, logging and reporting progress at each step.",
			`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`, none, plain),
		tool("shred", "Pretend to shred a document, after asking the user to confirm.",
			`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`, none, hint(false, true)),
		tool("read_file", "Read a text file inside a directory the host granted (nothing else exists).",
			`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`, none, hint(true, false)),
		tool("fail", "Panic with the given message (shows how errors reach the model).",
			`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`, none, plain),
	}
}

// Call runs one tool. The host has already checked the arguments against its input schema.
func Call(name string, arguments string, context types.RequestContext) result {
	var args struct {
		Text    string  `json:"text"`
		Value   float64 `json:"value"`
		Unit    string  `json:"unit"`
		N       int     `json:"n"`
		Name    string  `json:"name"`
		Path    string  `json:"path"`
		Message string  `json:"message"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return wit.Err[CallOutcome](types.MakeErrorInvalidParams(err.Error()))
	}
	switch name {
	case "stats":
		words := strings.Fields(args.Text)
		longest := ""
		for _, w := range words {
			if len(w) > len(longest) {
				longest = w
			}
		}
		lines := len(strings.Split(strings.TrimSuffix(args.Text, "\n"), "\n"))
		if args.Text == "" {
			lines = 0
		}
		return structured(map[string]any{"words": len(words), "lines": lines, "longest": longest})
	case "convert":
		value := args.Value * 1.609344
		if args.Unit != "mi" {
			value = args.Value / 1.609344
		}
		return structured(map[string]any{"result": math.Round(value*1e6) / 1e6})
	case "countdown":
		for i := 0; i < args.N; i++ {
			host.Log(host.LogLevel_Info, wit.None[string](), fmt.Sprintf("%d to go", args.N-i))
			host.Progress(float64(i+1), wit.Some(float64(args.N)), wit.Some(fmt.Sprintf("step %d", i+1)))
		}
		return text("lift-off", false)
	case "shred":
		return shred(args.Name, context)
	case "read_file":
		data, err := os.ReadFile(args.Path)
		if err != nil {
			return text(err.Error(), true)
		}
		return text(string(data), false)
	case "fail":
		panic(args.Message)
	}
	return wit.Err[CallOutcome](types.MakeErrorNotFound("no tool " + name))
}

// shred asks the user first: the host sends the elicitation and calls again with the answer.
func shred(name string, context types.RequestContext) result {
	for _, r := range context.Responses {
		if r.Key != "confirm" || r.Response.Tag() != types.InputResponse_Elicitation {
			continue
		}
		answer := r.Response.Elicitation()
		var content struct {
			Sure bool `json:"sure"`
		}
		if answer.Action == types.ElicitAction_Accept && answer.Content.Tag() == wit.OptionSome {
			_ = json.Unmarshal([]byte(answer.Content.Some()), &content)
		}
		if content.Sure {
			return text("shredded "+name, false)
		}
		return text("kept "+name, false)
	}
	ask := types.MakeInputRequestElicitForm(types.ElicitForm{Message: "Really shred " + name + "?",
		RequestedSchema: `{"type":"object","properties":{"sure":{"type":"boolean"}},"required":["sure"]}`})
	return wit.Ok[CallOutcome, types.Error](MakeCallOutcomeInputRequired(types.InputRequired{
		Requests: []types.KeyedInputRequest{{Key: "confirm", Request: ask}}, State: wit.None[[]uint8]()}))
}

func text(s string, isError bool) result {
	return wit.Ok[CallOutcome, types.Error](MakeCallOutcomeComplete(ToolResult{
		Content: []types.Content{types.MakeContentText(s)}, StructuredContent: wit.None[string](), IsError: isError}))
}

// structured answers with JSON for the output schema, and the same JSON as text for clients
// that predate structured output.
func structured(value any) result {
	data, err := json.Marshal(value)
	if err != nil {
		return wit.Err[CallOutcome](types.MakeErrorFailed(err.Error()))
	}
	return wit.Ok[CallOutcome, types.Error](MakeCallOutcomeComplete(ToolResult{
		Content: []types.Content{types.MakeContentText(string(data))}, StructuredContent: wit.Some(string(data))}))
}
