// Package export_capsule_plugin_completion suggests note names and review languages.
package export_capsule_plugin_completion

import (
	"strings"

	wit "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/capsule_plugin_completion"
	types "wit_component/capsule_plugin_types"
	"wit_component/export_capsule_plugin_resources"
)

func Complete(reference Reference, argument string, value string, context []wit.Tuple2[string, string]) wit.Result[Suggestions, types.Error] {
	var candidates []string
	switch {
	case reference.Tag() == Reference_ResourceTemplate && reference.ResourceTemplate() == "notes://{name}" && argument == "name":
		candidates = export_capsule_plugin_resources.Names()
	case reference.Tag() == Reference_Prompt && reference.Prompt() == "review" && argument == "language":
		candidates = []string{"c", "go", "javascript", "python", "rust", "typescript"}
	}
	values := []string{}
	for _, c := range candidates {
		if strings.HasPrefix(c, value) {
			values = append(values, c)
		}
	}
	return wit.Ok[Suggestions, types.Error](Suggestions{Values: values, Total: wit.None[uint32](), HasMore: false})
}
