package config

import (
	"fmt"
	"io"
	"strings"
	"text/template"

	"github.com/kelseyhightower/envconfig"
)

// envTableTemplate renders Config's variables as a Markdown table. It runs on envconfig's
// own view of the struct (envconfig.Usaget), so the table shows the names envconfig derives.
const envTableTemplate = `| Variable | Default | Description |
| --- | --- | --- |
{{range .}}| ` + "`{{.Key}}`" + ` | {{default (.Tags.Get "default")}} | {{cell (.Tags.Get "desc")}} |
{{end}}`

// WriteEnvTable writes the Markdown table of every variable: name, default, description.
func WriteEnvTable(w io.Writer) error {
	tmpl, err := template.New("env").Funcs(template.FuncMap{
		"default": func(s string) string {
			if s == "" {
				return "*(empty)*"
			}
			return "`" + s + "`"
		},
		"cell": func(s string) string { return strings.ReplaceAll(s, "|", `\|`) },
	}).Parse(envTableTemplate)
	if err != nil {
		return fmt.Errorf("parsing the variable table template: %w", err)
	}
	if err := envconfig.Usaget(envPrefix, &Config{}, w, tmpl); err != nil {
		return fmt.Errorf("writing the variable table: %w", err)
	}
	return nil
}
