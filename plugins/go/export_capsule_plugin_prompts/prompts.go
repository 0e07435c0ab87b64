// Package export_capsule_plugin_prompts is the Go example's one prompt.
package export_capsule_plugin_prompts

import (
	wit "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/capsule_plugin_prompts"
	types "wit_component/capsule_plugin_types"
)

func List() []Prompt {
	return []Prompt{{Name: "review", Title: wit.None[string](), Description: "Ask for a careful code review.",
		Arguments: []PromptArgument{
			{Name: "code", Title: wit.None[string](), Description: wit.None[string](), Required: true},
			{Name: "language", Title: wit.None[string](), Description: wit.None[string](), Required: false},
		}}}
}

// Get renders the prompt; the host has checked that the required arguments are there.
func Get(name string, arguments []wit.Tuple2[string, string], context types.RequestContext) wit.Result[GetOutcome, types.Error] {
	if name != "review" {
		return wit.Err[GetOutcome](types.MakeErrorNotFound("no prompt " + name))
	}
	code, language := "", "python"
	for _, a := range arguments {
		switch a.F0 {
		case "code":
			code = a.F1
		case "language":
			language = a.F1
		}
	}
	return wit.Ok[GetOutcome, types.Error](MakeGetOutcomeComplete(PromptResult{Description: wit.None[string](),
		Messages: []PromptMessage{
			{Role: types.Role_User, Content: types.MakeContentText("Please review this " + language + " code:\n\n" + code)},
			{Role: types.Role_Assistant, Content: types.MakeContentText("I will look for bugs first, then style.")},
		}}))
}
