// Package helm holds the tests of the capture-gate Helm chart (capture-gate/). It is its
// own Go module so that the Helm SDK and client-go stay out of the gate's go.mod.
//
// The tests render the chart with the Helm SDK, offline, for the value sets in testdata/,
// decode every manifest strictly with client-go's scheme (custom resources as unstructured
// objects with their required fields), check that values.schema.json and the templates
// reject the value sets in testdata/invalid/, and check every GATE_ variable the chart sets
// against `go run ./cmd/gate env` of the repository's root module.
//
//	cd deploy/helm && go vet ./... && go test -count=1 ./...
package helm
