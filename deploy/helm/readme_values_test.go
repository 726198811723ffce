package helm

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite the value tables of capture-gate/README.md from values.yaml")

const (
	readmeValuesBegin = "<!-- values: generated from values.yaml by deploy/helm TestReadmeValues (-update-readme); edit the comments there -->"
	readmeValuesEnd   = "<!-- end values -->"
)

// TestReadmeValues: the chart README's value tables are generated from values.yaml, helm-docs
// style: every value the schema knows (a leaf of values.schema.json) has a `# --` comment
// above it in values.yaml, and the README lists each with its default and that comment, in
// values.yaml's order, one table per top-level key. A value documented only in the README
// cannot drift from the file users copy.
func TestReadmeValues(t *testing.T) {
	doc := valuesNode(t)
	var schema map[string]any
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		sub, _ := schema["properties"].(map[string]any)[key.Value].(map[string]any)
		fmt.Fprintf(&out, "\n### `%s`\n\n", key.Value)
		_, section := sub["properties"]
		if d := docComment(key); d != "" && section {
			fmt.Fprintf(&out, "%s\n\n", d)
		}
		out.WriteString("| value | default | description |\n| --- | --- | --- |\n")
		rows(t, &out, key.Value, key, val, sub)
	}
	generated := readmeValuesBegin + "\n" + out.String() + "\n" + readmeValuesEnd

	path := filepath.Join(chartDir, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(readme, []byte(readmeValuesBegin))
	end := bytes.Index(readme, []byte(readmeValuesEnd))
	if begin < 0 || end < begin {
		t.Fatalf("README.md lacks the markers %q ... %q", readmeValuesBegin, readmeValuesEnd)
	}
	want := string(readme[:begin]) + generated + string(readme[end+len(readmeValuesEnd):])
	if *updateReadme {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(readme) != want {
		t.Errorf("README.md's value tables differ from values.yaml: go test -run TestReadmeValues -update-readme in deploy/helm")
	}
}

// rows writes one row per schema leaf under key (path), recursing into sections.
func rows(t *testing.T, out *strings.Builder, path string, key, val *yaml.Node, schema map[string]any) {
	t.Helper()
	props, section := schema["properties"].(map[string]any)
	if !section || val.Kind != yaml.MappingNode || val.Style&yaml.FlowStyle != 0 {
		d := docComment(key)
		if d == "" {
			t.Errorf("values.yaml: %s has no `# --` comment", path)
		}
		fmt.Fprintf(out, "| `%s` | `%s` | %s |\n", path, strings.ReplaceAll(inline(t, val), "|", `\|`), strings.ReplaceAll(d, "|", `\|`))
		return
	}
	for i := 0; i+1 < len(val.Content); i += 2 {
		k, v := val.Content[i], val.Content[i+1]
		sub, _ := props[k.Value].(map[string]any)
		rows(t, out, path+"."+k.Value, k, v, sub)
	}
}

// docComment is a key's helm-docs description: its head comment from the line starting
// "# --" on, one line of text.
func docComment(key *yaml.Node) string {
	lines := strings.Split(key.HeadComment, "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "# --"); ok {
			words := []string{strings.TrimSpace(rest)}
			for _, more := range lines[i+1:] {
				words = append(words, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(more), "#")))
			}
			return strings.Join(strings.Fields(strings.Join(words, " ")), " ")
		}
	}
	return ""
}

// inline renders a value on one line, as YAML flow.
func inline(t *testing.T, n *yaml.Node) string {
	t.Helper()
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	var flow func(*yaml.Node)
	flow = func(n *yaml.Node) {
		n.HeadComment, n.LineComment, n.FootComment = "", "", ""
		if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
			n.Style = yaml.FlowStyle
		}
		for _, ch := range n.Content {
			flow(ch)
		}
	}
	flow(&c)
	b, err := yaml.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(strings.TrimSpace(string(b))), " ")
	if s == "" || s == `""` {
		return `""`
	}
	return s
}

// valuesNode is values.yaml as a YAML node tree, its comments kept.
func valuesNode(t *testing.T) *yaml.Node {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	return &doc
}

// valueComments returns the `# --` comment of every key of values.yaml, one line each.
func valueComments(t *testing.T) []string {
	t.Helper()
	doc := valuesNode(t)
	var out []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if c := docComment(n.Content[i]); c != "" {
					out = append(out, c)
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(doc)
	return out
}
