// Package export_capsule_plugin_resources is the Go example's notes: a listed index and a
// template for each note.
package export_capsule_plugin_resources

import (
	"sort"
	"strings"

	wit "go.bytecodealliance.org/pkg/wit/types"
	. "wit_component/capsule_plugin_resources"
	types "wit_component/capsule_plugin_types"
)

// Notes is what the resources serve; the completion package offers its names.
var Notes = map[string]string{
	"welcome": "Capsule runs this Go plugin in a fresh sandbox for every call.",
	"limits":  "Each call has a CPU deadline and a memory cap.",
}

// Names lists the notes' names in order.
func Names() []string {
	names := make([]string, 0, len(Notes))
	for name := range Notes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func List() []Resource {
	return []Resource{{Uri: "notes://index", Name: "index", Title: wit.None[string](),
		Description: wit.Some("The names of all notes."), MimeType: wit.Some("text/plain"), Size: wit.None[uint64]()}}
}

func Templates() []ResourceTemplate {
	return []ResourceTemplate{{UriTemplate: "notes://{name}", Name: "note", Title: wit.None[string](),
		Description: wit.Some("One note, by name."), MimeType: wit.Some("text/plain")}}
}

// Read serves the index and, through the template, each note.
func Read(uri string, context types.RequestContext) wit.Result[ReadOutcome, types.Error] {
	name := strings.TrimPrefix(uri, "notes://")
	body, found := Notes[name]
	if name == "index" {
		body, found = strings.Join(Names(), "\n"), true
	}
	if !found {
		return wit.Err[ReadOutcome](types.MakeErrorNotFound("no note " + name))
	}
	return wit.Ok[ReadOutcome, types.Error](MakeReadOutcomeComplete([]types.ResourceContents{{
		Uri: uri, MimeType: wit.Some("text/plain"), Body: types.MakeResourceBodyText(body)}}))
}
