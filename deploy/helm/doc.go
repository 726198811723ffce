// Package helm holds the tests of the capture-gate Helm chart (capture-gate/). It is its
// own Go module so that the Helm SDK and client-go stay out of the gate's go.mod.
//
// The tests render the chart with the Helm SDK, offline, for the value sets in testdata/,
// decode every manifest strictly with client-go's scheme (custom resources as unstructured
// objects with their required fields), check that values.schema.json and the templates
// reject the value sets in testdata/invalid/, and check every GATE_ variable the chart sets
// against `go run ./cmd/gate env` of the repository's root module: each one the chart sets
// by default has the gate's default, unless it is one of chartChoices, which values.yaml's
// comment of it explains; and a default the docs or values.yaml state for the gate ("GATE_X
// defaults to V") is the gate's.
//
// The alerts (templates/prometheusrule.yaml) are loaded with Prometheus' own rule parser
// (model/rulefmt, promql/parser); every metric name their expressions and the Grafana
// dashboard's queries read must be in testdata/metrics.txt, the names a gate exports,
// which the root module's TestMetricNamesFile (cmd/gate/alerts_test.go) checks against a
// running gate and rewrites with -update-metric-names. Each alert's runbook_url must
// point at a heading of docs/operations.md.
//
//	cd deploy/helm && go vet ./... && go test -count=1 ./...
package helm
